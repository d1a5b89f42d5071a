import json
import subprocess
import sys

import pytest

from eve_search.cli import main


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "eve_search.cli", *args], check=False, capture_output=True, text=True)


def test_bench_throughput_prints_the_table_and_writes_json(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert main(["bench", "throughput", "--seconds", "0.1", "--rounds", "1", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "compute floor" in printed and "EvE / Adam" in printed
    figures = json.loads(out.read_text())
    assert set(figures["units_per_second"]) == {"floor", "passes", "eve", "adam"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["bench", "throughput", "--seconds", "-1"], "argument --seconds: '-1' must be > 0"),
        (["bench", "throughput", "--rounds", "two"], "argument --rounds: 'two' is not an integer"),
        (["bench", "latency"], "invalid choice: 'latency'"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
    ],
)
def test_bad_arguments_exit_2_with_one_line_and_no_traceback(args, message):
    result = run_cli(*args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_the_console_script_returns_mains_exit_code_and_skips_the_last_collection(monkeypatch, capsys):
    import gc

    from eve_search.cli import console

    monkeypatch.setattr(sys, "argv", ["eve-search", "adult", "--space", "nowhere"])
    try:
        assert console() == 2
        assert gc.get_freeze_count() > 0  # what is alive now is left out of the interpreter's final collection
    finally:
        gc.unfreeze()
    assert "argument --space" in capsys.readouterr().err


def test_the_installed_command_is_the_console_function():
    from pathlib import Path

    import tomllib

    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    assert project["project"]["scripts"]["eve-search"] == "eve_search.cli:console"


def test_the_command_table_runs_every_command_the_parser_accepts_and_nothing_else():
    import importlib

    from eve_search.cli import _main

    parser = _main._build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    kinds = next(a for a in commands["bench"]._actions if a.dest == "bench").choices
    accepted = {name for name in commands if name != "bench"} | {f"bench {kind}" for kind in kinds}
    assert set(_main.COMMANDS) == accepted
    for command in _main.COMMANDS.values():
        for target in (command.run, command.configure):
            module, _, name = target.partition(":")
            assert callable(getattr(importlib.import_module(module), name))


def test_python_dash_m_eve_search_is_the_console_script():
    # For an environment whose scripts folder is not on PATH: the same command, the same exit codes.
    help_ = subprocess.run([sys.executable, "-m", "eve_search", "--help"], check=False, capture_output=True, text=True)
    assert help_.returncode == 0 and "adult" in help_.stdout and help_.stderr == ""
    bad = subprocess.run([sys.executable, "-m", "eve_search", "frobnicate"], check=False, capture_output=True,
                         text=True)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "frobnicate" in bad.stderr


@pytest.mark.parametrize("args, code", [
    (["--help"], 0),
    (["bench", "--help"], 0),
    (["dashboard", "--help"], 0),
    (["frobnicate"], 2),
    (["bench", "frobnicate"], 2),
    ([], 2),
    (["sweep", "--help"], 0),
    (["rank", "adult", "--help"], 0),
    (["adult"], 2),
    (["adult", "--space", "hp", "--configs", "-1"], 2),
    (["sweep", "--task", "adult", "--rungs", "100,x"], 2),
])
def test_help_and_a_mistyped_command_load_no_command_and_no_pytorch(args, code):
    # Only the command argparse picks gets its arguments (and imports its module): the others are
    # never configured, so asking for help or mistyping a command costs no PyTorch import. Nor do the
    # main job's own help and bad arguments: their parser needs nothing of PyTorch's.
    probe = ("import sys\nfrom eve_search.cli import main\n"
             f"try:\n    code = main({args!r})\nexcept SystemExit as done:\n    code = done.code\n"
             "loaded = sorted(m for m in sys.modules if m == 'torch' or m.startswith('eve_search.cli.commands.'))\n"
             "print(code, loaded, file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-c", probe], check=False, capture_output=True, text=True)
    last = done.stderr.strip().splitlines()[-1]
    # The picked command's module (adult's and rank's arguments are declared by the sweep command's).
    picked = {"dashboard": ["dashboard"], "sweep": ["sweep"], "rank": ["rank", "sweep"], "adult": ["adult", "sweep"]}
    wanted = sorted(f"eve_search.cli.commands.{name}" for name in picked.get(args[0] if args else "", []))
    assert last == f"{code} {wanted}", done.stderr
    if code == 2:  # one line, then the probe's
        assert len(done.stderr.strip().splitlines()) == 2


def test_a_picked_command_gets_its_arguments_and_each_command_only_once():
    from eve_search.cli import UsageError, _main

    parser = _main._build_parser()
    args = parser.parse_args(["bench", "sweep", "--configs", "3"])
    assert (args.command, args.bench, args.configs) == ("bench", "sweep", 3)
    again = parser.parse_args(["bench", "sweep", "--configs", "4"])  # configured once, parsed again
    assert again.configs == 4
    with pytest.raises(UsageError, match="unrecognized arguments: --configs"):
        parser.parse_args(["bench", "matmul", "--configs", "4"])  # another kind: its own arguments only


def test_the_main_jobs_help_names_the_registered_search_spaces():
    done = run_cli("adult", "--help")
    assert done.returncode == 0 and done.stderr == ""
    shown = " ".join(done.stdout.split())
    assert "search space (arch, fashion-arch, fashion-hp, hp, or one a --plugin registers)" in shown


def test_the_errors_that_end_a_command_with_one_line_are_input_errors():
    # main() catches InputError (and a missing extra) without importing these errors' modules.
    from eve_search import InputError
    from eve_search.cli._common import OutputError
    from eve_search.cli._outputs import OutputClash
    from eve_search.data import AdultDataError, IdxError
    from eve_search.engine.checkpoint import CheckpointError
    from eve_search.engine.pool import PoolError
    from eve_search.tasks.lora import InstructionDataError, LoraModelError

    errors = (AdultDataError, IdxError, InstructionDataError, CheckpointError, PoolError, LoraModelError,
              OutputError, OutputClash)
    assert all(issubclass(error, InputError) for error in errors) and issubclass(InputError, ValueError)


TINY = ["sweep", "--task", "tiny", "--configs", "3", "--rungs", "30,90", "--backward-ratio", "2", "--quiet"]


def test_bad_input_found_during_training_is_one_line_and_exit_code_2(tmp_path, capsys, monkeypatch):
    from eve_search import InputError
    from eve_search.engine.trial import Trial

    def refused(self, budget):
        raise InputError(f"Invalid budget: {budget} (expected what the test wants)\nsecond line")

    monkeypatch.setattr(Trial, "train_to", refused)
    assert main([*TINY, "--workdir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err == "eve-search sweep: Invalid budget: 30 (expected what the test wants)\n"


def test_a_value_error_inside_training_is_a_bug_shown_with_its_traceback_and_exit_code_1(tmp_path, capsys,
                                                                                          monkeypatch):
    from eve_search.engine.trial import Trial

    def broken(self, budget):
        raise ValueError("a bug inside training")

    monkeypatch.setattr(Trial, "train_to", broken)
    assert main([*TINY, "--workdir", str(tmp_path)]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert "ValueError: a bug inside training" in lines and any("in broken" in line for line in lines)
    assert lines[-1] == ("eve-search sweep: stopped by an unexpected ValueError, a bug in eve-search: please report "
                         "it with the traceback above and the command you ran (everything recorded so far is kept)")


def test_any_other_exception_is_a_bug_report_too_and_the_console_script_exits_1(tmp_path, monkeypatch, capsys):
    from eve_search.cli import console
    from eve_search.engine.trial import Trial

    def broken(self, budget):
        raise KeyError("no such slot")

    monkeypatch.setattr(Trial, "train_to", broken)
    monkeypatch.setattr(sys, "argv", ["eve-search", *TINY, "--workdir", str(tmp_path)])
    try:
        assert console() == 1
    finally:
        import gc

        gc.unfreeze()
    err = capsys.readouterr().err
    assert "KeyError: 'no such slot'" in err and err.strip().splitlines()[-1].startswith(
        "eve-search sweep: stopped by an unexpected KeyError, a bug in eve-search: please report it")
