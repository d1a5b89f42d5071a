"""A results store and checkpoint files changed by someone else: one line, exit 2, nothing escapes.

Real stores are written by the CLI in-process on the tiny task (a finished `rank` of six sweeps, and
a sweep interrupted in its first rung), copied for each case, changed through Optuna's storage API
or sqlite3, then read back by `sweep --resume`, `rank` and `dashboard`. Every refusal must be one
line on stderr naming the key (never a traceback), leave the store's contents unchanged (sqlite3
``iterdump``, not bytes: WAL checkpoints rewrite bytes) and write nothing anywhere, in particular
not outside ``--workdir``. Checkpoint files that are directories, unreadable, garbage or crafted
pickles are refused in one line naming the file, or replayed exactly, never executed.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import sqlite3
import tempfile
import threading
from pathlib import Path

import optuna
import pytest
import torch

from eve_search.engine.checkpoint import CheckpointError, load_state
from eve_search.cli import main
from eve_search.integrations._optuna_driver import _settings_attr
from eve_search.integrations.optuna import run_sha
from eve_search.engine.ledger import PROMOTED_FRACTION
from eve_search.engine.store import StoreError
from eve_search.engine.trial import Trial

SETTINGS = ["--task", "tiny", "--configs", "6", "--rungs", "20,40", "--backward-ratio", "2"]
SWEEP = ["sweep", *SETTINGS, "--optimizer", "eve", "--quiet"]
RANK = ["rank", "adult", *SETTINGS, "--seeds", "0-1", "--quiet"]
NAME = "tiny-tiny-eve-seed0"  # the sweep every case changes


# Stores written by the CLI, once per module ---------------------------------------------------------


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished `rank` (eve, adam, adamw at seeds 0 and 1) and the eve seed-0 sweep's --json."""
    work = tmp_path_factory.mktemp("finished") / "work"
    assert main([*RANK, "--workdir", str(work)]) == 0
    reference = work.parent / "reference.json"
    assert main([*SWEEP, "--workdir", str(work), "--resume", "--json", str(reference)]) == 0
    return work, json.loads(reference.read_text())


@pytest.fixture(scope="module")
def running(tmp_path_factory):
    """The eve seed-0 sweep, interrupted in its first rung (three of six trials recorded)."""
    work = tmp_path_factory.mktemp("running") / "work"
    calls = {"n": 0}
    original = Trial.train_to

    def interrupted(self, budget):
        calls["n"] += 1
        if calls["n"] == 4:
            raise KeyboardInterrupt
        original(self, budget)

    Trial.train_to = interrupted
    try:
        assert main([*SWEEP, "--workdir", str(work)]) == 130
    finally:
        Trial.train_to = original
    assert len(list((work / "checkpoints").glob("*/trial-*.pt"))) == 3
    return work


def copy_of(store: Path, root: Path) -> Path:
    """A copy of a store's work directory two levels below ``root``: a path that escapes --workdir
    (``..``) still lands inside ``root``, where the test sees it."""
    work = root / "a" / "b" / "work"
    shutil.copytree(store, work)
    return work


# Reading and changing a store -------------------------------------------------------------------


def dump(work: Path) -> list[str]:
    with contextlib.closing(sqlite3.connect(work / "results.db")) as connection:
        return list(connection.iterdump())


