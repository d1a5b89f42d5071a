"""The results store is the user's data: nothing overwrites it, it is whole in its main file whenever
a command ends, it is never in memory, read-only stores and concurrent starts get one line or work,
and no password is ever shown.

Every command runs in-process (``eve_search.cli.main``) on the tiny task, except where the process
boundary is what is tested: the console script's fast exit, a real SIGINT, a user without write
permission, and two processes creating a new store at once.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eve_search.cli._outputs import OutputClash, check_outputs
from eve_search.engine._stores import close_stores, redact, safe_url
from eve_search.cli import main
from eve_search.tasks.spaces import get_space
from eve_search.engine.store import StoreError, SweepStore
from tests.hostile import default_sigint

pytestmark = pytest.mark.slow  # minutes in all: `make test` starts this file first
ROOT = Path(__file__).resolve().parents[2]
TINY = ["sweep", "--task", "tiny", "--configs", "3", "--rungs", "30,90", "--backward-ratio", "2", "--quiet"]
PASSWORD = "Sup3r-Secret-pw"
UNREACHABLE = f"postgresql+psycopg2://ann:{PASSWORD}@127.0.0.1:1/runs"


def dump(database: Path) -> str:
    """The store's contents (SQL text, not bytes: a checkpoint rewrites bytes, never contents)."""
    connection = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    try:
        return "\n".join(connection.iterdump())
    finally:
        connection.close()


def main_file_counts(database: Path, scratch: Path) -> dict[str, int]:
    """What a copy of the store's main file alone (no -wal, no -shm) holds."""
    scratch.mkdir(parents=True, exist_ok=True)
    copy = scratch / "copy.db"
    shutil.copyfile(database, copy)
    connection = sqlite3.connect(copy)
    try:
        counts = {table: connection.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]  # noqa: S608
                  for table in ("studies", "trials", "trial_intermediate_values", "trial_values")}
        counts["finished"] = connection.execute(
            "SELECT COUNT(*) FROM trials WHERE state IN ('COMPLETE', 'PRUNED')").fetchone()[0]
        counts["complete"] = connection.execute("SELECT COUNT(*) FROM trials WHERE state = 'COMPLETE'").fetchone()[0]
        return counts
    finally:
        connection.close()


def one_line(capsys) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in captured.err, captured.err
    return lines[0]


@pytest.fixture(scope="module")
def finished_sweep(tmp_path_factory) -> Path:
    """A work directory holding one finished tiny sweep (copy it before changing anything)."""
    workdir = tmp_path_factory.mktemp("finished")
    assert main([*TINY, "--workdir", str(workdir)]) == 0
    return workdir


@pytest.fixture
def workdir(finished_sweep, tmp_path, monkeypatch) -> Path:
    """A copy of the finished sweep's work directory, made the current directory."""
    target = tmp_path / "work"
    shutil.copytree(finished_sweep, target)
    monkeypatch.chdir(target)
    return target


