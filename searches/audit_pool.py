"""The proxy audit of a recorded pool (eve_search.analysis.audit.audit_pool), as a Markdown table.

A pool holds every configuration's score at every rung budget for each trainer, so the audit's
question (at which budget does each trainer keep the true best in its top third, and at what wall
time?) can be answered from the pool file, also from the exported prefix of a recording in progress:

    python searches/audit_pool.py --pool searches/pools/fashion-arch.json.gz --proxies eve,adam,sgd_momentum \
        --json searches/fashion/pool-audit-arch.json

The measures are `eve-search audit`'s for the same configurations (a test checks they are equal to the
audit of the store the pool came from); the wall seconds are the pool's recorded training seconds.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _interval(measure: dict, digits: int) -> str:
    low, high = measure["interval"]
    return f"{measure['mean']:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def table(report: dict) -> str:
    """The report as Markdown: one row per trainer and budget, then each trainer's verdict."""
    unit = report["regret_unit"]
    lines = [f"{report['task']} / {report['space']}: {report['configs']} configurations, truth = {report['truth']} "
             f"at {report['truth_budget']} units (training seed {report['seeds'][0]})", "",
             f"| trainer | budget | wall s (all configurations) | tau-b [95%] | top-1 regret, {unit} [95%] "
             "| true best in top third |", "|---|---:|---:|---:|---:|:---:|"]
    for proxy, entry in report["proxies"].items():
        for budget, row in entry["budgets"].items():
            lines.append(f"| {proxy} | {budget} | {row['wall_seconds']['mean']:,.0f} | {_interval(row['tau'], 3)} | "
                         f"{_interval(row['regret'], 2)} | {'yes' if row['keep']['kept'] else 'no'} |")
    lines.append("")
    for proxy, entry in report["proxies"].items():
        found = entry["verdict"]["keeps_best"]
        said = "none" if found is None else \
            f"{found['budget']} units ({found['wall_seconds']:,.0f} s for all configurations)"
        lines.append(f"- {proxy}: the cheapest budget at which the true best is in its top third: {said}.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pool", type=Path, required=True, help="a recorded pool (.json or .json.gz)")
    parser.add_argument("--proxies", default="eve,adam,sgd_momentum", help="the pool's trainers audited")
    parser.add_argument("--truth", default=None, help="the reference trainer (default: the pool's referee)")
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--json", type=Path, help="write the report as JSON")
    args = parser.parse_args(argv)

    from eve_search import InputError
    from eve_search.engine.pool import load_pool
    from eve_search.analysis.audit import audit_pool

    try:
        report = audit_pool(load_pool(args.pool), args.proxies.split(","), args.truth, resamples=args.resamples)
    except InputError as error:
        print(f"audit_pool.py: {error}", file=sys.stderr)
        return 2
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
