"""Property-based tests over every command's arguments: any string, number or path.

For each command, hypothesis picks one to three options and gives each a hostile value: huge,
negative, NaN, infinite, ``1e26``, empty, blank, unicode, undecodable bytes, random text, or a
path (the results store itself, its ``-wal``, its folder, the current directory, ``/dev/null``, a
folder that does not exist). Every call must end with exit code 0 or 2, at most one line on stderr
when 2, never a traceback, and leave the results store made at the start (by a tiny real sweep)
with the same contents (``iterdump()``, not bytes: a WAL checkpoint rewrites bytes).

The other options stay tiny and valid, so a value that passes every check does little work; the
long work itself (training, timing loops, measuring processes) is replaced by :class:`Accepted`,
raised once a command got past its checks, which counts as exit code 0.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sqlite3
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eve_search.cli import args as _argtypes
from eve_search.cli import main

EXAMPLES = settings(max_examples=25, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                           HealthCheck.data_too_large])


class Accepted(BaseException):
    """The command passed every check and reached its work (replaced here): exit code 0."""


def _accepted(*args, **kwargs):
    raise Accepted


def dump(path: Path) -> list[str]:
    with contextlib.closing(sqlite3.connect(path)) as connection:
        return list(connection.iterdump())


@functools.lru_cache(maxsize=2)
def _read_once(directory):
    from eve_search.data import load_idx_splits

    return load_idx_splits(directory)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A results store made by a tiny real sweep, and an empty current directory for the commands."""
    root = tmp_path_factory.mktemp("hostile")
    store_dir = root / "store"
    assert main(["sweep", "--task", "tiny", "--plugin", "tests.tiny_task", "--configs", "2", "--rungs", "2",
                 "--backward-ratio", "2", "--quiet", "--workdir", str(store_dir)]) == 0
    store = store_dir / "results.db"
    cwd = root / "cwd"
    cwd.mkdir()
    return SimpleNamespace(root=root, store=store, store_dir=store_dir, cwd=cwd, before=dump(store),
                           url=f"sqlite:///{store}")


@pytest.fixture
def stubbed(monkeypatch, world):
    """The long work of every command replaced by Accepted; the commands run in world.cwd."""
    import eve_search.cli.commands.audit
    import eve_search.benchmarks.throughput
    import eve_search.benchmarks.matmul
    import eve_search.benchmarks.memory
    import eve_search.benchmarks.sweep
    import eve_search.cli.commands.mnist
    import eve_search.tasks.mnist
    import eve_search.experiments.protocol
    import eve_search.cli.commands.bench_synthetic
    import eve_search.engine.sweep

    monkeypatch.setattr(eve_search.engine.sweep.Sweep, "run", _accepted)
    monkeypatch.setattr(eve_search.cli.commands.audit, "run_audit", _accepted)
    monkeypatch.setattr(eve_search.benchmarks.throughput, "throughput", _accepted)
    monkeypatch.setattr(eve_search.benchmarks.matmul, "measure_shape", _accepted)
    monkeypatch.setattr(eve_search.benchmarks.matmul, "_onednn_linear_trains", lambda: "not measured here")
    monkeypatch.setattr(eve_search.benchmarks.memory, "_in_fresh_process", _accepted)
    monkeypatch.setattr(eve_search.benchmarks.sweep, "_sweep_once", _accepted)
    monkeypatch.setattr(eve_search.benchmarks.sweep, "_hogs", lambda count: [])
    monkeypatch.setattr(eve_search.cli.commands.bench_synthetic, "run_suite", _accepted)
    monkeypatch.setattr(eve_search.experiments.protocol, "run_protocol", _accepted)
    # Fashion-MNIST is read once for the whole module, not once per example that gets that far.
    monkeypatch.setattr(eve_search.tasks.mnist, "load_idx_splits", _read_once)
    monkeypatch.setattr(eve_search.cli.commands.mnist, "load_idx_splits", _read_once)
    monkeypatch.chdir(world.cwd)
    monkeypatch.setattr(sys, "path", list(sys.path))
    return world


# Values ---------------------------------------------------------------------------------------------