def python(code: str, *prefix: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter at the repository root (the tiny task importable), with
    Ctrl-C handled as in a terminal even where the test run itself ignores SIGINT (a shell's background
    job does, and a child inherits that)."""
    return subprocess.run([*prefix, sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, check=False, preexec_fn=default_sigint)


# 1. No output lands on the store, its log, a checkpoint, an input, or another output -----------------


@pytest.mark.parametrize(("spelling", "what"), [
    ("results.db", "is the results store"),
    ("./results.db", "is the results store"),
    ("sub/../results.db", "is the results store"),
    ("link.json", "is the results store"),
    ("hard.json", "is the results store"),
    ("{absolute}", "is the results store"),
    ("results.db-wal", "is the results store's write-ahead log"),
    ("./sub/../results.db-shm", "is the results store's shared-memory index"),
    ("results.db-journal", "is the results store's journal"),
    ("checkpoints/summary.json", "is inside the checkpoint folder"),
])
def test_an_output_on_the_store_is_refused_before_any_work(workdir, capsys, spelling, what):
    (workdir / "sub").mkdir()
    (workdir / "link.json").symlink_to("results.db")
    os.link(workdir / "results.db", workdir / "hard.json")
    spelling = spelling.format(absolute=workdir / "results.db")
    before, files = dump(workdir / "results.db"), sorted(p.name for p in workdir.rglob("*"))
    assert main([*TINY, "--workdir", ".", "--resume", "--json", spelling]) == 2
    shown = str(Path(spelling))
    assert one_line(capsys) == (f"eve-search sweep: argument --json: {shown!r} {what}"
                                + (" 'checkpoints'" if "checkpoint" in what else "") + " (choose another path)")
    assert dump(workdir / "results.db") == before
    assert sorted(p.name for p in workdir.rglob("*")) == files


def test_json_on_the_default_store_in_the_current_directory_is_refused(workdir, capsys):
    assert main([*TINY, "--workdir", ".", "--json", "results.db"]) == 2
    assert one_line(capsys) == ("eve-search sweep: argument --json: 'results.db' is the results store (choose "
                                "another path)")


@pytest.mark.parametrize("argv", [
    ["adult", "--space", "hp", "--workdir", ".", "--json", "results.db"],
    ["rank", "adult", "--workdir", ".", "--json", "results.db"],
    ["audit", "adult", "--workdir", ".", "--json", "results.db"],
    ["bench", "synthetic", "--workdir", ".", "--json", "results.db"],
    ["mnist", "--workdir", ".", "--json", "results.db"],
    ["lora", "--workdir", ".", "--json", "results.db"],
    ["dashboard", "--storage", "sqlite:///results.db", "--out", "results.db"],
    ["dashboard", "--storage", "sqlite:///results.db", "--json", "./results.db-wal"],
    ["sweep", "--task", "tiny", "--storage", "sqlite:///results.db", "--workdir", "elsewhere", "--json",
     "results.db"],
])
def test_every_command_refuses_an_output_on_its_store(workdir, capsys, argv):
    before = dump(workdir / "results.db")
    assert main(argv) == 2
    line = one_line(capsys)
    assert "is the results store" in line and "(choose another path)" in line
    assert dump(workdir / "results.db") == before
    assert not (workdir / "elsewhere").exists() and not (workdir / "report.html").exists()


def test_the_dashboards_default_page_on_a_store_named_like_it_is_refused(workdir, capsys):
    shutil.copyfile(workdir / "results.db", workdir / "report.html")
    before = dump(workdir / "report.html")
    assert main(["dashboard", "--storage", "sqlite:///report.html"]) == 2
    assert one_line(capsys) == ("eve-search dashboard: argument --out: 'report.html' is the results store (choose "
                                "another path)")
    assert dump(workdir / "report.html") == before


def test_two_outputs_on_one_path_and_outputs_on_inputs_are_refused(workdir, capsys):
    assert main(["dashboard", "--storage", "sqlite:///results.db", "--out", "page.html", "--json", "./page.html"]) == 2
    assert one_line(capsys) == ("eve-search dashboard: argument --json: 'page.html' is also the --out path (choose "
                                "another path)")
    data = workdir / "data"
    data.mkdir()
    assert main([*TINY, "--workdir", ".", "--data-dir", "data", "--json", "data/out.json"]) == 2
    assert one_line(capsys) == ("eve-search sweep: argument --json: 'data/out.json' is inside the --data-dir folder "
                                "'data', which this command reads (choose another path)")
    (workdir / "records.jsonl").write_text('{"instruction": "a", "input": "", "output": "b"}\n')
    assert main(["lora", "--data", "records.jsonl", "--json", "records.jsonl", "--workdir", "."]) == 2
    assert one_line(capsys) == ("eve-search lora: argument --json: 'records.jsonl' is the --data file, which this "
                                "command reads (choose another path)")
    (workdir / "plug.py").write_text("RAN = True\n")
    assert main([*TINY, "--workdir", ".", "--plugin", "plug.py", "--json", "./plug.py"]) == 2
    assert one_line(capsys) == ("eve-search sweep: argument --json: 'plug.py' is the --plugin file, which this "
                                "command reads (choose another path)")
    assert (workdir / "plug.py").read_text() == "RAN = True\n"
    assert not (workdir / "page.html").exists() and not (data / "out.json").exists()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.lists(st.sampled_from([".", "sub/..", "sub", "elsewhere-link/..", "dir-link", "dir-link/..",
                                       "missing/.."]), max_size=4),
       name=st.sampled_from(["results.db", "results.db-wal", "other.json", "results.db.json"]),
       absolute=st.booleans())
def test_any_spelling_of_a_store_file_is_refused_and_nothing_else(tmp_path, monkeypatch, parts, name, absolute):
    """The guard refuses exactly the spellings that the system resolves to a file of the store."""
    root = tmp_path / "root"
    if not root.exists():
        (root / "sub").mkdir(parents=True)
        (tmp_path / "away" / "deep").mkdir(parents=True)
        (root / "elsewhere-link").symlink_to(tmp_path / "away" / "deep")  # its .. is away, not root
        (root / "dir-link").symlink_to(root / "sub")
        (root / "results.db").write_bytes(b"")
    monkeypatch.chdir(root)
    spelling = Path(*parts, name) if parts else Path(name)
    if absolute:
        spelling = root / spelling
    store = root / "results.db"
    # What the system does with the spelling (as the command would write it: parents created first).
    system = Path(os.path.realpath(spelling))
    truth = system in (store, store.with_name("results.db-wal"))
    try:
        check_outputs({"--json": spelling}, storage=f"sqlite:///{store}")
        refused = False
    except OutputClash:
        refused = True
    assert refused == truth, (spelling, system)


# 2. Whole in the main file however a command ends --------------------------------------------------


def test_an_in_process_sweep_leaves_every_result_in_the_main_file(tmp_path):
    assert main([*TINY, "--optimizer", "eve,adam", "--workdir", str(tmp_path)]) == 0
    database = tmp_path / "results.db"
    assert not Path(f"{database}-wal").exists() and not Path(f"{database}-shm").exists()
    counts = main_file_counts(database, tmp_path / "copy")
    assert counts["studies"] == 2 and counts["trials"] == 6 and counts["finished"] == 6
    assert counts["trial_intermediate_values"] == 2 * (3 + 1) and counts["complete"] == 2


def test_the_console_scripts_fast_exit_leaves_every_result_in_the_main_file(tmp_path):
    result = python(f"""
        import sys
        import tests.tiny_task
        from eve_search.cli import console
        sys.argv = ["eve-search", *{TINY!r}, "--workdir", {str(tmp_path)!r}]
        sys.exit(console())
    """)
    assert result.returncode == 0, result.stderr
    counts = main_file_counts(tmp_path / "results.db", tmp_path / "copy")
    assert counts["studies"] == 1 and counts["trials"] == 3 and counts["finished"] == 3
    assert counts["trial_intermediate_values"] == 4 and counts["complete"] == 1
    assert not (tmp_path / "results.db-wal").exists()


def test_ctrl_c_in_process_keeps_what_was_recorded_in_the_main_file(tmp_path, monkeypatch, capsys):
    recorded = SweepStore.eliminate

    def interrupted(self, indices):  # Ctrl-C right after the first rung's decisions are stored
        recorded(self, indices)
        raise KeyboardInterrupt

    monkeypatch.setattr(SweepStore, "eliminate", interrupted)
    assert main([*TINY, "--workdir", str(tmp_path)]) == 130
    assert "interrupted" in capsys.readouterr().err
    counts = main_file_counts(tmp_path / "results.db", tmp_path / "copy")
    assert counts["studies"] == 1 and counts["trials"] == 3
    assert counts["trial_intermediate_values"] == 3 and counts["finished"] == 2  # first rung: 3 scores, 2 pruned


def test_a_real_sigint_to_the_console_script_keeps_what_was_recorded_in_the_main_file(tmp_path):
    result = python(f"""
        import os, signal, sys
        import tests.tiny_task
        from eve_search.cli import console
        from eve_search.engine.store import SweepStore

        recorded = SweepStore.eliminate

        def eliminate(self, indices):  # the user presses Ctrl-C right after the first rung is stored
            recorded(self, indices)
            os.kill(os.getpid(), signal.SIGINT)

        SweepStore.eliminate = eliminate
        sys.argv = ["eve-search", *{TINY!r}, "--workdir", {str(tmp_path)!r}]
        sys.exit(console())
    """)
    assert result.returncode == 130, result.stderr
    assert "interrupted; everything recorded so far is kept" in result.stderr
    counts = main_file_counts(tmp_path / "results.db", tmp_path / "copy")
    assert counts["studies"] == 1 and counts["trials"] == 3 and counts["trial_intermediate_values"] >= 3


def test_an_error_after_results_were_recorded_leaves_them_in_the_main_file(tmp_path, monkeypatch, capsys):
    def broken(self, index, score):
        raise ValueError("Invalid score: the task's metric broke")

    monkeypatch.setattr(SweepStore, "complete", broken)
    assert main([*TINY, "--workdir", str(tmp_path)]) == 1  # not bad input: a bug, with its traceback
    err = capsys.readouterr().err
    assert "ValueError: Invalid score" in err and "a bug in eve-search: please report it" in err.splitlines()[-1]
    counts = main_file_counts(tmp_path / "results.db", tmp_path / "copy")
    assert counts["trial_intermediate_values"] == 4 and counts["finished"] == 2


def test_close_stores_is_safe_to_call_while_a_store_is_still_used(tmp_path):
    url = f"sqlite:///{tmp_path / 'results.db'}"
    store = SweepStore(url, "s", get_space("tiny").sample(2, 0), get_space("tiny"), tmp_path / "checkpoints",
                       {"task": "tiny"}, resume=False)
    close_stores()
    store.set("after", 1)  # the engine reconnects
    assert store.get("after") == 1
    close_stores()
    assert main_file_counts(tmp_path / "results.db", tmp_path / "copy")["studies"] == 1


# 3. Store URLs: never in memory; read-only stores; two sweeps creating a new store at once ----------


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:"])
@pytest.mark.parametrize("argv", [
    TINY, ["rank", "adult"], ["audit", "adult"], ["bench", "synthetic"], ["mnist"], ["lora"],
])
def test_a_store_in_memory_is_refused_in_one_line(tmp_path, capsys, url, argv):
    assert main([*argv, "--storage", url, "--workdir", str(tmp_path)]) == 2
    line = one_line(capsys)
    assert f"argument --storage: {url!r} is an SQLite database in memory" in line
    assert list(tmp_path.iterdir()) == []


def test_the_library_refuses_a_sweep_store_in_memory():
    with pytest.raises(StoreError, match="in memory, which no worker, later --resume or dashboard can open"):
        SweepStore("sqlite://", "s", [], get_space("tiny"), Path("checkpoints"), {}, resume=False)


def _without_write_permission() -> list[str]:
    """A command prefix under which the current user cannot write files it lacks permission for: root
    ignores permissions, so for root the capabilities that let it do so are dropped."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    assert setpriv is not None, "setpriv (util-linux) is needed to test permissions as root"
    caps = "-dac_override,-dac_read_search"
    return [setpriv, f"--bounding-set={caps}", f"--inh-caps={caps}", "--"]


def _run_main(argv: list[str], *prefix: str) -> subprocess.CompletedProcess:
    return python(f"""
        import sys
        import tests.tiny_task
        from eve_search.cli import main
        sys.exit(main({argv!r}))
    """, *prefix)


@pytest.mark.parametrize(("locked", "message"), [
    ("file", "its results store is read-only: "),
    ("folder", "its results store is in the read-only folder "),
])
def test_resuming_a_finished_sweep_on_a_read_only_store_is_one_line(workdir, locked, message):
    before = dump(workdir / "results.db")
    target = workdir / "results.db" if locked == "file" else workdir
    target.chmod(0o444 if locked == "file" else 0o555)
    try:
        result = _run_main([*TINY, "--workdir", str(workdir), "--resume"], *_without_write_permission())
    finally:
        target.chmod(0o644 if locked == "file" else 0o755)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith(f"eve-search sweep: argument --workdir: {str(workdir)!r}: {message}")
    assert dump(workdir / "results.db") == before


def test_a_store_that_turns_out_read_only_while_running_is_one_line(workdir, capsys):
    before = dump(workdir / "results.db")
    url = f"sqlite:///file:{workdir / 'results.db'}?mode=ro&uri=true"
    assert main([*TINY, "--storage", url, "--workdir", str(workdir), "--resume"]) == 2
    line = one_line(capsys)
    assert line.startswith("eve-search sweep: ") and "read-only" in line and "attempt to write a readonly" in line
    assert dump(workdir / "results.db") == before


def test_the_dashboard_reads_a_store_in_a_read_only_folder(workdir, tmp_path):
    workdir.chmod(0o555)
    try:
        result = _run_main(["dashboard", "--storage", f"sqlite:///{workdir / 'results.db'}", "--out",
                            str(tmp_path / "page.html")], *_without_write_permission())
    finally:
        workdir.chmod(0o755)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "page.html").stat().st_size > 0


