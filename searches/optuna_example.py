"""Synchronous successive halving in an ordinary Optuna script, with EvE training your own model.

The script is written the way Optuna's documentation writes its pruning examples: an objective that
suggests hyperparameters, trains, ``report``s the validation accuracy and asks ``should_prune``. Two
things differ from a plain Optuna script:

- the pruner is :class:`eve_search.integrations.optuna.SynchronousSHAPruner`: a rung is judged when
  all ``cohort_size`` trials have reported it (Optuna's ``SuccessiveHalvingPruner`` judges each trial
  against the trials that happened to report before it), so the trials of a cohort run at once
  (``n_jobs=cohort_size`` here, or that many worker processes on one RDB storage);
- the model is trained by an eve-search :class:`~eve_search.engine.trial.Trial` with the EvE optimizer,
  and ``step`` is the evaluation cost charged so far (paper, Appendix "Evaluation-Cost Accounting"),
  so every trial is judged at the same cost.

The model and data are the user's own: a small convolutional network on scikit-learn's 8x8 digits
(bundled with scikit-learn, no download). scikit-learn is not a dependency of eve-search: this script
needs ``pip install scikit-learn`` (and ``optuna-dashboard`` for the dashboard line below).

Run it::

    python searches/optuna_example.py                      # 9 trials, in memory
    python searches/optuna_example.py --storage sqlite:///digits.db
    optuna-dashboard sqlite:///digits.db                   # learning curves and rung decisions
"""

from __future__ import annotations

import argparse

import optuna
import torch
from torch import nn

from eve_search.integrations.optuna import SynchronousSHAPruner
from eve_search.tasks import Splits, Task
from eve_search.engine.trial import Trial

RUNGS = (100, 300, 900)  # charged evaluation units at which the trials are compared


def load_digits_splits(data_dir=None) -> Splits:
    """scikit-learn's 1,797 8x8 digit images, split 60/20/20 with a fixed permutation."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(digits.target, dtype=torch.long)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    x, y = x[order], y[order]
    a, b = int(0.6 * len(y)), int(0.8 * len(y))
    return Splits(x[:a], y[:a], x[a:b], y[a:b], x[b:], y[b:])


class SmallConvNet(nn.Module):
    """The user's own model: one convolution, pooling and a linear classifier."""

    def __init__(self, channels: int, generator: torch.Generator) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, channels, kernel_size=3, padding=1)
        self.head = nn.Linear(channels * 4 * 4, 10)
        with torch.no_grad():  # initial weights from the trial's generator only: one seed, one network
            for layer in (self.conv, self.head):
                bound = (6.0 / layer.weight[0].numel()) ** 0.5
                layer.weight.uniform_(-bound, bound, generator=generator)
                layer.bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.max_pool2d(torch.relu(self.conv(x)), 2)
        return self.head(x.flatten(1))


def build_model(config: dict, data: Splits, generator: torch.Generator) -> nn.Module:
    return SmallConvNet(int(config["channels"]), generator)


DIGITS = Task("digits", "scikit-learn 8x8 digits, a one-layer ConvNet", load_data=load_digits_splits,
              build_model=build_model, batch_size=64)


def objective(trial: optuna.Trial) -> float:
    config = {
        "lr": trial.suggest_float("lr", 1e-4, 1e-1, log=True),
        "weight_decay": trial.suggest_float("weight_decay", 1e-6, 1e-2, log=True),
        "channels": trial.suggest_categorical("channels", [4, 8, 16]),
    }
    # backward_ratio: a backward pass is charged as two forward passes (Trial.calibrate() measures
    # it on this machine instead).
    run = Trial(DIGITS, config, "eve", seed=0, index=trial.number, backward_ratio=2.0)
    accuracy = float("nan")
    for budget in RUNGS:
        run.train_to(budget)  # continues from where the previous rung stopped
        accuracy = run.evaluate("val")["accuracy"]
        trial.report(accuracy, step=budget)
        if trial.should_prune():
            raise optuna.TrialPruned()
    return accuracy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=9, help="trials in the cohort (all run at once)")
    parser.add_argument("--storage", default=None, help="an Optuna storage URL (default: in memory)")
    parser.add_argument("--seed", type=int, default=0, help="the TPE sampler's seed")
    args = parser.parse_args()
    torch.set_num_threads(1)  # the trials run in threads: one torch thread each
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        direction="maximize",
        storage=args.storage,
        sampler=optuna.samplers.TPESampler(seed=args.seed),
        pruner=SynchronousSHAPruner(rungs=RUNGS, cohort_size=args.trials),
    )
    study.optimize(objective, n_trials=args.trials, n_jobs=args.trials)

    for budget in RUNGS:
        reported = [t for t in study.trials if budget in t.intermediate_values]
        print(f"rung {budget:>4} units: {len(reported)} trials, best val accuracy "
              f"{max(t.intermediate_values[budget] for t in reported):.4f}")
    print(f"best: trial {study.best_trial.number}, val accuracy {study.best_value:.4f}, {study.best_params}")


if __name__ == "__main__":
    main()
