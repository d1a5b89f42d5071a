"""Where does a sweep's wall time go besides training? One fresh sweep per optimizer, timed by part.

    python searches/sweep_time_breakdown.py --space hp --optimizers eve,adam

Each sweep runs in a temporary store with the CLI's defaults. The parts are timed by wrapping the
functions that do them, so the sweep itself runs unchanged: calibration (its probe trials
included), building trials, validation and test evaluations, writing checkpoints, the rest of
recording a rung (Optuna storage), and pruning the trials a rung drops.
"""

from __future__ import annotations

import argparse
import collections
import functools
import tempfile
import time
from pathlib import Path

from eve_search.engine import store, sweep, trial

PARTS = [  # (owner, function, label); calibration's probe trials count under calibration only
    (sweep.Sweep, "calibrate", "calibration"),
    (trial.Trial, "__init__", "building trials"),
    (trial.Trial, "load_state_dict", "loading checkpoints"),
    (trial.Trial, "evaluate", "evaluations (val and test)"),
    (store, "save_atomically", "writing checkpoints"),
    (trial.Trial, "to_bytes", "serializing checkpoints"),
    (store.SweepStore, "record", "recording a rung (checkpoint write included)"),
    (store.SweepStore, "eliminate", "pruning dropped trials"),
]


class _Timings:
    """Seconds and calls per part; work done inside calibration counts under calibration only."""

    def __init__(self) -> None:
        self.seconds: collections.Counter = collections.Counter()
        self.calls: collections.Counter = collections.Counter()
        self.calibrating = False

    def wrap(self, label: str, function):
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            if self.calibrating:
                return function(*args, **kwargs)
            self.calibrating = label == "calibration"
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.calibrating = False
                self.seconds[label] += time.perf_counter() - start
                self.calls[label] += 1

        return wrapper


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--space", default="hp")
    parser.add_argument("--optimizers", default="eve,adam")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    timings = _Timings()
    for owner, name, label in PARTS:
        setattr(owner, name, timings.wrap(label, getattr(owner, name)))
    for optimizer in args.optimizers.split(","):
        timings.seconds.clear()
        timings.calls.clear()
        with tempfile.TemporaryDirectory() as directory:
            result = sweep.run_sweep(sweep.SweepSettings(space=args.space, optimizer=optimizer, seed=args.seed),
                                     storage=f"sqlite:///{directory}/results.db",
                                     checkpoint_dir=Path(directory) / "checkpoints")
        print(f"{args.space} {optimizer}: sweep {result.wall_seconds:.2f} s, training {result.training_seconds:.2f} s, "
              f"other {result.wall_seconds - result.training_seconds:.2f} s")
        for _, _, label in PARTS:
            print(f"    {label}: {timings.seconds[label]:.2f} s in {timings.calls[label]} calls")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