_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=24)
_NUMBERS = ["", " ", "0", "-0", "-1", "1.5", "nan", "NaN", "-nan", "inf", "-inf", "Infinity", "1e26", "1e400",
            "-1e26", "99999999999999999999", "-99999999999999999999", "9" * 5000, "0x10", "1_0", "\u0661\u0662",
            "\uff11", "\u00bd", "1e3", "3.0", "+2", " 2 ", "2\n", "None", "1e-400", "caf\udce9"]


def counts(tiny: int, limit: int) -> st.SearchStrategy[str]:
    """Hostile numbers, and integers that are either tiny (valid and cheap) or beyond ``limit``."""
    return st.one_of(st.sampled_from(_NUMBERS), st.integers(-10**30, 0).map(str),
                     st.integers(1, tiny).map(str), st.integers(limit + 1, 10**40).map(str),
                     st.floats(allow_nan=True, allow_infinity=True).map(repr), _TEXT)


def reals(tiny: float, limit: float) -> st.SearchStrategy[str]:
    """Hostile numbers, and numbers that are either tiny or beyond ``limit``."""
    return st.one_of(st.sampled_from(_NUMBERS), st.floats(max_value=0).map(repr),
                     st.floats(min_value=1e-6, max_value=tiny).map(repr),
                     st.floats(min_value=limit, exclude_min=True).map(repr), _TEXT)


def lists(*valid: str) -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from([*valid, "", ",", " , ", "0-", "-1", "1,1", "0-99999999999", f"0-{10**40}",
                                      "3-1", "a-b", "1e26,1e27", "nan,inf", "\u0661-\u0662", ",".join(["1"] * 500)]),
                     _TEXT)


def names(*valid: str) -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from([*valid, "", " ", "\t", "nosuch", "..", "a\nb", "caf\udce9", "x" * 5000]), _TEXT)


def choices(*valid: str) -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from([*valid, "", " ", "LOCAL", "nosuch"]), _TEXT)


def _safe_relative(text: str) -> bool:
    return bool(text) and not text.startswith(("/", "~", "-")) and ".." not in text


def paths(world: SimpleNamespace, *, store_dir: bool = True) -> st.SearchStrategy[str]:
    """The store and its companions, its folder (only where the command never writes a store there), the
    current directory, /dev/null, folders that do not exist, and relative names."""
    fixed = [str(world.store), f"{world.store}-wal", f"{world.store}-shm", str(world.store_dir / "checkpoints"),
             ".", "", "/dev/null", "/dev/null/x", str(world.root / "missing" / "deep" / "out.json"), "out.json",
             "caf\udce9.json", "sub/dir/out.json", "x" * 300]
    if store_dir:
        fixed.append(str(world.store_dir))
    return st.one_of(st.sampled_from(fixed), _TEXT.filter(_safe_relative))


def storages(world: SimpleNamespace, *, store: bool = False) -> st.SearchStrategy[str]:
    fixed = ["", " ", "sqlite://", "sqlite:///:memory:", "sqlite:////dev/null", "sqlite:////dev/null/x.db",
             f"sqlite:///{world.root / 'missing' / 'x.db'}", "nosuchdb://x", "postgresql://user:secret@127.0.0.1:1/db",
             "mysql://user:secret@127.0.0.1:1/db", f"sqlite:///{world.store_dir}", f"sqlite:///{world.store}-wal",
             "file:///etc/passwd", "sqlite:///caf\udce9.db"]
    if store:
        fixed.append(world.url)
    return st.one_of(st.sampled_from(fixed), _TEXT)


FLAG = st.just(None)  # a store_true option: given or not


# Commands -------------------------------------------------------------------------------------------


def _sweep_options(world: SimpleNamespace) -> dict[str, st.SearchStrategy]:
    return {
        "--configs": counts(3, _argtypes.MAX_CONFIGS),
        "--rungs": lists("1", "1,2", "2,4"),
        "--fraction": reals(1, 1),
        "--seed": counts(3, _argtypes.MAX_SEED),
        "--backward-ratio": reals(5, _argtypes.MAX_RATIO),
        "--cost-mode": choices("calibrated", "measured"),
        "--optimizer": names("eve", "adam", "eve,adam", "eve,eve"),
        "--jobs": counts(2, 1024),
        "--workers": counts(2, 1024),
        "--backend": choices("local"),
        "--address": names("auto"),
        "--json": paths(world),
        "--data-dir": paths(world),
        "--storage": storages(world),
        "--workdir": paths(world, store_dir=False),
        "--plugin": names("tests.tiny_task", "./nosuch.py", "/dev/null", str(world.store), "os", "sys.path"),
        "--resume": FLAG,
        "--force-jobs": FLAG,
    }


