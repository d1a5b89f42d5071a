"""Against what users would pick instead: one search problem through eve-search, Optuna, Ray Tune, DEHB,
Syne Tune and random search, every pick judged by one referee.

    python searches/peers.py --spaces hp,arch --seeds 0-4 --budget-multipliers 1,3 --tools all --workdir DIR
    python searches/peers.py --task fashion-mnist --seeds 0-4 --budget-multipliers 1 --tools all --workdir DIR
    python searches/peers.py --workdir DIR --report-only --report-html peers.html   # the table and page again
    eve-search dashboard --storage sqlite:///DIR/peers.db                            # the same, in the dashboard

The problem (searches/_peers/problem.py): a task (UCI Adult by default, or Fashion-MNIST), its declared
spaces (Adult's ``hp`` and ``arch``, Fashion-MNIST's ``fashion-hp`` and ``fashion-arch``; each
translated to every tool's format in one place), configurations trained as eve-search trials with Adam
under the calibrated cost rule with a pinned backward/forward ratio (2.0), at most 3,000 charged units
per configuration, a first fidelity of 100 units and a reduction factor of 3 wherever a tool has them.

The budget: for each space and search seed, eve-search's synchronous SHA with EvE runs first on 48
configurations; the units it charges are every other tool's budget (times each ``--budget-multipliers``
value), and each stops there (a tool sees the budget only through its own stopping hook: a stopper, a
stop criterion, a callback). eve-search's own searches run their protocol instead: SHA on 48 x m
configurations, ``run_sha`` with TPE on m cohorts of 48 (``eve-run-sha-tpe``) or on 2m cohorts of 24
(``eve-run-sha-tpe2``, whose second cohort TPE samples from the first's results; the same units).

The referee: every configuration a search returns is trained with Adam to 3,000 units on three referee
seeds (their own seeds); the mean validation and test accuracy there is the pick's quality, and its rank
among the referee scores of 48 reference configurations (the space's configuration seed 0) is reported
too. The anytime curve is the referee's test accuracy of the best configuration so far against wall
seconds and charged units, at fixed shares of the budget.

Each run happens in a fresh process (DEHB and Syne Tune in virtual environments the script creates under
``--workdir`` and reuses), whose process-tree CPU time is charged to it; its wall time starts once
PyTorch, eve-search and the data are loaded. Every finished run is one study in the results store
(``--storage``, default ``sqlite:///DIR/peers.db``): running the command again skips finished runs, so an
interrupted comparison resumes and a comparison grows with more seeds, spaces or tools.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from eve_search.cli import args as _argtypes  # noqa: E402
from eve_search.cli.args import name_list, seed_list, shown, space_list  # noqa: E402
from eve_search.dashboard._peers import OWN_PREFIX, REFERENCE_TOOL, TOOLS, goal_text, peers_section  # noqa: E402

from _peers.cpu import LostChildren  # noqa: E402

DEFAULT_TOOLS = list(TOOLS)
IN_PROJECT = ("eve-sha-eve", "eve-sha-adam", "eve-run-sha-tpe", "eve-run-sha-tpe2", "optuna-tpe-sh", "optuna-tpe-hb",
              "ray-asha", "ray-hyperband", "random")
UNAVAILABLE = {"synetune-dehb": "Syne Tune 0.16 ships no DEHB (its baselines are ASHA, BOHB and others since "
                                "0.14); DEHB itself runs as the tool 'dehb'"}


class UsageError(Exception):
    """Bad input: one line on stderr, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:
        raise UsageError(f"{self.prog}: {message}".replace("\n", " "))


def _multipliers(text: str) -> list[float]:
    values = []
    for part in text.split(","):
        try:
            value = float(part)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{shown(text)} is not a comma-separated list of numbers (e.g. 1,3)") from None
        if not (math.isfinite(value) and 0 < value <= 100):
            raise argparse.ArgumentTypeError(f"{shown(part)} is not a budget multiple in (0, 100]")
        values.append(value)
    if len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"{shown(text)} repeats a multiple")
    return values