def _two_sweeps_at_once(url: str, tmp_path: Path) -> list[str]:
    space = get_space("tiny")
    barrier, errors = threading.Barrier(2), []

    def start(seed: int) -> None:
        barrier.wait()
        try:
            SweepStore(url, f"tiny-seed{seed}", space.sample(3, seed), space, tmp_path / "checkpoints",
                       {"seed": seed}, resume=False)
        except Exception as error:  # noqa: BLE001 collected for the assertion
            errors.append(f"{type(error).__name__}: {error}")

    threads = [threading.Thread(target=start, args=(seed,)) for seed in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return errors


def test_two_sweeps_starting_at_once_on_a_new_sqlite_store_both_work(tmp_path):
    import optuna

    for attempt in range(4):  # without the lock and the retries, every attempt fails here
        url = f"sqlite:///{tmp_path / f'new-{attempt}.db'}"
        assert _two_sweeps_at_once(url, tmp_path) == []
        assert sorted(optuna.get_all_study_names(url)) == ["tiny-seed1", "tiny-seed2"]


def test_two_sweep_processes_starting_at_once_on_a_new_store_both_work(tmp_path):
    go = tmp_path / "go"
    code = """
        import sys, time
        from pathlib import Path
        import tests.tiny_task
        from eve_search.cli import main
        import eve_search.engine.store, eve_search.engine.sweep, optuna  # everything imported before the start signal
        Path(sys.argv[1] + "-ready-" + sys.argv[3]).touch()
        while not Path(sys.argv[1]).exists():
            time.sleep(0.001)
        sys.exit(main([*{tiny!r}, "--workdir", sys.argv[2], "--seed", sys.argv[3]]))
    """.format(tiny=TINY)
    processes = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), str(go), str(tmp_path / "work"),
                                   str(seed)], cwd=ROOT, stderr=subprocess.PIPE, text=True) for seed in (1, 2)]
    deadline = time.monotonic() + 120
    while not all(Path(f"{go}-ready-{seed}").exists() for seed in (1, 2)):
        assert time.monotonic() < deadline and all(p.poll() is None for p in processes)
        time.sleep(0.01)
    go.touch()
    for process in processes:
        assert process.wait(timeout=300) == 0, process.stderr.read()
    counts = main_file_counts(tmp_path / "work" / "results.db", tmp_path / "copy")
    assert counts["studies"] == 2 and counts["finished"] == 6