def commands(world: SimpleNamespace) -> dict[str, tuple[list[str], dict[str, st.SearchStrategy]]]:
    """command -> (tiny valid arguments, option -> hostile values)."""
    work = str(world.root / "work")
    tiny = ["--task", "tiny", "--plugin", "tests.tiny_task", "--configs", "2", "--backward-ratio", "2", "--quiet",
            "--workdir", work]
    protocol = {
        "--optimizer": names("eve", "adam"), "--lrs": lists("1e-3", "1e-3,1e-2"), "--seeds": lists("0", "0-1"),
        "--budget": counts(4, _argtypes.MAX_BUDGET), "--eval-every": counts(4, _argtypes.MAX_BUDGET),
        "--weight-decay": reals(1, 1), "--cost-mode": choices("calibrated", "measured"),
        "--backward-ratio": reals(5, _argtypes.MAX_RATIO), "--storage": storages(world),
        "--workdir": paths(world, store_dir=False), "--json": paths(world), "--resume": FLAG, "--report-only": FLAG,
    }
    protocol_base = ["--optimizer", "eve", "--lrs", "1e-3", "--seeds", "0", "--budget", "2", "--eval-every", "1",
                     "--backward-ratio", "2", "--quiet", "--workdir", work]
    return {
        "adult": (["adult", "--space", "hp", "--configs", "2", "--rungs", "1", "--backward-ratio", "2", "--quiet",
                   "--workdir", work],
                  {**_sweep_options(world), "--space": names("hp", "arch")}),
        "sweep": (["sweep", *tiny, "--rungs", "2"],
                  {**_sweep_options(world), "--task": names("tiny", "adult"), "--space": names("tiny", "hp")}),
        "rank adult": (["rank", "adult", *tiny, "--rungs", "2", "--seeds", "0-1"],
                       {**{k: v for k, v in _sweep_options(world).items()
                           if k not in ("--optimizer", "--jobs", "--workers", "--backend", "--address", "--seed",
                                        "--force-jobs")},
                        "--space": lists("tiny"), "--seeds": lists("0-1", "0,1"), "--against": names("adam", "eve"),
                        "--task": names("tiny")}),
        "bench throughput": (["bench", "throughput", "--seconds", "0.01", "--rounds", "1"],
                             {"--seconds": reals(0.05, _argtypes.MAX_SECONDS), "--rounds": counts(2, 1000),
                              "--json": paths(world)}),
        "bench synthetic": (["bench", "synthetic", "--functions", "sphere", "--dims", "2", "--seeds", "0-1", "--budget",
                             "10", "--quiet", "--workdir", work],
                            {"--functions": names("sphere", "ackley,sphere", "sphere,sphere"),
                             "--dims": lists("2", "2,10", "1e8", "1e9"), "--seeds": lists("0-1"),
                             "--budget": reals(20, _argtypes.MAX_BUDGET), "--clock": choices("cpu", "wall"),
                             "--alpha": reals(0.5, 1), "--json": paths(world), "--storage": storages(world),
                             "--workdir": paths(world, store_dir=False), "--report-only": FLAG}),
        "bench sweep": (["bench", "sweep", "--rounds", "1", "--configs", "2", "--optimizers", "eve"],
                        {"--space": names("hp", "arch", "tiny"), "--optimizers": names("eve", "eve,adam"),
                         "--rounds": counts(2, 1000), "--hogs": counts(1, 8), "--jobs": counts(2, 8),
                         "--configs": counts(3, _argtypes.MAX_CONFIGS), "--backward-ratio": reals(5, 1000),
                         "--json": paths(world), "--force-jobs": FLAG}),
        "bench memory": (["bench", "memory", "--model", "mnist-mlp", "--optimizer", "eve", "--iterations", "2"],
                         {"--model": choices("lora", "all"), "--optimizer": names("eve", "adam"),
                          "--iterations": counts(3, _argtypes.MAX_ITERATIONS), "--device": choices("cpu", "cuda"),
                          "--threads": counts(2, 8), "--json": paths(world)}),
        "bench matmul": (["bench", "matmul", "--seconds", "0.01", "--threads", "1"],
                         {"--threads": st.lists(counts(2, 8), min_size=0, max_size=3),
                          "--seconds": reals(0.05, _argtypes.MAX_SECONDS), "--json": paths(world)}),
        "dashboard": (["dashboard", "--storage", world.url, "--out", str(world.root / "page.html")],
                      {"--storage": storages(world, store=True), "--out": paths(world), "--json": paths(world),
                       "--title": names("results", "<script>alert(1)</script>"), "--port": counts(1, 65535),
                       "--interval": reals(1, 1e9)}),
        "mnist": (["mnist", *protocol_base, "--subset", "256"],
                  {**protocol, "--data-dir": paths(world), "--dataset-name": names("MNIST", "Fashion-MNIST"),
                   "--subset": counts(300, _argtypes.MAX_ROWS), "--width": counts(8, _argtypes.MAX_WIDTH),
                   "--depth": counts(2, _argtypes.MAX_DEPTH)}),
        "lora": (["lora", *protocol_base],
                 {**protocol, "--model": paths(world), "--data": paths(world), "--rank": counts(4, _argtypes.MAX_RANK),
                  "--alpha": reals(16, _argtypes.MAX_ALPHA), "--max-length": counts(64, _argtypes.MAX_TOKENS)}),
        "audit adult": (["audit", "adult", *tiny, "--budgets", "1,2", "--seeds", "0-1", "--proxies", "eve", "--truth",
                         "adam", "--resamples", "10"],
                        {"--space": lists("tiny"), "--seeds": lists("0-1"), "--proxies": names("eve", "eve,adam"),
                         "--truth": names("adam", "adam,eve"), "--budgets": lists("1,2", "2"),
                         "--task": names("tiny"), "--fraction": reals(1, 1), "--keep-rate": reals(1, 1),
                         "--regret-threshold": reals(5, 1e300), "--configs": counts(3, _argtypes.MAX_CONFIGS),
                         "--storage": storages(world), "--workdir": paths(world, store_dir=False),
                         "--data-dir": paths(world), "--cost-mode": choices("calibrated", "measured"),
                         "--backward-ratio": reals(5, _argtypes.MAX_RATIO),
                         "--resamples": counts(20, _argtypes.MAX_RESAMPLES), "--json": paths(world),
                         "--plugin": names("tests.tiny_task", "./nosuch.py", str(world.store))}),
    }


