"""Record (or resume) the recorded pools that `eve-search bench scale` and the simulator replay.

One command per space; it trains every configuration not yet recorded with each trainer along one
trajectory (the audit's machinery, so a killed run resumes), then writes the pool file:

    python searches/record_pools.py --space arch --configs 512 --workdir pools-runs \
        --out searches/pools/adult-arch.json.gz

`--export-only` writes the configurations recorded so far without training (a recording in
progress, in another process, keeps going). `--profile R` measures the seconds again on a quiet
machine, once per model shape and trainer (a long recording shares the machine with other work, and
its seconds carry that noise; the scores do not depend on timing). Run it with OMP_NUM_THREADS=1 beside other work, and note
the load: the pool's seconds are wall seconds measured as it trains.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="adult")
    parser.add_argument("--space", required=True)
    parser.add_argument("--configs", type=int, default=512)
    parser.add_argument("--trainers", default="adam,eve")
    parser.add_argument("--referee", default="adam")
    parser.add_argument("--budgets", default="100,300,900,2700,3000")
    parser.add_argument("--backward-ratio", type=float, default=2.0)
    parser.add_argument("--workdir", type=Path, required=True, help="where the runs (a SQLite store) are kept")
    parser.add_argument("--out", type=Path, required=True, help="the pool file (.json or .json.gz)")
    parser.add_argument("--export-only", action="store_true", help="write what is recorded, train nothing")
    parser.add_argument("--from-end", action="store_true",
                        help="train from the last configuration backwards (a second process, into its own --workdir, "
                             "beside one that trains forwards; stop it when they meet)")
    parser.add_argument("--also", type=Path, action="append", default=[], metavar="DIR",
                        help="another --workdir of the same recording (e.g. the --from-end one): its configurations "
                             "join the pool")
    parser.add_argument("--profile", type=int, default=0, metavar="R",
                        help="measure the seconds again on this (quiet) machine, per model shape and trainer, "
                             "median of R trajectories (eve_search.experiments.pools.profile_seconds); 0: keep "
                             "the seconds measured while recording")
    args = parser.parse_args(argv)

    from eve_search.engine.pool import save_pool
    from eve_search.experiments.audit import prepare_audit, run_audit
    from eve_search.experiments.pools import pool_from_audit

    trainers = list(dict.fromkeys([*args.trainers.split(","), args.referee]))
    budgets = tuple(int(b) for b in args.budgets.split(","))
    args.workdir.mkdir(parents=True, exist_ok=True)
    storage = f"sqlite:///{args.workdir.resolve()}/results.db"
    prepared = prepare_audit(args.task, args.space, trainers, [0], storage=storage,
                             checkpoint_dir=args.workdir / "checkpoints", budgets=budgets, configs=args.configs,
                             backward_ratio=args.backward_ratio, truth=args.referee)
    start, load = time.time(), os.getloadavg()[0]
    if not args.export_only:
        def progress(space: str, seed: int, trainer: str, index: int, done: int, total: int) -> None:
            print(f"\r{space} {trainer} configuration {index}: {done}/{total}", end="", file=sys.stderr, flush=True)

        run_audit(prepared, progress, order=reversed(range(args.configs)) if args.from_end else None)
        print(file=sys.stderr)
    notes = {"command": "python searches/record_pools.py " + " ".join(argv if argv is not None else sys.argv[1:]),
             "load_at_export": round(os.getloadavg()[0], 2), "load_at_start": round(load, 2),
             "threads": os.environ.get("OMP_NUM_THREADS", "default")}
    also = [prepare_audit(args.task, args.space, trainers, [0], storage=f"sqlite:///{other.resolve()}/results.db",
                          checkpoint_dir=other / "checkpoints", budgets=budgets, configs=args.configs,
                          backward_ratio=args.backward_ratio, truth=args.referee) for other in args.also]
    pool = pool_from_audit(prepared, args.referee, notes=notes, also=also)
    if args.profile:
        from eve_search.experiments.pools import profile_seconds

        pool = profile_seconds(pool, repeats=args.profile)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    save_pool(pool, args.out)
    print(f"{args.out}: {pool.size} configurations x {len(pool.trainers)} trainers at budgets "
          f"{', '.join(map(str, pool.budgets))} ({time.time() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