def test_two_sweeps_starting_at_once_on_a_new_postgresql_database_both_work(postgres_url, tmp_path):
    import optuna
    from sqlalchemy import create_engine, text

    engine = create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    try:
        for attempt in range(3):
            with engine.connect() as connection:
                connection.execute(text(f"CREATE DATABASE concurrent{attempt}"))
            url = postgres_url.replace("/eve?", f"/concurrent{attempt}?")
            assert _two_sweeps_at_once(url, tmp_path) == []
            assert sorted(optuna.get_all_study_names(url)) == ["tiny-seed1", "tiny-seed2"]
    finally:
        engine.dispose()


# 4. Credentials ---------------------------------------------------------------------------------------


def test_safe_url_and_redact_hide_the_password():
    assert safe_url(UNREACHABLE) == "postgresql+psycopg2://ann:***@127.0.0.1:1/runs"
    assert safe_url("sqlite:///runs/results.db") == "sqlite:///runs/results.db"
    assert PASSWORD not in safe_url("postgresql://ann:Sup3r-Secret-pw@db:notaport/x")  # not parseable
    assert redact(f"could not open {UNREACHABLE} (password {PASSWORD!r} rejected)") == \
        "could not open postgresql+psycopg2://ann:***@127.0.0.1:1/runs (password '***' rejected)"