def _arguments(options: dict[str, st.SearchStrategy]) -> st.SearchStrategy[list[str]]:
    def build(chosen: list[str]) -> st.SearchStrategy[list[str]]:
        def flatten(values: tuple) -> list[str]:
            argv: list[str] = []
            for option, value in zip(chosen, values, strict=True):
                if value is None:
                    argv.append(option)
                elif isinstance(value, list):
                    argv += [option, *value]
                else:
                    argv.append(f"{option}={value}")  # '=' so that a value starting with '-' stays a value
            return argv

        return st.tuples(*(options[option] for option in chosen)).map(flatten)

    return st.lists(st.sampled_from(sorted(options)), min_size=1, max_size=3, unique=True).flatmap(build)


def check(world: SimpleNamespace, capsys, argv: list[str]) -> None:
    try:
        code = main(argv)
    except Accepted:
        code = 0
    finally:
        os.chdir(world.cwd)  # a command never changes it; keep every example in the same place anyway
    err = capsys.readouterr().err
    assert "Traceback" not in err, (argv, err)
    assert code in (0, 2), (argv, code, err)
    if code == 2:
        assert len(err.strip().splitlines()) == 1, (argv, err)
        assert err.startswith("eve-search "), (argv, err)
    assert dump(world.store) == world.before, argv


@pytest.mark.parametrize("command", ["adult", "sweep", "rank adult", "bench throughput", "bench synthetic",
                                     "bench sweep", "bench memory", "bench matmul", "dashboard", "mnist", "lora",
                                     "audit adult"])
def test_any_argument_exits_0_or_2_in_one_line_and_leaves_the_store_unchanged(stubbed, capsys, command):
    base, options = commands(stubbed)[command]

    @EXAMPLES
    @given(extra=_arguments(options))
    def run(extra: list[str]) -> None:
        check(stubbed, capsys, [*base, *extra])

    run()