def _tools(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    if names == ["all"]:
        return list(DEFAULT_TOOLS)
    for name in names:
        if name in UNAVAILABLE:
            raise argparse.ArgumentTypeError(f"{shown(name)} cannot run: {UNAVAILABLE[name]}")
    try:
        return name_list(text, list(TOOLS), "tool")
    except argparse.ArgumentTypeError as error:
        raise argparse.ArgumentTypeError(f"{error} or 'all'") from None


def build_parser() -> _Parser:
    parser = _Parser(prog="peers.py", description=__doc__.split("\n\n")[0].replace("\n", " "),
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="adult", metavar="NAME",
                        help="a registered task: adult (default) or fashion-mnist (spaces fashion-hp, fashion-arch)")
    parser.add_argument("--spaces", type=space_list, help="declared spaces of the task (default: all of them, "
                                                          "hp,arch for adult)")
    parser.add_argument("--seeds", type=seed_list, default=list(range(5)), help="search seeds, e.g. 0-4 (default)")
    parser.add_argument("--budget-multipliers", type=_multipliers, default=[1.0, 3.0], metavar="M",
                        help="budgets as multiples of eve-search SHA's spend on --configs configurations (default 1,3)")
    parser.add_argument("--tools", type=_tools, default=list(DEFAULT_TOOLS),
                        help=f"'all' (default) or a comma-separated list of: {', '.join(TOOLS)}")
    parser.add_argument("--workdir", type=Path, default=Path("peers-runs"), metavar="DIR",
                        help="the store, logs, scratch folders and the tools' virtual environments (default ./peers-runs)")
    parser.add_argument("--storage", metavar="URL", help="SQLAlchemy URL of the results store (default "
                        "sqlite:///DIR/peers.db)")
    parser.add_argument("--configs", type=_argtypes.configs, default=48,
                        help="configurations of the SHA that sets the budget, and of the rank reference (default 48)")
    parser.add_argument("--max-units", type=_argtypes.budget, default=3000,
                        help="charged units per configuration at most; the referee's budget (default 3000)")
    parser.add_argument("--min-units", type=_argtypes.budget, default=100,
                        help="the first fidelity / rung / grace period, and the report step (default 100)")
    parser.add_argument("--reduction-factor", type=_argtypes.bounded_int(2, 100), default=3, help="eta (default 3)")
    parser.add_argument("--backward-ratio", type=_argtypes.backward_ratio, default=2.0,
                        help="the pinned backward/forward ratio of the cost rule (default 2.0)")
    parser.add_argument("--referee-seeds", type=_argtypes.bounded_int(1, 20), default=3,
                        help="referee trainings per pick (default 3)")
    parser.add_argument("--anytime-points", type=_argtypes.bounded_int(1, 20), default=4,
                        help="points of each anytime curve, at equal shares of the budget (default 4)")
    parser.add_argument("--cpus", type=_argtypes.bounded_int(1, 4 * _argtypes.available_cpus()), default=2,
                        help="CPUs each search may use: Ray's num_cpus, Syne Tune's workers, eve-search's --jobs, "
                             "PyTorch threads of one-process tools; also the referee's workers (default 2)")
    parser.add_argument("--run-timeout", type=_argtypes.bounded_float(1.0, 7 * 86400.0, "a week", low_open=False),
                        default=4 * 3600.0, metavar="S",
                        help="seconds one run may take before it is ended and recorded as failed (default 14400)")
    parser.add_argument("--no-rank-grid", action="store_true",
                        help="skip the referee scores of the reference configurations (no ranks)")
    parser.add_argument("--report-only", action="store_true", help="run nothing: report what the store holds")
    parser.add_argument("--report-html", type=Path, metavar="PATH", help="also write the comparison as an HTML page")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the table's data as JSON")
    return parser


# Runs ---------------------------------------------------------------------------------------------------


def _say(text: str) -> None:
    print(f"peers: {text}", file=sys.stderr, flush=True)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)


def read_events(path: Path) -> list[dict[str, Any]]:
    records = []
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                try:
                    records.append(json.loads(line))
                except ValueError:
                    break  # a line cut by a killed process: what came before it stands
    return records


