"""How much does the calibrated backward/forward ratio move between repeated calibrations?

For every architecture of a space, calibrate the same trial ``--repeats`` times, once measuring the
whole short run as one piece (``chunks=1``) and once keeping the median of five chunks (what
sweeps use), and print each ratio and the spread (max - min) / median.

    python searches/calibration_spread.py --space arch --optimizers eve,adam

A spread of 0.10 means two fresh sweeps can charge a backward pass 10% apart, so they buy
different numbers of gradient steps with the same budget; ``--backward-ratio`` pins it.
"""

from __future__ import annotations

import argparse
import statistics

from eve_search.tasks.spaces import get_space
from eve_search.tasks.models import architecture_key
from eve_search.engine.trial import Trial


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--space", default="arch")
    parser.add_argument("--optimizers", default="eve,adam")
    parser.add_argument("--repeats", type=int, default=4)
    args = parser.parse_args(argv)
    first_of_each: dict[str, tuple[int, dict]] = {}
    for index, config in enumerate(get_space(args.space).sample(48, 0)):
        first_of_each.setdefault(architecture_key(config), (index, config))
    for optimizer in args.optimizers.split(","):
        for chunks in (1, 5):
            spreads = []
            for key, (index, config) in sorted(first_of_each.items()):
                ratios = [Trial("adult", config, optimizer, seed=0, index=index, cost_mode="measured")
                          .calibrate(chunks=chunks) for _ in range(args.repeats)]
                spreads.append((max(ratios) - min(ratios)) / statistics.median(ratios))
                print(f"{optimizer:>12} chunks={chunks} {key:>6}: " + " ".join(f"{r:.2f}" for r in ratios))
            print(f"{optimizer:>12} chunks={chunks}: spread median {statistics.median(spreads):.3f}, "
                  f"max {max(spreads):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
