"""Tune your own PyTorch model with EvE under synchronous successive halving, on Ray Tune.

A Ray Tune script written the way Ray's documentation writes them: a class ``Trainable`` with
``setup``/``step``/``save_checkpoint``/``load_checkpoint``, a ``Tuner`` with a ``TuneConfig``. The
model is the user's own (a small MLP on two interleaved spirals, not UCI Adult); the optimizer is
``eve_search.EvE`` metered by a ``CostMeter``, and the scheduler is eve-search's
``SynchronousSHAScheduler``: every trial is paused at each rung until the whole cohort has reached it,
then the top third are resumed from their checkpoints and the rest stopped.

    python searches/ray_tune_example.py                  # 27 configurations, rungs 200/600/1800
    python searches/ray_tune_example.py --smoke-test     # 9 configurations, rungs 100/300
    python searches/ray_tune_example.py --address auto   # on a running cluster (ray start --head)
"""

from __future__ import annotations

import argparse
import math
import os

import ray
import torch
from ray import tune
from ray.tune.search.basic_variant import BasicVariantGenerator

from eve_search import CostMeter, EvE
from eve_search.integrations.ray import SynchronousSHAScheduler

UNITS_PER_STEP = 100  # evaluation units trained by one step(); the rungs are multiples of it


def spirals(n: int, noise: float, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Two interleaved spirals in the plane, ``n`` points each, labels 0 and 1."""
    t = torch.rand(n, generator=generator) * 3 * math.pi + 0.5
    arm = torch.stack([t * torch.cos(t), t * torch.sin(t)], dim=1) / 10
    x = torch.cat([arm, -arm]) + noise * torch.randn(2 * n, 2, generator=generator)
    y = torch.cat([torch.zeros(n, dtype=torch.long), torch.ones(n, dtype=torch.long)])
    return x, y


class SpiralMLP(torch.nn.Module):
    def __init__(self, width: int, depth: int, generator: torch.Generator) -> None:
        super().__init__()
        layers, inputs = [], 2
        for _ in range(depth):
            layers += [torch.nn.Linear(inputs, width), torch.nn.Tanh()]
            inputs = width
        layers.append(torch.nn.Linear(inputs, 2))
        self.net = torch.nn.Sequential(*layers)
        with torch.no_grad():  # initial weights from the trial's own generator: one seed, one network
            for module in self.net:
                if isinstance(module, torch.nn.Linear):
                    bound = 1 / math.sqrt(module.in_features)
                    module.weight.uniform_(-bound, bound, generator=generator)
                    module.bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class SpiralTrainable(tune.Trainable):
    def setup(self, config: dict) -> None:
        data = torch.Generator().manual_seed(0)  # the same data for every trial
        self.x_train, self.y_train = spirals(1000, 0.05, data)
        self.x_val, self.y_val = spirals(300, 0.05, data)
        seed = config["seed"]
        self.model = SpiralMLP(config["width"], config["depth"], torch.Generator().manual_seed(seed))
        # The paper's cost rule: a forward pass over a minibatch costs 1, a backward pass 2 (pinned
        # ratio: the same charge on every machine).
        self.meter = CostMeter(mode="calibrated", backward_ratio=2.0)
        self.optimizer = EvE(self.model.parameters(), lr=config["lr"], weight_decay=config["weight_decay"],
                             meter=self.meter, seed=seed)
        self.batches = torch.Generator().manual_seed(seed + 1)

    def step(self) -> dict:
        self.meter.set_budget((self.meter.cost // UNITS_PER_STEP + 1) * UNITS_PER_STEP)
        while not self.meter.exhausted:
            rows = torch.randint(0, len(self.x_train), (64,), generator=self.batches)
            x, y = self.x_train[rows], self.y_train[rows]
            self.optimizer.step(lambda: torch.nn.functional.cross_entropy(self.model(x), y))
        with torch.inference_mode():
            logits = self.model(self.x_val)
        accuracy = (logits.argmax(dim=1) == self.y_val).double().mean().item()
        return {"eval_cost": self.meter.cost, "accuracy": accuracy}

    def save_checkpoint(self, checkpoint_dir: str) -> None:
        torch.save({"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                    "meter": self.meter.state_dict(), "batches": self.batches.get_state()},
                   os.path.join(checkpoint_dir, "spirals.pt"))

    def load_checkpoint(self, checkpoint_dir: str) -> None:
        state = torch.load(os.path.join(checkpoint_dir, "spirals.pt"), weights_only=True)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])  # EvE's population, fitness and moments
        self.meter.load_state_dict(state["meter"])  # the charged cost continues across pauses
        self.batches.set_state(state["batches"])

    def reset_config(self, new_config: dict) -> bool:  # reuse_actors=True: no new process per trial
        self.setup(new_config)
        return True


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke-test", action="store_true", help="9 configurations, rungs 100/300")
    parser.add_argument("--address", help="a running Ray cluster (default: a local instance with 2 CPUs)")
    args = parser.parse_args()

    if args.address:
        ray.init(address=args.address)
    else:
        ray.init(num_cpus=2, include_dashboard=False)

    rungs = (100, 300) if args.smoke_test else (200, 600, 1800)
    samples = 9 if args.smoke_test else 27
    tuner = tune.Tuner(
        SpiralTrainable,
        param_space={
            "lr": tune.loguniform(1e-3, 3e-2),
            "weight_decay": tune.loguniform(1e-6, 1e-3),
            "width": tune.choice([16, 32, 64]),
            "depth": tune.choice([1, 2, 3]),
            "seed": tune.randint(0, 2**31 - 1),
        },
        tune_config=tune.TuneConfig(
            metric="accuracy",
            mode="max",
            num_samples=samples,
            scheduler=SynchronousSHAScheduler(time_attr="eval_cost", rungs=rungs, fraction=1 / 3),
            search_alg=BasicVariantGenerator(random_state=0),
            reuse_actors=True,
        ),
        run_config=tune.RunConfig(name="spirals_eve_sha", verbose=1),
    )
    results = tuner.fit()

    best = results.get_best_result()
    print("Best configuration:", {k: v for k, v in best.config.items() if k != "seed"})
    print(f"Validation accuracy {best.metrics['accuracy']:.4f} after {best.metrics['eval_cost']:.0f} evaluation units")
    per_rung = [sum(1 for r in results if r.metrics["eval_cost"] >= rung) for rung in rungs]
    print("Trials that reached each rung:", dict(zip(rungs, per_rung, strict=True)))