def trials_of(reports: list[dict[str, Any]], problem: Any) -> tuple[list[dict[str, Any]], list[list[Any]]]:
    """The tool's trials (one per trial key, in order of appearance) and the compact event log
    ``[wall, total units, trial, trial units, score]``."""
    index: dict[str, int] = {}
    trials: list[dict[str, Any]] = []
    events = []
    for r in reports:
        key = r["trial"]
        if key not in index:
            index[key] = len(trials)
            trials.append({"key": key, "config": r["config"], "reports": {}, "units": 0.0, "score": None,
                           "complete": False})
        t = trials[index[key]]
        t["units"] = max(t["units"], r["units"])
        if r["score"] is not None:
            t["reports"][round(r["units"])] = r["score"]
            t["score"] = r["score"]
            t["complete"] = problem.level(r["units"]) >= problem.steps
        events.append([round(r["wall"], 4), round(r["total"], 3), index[key], round(r["units"], 3), r["score"]])
    return trials, events


def anytime_points(events: list[list[Any]], budget: float, problem: Any, points: int, end_wall: float,
                   end_total: float) -> list[dict[str, Any]]:
    """The best configuration so far (furthest trained, then best score) when the run's charged units
    first reach k/points of the budget; the last point is left to the pick."""
    shares = [k / points for k in range(1, points)]
    out: list[dict[str, Any]] = []
    best: tuple[tuple[int, float], int] | None = None
    for wall, total, trial, units, score in events:
        if score is not None:
            key = (problem.level(units), score)
            if best is None or key > best[0]:
                best = (key, trial)
        while shares and total >= shares[0] * budget and best is not None:
            out.append({"fraction": shares.pop(0), "wall": wall, "units": total, "trial": best[1]})
    for share in shares:  # the run ended before this share of the budget
        if best is not None:
            out.append({"fraction": share, "wall": end_wall, "units": end_total, "trial": best[1]})
    return out


