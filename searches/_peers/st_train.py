"""Syne Tune's training script for ``searches/peers.py`` (its ``LocalBackend`` runs one per trial).

Syne Tune passes the configuration as command-line arguments (the searched parameters, and the
constants ``peers_problem``, ``peers_seed``, ``peers_threads``); the script trains the same Adam
trial as every other tool and reports the validation score every ``min_units`` units with
``syne_tune.Reporter`` (``step``, ``accuracy``, ``units``). Syne Tune's ASHA and BOHB stop trials;
they never pause one, so the script keeps no checkpoint.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peers_problem", required=True)
    parser.add_argument("--peers_seed", type=int, required=True)
    parser.add_argument("--peers_threads", type=int, default=1)
    args, rest = parser.parse_known_args()

    import torch
    from syne_tune import Reporter

    from _peers.problem import Problem, coerce, config_key
    from _peers.runner import METRIC, stable_index
    from eve_search.tasks import get_task
    from eve_search.engine.trial import Trial

    torch.set_num_threads(args.peers_threads)
    problem = Problem(**json.loads(args.peers_problem))
    space = problem.declared
    names = argparse.ArgumentParser()
    for p in space.parameters:
        names.add_argument(f"--{p.name}")
    raw, _ = names.parse_known_args(rest)
    config = coerce(space, {k: v for k, v in vars(raw).items() if v is not None})
    trial = Trial(problem.task, config, "adam", seed=args.peers_seed, index=stable_index(config_key(config)),
                  cost_mode="calibrated", backward_ratio=problem.backward_ratio, data=get_task(problem.task).data())
    report = Reporter()
    for step in range(1, problem.steps + 1):
        trial.train_to(problem.units_at(step))
        report(step=step, **{METRIC: trial.score(trial.evaluate()), "units": trial.charged_units})


if __name__ == "__main__":
    main()