def files(root: Path, work: Path) -> dict[str, tuple]:
    """Every path under ``root``, with each file's size and time of change (the store's own files
    aside: their contents are compared instead)."""
    return {str(p.relative_to(root)): None if p.is_dir() else (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if not (p.parent == work and p.name.startswith("results.db"))}


def storage(work: Path) -> optuna.storages.RDBStorage:
    return optuna.storages.RDBStorage(f"sqlite:///{work / 'results.db'}")


def set_study_attr(work: Path, key, value, name=NAME) -> None:
    store = storage(work)
    try:
        store.set_study_user_attr(store.get_study_id_from_name(name), key, value)
    finally:
        store.engine.dispose()


def trial_attrs(work: Path, number: int, name=NAME) -> dict:
    store = storage(work)
    try:
        return store.get_all_trials(store.get_study_id_from_name(name))[number].user_attrs
    finally:
        store.engine.dispose()


def set_trial_attr(work: Path, number: int, key, value, name=NAME) -> None:
    """Through sqlite3: Optuna's API refuses to change a finished trial; a user's editor does not."""
    store = storage(work)
    try:
        trial_id = store.get_trial_id_from_study_id_trial_number(store.get_study_id_from_name(name), number)
    finally:
        store.engine.dispose()
    with contextlib.closing(sqlite3.connect(work / "results.db")) as connection, connection:
        changed = connection.execute("UPDATE trial_user_attributes SET value_json = ? WHERE trial_id = ? AND key = ?",
                                     (json.dumps(value), trial_id, key)).rowcount
        if not changed:
            connection.execute("INSERT INTO trial_user_attributes (trial_id, key, value_json) VALUES (?, ?, ?)",
                               (trial_id, key, json.dumps(value)))


def set_param(work: Path, number: int, param: str, value: float) -> None:
    with contextlib.closing(sqlite3.connect(work / "results.db")) as connection, connection:
        assert connection.execute(
            "UPDATE trial_params SET param_value = ? WHERE param_name = ? AND trial_id = (SELECT trial_id FROM "
            "trials JOIN studies USING (study_id) WHERE study_name = ? AND number = ?)",
            (value, param, NAME, number)).rowcount == 1


def rung(work: Path, number: int = 0, budget: int = 20) -> dict:
    return dict(trial_attrs(work, number)[f"rung_{budget}"])


def refused(argv: list[str], root: Path, work: Path, capsys, *expected: str) -> str:
    """Run ``argv``: exit 2, one line on stderr holding every ``expected`` text, no traceback, the
    store's contents and every file under ``root`` unchanged."""
    capsys.readouterr()
    before, tree = dump(work), files(root, work)
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    for text in expected:
        assert text in lines[0], err
    assert dump(work) == before
    assert files(root, work) == tree
    return lines[0]


def resume(work: Path) -> list[str]:
    return [*SWEEP, "--workdir", str(work), "--resume"]


def rank(work: Path) -> list[str]:
    return [*RANK, "--workdir", str(work)]


def dashboard(work: Path) -> list[str]:
    return ["dashboard", "--storage", f"sqlite:///{work / 'results.db'}", "--out", str(work / "report.html")]


def same_result(document: dict, reference: dict) -> bool:
    def stable(doc):
        (result,) = doc["optimizers"].values()
        return {key: result[key] for key in ("best", "winner", "rungs", "trials", "charged_units")}

    return stable(document) == stable(reference)


# Paths built from stored values -------------------------------------------------------------------


@pytest.mark.parametrize("sweep_id", ["/../../../..", "../x", "/tmp/eve-search-abs", "ab\x00cd" * 8, 7,
                                      "ABCDEF0123456789ABCDEF0123456789", "0" * 31])
def test_a_sweep_id_that_is_not_hex_is_refused_before_anything_is_written(running, tmp_path, capsys, sweep_id):
    work = copy_of(running, tmp_path)
    set_study_attr(work, "sweep_id", sweep_id)
    refused(resume(work), tmp_path, work, capsys, "key 'sweep_id'", repr(sweep_id)[:20],
            "expected 32 hexadecimal digits")


def test_a_checkpoint_folder_that_is_a_link_out_of_the_workdir_is_refused(running, tmp_path, capsys):
    work = copy_of(running, tmp_path)
    (folder,) = (work / "checkpoints").iterdir()
    elsewhere = tmp_path / "elsewhere"
    shutil.move(folder, elsewhere)
    folder.symlink_to(elsewhere, target_is_directory=True)
    refused(resume(work), tmp_path, work, capsys, f"sweep {NAME!r}: its checkpoint folder", "leads outside")


def within(seconds: float, function) -> BaseException | None:
    """What ``function()`` raised (None if nothing), failing the test if it runs past ``seconds``."""
    outcome: dict[str, BaseException] = {}

    def target():
        try:
            function()
        except BaseException as error:  # noqa: BLE001 handed to the test
            outcome["error"] = error

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still running after {seconds} s"
    return outcome.get("error")


def test_the_optuna_driver_refuses_checkpoint_folders_named_by_a_changed_study(tmp_path, tiny_task):
    (tmp_path / "work").mkdir()
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'work' / 'optuna.db'}")
    settings = _settings_attr(task="tiny", n_trials=3, optimizer="eve", seed=0, rungs=[20, 40],
                              fraction=PROMOTED_FRACTION, cost_mode="calibrated", backward_ratio=2.0)
    before = files(tmp_path, tmp_path / "work")
    for name, sweep_id, message in [("sha", "/../../../..", "key 'sweep_id' holds '/../../../..'"),
                                    ("../../escape", "0123456789abcdef0123456789abcdef",
                                     "study name '../../escape' cannot name a checkpoint folder")]:
        study = optuna.create_study(study_name=name, storage=storage)
        for key, value in {"sha_cohort_size": 3, "sha_settings": settings, "sweep_id": sweep_id,
                           "backward_ratios": {}}.items():
            study.set_user_attr(key, value)
        error = within(30, lambda: run_sha(study, tiny_task, 3, space="tiny", storage=storage, poll_interval=0.05,
                                           checkpoint_dir=tmp_path / "work" / "checkpoints", rungs=(20, 40),
                                           backward_ratio=2.0))
        assert isinstance(error, StoreError) and message in str(error) and "\n" not in str(error)
    after = files(tmp_path, tmp_path / "work")
    assert {k for k in after if "optuna.db" not in k} == {k for k in before if "optuna.db" not in k}