class Comparison:
    """Runs what is missing and judges what is stored, for one set of arguments."""

    def __init__(self, args: argparse.Namespace) -> None:
        from _peers.envs import ensure_env, env_for
        from _peers.problem import Problem
        from _peers.referee import referee_seeds
        from _peers.store import PeerStore

        self.args = args
        self.workdir = args.workdir.resolve()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.url = args.storage or f"sqlite:///{self.workdir / 'peers.db'}"
        self.store = PeerStore(self.url)
        self.problems = {space: Problem(task=args.task, space=space, configs=args.configs, max_units=args.max_units,
                                        min_units=args.min_units, reduction_factor=args.reduction_factor,
                                        backward_ratio=args.backward_ratio) for space in args.spaces}
        self.referee_seeds = referee_seeds(args.referee_seeds)
        self.ensure_env, self.env_for = ensure_env, env_for
        self.failures: list[str] = []
        self.broken_envs: dict[str, str] = {}
        self._pool: Any = None

    def pool(self) -> Any:
        """The referee's worker processes (``--cpus`` of them), started once when first needed."""
        from _peers.referee import worker_pool

        if self._pool is None:
            self._pool = worker_pool(self.args.cpus) or False
        return self._pool or None

    def close(self) -> None:
        if self._pool:
            self._pool.shutdown(cancel_futures=True)

    def name(self, problem: Any, tool: str, seed: int, multiplier: float) -> str:
        return f"{self.store.run_name(problem, tool, seed, multiplier)}:c{self.args.cpus}"

    def grid(self, problem: Any) -> list[dict[str, Any]]:
        return problem.declared.sample(problem.configs, seed=0)

    # Running ------------------------------------------------------------------------------------------

    def python_for(self, tool: str) -> Path | None:
        spec = self.env_for(tool)
        if spec is None:
            return Path(sys.executable)
        if spec.name in self.broken_envs:
            return None
        from _peers.envs import EnvError, ready

        if ready(spec, self.workdir / "venvs") is None:
            _say(f"creating the virtual environment {spec.name} for {tool} (once; pip output in "
                 f"{self.workdir / 'logs'})")
        try:
            return self.ensure_env(spec, self.workdir / "venvs", self.workdir / "logs" / f"venv-{spec.name}.log")
        except EnvError as error:
            self.broken_envs[spec.name] = str(error)
            self.failures.append(f"{tool}: {error}")
            return None

    def run(self, problem: Any, tool: str, seed: int, multiplier: float, budget: float | None,
            reference_units: float | None) -> dict[str, Any] | None:
        name = self.name(problem, tool, seed, multiplier)
        done = self.store.done_run(name)
        if done is not None:
            return self.judge(name, done, problem)
        if self.args.report_only:
            return None
        python = self.python_for(tool)
        if python is None:
            return None
        scratch = self.workdir / "scratch" / _safe(name)
        if scratch.exists():
            shutil.rmtree(scratch)
        scratch.mkdir(parents=True)
        log = self.workdir / "logs" / f"{_safe(name)}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        spec = {"tool": tool, "problem": problem.as_dict(), "seed": seed, "multiplier": multiplier, "budget": budget,
                "cpus": self.args.cpus, "scratch": str(scratch), "events": str(scratch / "events.jsonl")}
        (scratch / "spec.json").write_text(json.dumps(spec), encoding="utf-8")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(HERE), *filter(None, [env.get("PYTHONPATH")])])
        load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        with log.open("w", encoding="utf-8") as out:
            process = subprocess.Popen([str(python), str(HERE / "_peers" / "runner.py"), str(scratch / "spec.json")],
                                       stdout=out, stderr=subprocess.STDOUT, cwd=scratch, env=env,
                                       start_new_session=True)
            lost = LostChildren(process.pid)
            try:
                code = process.wait(timeout=self.args.run_timeout)
            except subprocess.TimeoutExpired:
                code = None
            finally:
                lost_cpu = lost.stop()
                if process.poll() is None:  # interrupted: the run's process group ends with this process
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
        process_seconds = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        load_after = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
        records = read_events(scratch / "events.jsonl")
        start = next((r for r in records if r.get("type") == "start"), None)
        end = next((r for r in records if r.get("type") == "end"), None)
        if code != 0 or start is None or end is None:
            error = next((r["message"] for r in records if r.get("type") == "error"),
                         f"ran past --run-timeout {self.args.run_timeout:g} s" if code is None else f"exit code {code}")
            self.failures.append(f"{problem.space} seed {seed} x{multiplier:g} {tool}: {error} (log: {log})")
            _say(f"FAILED {problem.space} seed {seed} x{multiplier:g} {tool}: {error} (log: {log})")
            return None
        waited_cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        tree_cpu = waited_cpu + lost_cpu
        reports = [r for r in records if r.get("type") == "report"]
        trials, events = trials_of(reports, problem)
        attrs = {"kind": "peer-run", "status": "done", "task": problem.task, "space": problem.space, "tool": tool,
                 "label": TOOLS.get(tool, tool), "seed": seed, "multiplier": multiplier,
                 "problem": problem.as_dict(), "signature": problem.signature(), "cpus": self.args.cpus,
                 "budget_units": budget if budget is not None else
                 (end["total"] if reference_units is None else reference_units) * multiplier,
                 "budget_enforced": budget is not None, "reference_units": reference_units,
                 "charged_units": end["total"], "wall_seconds": end["wall"],
                 "cpu_seconds": max(0.0, tree_cpu - start["cpu_start"]), "setup_cpu_seconds": start["cpu_start"],
                 "sampled_cpu_seconds": lost_cpu,
                 "process_seconds": process_seconds, "subreaper": start.get("subreaper"),
                 "load_before": load_before, "load_after": load_after,
                 "pick": end["pick"], "pick_note": end["note"], "pick_key": end["pick_key"],
                 "versions": end["versions"], "settings": end["settings"], "trials": len(trials),
                 "reports": end["reports"], "configs": [t["config"] for t in trials], "events": events}
        # The run is stored before the referee trains: an interruption there loses no search.
        self.store.save_run(name, {**attrs, "referee": None}, trials, problem.declared)
        shutil.rmtree(scratch, ignore_errors=True)
        attrs = self.judge(name, {**attrs, "referee": None}, problem)
        test = (attrs.get("referee") or {}).get("test")
        _say(f"{problem.space} seed {seed} x{multiplier:g} {tool}: {attrs['charged_units']:,.0f} units, "
             f"{attrs['wall_seconds']:.1f} s wall, {attrs['cpu_seconds']:.1f} s CPU, "
             f"pick test acc {'-' if test is None else f'{test:.4f}'} ({len(trials)} trials)")
        return attrs

    # Judging --------------------------------------------------------------------------------------------

    def judged_with(self, problem: Any) -> dict[str, Any]:
        return {"referee_seeds": self.referee_seeds, "anytime_points": self.args.anytime_points,
                "rank_grid": not self.args.no_rank_grid, "grid_size": problem.configs}

    def judgement(self, attrs: dict[str, Any], problem: Any) -> dict[str, Any]:
        """The referee's verdict on a run's pick, its rank and its anytime curve (training what is missing,
        unless --report-only)."""
        from _peers import referee

        budget = attrs["budget_units"] or attrs["charged_units"]
        points = anytime_points(attrs["events"], budget, problem, self.args.anytime_points, attrs["wall_seconds"],
                                attrs["charged_units"])
        configs = [attrs["pick"]] + [attrs["configs"][p["trial"]] for p in points]
        if not self.args.report_only:
            referee.score(self.store, problem, configs, self.referee_seeds, pool=self.pool())
        pick = referee.summary(self.store, problem, attrs["pick"], self.referee_seeds)
        curve = []
        for p in points:
            verdict = referee.summary(self.store, problem, attrs["configs"][p["trial"]], self.referee_seeds)
            if verdict is not None:
                curve.append({"fraction": p["fraction"], "wall": p["wall"], "units": p["units"], "test": verdict["test"],
                              "val": verdict["val"], "config_key": verdict["key"]})
        if pick is not None:
            curve.append({"fraction": 1.0, "wall": attrs["wall_seconds"], "units": attrs["charged_units"],
                          "test": pick["test"], "val": pick["val"], "config_key": pick["key"]})
        rank = None
        if pick is not None and not self.args.no_rank_grid:
            grid = [referee.summary(self.store, problem, c, self.referee_seeds) for c in self.grid(problem)]
            if all(g is not None for g in grid):
                rank = 1 + sum(g["test"] > pick["test"] for g in grid)
        return {"referee": pick, "rank": rank, "rank_of": problem.configs if rank is not None else None,
                "anytime": curve, "judged_with": self.judged_with(problem)}

    def judge(self, name: str, attrs: dict[str, Any], problem: Any) -> dict[str, Any]:
        """A stored run, judged again when the referee settings changed since it was stored."""
        if attrs.get("judged_with") == self.judged_with(problem) and attrs.get("referee") is not None:
            return attrs
        fresh = self.judgement(attrs, problem)
        if fresh["referee"] is not None:
            self.store.update_run(name, fresh)
        attrs.update(fresh)
        return attrs

    # The whole comparison ------------------------------------------------------------------------------

    def execute(self) -> None:
        from _peers import referee

        args = self.args
        for space in args.spaces:
            problem = self.problems[space]
            if not args.no_rank_grid and not args.report_only:
                grid = self.grid(problem)
                _say(f"{space}: referee scores of the {len(grid)} reference configurations (cached once)")
                referee.score(self.store, problem, grid, self.referee_seeds, pool=self.pool())
            for seed in args.seeds:
                reference = self.run(problem, REFERENCE_TOOL, seed, 1.0, None, None)
                if reference is None:
                    if not args.report_only:
                        self.failures.append(f"{space} seed {seed}: no budget without {REFERENCE_TOOL}; its other "
                                             "runs were skipped")
                    continue
                base = float(reference["charged_units"])
                for multiplier in args.budget_multipliers:
                    for tool in args.tools:
                        if tool == REFERENCE_TOOL and multiplier == 1.0:
                            continue
                        own_protocol = tool.startswith(OWN_PREFIX)
                        self.run(problem, tool, seed, multiplier, None if own_protocol else base * multiplier, base)

    def section(self) -> dict[str, Any]:
        """The table's data for the requested spaces, seeds, multiples and tools (as the dashboard builds it)."""
        wanted_tools = set(self.args.tools) | {REFERENCE_TOOL}
        records = []
        for attrs in self.store.runs().values():
            problem = self.problems.get(attrs.get("space"))
            if (problem is None or attrs.get("signature") != problem.signature() or attrs.get("cpus") != self.args.cpus
                    or attrs.get("seed") not in self.args.seeds or attrs.get("tool") not in wanted_tools
                    or attrs.get("multiplier") not in self.args.budget_multipliers):
                continue
            records.append({"name": "", "user_attrs": attrs, "trials": []})
        return peers_section(records)


