"""Hostile input, round two (issue 41, item 6): what arrives after the arguments.

Each case of the issue, in process on small plugin tasks: a password in a URL's query string, symbolic
link loops in path arguments, ``--json`` onto a full disk, a deleted trial row, ``--resume`` on other
data, a poisoned data cache, rung and sample counts that would hang, a plugin's model builder returning
None, metrics that are no number, ``sys.exit()`` in a metric, ``+inf`` and diverged scores, and the
current folder deleted during start-up. The cases that need a process of their own (signals, a closed
standard output, an ASCII terminal) are in ``test_hostile_processes.py``.

Every refusal is one line on stderr naming the argument or the plugin's code, the value and what was
expected, exit code 2, and leaves what the store held.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import re
import sqlite3
import textwrap
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import eve_search.cli._plugins as plugins
import eve_search.tasks._registry as registry
import eve_search.tasks.spaces as spaces
from eve_search.cli import main
from eve_search.engine._stores import redact, safe_url
from eve_search.engine.ledger import MAX_RUNGS, RungLedger, rank_order, rungs_from_geometric
from eve_search.tasks import Splits, Task
from tests.hostile import deadline, one_line

EXAMPLES = settings(max_examples=40, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
TINY = ["sweep", "--task", "tiny", "--plugin", "tests.tiny_task", "--configs", "4", "--rungs", "10,30",
        "--backward-ratio", "2"]

# A plugin task whose code misbehaves as the environment variable EVE_TEST_BEHAVIOUR says, read at each call.
PLUGIN = '''
import math, os, sys
import torch
from eve_search.tasks import Splits, Task, register_task
from eve_search.tasks.models import mlp
from eve_search.tasks.spaces import Categorical, Fixed, Float, SearchSpace, register_space

calls = [0]


def behaviour():
    return os.environ.get("EVE_TEST_BEHAVIOUR", "")


def load(data_dir):
    seed = 0 if data_dir is None else int((data_dir / "seed").read_text())
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(600, 6, generator=g)
    y = (x.sum(1) > 0).long()
    return Splits(x[:400], y[:400], x[400:500], y[400:500], x[500:], y[500:])


def model(config, data, generator):
    if behaviour() == "none":
        return None
    return mlp(6, [int(config["width"])], 2, generator=generator)


def metrics(model, x, y):
    calls[0] += 1
    logits = model(x)
    accuracy = (logits.argmax(1) == y).double().mean().item()
    loss = torch.nn.functional.cross_entropy(logits, y).item()
    if behaviour() == "exit" and calls[0] > 3:
        sys.exit(3)
    if behaviour() == "abc":
        return {"accuracy": "abc", "loss": loss}
    if behaviour() == "tensor":
        return {"accuracy": torch.tensor([accuracy, accuracy]), "loss": loss}
    if behaviour() == "inf" and calls[0] == 2:
        return {"accuracy": math.inf, "loss": loss}
    if behaviour() == "diverge":
        loss = 3.4e34 if calls[0] % 3 else math.nan
    return {"accuracy": accuracy, "loss": loss}


register_task(Task("hostile", "a plugin task that misbehaves on request", load_data=load, build_model=model,
                   metrics=metrics, batch_size=32, spaces=("hostile",)))
register_task(Task("hostile-min", "the same, ranked by its loss", load_data=load, build_model=model,
                   metrics=metrics, metric="loss", mode="min", batch_size=32, spaces=("hostile",)))
register_space(SearchSpace("hostile", (Categorical("width", (4, 8)), Float("lr", 1e-3, 3e-2, log=True),
                                       Fixed("weight_decay", 0.0))))
'''


@pytest.fixture(autouse=True)
def registries(monkeypatch):
    """Whatever a plugin registers here (even over ``adult``) is gone after the test."""
    monkeypatch.setattr(registry, "_TASKS", dict(registry._TASKS))
    monkeypatch.setattr(spaces, "_SPACES", dict(spaces._SPACES))
    monkeypatch.setattr(plugins, "_PLUGINS", dict(plugins._PLUGINS))


@pytest.fixture
def plugin(tmp_path, monkeypatch) -> Path:
    """The misbehaving plugin, as a file; its behaviour is chosen with ``monkeypatch.setenv``."""
    monkeypatch.delenv("EVE_TEST_BEHAVIOUR", raising=False)
    path = tmp_path / "hostile_plugin.py"
    path.write_text(PLUGIN)
    return path


def hostile(plugin: Path, workdir: Path, *extra: str, task: str = "hostile") -> list[str]:
    return ["sweep", "--task", task, "--plugin", str(plugin), "--configs", "6", "--rungs", "20,60",
            "--backward-ratio", "2", "--workdir", str(workdir), *extra]


def trials(database: Path) -> list[tuple[int, str]]:
    with contextlib.closing(sqlite3.connect(database)) as connection:
        return connection.execute("SELECT number, state FROM trials ORDER BY trial_id").fetchall()


def dump(database: Path) -> list[str]:
    with contextlib.closing(sqlite3.connect(database)) as connection:
        return list(connection.iterdump())


# Credentials: every one a SQLAlchemy URL can carry, masked wherever the URL can be printed ----------------

_SECRET_KEYS = ["password", "PASSWORD", "passwd", "pwd", "PWD", "sslpassword", "token", "access_token", "api_key",
                "private_key", "secret", "client_secret", "authToken", "credentials"]
_SECRETS = st.text(st.characters(whitelist_categories=("L", "N", "P", "S")), min_size=1, max_size=16).map(
    lambda text: "Zq9!" + text)


def _url_forms(secret: str) -> list[str]:
    return [secret, quote(secret, safe=""), quote(secret), quote(secret, safe="").replace("%20", "+")]


@EXAMPLES
@given(key=st.sampled_from(_SECRET_KEYS), secret=_SECRETS, where=st.sampled_from(["query", "userinfo", "odbc"]),
       prefix=st.sampled_from(["postgresql+psycopg2", "mysql+pymysql", "mssql+pyodbc", "sqlite", "snowflake"]))
def test_every_credential_of_a_url_is_masked_by_the_one_helper(key, secret, where, prefix):
    encoded = quote(secret, safe="")
    url = {"query": f"{prefix}://bob@db.example:5432/runs?sslmode=require&{key}={encoded}&connect_timeout=5",
           "userinfo": f"{prefix}://bob:{encoded}@db.example:5432/runs?sslmode=require",
           "odbc": f"{prefix}:///?odbc_connect=" + quote(f"DRIVER={{ODBC}};UID=bob;PWD={secret}", safe="")}[where]
    shown = safe_url(url)
    assert "***" in shown and shown.startswith(prefix + "://")
    assert "sslmode=require" in shown or where == "odbc"
    # In a message, quoted, after other words, or followed by punctuation: masked too.
    text = redact(f"eve-search sweep: argument --storage: {url!r} (and then {url}), the end")
    for form in _url_forms(secret):
        assert form not in shown and form not in text


def test_a_url_without_credentials_keeps_the_users_spelling():
    for url in ("sqlite:///runs/results.db", "postgresql+psycopg2://bob@db/runs?sslmode=require&host=/tmp/x",
                "sqlite:////tmp/ü/results.db?uri=true"):
        assert safe_url(url) == url and redact(f"at {url}") == f"at {url}"


PASSWORD = "Sup3r-Secret-pw"
QUERY_URL = f"postgresql+psycopg2://bob@127.0.0.1:1/runs?password={PASSWORD}"


@pytest.mark.parametrize("argv", [
    [*TINY, "--storage", QUERY_URL],  # the error line of a store that cannot be opened
    ["dashboard", "--storage", QUERY_URL],
    ["sweep", "--task", "tiny", QUERY_URL],  # argparse's echo of an unexpected word
    ["sweep", "--task", QUERY_URL],  # of a bad value
    [QUERY_URL],  # of an unknown command
    ["sweep", "--task", "tiny", "--storage=" + QUERY_URL, "--configs", "x"],
])
def test_no_line_shows_a_password_of_the_query_string(argv, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    line = one_line(capsys)
    assert PASSWORD not in line and quote(PASSWORD) not in line


@pytest.mark.filterwarnings("ignore:Query string argument")
def test_the_sweep_json_the_table_and_the_dashboard_never_show_a_query_password(tmp_path, capfd):
    # pysqlite ignores a query argument it does not know (with a warning): a real, working store URL.
    url = f"sqlite:///{tmp_path / 'results.db'}?password={PASSWORD}"
    out = tmp_path / "sweep.json"
    assert main([*TINY, "--storage", url, "--workdir", str(tmp_path), "--json", str(out)]) == 0
    page, data = tmp_path / "page.html", tmp_path / "data.json"
    assert main(["dashboard", "--storage", url, "--out", str(page), "--json", str(data)]) == 0
    printed = capfd.readouterr()
    assert json.loads(out.read_text())["storage"].endswith("?password=***")
    assert "results.db?password=***" in page.read_text() and "?password=***" in data.read_text()
    for text in (printed.out, printed.err, out.read_text(), page.read_text(), data.read_text()):
        assert PASSWORD not in text.replace("\n", "")


# Symbolic-link loops in path arguments -----------------------------------------------------------------


@pytest.mark.parametrize(("option", "value"), [
    ("--workdir", "loop"), ("--workdir", "loop/runs"), ("--storage", "sqlite:///loop"),
    ("--storage", "sqlite:///loop/results.db"), ("--data-dir", "loop"), ("--json", "loop"),
    ("--json", "loop/out.json"), ("--plugin", "./loop/plugin.py"),
])
def test_a_symbolic_link_loop_in_a_sweeps_path_argument_is_one_line(option, value, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("loop").symlink_to("back")
    Path("back").symlink_to("loop")
    argv = [*TINY, "--workdir", "work", option, value] if option != "--workdir" else [*TINY, option, value]
    assert main(argv) == 2
    one_line(capsys, f"argument {option}", "loop of symbolic links")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["back", "loop"]  # nothing written


@pytest.mark.parametrize(("option", "value"), [("--out", "loop"), ("--out", "loop/page.html"), ("--json", "loop"),
                                               ("--storage", "sqlite:///loop/results.db")])
def test_a_symbolic_link_loop_in_a_dashboard_path_is_one_line(option, value, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main([*TINY, "--workdir", "work", "--quiet"]) == 0
    Path("loop").symlink_to("back")
    Path("back").symlink_to("loop")
    argv = ["dashboard", "--storage", "sqlite:///work/results.db", "--out", "page.html", option, value]
    assert main(argv) == 2
    one_line(capsys, f"argument {option}", "loop of symbolic links")
    assert not Path("page.html").exists()


# --json onto a full disk: written atomically, one line, exit 2, nothing lost -------------------------------


def test_json_onto_dev_full_is_one_line_and_the_results_stay_in_the_store(tmp_path, capsys):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full on this system")
    assert main([*TINY, "--quiet", "--workdir", str(tmp_path), "--json", "/dev/full"]) == 2
    one_line(capsys, "argument --json", "'/dev/full'", "No space left on device", "--resume")
    out = tmp_path / "out.json"  # the same command with --resume writes it, training nothing
    assert main([*TINY, "--quiet", "--workdir", str(tmp_path), "--resume", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["optimizers"]["eve"]["trained"] == 0


@pytest.mark.parametrize("command", ["sweep", "dashboard"])
def test_a_disk_that_fills_up_while_an_output_is_written_leaves_the_old_file_whole(command, tmp_path, capsys,
                                                                                   monkeypatch):
    import eve_search._atomic as atomic

    assert main([*TINY, "--quiet", "--workdir", str(tmp_path)]) == 0
    target = tmp_path / "kept.out"
    target.write_text("the previous results\n")
    real_fdopen = os.fdopen

    class Full:  # the first kilobyte fits, then the disk is full
        def __init__(self, handle):
            self.handle, self.written = handle, 0

        def write(self, data):
            if self.written + len(data) > 1024:
                self.handle.write(data[:1024 - self.written])
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            self.written += len(data)
            return self.handle.write(data)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

    monkeypatch.setattr(atomic.os, "fdopen", lambda fd, mode: Full(real_fdopen(fd, mode)))
    option = "--json" if command == "sweep" else "--out"
    argv = ([*TINY, "--quiet", "--workdir", str(tmp_path), "--resume"] if command == "sweep"
            else ["dashboard", "--storage", f"sqlite:///{tmp_path / 'results.db'}"])
    assert main([*argv, option, str(target)]) == 2
    one_line(capsys, f"argument {option}", "No space left on device", "left as it was")
    assert target.read_text() == "the previous results\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoints", "kept.out", "results.db"]  # no leftovers


def test_an_output_through_a_symbolic_link_replaces_the_file_it_names_and_keeps_the_link(tmp_path):
    real = tmp_path / "real.json"
    real.write_text("old")
    (tmp_path / "link.json").symlink_to(real)
    assert main([*TINY, "--quiet", "--workdir", str(tmp_path / "w"), "--json", str(tmp_path / "link.json")]) == 0
    assert (tmp_path / "link.json").is_symlink() and json.loads(real.read_text())["schema"] == "eve-search/sweep"


# A trial row deleted from the store, then --resume ------------------------------------------------------


def _delete_trial(database: Path, number: int) -> None:
    with contextlib.closing(sqlite3.connect(database)) as connection:
        (trial_id,) = connection.execute("SELECT trial_id FROM trials WHERE number = ?", (number,)).fetchone()
        for table in ("trial_user_attributes", "trial_system_attributes", "trial_params", "trial_values",
                      "trial_intermediate_values", "trial_heartbeats", "trials"):
            connection.execute(f"DELETE FROM {table} WHERE trial_id = ?", (trial_id,))  # noqa: S608
        connection.commit()


@pytest.mark.parametrize("finished", [True, False])
def test_a_deleted_trial_row_is_refused_on_resume_and_never_readded_under_a_taken_number(finished, tmp_path,
                                                                                          capsys, monkeypatch):
    from eve_search.engine.store import SweepStore

    argv = [*TINY[:6], "12", "--rungs", "10,30,90", "--backward-ratio", "2", "--quiet", "--workdir", str(tmp_path)]
    if not finished:
        recorded = SweepStore.eliminate

        def interrupted(self, indices):  # Ctrl-C once the first rung is decided
            recorded(self, indices)
            raise KeyboardInterrupt

        monkeypatch.setattr(SweepStore, "eliminate", interrupted)
        assert main(argv) == 130
        monkeypatch.setattr(SweepStore, "eliminate", recorded)
    else:
        assert main(argv) == 0
    capsys.readouterr()
    database = tmp_path / "results.db"
    _delete_trial(database, 5)
    before = dump(database)
    assert main([*argv, "--resume"]) == 2
    one_line(capsys, "configuration 5 has no trial", "trial #5 is missing", "changed outside eve-search")
    assert dump(database) == before
    numbers = [number for number, _ in trials(database)]
    assert len(numbers) == len(set(numbers)) == 11


def test_a_store_that_already_holds_a_readded_trial_is_refused(tmp_path, capsys):
    """As eve-search 0.3 left it: a deleted row, then the trial re-added under a number already taken
    (Optuna then reads back only one trial of that number)."""
    import optuna

    argv = [*TINY, "--quiet", "--workdir", str(tmp_path)]
    assert main(argv) == 0
    database = tmp_path / "results.db"
    _delete_trial(database, 1)
    space = spaces.get_space("tiny")
    config = space.sample(4, 0)[1]
    study = optuna.load_study(study_name="tiny-tiny-eve-seed0", storage=f"sqlite:///{database}")
    study.add_trial(optuna.trial.create_trial(  # numbered 3, again
        state=optuna.trial.TrialState.RUNNING, params={key: config[key] for key in space.distributions()},
        distributions=space.distributions(), user_attrs={"config_index": 1, "config": config}))
    assert sorted(number for number, _ in trials(database)) == [0, 2, 3, 3]
    before = dump(database)
    assert main([*argv, "--resume"]) == 2
    one_line(capsys, "trial #1 is missing", "changed outside eve-search")
    assert dump(database) == before


# --resume with another --data-dir -------------------------------------------------------------------------


def _data_dir(root: Path, name: str, seed: int) -> Path:
    folder = root / name
    folder.mkdir()
    (folder / "seed").write_text(str(seed))
    return folder


def test_resume_on_other_data_is_refused_in_one_line(plugin, tmp_path, capsys):
    first, other, same = (_data_dir(tmp_path, name, seed) for name, seed in (("a", 1), ("b", 2), ("c", 1)))
    work = tmp_path / "work"
    assert main(hostile(plugin, work, "--quiet", "--data-dir", str(first))) == 0
    before = dump(work / "results.db")
    assert main(hostile(plugin, work, "--quiet", "--resume", "--data-dir", str(other))) == 2
    one_line(capsys, "started on other data", f"--data-dir {str(first)!r}", f"not --data-dir {str(other)!r}",
             "sha256")
    assert dump(work / "results.db") == before
    assert main(hostile(plugin, work, "--quiet", "--resume")) == 2  # the task's default data is other data too
    one_line(capsys, "the task's default data")
    # The same data in another folder is the same data.
    assert main(hostile(plugin, work, "--quiet", "--resume", "--data-dir", str(same))) == 0


def test_a_sweep_stored_without_its_datas_identity_gets_it_on_resume(plugin, tmp_path, capsys):
    import optuna

    first, other = _data_dir(tmp_path, "a", 1), _data_dir(tmp_path, "b", 2)
    work = tmp_path / "work"
    assert main(hostile(plugin, work, "--quiet", "--data-dir", str(first))) == 0
    with contextlib.closing(sqlite3.connect(work / "results.db")) as connection:  # as eve-search 0.3 stored it
        connection.execute("DELETE FROM study_user_attributes WHERE key = 'data'")
        connection.commit()
    assert main(hostile(plugin, work, "--quiet", "--resume", "--data-dir", str(first))) == 0
    study = optuna.load_study(study_name="hostile-hostile-eve-seed0", storage=f"sqlite:///{work / 'results.db'}")
    assert study.user_attrs["data"]["data_dir"] == str(first.resolve())
    assert main(hostile(plugin, work, "--quiet", "--resume", "--data-dir", str(other))) == 2
    one_line(capsys, "started on other data")


# A poisoned data cache ----------------------------------------------------------------------------------


def _poison(entry: Path, name: str) -> None:
    with np.load(entry, allow_pickle=False) as saved:
        arrays = {key: saved[key] for key in saved.files}
    arrays[name] = 1 - arrays[name]  # every label flipped, the recorded checksum kept
    with open(entry, "wb") as handle:
        np.savez(handle, **arrays)


def test_a_poisoned_cache_entry_is_named_and_recomputed(tmp_path, capsys):
    from eve_search.data._cache import cached_arrays

    def compute():
        return {"x": np.arange(6.0).reshape(3, 2), "y": np.array([0, 1, 1])}

    first = cached_arrays("demo", "k1", compute, ("x", "y"), folder=tmp_path)
    entry = tmp_path / "demo-k1.npz"
    _poison(entry, "y")
    again = cached_arrays("demo", "k1", compute, ("x", "y"), folder=tmp_path)
    assert np.array_equal(again["y"], first["y"])
    err = capsys.readouterr().err
    assert "does not match the checksum it was made with" in err and str(entry) in err
    cached_arrays("demo", "k1", compute, ("x", "y"), folder=tmp_path)  # rewritten whole: read quietly
    assert capsys.readouterr().err == ""


def test_adults_poisoned_cache_changes_no_label(tmp_path, monkeypatch, capsys):
    from eve_search.data import _adult

    monkeypatch.setenv("EVE_SEARCH_CACHE", str(tmp_path))
    _adult._load.cache_clear()
    try:
        clean = _adult.load_adult()
        (entry,) = tmp_path.glob("adult-*.npz")
        _poison(entry, "y_train")
        _adult._load.cache_clear()
        loaded = _adult.load_adult()
    finally:
        _adult._load.cache_clear()
    assert torch.equal(loaded.y_train, clean.y_train) and torch.equal(loaded.x_train, clean.x_train)
    assert "does not match the checksum" in capsys.readouterr().err


# Hangs: rung counts and sample counts are bounded in the library ----------------------------------------


@EXAMPLES
@given(excess=st.floats(min_value=1e-12, max_value=1e-2), first=st.integers(1, 1000),
       last=st.integers(1, 10**9))
def test_any_reduction_factor_gives_bounded_rungs_quickly(excess, first, last):
    with deadline(60):  # a hang guard only (the refusal takes milliseconds)
        try:
            rungs = rungs_from_geometric(first, max(first, last), 1 + excess)
        except ValueError as error:
            assert f"more than {MAX_RUNGS:,} rungs" in str(error)
        else:
            assert len(rungs) <= MAX_RUNGS and rungs[-1] == max(first, last)


def test_a_ledger_refuses_more_rungs_than_its_bound():
    RungLedger(rungs=range(1, MAX_RUNGS + 1))
    with pytest.raises(ValueError, match=f"is more than {MAX_RUNGS:,}"):
        RungLedger(rungs=range(1, MAX_RUNGS + 2))


def test_the_optuna_pruner_inherits_the_bound():
    pytest.importorskip("optuna")
    from eve_search.integrations.optuna import SynchronousSHAPruner

    with deadline(60), pytest.raises(ValueError, match="more than 1,000 rungs"):
        SynchronousSHAPruner(reduction_factor=1.0000001)


def test_the_ray_scheduler_inherits_the_bound():
    pytest.importorskip("ray")
    from eve_search.integrations.ray import SynchronousSHAScheduler

    with deadline(60), pytest.raises(ValueError, match="more than 1,000 rungs"):
        SynchronousSHAScheduler(grace_period=1, max_t=10**9, reduction_factor=1.0000001)


@EXAMPLES
@given(count=st.one_of(st.integers(100_001, 10**30), st.just(10**9)))
def test_sampling_is_capped_in_the_library(count):
    from eve_search import InputError
    from eve_search.cli.args import MAX_CONFIGS

    with deadline(60):
        with pytest.raises(InputError, match=f"at most {MAX_CONFIGS:,} configurations"):
            spaces.get_space("hp").sample(count, 0)


# A plugin's code: a model builder returning None, metrics that are no number, sys.exit -------------------


def test_a_plugin_that_reregisters_adult_with_a_builder_returning_none_is_named(tmp_path, capsys):
    path = tmp_path / "adult_override.py"
    path.write_text(textwrap.dedent("""
        import dataclasses
        from eve_search.tasks import get_task, register_task

        def build(config, data, generator):
            return None

        register_task(dataclasses.replace(get_task("adult"), build_model=build))
    """))
    argv = ["adult", "--space", "hp", "--configs", "2", "--rungs", "10", "--backward-ratio", "2", "--quiet",
            "--plugin", str(path), "--workdir", str(tmp_path / "w")]
    assert main(argv) == 2
    one_line(capsys, "task 'adult'", "build_model 'build' (adult_override.py:5)", "returned None",
             "expected a torch.nn.Module")


@pytest.mark.parametrize(("behaviour", "shown"), [("abc", "'abc'"), ("tensor", "tensor([")])
def test_a_metric_that_is_no_number_names_the_plugin_and_the_metric(behaviour, shown, plugin, tmp_path, capsys,
                                                                      monkeypatch):
    monkeypatch.setenv("EVE_TEST_BEHAVIOUR", behaviour)
    assert main(hostile(plugin, tmp_path / "w", "--quiet")) == 2
    one_line(capsys, "task 'hostile'", "metrics 'metrics' (hostile_plugin.py:", shown, "metric 'accuracy'",
             "expected one number")


_NOT_NUMBERS = st.one_of(
    st.text(max_size=8), st.binary(max_size=4), st.none(), st.just([1.0, 2.0]), st.just({"a": 1}),
    st.integers(2, 5).map(lambda n: torch.ones(n)), st.integers(2, 5).map(lambda n: np.ones(n)),
    st.just(torch.ones(0)), st.just(object()))


@EXAMPLES
@given(value=_NOT_NUMBERS, key=st.sampled_from(["accuracy", "loss", "f1 score"]))
def test_task_evaluate_names_the_function_the_metric_and_the_value(value, key):
    def my_metrics(model, x, y):
        return {"accuracy": 0.5, "loss": 0.1, key: value}

    data = Splits(*[torch.zeros(4, 2), torch.zeros(4, dtype=torch.long)] * 3)
    task = Task("scored", "a task", load_data=lambda data_dir: data, build_model=lambda c, d, g: torch.nn.Linear(2, 2),
                metrics=my_metrics)
    with pytest.raises(ValueError) as raised:
        task.evaluate(torch.nn.Linear(2, 2), data)
    message = str(raised.value)
    assert "\n" not in message and "task 'scored'" in message and "my_metrics" in message
    assert f"metric {key!r}" in message and "expected one number" in message


def test_one_element_tensors_and_numpy_scalars_are_numbers():
    data = Splits(*[torch.zeros(4, 2), torch.zeros(4, dtype=torch.long)] * 3)
    task = Task("scored", "a task", load_data=lambda data_dir: data, build_model=lambda c, d, g: torch.nn.Linear(2, 2),
                metrics=lambda model, x, y: {"accuracy": torch.tensor([0.25]), "loss": np.float32(0.5), "n": 3})
    assert task.evaluate(torch.nn.Linear(2, 2), data) == {"accuracy": 0.25, "loss": 0.5, "n": 3.0}


def test_a_plugins_sys_exit_in_a_metric_is_one_line_and_the_sweep_resumes(plugin, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("EVE_TEST_BEHAVIOUR", "exit")
    work = tmp_path / "w"
    assert main(hostile(plugin, work, "--quiet")) == 2
    one_line(capsys, "--plugin", "called sys.exit(3)", "hostile_plugin.py:", "continue with --resume")
    states = {state for _, state in trials(work / "results.db")}
    assert states == {"RUNNING"}  # an interrupted sweep: every trial waits for --resume, as after Ctrl-C
    monkeypatch.setenv("EVE_TEST_BEHAVIOUR", "")
    out = tmp_path / "out.json"
    assert main(hostile(plugin, work, "--quiet", "--resume", "--json", str(out))) == 0
    assert {state for _, state in trials(work / "results.db")} == {"PRUNED", "COMPLETE"}


# Scores that are not finite: +inf never wins, a diverged sweep says so --------------------------------------


@EXAMPLES
@given(scores=st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=1, max_size=12),
       mode=st.sampled_from(["max", "min"]))
def test_a_score_that_is_not_finite_ranks_last_in_either_mode(scores, mode):
    order = rank_order(dict(enumerate(scores)), mode)
    finite = [k for k in order if math.isfinite(scores[k])]
    assert order[:len(finite)] == finite  # every finite score before every other
    best = max if mode == "max" else min
    if finite:
        assert scores[order[0]] == best(scores[k] for k in finite)


def test_an_infinite_metric_never_wins_and_is_named(plugin, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("EVE_TEST_BEHAVIOUR", "inf")
    out = tmp_path / "out.json"
    work = tmp_path / "w"
    assert main(hostile(plugin, work, "--json", str(out))) == 0
    sweep = json.loads(out.read_text())["optimizers"]["eve"]
    assert math.isfinite(sweep["best"]["score"]) and math.isfinite(sweep["winner"]["score"])
    (diverged,) = sweep["diverged"]
    assert math.isinf(sweep["trials"][diverged]["scores"]["20"]) and diverged != sweep["winner"]["index"]
    assert "training diverged for 1 of 6 configurations" in capsys.readouterr().out
    with contextlib.closing(sqlite3.connect(work / "results.db")) as connection:
        complete = {number for (number,) in connection.execute("SELECT number FROM trials WHERE state = 'COMPLETE'")}
    assert sweep["winner"]["index"] in complete and diverged not in complete


def test_diverged_losses_print_as_numbers_and_say_that_training_diverged(plugin, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("EVE_TEST_BEHAVIOUR", "diverge")
    out = tmp_path / "out.json"
    assert main(hostile(plugin, tmp_path / "w", "--json", str(out), task="hostile-min")) == 0
    printed = capsys.readouterr().out
    assert not re.search(r"\d{12,}", printed), printed  # no 35-digit integer
    assert "3.400e+34" in printed and "training diverged for" in printed
    sweep = json.loads(out.read_text())["optimizers"]["eve"]
    assert sweep["diverged"] and not math.isnan(sweep["best"]["score"])


# The current folder deleted during start-up -------------------------------------------------------------


def test_a_current_folder_deleted_before_the_command_is_one_line(tmp_path, capsys, monkeypatch):
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    assert main(TINY) == 2
    one_line(capsys, "the current folder no longer exists")


def test_a_current_folder_deleted_during_start_up_is_one_line(tmp_path, capsys, monkeypatch):
    import eve_search.cli._main as cli_main

    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    checked = cli_main.check_paths

    def then_deleted(args):  # the folder goes away once the command has started
        checked(args)
        gone.rmdir()

    monkeypatch.setattr(cli_main, "check_paths", then_deleted)
    assert main(TINY) == 2  # the default --workdir is relative to it
    one_line(capsys, "the current folder no longer exists")