@pytest.mark.parametrize("argv", [
    TINY, ["rank", "adult", "--seeds", "0,1", "--configs", "3"], ["audit", "adult", "--configs", "3"],
    ["bench", "synthetic", "--functions", "sphere", "--dims", "2", "--seeds", "0"],
    ["mnist", "--subset", "256", "--budget", "10", "--optimizer", "eve", "--lrs", "1e-3", "--seeds", "0"],
    ["dashboard"],
])
def test_no_error_message_shows_the_password(tmp_path, capsys, argv):
    extra = ["--out", str(tmp_path / "page.html")] if argv[0] == "dashboard" else ["--workdir", str(tmp_path)]
    assert main([*argv, "--storage", UNREACHABLE, *extra]) == 2
    line = one_line(capsys)
    assert PASSWORD not in line and "ann:***@127.0.0.1" in line


def test_a_sweep_on_a_password_url_never_shows_or_stores_the_password(postgres_url, tmp_path, capfd):
    from sqlalchemy import create_engine, text

    engine = create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        connection.execute(text("CREATE DATABASE credentials"))
    engine.dispose()
    # The test server trusts local connections, so it accepts any password: the URL is real and works.
    url = postgres_url.replace("postgres@/eve?", f"postgres:{PASSWORD}@/credentials?")
    assert PASSWORD in url
    out = tmp_path / "sweep.json"
    argv = [a for a in TINY if a != "--quiet"]
    assert main([*argv, "--storage", url, "--workdir", str(tmp_path), "--json", str(out)]) == 0
    document = json.loads(out.read_text())
    assert document["storage"] == safe_url(url) and "postgres:***@" in document["storage"]
    page, data = tmp_path / "page.html", tmp_path / "data.json"
    assert main(["dashboard", "--storage", url, "--out", str(page), "--json", str(data)]) == 0
    assert main([*argv, "--storage", url, "--workdir", str(tmp_path), "--resume"]) == 0  # the summary again
    printed = capfd.readouterr()
    assert "results store: postgresql+psycopg2://postgres:***@" in printed.out
    for text_ in (printed.out, printed.err, out.read_text(), page.read_text(), data.read_text()):
        assert PASSWORD not in text_.replace("\n", "")  # also where a long line was folded