def print_table(section: dict[str, Any], out: Any = None) -> None:
    out = sys.stdout if out is None else out
    for group in section["groups"]:
        print(f"\n{group['task']} / {group['space']}, {group['multiplier']:g}x budget", file=out)
        print(goal_text(group), file=out)
        header = (f"{'tool':<40}{'seeds':>6}{'referee test acc':>20}{'val acc':>9}{'rank':>7}{'units':>9}"
                  f"{'wall s':>16}{'CPU s':>9}")
        print(header, file=out)
        for r in group["rows"]:
            test = "-" if r["test_mean"] is None else f"{r['test_mean']:.4f}" + (
                f" ± {r['test_sd']:.4f}" if r["test_sd"] is not None else "")
            wall = "-" if r["wall_mean"] is None else f"{r['wall_mean']:.1f}" + (
                f" ± {r['wall_sd']:.1f}" if r["wall_sd"] is not None else "")
            rank = "-" if r["rank_mean"] is None else f"{r['rank_mean']:.1f}"
            val = "-" if r["val_mean"] is None else f"{r['val_mean']:.4f}"
            cpu = "-" if r["cpu_mean"] is None else f"{r['cpu_mean']:.1f}"
            print(f"{r['label']:<40}{len(r['seeds']):>6}{test:>20}{val:>9}{rank:>7}{r['units_mean']:>9,.0f}"
                  f"{wall:>16}{cpu:>9}", file=out)
        versions = sorted({v for r in group["rows"] for v in r["versions"]})
        if versions:
            print(f"versions: {'; '.join(versions)}", file=out)


