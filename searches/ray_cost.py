"""What the Ray backend costs beside the local engine: a fixed start plus a cost per trial-rung, at two
sweep sizes, and each backend's utilisation of its two workers.

    python searches/ray_cost.py                                   # 48 and 480 arch configurations
    python searches/ray_cost.py --configs 48,480 --cohort-size 48 --json ray_cost.json

Each size runs the same sweep (Adult, one space, Adam, pinned backward ratio, the same seed) three
ways, one after another on this machine: the local engine on ``--jobs 2`` worker processes, and Ray
Tune with two one-CPU actors (``ray.init(num_cpus=2)``; its start is timed apart). Every run must
take the same decisions (checked). For each backend, the two sizes give a line

    wall seconds = fixed + per trial-rung x trial-rungs trained

(two points, so the line passes through both). Utilisation is the trials' own training seconds over
wall x 2: evaluations, checkpoints and each backend's own work count as idle, so it is a lower bound.
Time it on a quiet machine (``uptime`` below 0.5) and note the load, which is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path


def _run(settings, root: Path, name: str, backend: str) -> dict:
    from eve_search.engine.sweep import prepare_sweep
    from eve_search.integrations.ray import run_sweep_on_ray

    sweep = prepare_sweep(settings, storage=f"sqlite:///{root / name}.db", checkpoint_dir=root / name)
    load = os.getloadavg()[0]
    started = time.perf_counter()
    result = sweep.run(jobs=2) if backend == "local" else run_sweep_on_ray(sweep)
    wall = time.perf_counter() - started
    return {"backend": backend, "configs": settings.configs, "cohort_size": settings.cohort_size, "wall_seconds": wall,
            "training_seconds": result.training_seconds, "trial_rungs": result.trained,
            "utilisation": result.training_seconds / (wall * 2), "load_before": load,
            "decisions": [(r["budget"], r["trials"], r["promoted"]) for r in result.rungs],
            "winner": result.winner["index"], "units": result.charged_units}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--space", default="arch", choices=("hp", "arch"))
    parser.add_argument("--configs", default="48,480", help="two sweep sizes, comma-separated")
    parser.add_argument("--cohort-size", type=int, default=48, help="cohort size of the stream (0: one cohort)")
    parser.add_argument("--optimizer", default="adam")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)

    import ray

    from eve_search.engine.sweep import SweepSettings

    sizes = [int(n) for n in args.configs.split(",")]
    root = Path(tempfile.mkdtemp(prefix="ray-cost-"))
    started = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    ray_init = time.perf_counter() - started
    runs = []
    for configs in sizes:
        cohort = args.cohort_size if args.cohort_size and args.cohort_size < configs else None
        settings = SweepSettings(task="adult", space=args.space, optimizer=args.optimizer, seed=args.seed,
                                 configs=configs, backward_ratio=2.0, cohort_size=cohort)
        for backend in ("local", "ray"):
            runs.append(_run(settings, root, f"{backend}-{configs}", backend))
            print(json.dumps({k: v for k, v in runs[-1].items() if k != "decisions"}), file=sys.stderr)
    ray.shutdown()
    same = all(a["decisions"] == b["decisions"] and a["winner"] == b["winner"]
               for a, b in zip(runs[::2], runs[1::2]))
    lines = {}
    for backend in ("local", "ray"):
        small, large = [r for r in runs if r["backend"] == backend][:2]
        per = (large["wall_seconds"] - small["wall_seconds"]) / (large["trial_rungs"] - small["trial_rungs"])
        lines[backend] = {"fixed_seconds": small["wall_seconds"] - per * small["trial_rungs"], "per_trial_rung": per}
    print(f"{args.space} space, {args.optimizer}, seed {args.seed}, cohorts of {args.cohort_size or 'all'}; "
          f"ray.init {ray_init:.1f} s (excluded)")
    print(f"{'backend':<8}{'configs':>8}{'trial-rungs':>12}{'wall s':>9}{'train s':>9}{'utilisation':>12}{'load':>6}")
    for r in runs:
        print(f"{r['backend']:<8}{r['configs']:>8}{r['trial_rungs']:>12}{r['wall_seconds']:>9.1f}"
              f"{r['training_seconds']:>9.1f}{r['utilisation']:>12.2f}{r['load_before']:>6.1f}")
    for backend, line in lines.items():
        print(f"{backend}: wall = {line['fixed_seconds']:.1f} s + {line['per_trial_rung'] * 1000:.0f} ms x trial-rungs")
    print(f"same decisions and winner on both backends: {'yes' if same else 'NO'}")
    if args.json:
        args.json.write_text(json.dumps({"runs": runs, "lines": lines, "ray_init_seconds": ray_init,
                                         "same": same}, indent=2))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
