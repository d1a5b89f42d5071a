"""Bounded arguments (eve_search.cli.args), names that must not be empty, and what --plugin imports.

Every case is refused in one line naming the argument, the value and the limit, before anything
trains or any process starts. The plugin tests put an ``optuna.py``, a ``torch.py`` and an
``eve_search.py`` in the current directory and check that the installed packages are still the ones
imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from eve_search.cli import args as _argtypes
from eve_search.cli import main
from eve_search.engine.trial import Trial
from tests.load import hang_guard

ROOT = Path(__file__).resolve().parents[2]
TINY = ["sweep", "--task", "tiny", "--plugin", "tests.tiny_task", "--configs", "2", "--rungs", "4",
        "--backward-ratio", "2", "--quiet"]
HUGE = "99999999999999999999"


@pytest.fixture
def nothing_runs(monkeypatch):
    """Fail the test if anything trains, measures or starts a process."""

    def refuse(*args, **kwargs):
        raise AssertionError("work started before the arguments were checked")

    monkeypatch.setattr(Trial, "train_to", refuse)
    monkeypatch.setattr(subprocess, "run", refuse)
    monkeypatch.setattr(subprocess, "Popen", refuse)
    monkeypatch.setattr(_argtypes, "available_cpus", lambda: 2)  # the CPU limits below assume 2


def one_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


LIMITS = [
    # adult / sweep
    (["adult", "--space", "hp", "--configs", HUGE], "argument --configs: '99999999999999999999' is more than 100,000"),
    (["adult", "--space", "hp", "--configs", "100001"], "is more than 100,000 (one trial per configuration"),
    (["adult", "--space", "hp", "--configs", "9" * 5000], "(5,000 characters) is more than 100,000"),
    (["adult", "--space", "hp", "--configs", "1e3"], "argument --configs: '1e3' is not an integer"),
    (["adult", "--space", "hp", "--rungs", "1e26"], "argument --rungs: '1e26': a budget is more than 1,000,000,000"),
    (["adult", "--space", "hp", "--rungs", "inf"], "argument --rungs: 'inf': a budget is more than"),
    (["adult", "--space", "hp", "--rungs", "nan"], "argument --rungs: 'nan': Invalid rungs"),
    (["adult", "--space", "hp", "--rungs", "-1"], "argument --rungs: '-1': Invalid rungs"),
    (["adult", "--space", "hp", "--rungs", "1000000001"], "a budget is more than 1,000,000,000"),
    (["adult", "--space", "hp", "--rungs", ",".join(map(str, range(1, 102)))], "101 rungs is more than 100"),
    (["adult", "--space", "hp", "--seed", "4294967296"], "argument --seed: '4294967296' is more than 4,294,967,295"),
    (["adult", "--space", "hp", "--seed", HUGE], "argument --seed: '99999999999999999999' is more than"),
    (["adult", "--space", "hp", "--backward-ratio", "inf"], "argument --backward-ratio: 'inf' is not a finite number"),
    (["adult", "--space", "hp", "--backward-ratio", "nan"], "argument --backward-ratio: 'nan' is not a finite number"),
    (["adult", "--space", "hp", "--backward-ratio", "1001"], "argument --backward-ratio: '1001' is more than 1,000"),
    (["adult", "--space", "hp", "--backward-ratio", "0"], "argument --backward-ratio: '0' must be > 0"),
    (["adult", "--space", "hp", "--fraction", "nan"], "argument --fraction: 'nan' is not a number in (0, 1]"),
    (["adult", "--space", "hp", "--jobs", "100000"], "argument --jobs: 100000 is more than --configs 48"),
    (["adult", "--space", "hp", "--jobs", HUGE], "argument --jobs: '99999999999999999999' is more than 100,000"),
    (["adult", "--space", "hp", "--jobs", "9"], "argument --jobs: 9 is more than 4 x the 2 CPUs this process may "
                                                "use (8)"),
    (["adult", "--space", "hp", "--jobs", "3", "--configs", "2"], "argument --jobs: 3 is more than --configs 2"),
    (["adult", "--space", "hp", "--jobs", "1025", "--configs", "2000", "--force-jobs"],
     "argument --jobs: 1025 is more than 1,024, the most worker processes even --force-jobs starts"),
    (["sweep", "--task", "tiny", "--plugin", "tests.tiny_task", "--backend", "optuna", "--workers", "9"],
     "argument --workers: 9 is more than 4 x the 2 CPUs"),
    (["adult", "--space", ""], "argument --space: '' is empty (expected a search space)"),
    (["adult", "--space", "   "], "argument --space: '   ' is empty"),
    (["sweep", "--task", ""], "argument --task: '' is empty (expected a registered task)"),
    (["sweep", "--task", "tiny", "--plugin", "tests.tiny_task", "--space", " "], "argument --space: ' ' is empty"),
    (["adult", "--space", "hp", "--optimizer", "x" * 10_000], "(10,000 characters)"),
    # rank adult
    (["rank", "adult", "--seeds", "0-99999999999"], "argument --seeds: '0-99999999999': seed '99999999999' is more "
                                                    "than 4,294,967,295"),
    (["rank", "adult", "--seeds", "0-1000"], "argument --seeds: '0-1000' names more than 1000 seeds"),
    (["rank", "adult", "--seeds", f"0-{HUGE}"], "is more than 4,294,967,295"),
    (["rank", "adult", "--task", ""], "argument --task: '' is empty"),
    (["rank", "adult", "--configs", "0"], "argument --configs: '0' must be > 0"),
    # bench
    (["bench", "throughput", "--seconds", "inf"], "argument --seconds: 'inf' is not a finite number"),
    (["bench", "throughput", "--seconds", "1e26"], "argument --seconds: '1e26' is more than 3,600"),
    (["bench", "throughput", "--rounds", "1001"], "argument --rounds: '1001' is more than 1,000"),
    (["bench", "matmul", "--seconds", "nan"], "argument --seconds: 'nan' is not a finite number"),
    (["bench", "matmul", "--threads", "9"], "argument --threads: '9' is more than 8 (4 x the 2 CPUs"),
    (["bench", "matmul", "--threads", *["1"] * 17], "argument --threads: 17 thread counts is more than 16"),
    (["bench", "memory", "--iterations", "1000001"], "argument --iterations: '1000001' is more than 1,000,000"),
    (["bench", "memory", "--threads", "100000"], "argument --threads: '100000' is more than 8"),
    (["bench", "sweep", "--space", "nosuch"], "argument --space: unknown space 'nosuch' (expected one of: arch, hp)"),
    (["bench", "sweep", "--space", ""], "argument --space: unknown space ''"),
    (["bench", "sweep", "--jobs", "49"], "argument --jobs: 49 is more than --configs 48"),
    (["bench", "sweep", "--jobs", "9", "--configs", "9"], "argument --jobs: 9 is more than 4 x the 2 CPUs"),
    (["bench", "sweep", "--hogs", "9"], "argument --hogs: '9' is more than 8 (4 x the 2 CPUs"),
    (["bench", "sweep", "--rounds", HUGE], "argument --rounds: '99999999999999999999' is more than 1,000"),
    (["bench", "synthetic", "--dims", "1e9"], "argument --dims: '1e9' is not a dimension (expected an integer from 2 "
                                              "to 1e8"),
    (["bench", "synthetic", "--dims", ",".join(map(str, range(2, 103)))], "101 dimensions is more than 100"),
    (["bench", "synthetic", "--budget", "inf"], "argument --budget: 'inf' is not a finite number"),
    (["bench", "synthetic", "--budget", "1e10"], "argument --budget: '1e10' is more than 1,000,000,000"),
    (["bench", "synthetic", "--seeds", "0-5000"], "argument --seeds: '0-5000' names more than 1000 seeds"),
    (["bench", "synthetic", "--alpha", "nan"], "argument --alpha: nan (expected a family-wise level in (0, 1))"),
    # the protocols
    (["mnist", "--width", "999999999"], "argument --width: '999999999' is more than 65,536"),
    (["mnist", "--width", "20000"], "argument --width: 20000 with --depth 2 is an MLP of 415,920,010 weights, more "
                                    "than 100,000,000"),
    (["mnist", "--depth", "101"], "argument --depth: '101' is more than 100"),
    (["mnist", "--subset", HUGE], "argument --subset: '99999999999999999999' is more than 1,000,000,000"),
    (["mnist", "--budget", "1e26"], "argument --budget: '1e26' is not an integer"),
    (["mnist", "--budget", "1000000001"], "argument --budget: '1000000001' is more than 1,000,000,000"),
    (["mnist", "--eval-every", HUGE], "argument --eval-every: '99999999999999999999' is more than"),
    (["mnist", "--weight-decay", "nan"], "argument --weight-decay: 'nan' is not a finite number"),
    (["mnist", "--weight-decay", "2"], "argument --weight-decay: '2' is more than 1"),
    (["mnist", "--lrs", ",".join(f"{k}e-5" for k in range(1, 102))], "101 learning rates is more than 100"),
    (["mnist", "--seeds", "0-99999999999"], "is more than 4,294,967,295"),
    (["lora", "--rank", "100000"], "argument --rank: '100000' is more than 65,536"),
    (["lora", "--rank", "65"], "argument --rank: 65 is more than the model's hidden size 64"),
    (["lora", "--alpha", "inf"], "argument --alpha: 'inf' is not a finite number"),
    (["lora", "--alpha", "1e7"], "argument --alpha: '1e7' is more than 1,000,000"),
    (["lora", "--max-length", "1000000"], "argument --max-length: '1000000' is more than 131,072"),
    (["lora", "--max-length", "1"], "argument --max-length: '1' must be >= 2"),
    # audit
    (["audit", "adult", "--configs", "100001"], "argument --configs: '100001' is more than 100,000"),
    (["audit", "adult", "--resamples", "10000000"], "argument --resamples: '10000000' is more than 1,000,000"),
    (["audit", "adult", "--budgets", "1,1e26"], "argument --budgets: '1,1e26': a budget is more than"),
    (["audit", "adult", "--regret-threshold", "inf"], "argument --regret-threshold: 'inf' is not a finite number"),
    (["audit", "adult", "--task", " "], "argument --task: ' ' is empty"),
    (["audit", "adult", "--seeds", "0-99999999999"], "is more than 4,294,967,295"),
]


@pytest.mark.parametrize(("args", "message"), LIMITS, ids=lambda v: " ".join(v)[:60] if isinstance(v, list) else None)
def test_every_bound_is_one_line_naming_the_value_and_the_limit(tmp_path, capsys, monkeypatch, nothing_runs, args,
                                                                  message):
    monkeypatch.chdir(tmp_path)
    workdir = [] if args[0] in ("bench", "dashboard") else ["--workdir", str(tmp_path / "w")]
    with hang_guard():  # refused, never run until killed (nothing_runs refuses any work)
        assert main([*args, *workdir]) == 2
    line = one_line(capsys)
    assert message in line, line
    assert line.startswith("eve-search ")
    assert not (tmp_path / "w" / "results.db").exists()  # nothing recorded


def test_force_jobs_lifts_only_the_cpu_limit(monkeypatch):
    monkeypatch.setattr(_argtypes, "available_cpus", lambda: 2)
    assert _argtypes.check_processes(9, "--jobs", configs=48, force=True) is None
    assert "4 x the 2 CPUs" in _argtypes.check_processes(9, "--jobs", configs=48, force=False)
    assert "more than --configs 8" in _argtypes.check_processes(9, "--jobs", configs=8, force=True)
    assert _argtypes.check_processes(8, "--jobs", configs=48, force=False) is None


def test_the_engine_refuses_more_than_1024_workers():
    from eve_search.engine._workers import check_jobs

    assert check_jobs(1024) == 1024
    with pytest.raises(ValueError, match="Invalid jobs: 1025 .expected at most 1024"):
        check_jobs(1025)


@pytest.mark.parametrize("text", [HUGE * 10, "9" * 100_000, "-" + "9" * 100_000, "1" + "_0" * 50])
def test_huge_integers_are_compared_not_converted(text, monkeypatch):
    import argparse

    converted = []

    def spy(value=0, *args, **kwargs):  # the module's int(): every text it converts is seen here
        if isinstance(value, str):
            converted.append(len(value))
        return int(value, *args, **kwargs)

    monkeypatch.setattr(_argtypes, "int", spy, raising=False)
    for parse in (_argtypes.configs, _argtypes.seed, _argtypes.budget, _argtypes.positive_int):
        with pytest.raises(argparse.ArgumentTypeError):
            parse(text)
    with pytest.raises(argparse.ArgumentTypeError):
        _argtypes.seed_list(f"0-{text}")
    assert converted and max(converted) < 64  # a few digits at most were ever converted: never the huge text


def test_jobs_within_the_limits_run(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(_argtypes, "available_cpus", lambda: 1)
    out = tmp_path / "out.json"
    assert main([*TINY, "--jobs", "2", "--workdir", str(tmp_path / "w"), "--json", str(out)]) == 0  # 2 <= 4 x 1
    assert json.loads(out.read_text())["optimizers"]["eve"]["winner"] is not None


def test_bench_sweep_refuses_an_unknown_space_before_any_process_starts(capsys, nothing_runs):
    assert main(["bench", "sweep", "--space", "nosuch", "--rounds", "1", "--configs", "2"]) == 2
    assert one_line(capsys) == ("eve-search bench sweep: argument --space: unknown space 'nosuch' (expected one of: "
                                "arch, hp)")


def test_an_empty_task_or_space_never_runs_the_default(tmp_path, capsys, monkeypatch, nothing_runs):
    for args in (["adult", "--space", ""], ["sweep", "--task", ""], ["sweep", "--task", "\t"],
                 ["sweep", "--task", "adult", "--space", ""]):
        assert main([*args, "--workdir", str(tmp_path), "--quiet"]) == 2
        assert "is empty" in one_line(capsys)
    assert not (tmp_path / "results.db").exists()


def test_a_newline_in_an_unknown_argument_stays_on_one_line(capsys):
    assert main(["adult", "--space", "hp", "--no-such\noption"]) == 2
    assert "unrecognized arguments: --no-such\\noption" in one_line(capsys)


# --plugin ---------------------------------------------------------------------------------------------

SHADOWS = ("optuna", "torch", "eve_search", "colorsys")


def _shadow(folder: Path) -> None:
    """Modules in ``folder`` named like installed packages: importing one leaves a mark and fails."""
    for name in SHADOWS:
        (folder / f"{name}.py").write_text(f"open({str(folder / ('SHADOW-' + name))!r}, 'w').close()\n"
                                           f"raise ImportError('the {name}.py of the current directory ran')\n")


def _tiny_plugin(name: str) -> str:
    """A plugin registering task ``name`` on the tiny data and space (tests/tiny_task.py)."""
    return textwrap.dedent(f"""\
        import colorsys  # installed (the standard library), and shadowed in the current directory

        from eve_search.tasks import Task, register_task
        from tests.tiny_task import _tiny_data, _tiny_model

        assert colorsys.__file__ and "SHADOW" not in open(colorsys.__file__).read()

        register_task(Task({name!r}, "the tiny task, from a plugin", load_data=_tiny_data, build_model=_tiny_model,
                           batch_size=32, spaces=("tiny",)))
        """)


def _sweep(task: str, plugin: str, workdir: Path, *extra: str) -> list[str]:
    return ["sweep", "--task", task, "--plugin", plugin, "--configs", "2", "--rungs", "4", "--backward-ratio", "2",
            "--quiet", "--workdir", str(workdir), *extra]


@pytest.fixture
def shadowed(tmp_path, monkeypatch):
    """A current directory full of shadows; sys.path and sys.modules restored afterwards."""
    _shadow(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "colorsys", raising=False)  # so that the plugin's import looks it up
    return tmp_path


def test_a_plugin_file_is_imported_by_its_path_without_touching_sys_path(shadowed, capsys):
    (shadowed / "plugins").mkdir()
    (shadowed / "plugins" / "mine.py").write_text(_tiny_plugin("tiny-by-path"))
    path_before = list(sys.path)
    out = shadowed / "out.json"
    assert main([*_sweep("tiny-by-path", "plugins/mine.py", shadowed / "w"), "--json", str(out)]) == 0, \
        capsys.readouterr().err
    assert sys.path == path_before
    assert json.loads(out.read_text())["task"] == "tiny-by-path"
    assert not list(shadowed.glob("SHADOW-*"))


def test_a_plugin_module_in_the_current_directory_comes_after_the_installed_packages(shadowed, capsys):
    (shadowed / "mine_by_name.py").write_text(_tiny_plugin("tiny-by-name"))
    assert main(_sweep("tiny-by-name", "mine_by_name", shadowed / "w")) == 0, capsys.readouterr().err
    assert not list(shadowed.glob("SHADOW-*"))
    import colorsys

    assert Path(colorsys.__file__).parent != shadowed
    # The folder stays on the path (for --jobs workers), after every installed package.
    position = sys.path.index(str(shadowed))
    site = max(k for k, entry in enumerate(sys.path) if "site-packages" in entry)
    assert position > site


def test_a_module_plugin_found_elsewhere_leaves_sys_path_as_it_was(shadowed, capsys):
    path_before = list(sys.path)
    assert main(_sweep("tiny", "tests.tiny_task", shadowed / "w")) == 0, capsys.readouterr().err
    assert sys.path == path_before


def test_the_installed_command_ignores_shadows_in_the_current_directory(tmp_path):
    """The console script (no current directory on sys.path) with an optuna.py, torch.py and
    eve_search.py beside the plugin: the real packages run the sweep."""
    _shadow(tmp_path)
    (tmp_path / "mine.py").write_text(_tiny_plugin("tiny-console"))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # for tests.tiny_task (the path's end, after site-packages)
    script = Path(sys.executable).parent / "eve-search"
    command = [str(script)] if script.exists() else [sys.executable, "-P", "-c",
                                                      "import sys; from eve_search.cli import console; "
                                                      "sys.exit(console())"]
    for plugin, workdir in (("mine", "a"), ("./mine.py", "b")):
        done = subprocess.run([*command, *_sweep("tiny-console", plugin, tmp_path / workdir), "--json",
                               str(tmp_path / f"{workdir}.json")], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=300, check=False)
        assert done.returncode == 0, done.stderr
        assert json.loads((tmp_path / f"{workdir}.json").read_text())["task"] == "tiny-console"
    assert not list(tmp_path.glob("SHADOW-*"))


def test_a_plugin_file_runs_in_jobs_workers(shadowed, capsys, monkeypatch):
    monkeypatch.setattr(_argtypes, "available_cpus", lambda: 1)
    (shadowed / "jobs_plugin.py").write_text(_tiny_plugin("tiny-jobs"))
    out = shadowed / "out.json"
    assert main([*_sweep("tiny-jobs", "./jobs_plugin.py", shadowed / "w", "--jobs", "2"), "--json", str(out)]) == 0, \
        capsys.readouterr().err
    assert json.loads(out.read_text())["optimizers"]["eve"]["winner"] is not None


@pytest.mark.parametrize(
    ("plugin", "source", "message"),
    [
        ("no_such_plugin_xyz", None, "argument --plugin: 'no_such_plugin_xyz' could not be imported (no module named "
                                     "'no_such_plugin_xyz' among the installed packages or in the current directory"),
        ("./no_such_file.py", None, "argument --plugin: './no_such_file.py' is not a file"),
        ("", None, "argument --plugin: '' is empty"),
        ("not a name", None, "argument --plugin: 'not a name' is neither a module name"),
        ("at_import.py", "x = 1\nraise KeyError('broken at import')\n",
         "argument --plugin: 'at_import.py' could not be imported (KeyError: 'broken at import' at at_import.py:2)"),
        ("syntax.py", "def f(:\n", "argument --plugin: 'syntax.py' could not be imported (SyntaxError: "),
        ("exits.py", "import sys\nsys.exit(3)\n", "argument --plugin: 'exits.py' could not be imported (SystemExit: 3"),
        ("missing_import.py", "import no_such_module_abc\n",
         "'missing_import.py' could not be imported (ModuleNotFoundError: No module named 'no_such_module_abc' at "
         "missing_import.py:1)"),
    ],
)
def test_a_plugin_that_cannot_be_imported_is_one_line(shadowed, capsys, plugin, source, message):
    if source is not None:
        (shadowed / plugin).write_text(source)
    assert main(_sweep("tiny", plugin, shadowed / "w")) == 2
    line = one_line(capsys)
    assert line.startswith("eve-search sweep: ") and message in line, line


@pytest.mark.parametrize("where", ["load_data", "build_model"])
def test_an_exception_in_plugin_code_at_run_time_is_one_line_naming_the_plugin(shadowed, capsys, where):
    name = f"tiny-raises-in-{where}"
    body = textwrap.dedent(f"""\
        def _broken(*args):
            raise RuntimeError("the plugin's {where} broke")
        """)
    source = _tiny_plugin(name).replace(f"{where}=_tiny_{'data' if where == 'load_data' else 'model'}",
                                            f"{where}=_broken")
    (shadowed / "raises.py").write_text(body + source)
    assert main(_sweep(name, "./raises.py", shadowed / "w")) == 2
    line = one_line(capsys)
    assert line == f"eve-search sweep: --plugin './raises.py' raised RuntimeError: the plugin's {where} broke (at " \
                   "raises.py:2)", line


def test_a_plugin_error_in_rank_and_audit_is_one_line(shadowed, capsys):
    (shadowed / "bad_data.py").write_text("def _broken(*args):\n    raise OSError('no data here')\n"
                                          + _tiny_plugin("tiny-bad-data").replace("load_data=_tiny_data",
                                                                                  "load_data=_broken"))
    common = ["--task", "tiny-bad-data", "--plugin", "bad_data.py", "--configs", "2", "--backward-ratio", "2",
              "--workdir", str(shadowed / "w"), "--quiet"]
    assert main(["rank", "adult", *common, "--rungs", "4", "--seeds", "0-1"]) == 2
    assert one_line(capsys).startswith("eve-search rank adult: --plugin 'bad_data.py' raised OSError: no data here")
    assert main(["audit", "adult", *common, "--budgets", "2,4", "--seeds", "0-1"]) == 2
    assert one_line(capsys).startswith("eve-search audit adult: --plugin 'bad_data.py' raised OSError: no data here")


def test_every_command_defaults_to_the_store_of_its_work_directory(tmp_path, monkeypatch):
    from eve_search.cli._common import default_storage
    from eve_search.cli._main import _build_parser

    monkeypatch.chdir(tmp_path)
    parser = _build_parser()
    store = default_storage(parser.parse_args(["adult", "--space", "hp", "--workdir", "runs"]))
    assert store == _argtypes.default_storage_url("runs") == f"sqlite:///{tmp_path / 'runs' / 'results.db'}"
    assert default_storage(parser.parse_args(["dashboard"])) == _argtypes.default_storage_url() \
        == f"sqlite:///{tmp_path / _argtypes.DEFAULT_WORKDIR / 'results.db'}"
    given = "sqlite:///elsewhere.db"
    assert default_storage(parser.parse_args(["dashboard", "--storage", given])) == given
    assert default_storage(parser.parse_args(["bench", "matmul"])) is None  # no store