def write_html(path: Path, url: str) -> None:
    from eve_search.dashboard import dashboard_data, render_page

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_page(dashboard_data(url), title="eve-search against other search tools"), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        if args.min_units > args.max_units:
            raise UsageError(f"peers.py: argument --min-units: {args.min_units} is more than --max-units "
                             f"{args.max_units}")
        from eve_search.tasks import get_task

        from eve_search import InputError

        try:
            task = get_task(args.task)
        except InputError as error:
            raise UsageError(f"peers.py: argument --task: {error}") from None
        spaces = task.spaces
        if args.spaces is None:
            args.spaces = list(spaces)
        for space in args.spaces:
            if space not in spaces:
                raise UsageError(f"peers.py: argument --spaces: {space!r} is not a space of the {args.task} task "
                                 f"(expected some of: {', '.join(sorted(spaces))})")
        for argument, path in (("--report-html", args.report_html), ("--json", args.json)):
            if path is not None and path.is_dir():
                raise UsageError(f"peers.py: argument {argument}: {str(path)!r} is a directory (expected a file path)")
        from eve_search.engine.store import StoreError

        try:
            comparison = Comparison(args)
        except StoreError as error:
            raise UsageError(f"peers.py: {error}") from None
        except OSError as error:
            raise UsageError(f"peers.py: argument --workdir: cannot use {str(args.workdir)!r} "
                             f"({error.strerror or error})") from None
    except UsageError as error:
        print(error, file=sys.stderr)
        return 2
    try:
        comparison.execute()
    except KeyboardInterrupt:
        _say("interrupted: finished runs are in the store; run the same command again to go on")
        return 130
    finally:
        comparison.close()
    section = comparison.section()
    print_table(section)
    for argument, path, write in (
            ("--json", args.json, lambda p: p.write_text(json.dumps(section, indent=1, allow_nan=False), encoding="utf-8")),
            ("--report-html", args.report_html, lambda p: write_html(p, comparison.url))):
        if path is None:
            continue
        try:
            write(path)
        except OSError as error:
            print(f"peers.py: argument {argument}: cannot write {str(path)!r} ({error.strerror or error})",
                  file=sys.stderr)
            return 2
        _say(f"wrote {path}")
    for failure in comparison.failures:
        _say(f"not done: {failure}")
    return 1 if comparison.failures else 0


if __name__ == "__main__":
    sys.exit(main())