# Values read back ---------------------------------------------------------------------------------


def _index(value):
    return lambda work: set_trial_attr(work, 1, "config_index", value)


def _rung(change):
    return lambda work: set_trial_attr(work, 0, "rung_20", change(rung(work)))


CHANGES = {
    "config_index is a string": (_index("1"), ["trial #1", "key 'config_index' holds '1'", "an int in [0, 5]"]),
    "config_index is negative": (_index(-1), ["key 'config_index' holds -1"]),
    "config_index out of range": (_index(99), ["key 'config_index' holds 99"]),
    "config_index is a bool": (_index(True), ["key 'config_index' holds True"]),
    "config_index twice": (_index(2), ["trials #1 and #2 both hold config_index 2"]),
    "config changed": (lambda work: set_trial_attr(work, 0, "config", {**trial_attrs(work, 0)["config"], "lr": 0.5}),
                       ["trial #0 (configuration 0): key 'config.lr' holds 0.5"]),
    "parameter changed": (lambda work: set_param(work, 0, "lr", 0.5), ["key 'params.lr' holds 0.5"]),
    "rung without score": (_rung(lambda r: {k: v for k, v in r.items() if k != "score"}),
                           ["key 'rung_20.score' is missing (expected a number)"]),
    "rung score a string": (_rung(lambda r: {**r, "score": "high"}), ["key 'rung_20.score' holds 'high'"]),
    "rung budget a string": (_rung(lambda r: {**r, "budget": "20"}), ["key 'rung_20.budget' holds '20'"]),
    "rung budget a float": (_rung(lambda r: {**r, "budget": 20.5}), ["key 'rung_20.budget' holds 20.5"]),
    "rung of another budget": (lambda work: set_trial_attr(work, 0, "rung_25", {**rung(work), "budget": 25}),
                               ["key 'rung_25' holds 25 (expected a budget of the sweep's rungs 20, 40)"]),
    "rung units NaN": (_rung(lambda r: {**r, "charged_units": float("nan")}),
                       ["key 'rung_20.charged_units' holds nan (expected a finite number >= 0)"]),
    "rung metrics a list": (_rung(lambda r: {**r, "val": [0.5]}), ["key 'rung_20.val' holds [0.5]"]),
    "rung a list": (_rung(lambda r: [1, 2]), ["key 'rung_20' holds [1, 2] (expected a dict"]),
    "settings a string": (lambda work: set_study_attr(work, "settings", "abc"), ["key 'settings' holds 'abc'"]),
    "kind a number": (lambda work: set_study_attr(work, "kind", 5), ["key 'kind' holds 5"]),
    "ratios a string": (lambda work: set_study_attr(work, "backward_ratios", "x"), ["key 'backward_ratios'"]),
    "ratio not the pinned one": (lambda work: set_study_attr(work, "backward_ratios", {"16x1": 3.0}),
                                 ["key 'backward_ratios'", "the pinned --backward-ratio 2.0"]),
    "wall seconds a string": (lambda work: set_study_attr(work, "wall_seconds", "x"), ["key 'wall_seconds'"]),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_changed_value_stops_resume_in_one_line(running, tmp_path, capsys, change):
    work = copy_of(running, tmp_path)
    apply, expected = CHANGES[change]
    apply(work)
    line = refused(resume(work), tmp_path, work, capsys, f"sweep {NAME!r}", *expected)
    assert line.startswith("eve-search sweep: results store:") and "changed outside eve-search" in line


@pytest.mark.parametrize("change", ["config_index twice", "rung without score", "rung of another budget"])
def test_resuming_a_finished_sweep_and_ranking_read_the_same_checks(finished, tmp_path, capsys, change):
    work = copy_of(finished[0], tmp_path)
    apply, expected = CHANGES[change]
    apply(work)
    refused(resume(work), tmp_path, work, capsys, *expected)
    refused(rank(work), tmp_path, work, capsys, *expected)


@pytest.mark.parametrize(("value", "expected"), [
    ("x", "key 'winner' holds 'x'"),
    ({"index": 99, "score": 0.5, "test": None}, "expected a dict of an int index in [0, 5]"),
])
def test_a_changed_winner_is_refused(finished, tmp_path, capsys, value, expected):
    work = copy_of(finished[0], tmp_path)
    set_study_attr(work, "winner", value)
    refused(resume(work), tmp_path, work, capsys, expected)


@pytest.mark.parametrize(("apply", "expected"), [
    (lambda work: set_trial_attr(work, 0, "rung_20", [1, 2]), "trial #0 (configuration 0): key 'rung_20' holds [1, 2]"),
    (lambda work: set_trial_attr(work, 0, "rung_20", {**rung(work), "budget": "x"}), "key 'rung_20.budget' holds 'x'"),
    (lambda work: set_trial_attr(work, 1, "config_index", "x"), "trial #1: key 'config_index' holds 'x'"),
    (lambda work: set_trial_attr(work, 1, "config_index", 2), "trials #1 and #2 both hold config_index 2"),
    (lambda work: set_study_attr(work, "settings", "abc"), "key 'settings' holds 'abc'"),
    (lambda work: set_study_attr(work, "settings", {"seed": "zero"}), "key 'settings.seed' holds 'zero'"),
    (lambda work: set_study_attr(work, "backward_ratios", "x"), "key 'backward_ratios' holds 'x'"),
])
def test_the_dashboard_refuses_a_changed_sweep_in_one_line(finished, tmp_path, capsys, apply, expected):
    work = copy_of(finished[0], tmp_path)
    apply(work)
    line = refused(dashboard(work), tmp_path, work, capsys, expected)
    assert line.startswith("eve-search dashboard: results store:")


def test_untouched_stores_resume_rank_and_draw(finished, tmp_path, capsys):
    work = copy_of(finished[0], tmp_path)
    out = tmp_path / "again.json"
    assert main([*SWEEP, "--workdir", str(work), "--resume", "--json", str(out)]) == 0
    assert same_result(json.loads(out.read_text()), finished[1])
    assert main(rank(work)) == 0
    assert main(dashboard(work)) == 0


# Checkpoint files ---------------------------------------------------------------------------------


def checkpoint_paths(work: Path) -> list[Path]:
    (folder,) = (work / "checkpoints").iterdir()
    return [folder / f"trial-{index:04d}.pt" for index in range(6)]


def resumes_to_the_reference(work: Path, reference: dict) -> None:
    out = work.parent / "resumed.json"
    assert main([*resume(work), "--json", str(out)]) == 0
    assert same_result(json.loads(out.read_text()), reference)


def test_a_directory_in_place_of_a_checkpoint_is_one_line_and_nothing_is_lost(running, finished, tmp_path, capsys):
    work = copy_of(running, tmp_path)
    missing = [path for path in checkpoint_paths(work) if not path.exists()]
    for path in missing:
        path.mkdir()
    refused(resume(work), tmp_path, work, capsys, f"checkpoint {missing[0]}: is a directory",
            "move it away, then run again with --resume")
    for path in missing:
        path.rmdir()
    resumes_to_the_reference(work, finished[1])


class RunsCode:
    """What an attacker would plant: unpickling it calls os.system."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.mark.parametrize("content", ["garbage", "truncated", "code"])
def test_unusable_checkpoints_are_replayed_exactly_and_never_run(running, finished, tmp_path, content):
    work = copy_of(running, tmp_path)
    marker = tmp_path / "pwned"
    for path in checkpoint_paths(work):
        if content == "code":
            torch.save({"format": "eve-search-trial/1", "model": RunsCode(marker)}, path)
        elif content == "truncated" and path.exists():
            path.write_bytes(path.read_bytes()[:100])
        else:
            path.write_bytes(b"garbage")
    resumes_to_the_reference(work, finished[1])
    assert not marker.exists()


def test_loading_a_bad_checkpoint_names_the_file_and_what_to_do(tmp_path):
    marker = tmp_path / "pwned"
    crafted = tmp_path / "crafted.pt"
    torch.save({"format": "eve-search-trial/1", "model": RunsCode(marker)}, crafted)
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a checkpoint at all")
    folder = tmp_path / "folder.pt"
    folder.mkdir()
    for path, message in [(crafted, "refused: it holds objects other than tensors"),
                          (garbage, "unreadable (not an eve-search checkpoint"), (folder, "is a directory")]:
        with pytest.raises(CheckpointError) as error:
            load_state(path)
        text = str(error.value)
        assert text.startswith(f"checkpoint {path}: {message}") and "--resume" in text and "\n" not in text
    assert not marker.exists()


@contextlib.contextmanager
def as_unprivileged_user(*owned: Path):
    """Run the block as a user that file permissions apply to: as root they do not, so the effective
    user becomes 'nobody', and ``owned`` (and what lies under it) is given to it first."""
    if os.geteuid() != 0:
        yield
        return
    nobody = pwd.getpwnam("nobody")
    for top in owned:
        for path in [top, *top.rglob("*")]:
            os.chown(path, nobody.pw_uid, nobody.pw_gid, follow_symlinks=False)
    os.setegid(nobody.pw_gid)
    os.seteuid(nobody.pw_uid)
    try:
        yield
    finally:
        os.seteuid(0)
        os.setegid(0)


@pytest.fixture
def shared_tmp():
    """A folder another user can reach (pytest's tmp_path lies in a folder only its owner can enter)."""
    root = Path(tempfile.mkdtemp(prefix="eve-search-hostile-"))
    root.chmod(0o755)
    yield root
    for path in [root, *root.rglob("*")]:
        if path.is_dir() and not path.is_symlink():
            path.chmod(0o755)
    shutil.rmtree(root)


def test_a_read_only_checkpoint_folder_is_one_line_and_nothing_is_lost(running, finished, shared_tmp, capsys):
    work = copy_of(running, shared_tmp)
    (folder,) = (work / "checkpoints").iterdir()
    with as_unprivileged_user(shared_tmp):
        folder.chmod(0o555)
        before = files(shared_tmp, work)
        assert main(resume(work)) == 2
        err = capsys.readouterr().err
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in err, err
        assert f"checkpoint {folder}/trial-0003.pt: cannot be written (Permission denied; make the folder " \
               "writable" in lines[0]
        assert files(shared_tmp, work) == before
        folder.chmod(0o755)
        resumes_to_the_reference(work, finished[1])


def test_a_finished_sweep_reads_back_from_a_read_only_checkpoint_folder(finished, shared_tmp, capsys):
    work = copy_of(finished[0], shared_tmp)
    out = shared_tmp / "again.json"
    with as_unprivileged_user(shared_tmp):
        for folder in (work / "checkpoints").iterdir():
            folder.chmod(0o555)
        assert main([*resume(work), "--json", str(out)]) == 0
    assert same_result(json.loads(out.read_text()), finished[1])


def test_an_unreadable_checkpoint_is_one_line(shared_tmp):
    path = shared_tmp / "trial-0000.pt"
    torch.save({"format": "eve-search-trial/1"}, path)
    with as_unprivileged_user(shared_tmp):
        path.chmod(0o000)
        with pytest.raises(CheckpointError, match=rf"checkpoint {path}: cannot be read \(permission denied; make it "
                                                  "readable"):
            load_state(path)
