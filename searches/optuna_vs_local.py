"""The Optuna worker backend against the in-process engine on the 48-configuration UCI Adult sweep.

Runs the same sweep (space, optimizer, training seed, pinned backward/forward ratio) with the local
engine and with ``run_sweep_on_optuna`` at 1 and 2 worker processes, on SQLite and on PostgreSQL,
each in a fresh store, and prints wall seconds side by side with the overhead over the local engine on
the same database, and whether every result (configurations, rung scores, promotions, best and
winner) is identical to the local engine's.

    python searches/optuna_vs_local.py                          # SQLite, and a throwaway PostgreSQL
    python searches/optuna_vs_local.py --postgres postgresql+psycopg2://user@host/db   # yours (empty)
    python searches/optuna_vs_local.py --postgres none --json optuna_vs_local.json
    python searches/optuna_vs_local.py --threads 1    # on a machine shared with other programs

The throwaway PostgreSQL server needs the server binaries (Debian: ``apt-get install postgresql``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from eve_search import testing
from eve_search.integrations.optuna import run_sweep_on_optuna
from eve_search.engine.sweep import SweepSettings, prepare_sweep

VARIABLE = ("wall_seconds", "training_seconds", "trained")


@contextlib.contextmanager
def throwaway_postgres():
    """A PostgreSQL server for this run only (see :func:`eve_search.testing.throwaway_postgres`)."""
    with contextlib.ExitStack() as stack:
        try:
            database = stack.enter_context(testing.throwaway_postgres())
        except RuntimeError as error:
            raise SystemExit(f"optuna_vs_local: {error}, or pass --postgres URL or --postgres none") from None
        yield database


def _comparable(result) -> dict:
    values = result.as_dict()
    for key in VARIABLE:
        values.pop(key)
    return values


def _cpu_seconds() -> float:
    """CPU seconds of this process and of its finished worker processes (user + system)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def run_one(settings: SweepSettings, url: str, workdir: Path, workers: int | None) -> tuple[float, float, object]:
    """Wall and CPU seconds of one sweep, from the start of preparing it to its result, and the result.

    CPU seconds say what the sweep cost when other programs share the machine (wall time then
    measures the machine's load as much as the sweep)."""
    started, cpu = time.perf_counter(), _cpu_seconds()
    sweep = prepare_sweep(settings, storage=url, checkpoint_dir=workdir / "checkpoints")
    result = sweep.run() if workers is None else run_sweep_on_optuna(sweep, workers=workers)
    return time.perf_counter() - started, _cpu_seconds() - cpu, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--space", default="hp", choices=("hp", "arch"))
    parser.add_argument("--optimizer", default="eve")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--backward-ratio", type=float, default=2.0,
                        help="pinned backward/forward ratio (identical charging in every run)")
    parser.add_argument("--workers", default="1,2", help="worker counts of the Optuna backend")
    parser.add_argument("--postgres", default="auto",
                        help="'auto' (a throwaway server), 'none', or the URL of an empty database")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads of the local engine and of the Optuna backend in all (default: torch's)")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    workers = [int(w) for w in args.workers.split(",")]
    settings = SweepSettings(space=args.space, optimizer=args.optimizer, seed=args.seed,
                             backward_ratio=args.backward_ratio)
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rows = []
    with tempfile.TemporaryDirectory(prefix="optuna-vs-local-") as tmp, contextlib.ExitStack() as stack:
        root = Path(tmp)
        databases: list[tuple[str, object]] = [("sqlite", lambda name: f"sqlite:///{root / name}.db")]
        if args.postgres == "auto":
            databases.append(("postgresql", stack.enter_context(throwaway_postgres())))
        elif args.postgres != "none":
            counter = iter(range(100))

            def own(name: str, url: str = args.postgres) -> str:
                if next(counter):
                    raise SystemExit("optuna_vs_local: --postgres URL holds one sweep; run one database at a time "
                                     "(--workers N)")
                return url

            databases.append(("postgresql", own))
        print(f"Adult {args.space} sweep, {settings.configs} configurations, {settings.optimizer}, seed {settings.seed}, "
              f"rungs {'/'.join(map(str, settings.rungs))}, ratio {settings.backward_ratio}; "
              f"torch threads {torch.get_num_threads()}", flush=True)
        # The comparisons that matter most first (one worker against the local engine on each
        # database), then the two-worker runs.
        local: dict[str, tuple[float, float, dict]] = {}
        plan = [step for db, _ in databases for step in ((db, None), (db, 1)) if step[1] is None or 1 in workers]
        plan += [(db, count) for count in workers if count != 1 for db, _ in databases]
        urls = dict(databases)
        for db, count in plan:
            name = "local" if count is None else f"optuna{count}"
            seconds, cpu, result = run_one(settings, urls[db](name), root / f"{db}-{name}", count)
            if count is None:
                local[db] = (seconds, cpu, _comparable(result))
            local_seconds, local_cpu, reference = local[db]
            row = {"database": db, "backend": "local" if count is None else "optuna", "workers": count or 1,
                   "seconds": seconds, "cpu_seconds": cpu, "overhead": seconds / local_seconds,
                   "cpu_overhead": cpu / local_cpu, "identical": _comparable(result) == reference,
                   "load_average": os.getloadavg()[0]}
            rows.append(row)
            print(f"{db:>10}  {'local' if count is None else f'optuna x{count}':<10} {seconds:7.1f} s wall "
                  f"({row['overhead']:.2f}x local)  {cpu:7.1f} s CPU ({row['cpu_overhead']:.2f}x local)  "
                  f"result {'identical' if row['identical'] else 'DIFFERENT'}  load {row['load_average']:.1f}",
                  flush=True)
    print()
    print("| database | backend | workers | wall s | wall / local | CPU s | CPU / local | result |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for row in rows:
        print(f"| {row['database']} | {row['backend']} | {row['workers']} | {row['seconds']:.1f} | "
              f"{row['overhead']:.2f} | {row['cpu_seconds']:.1f} | {row['cpu_overhead']:.2f} | "
              f"{'identical' if row['identical'] else 'different'} |")
    if args.json:
        args.json.write_text(json.dumps({"settings": settings.as_dict(), "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
