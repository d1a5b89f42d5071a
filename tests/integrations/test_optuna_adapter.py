"""The adapter to Optuna's internals: the fast path writes what Optuna's public storage calls write, and a
test fails when Optuna's table layout changes under it."""

import optuna
import pytest

from eve_search.integrations._optuna_adapter import LAYOUT, TESTED_NOW, layout_problems
from eve_search.integrations._optuna_adapter._sql import SCHEMA_VERSION
from eve_search.integrations._optuna_adapter._version import in_tested_range


def _ask(storage, study, count):
    """Ask ``count`` trials; their storage ids (asked for by number, through the public API)."""
    study_id = storage.get_study_id_from_name(study.study_name)
    return [storage.get_trial_id_from_study_id_trial_number(study_id, study.ask().number) for _ in range(count)]


def test_optunas_schema_is_the_one_the_fast_path_writes(tmp_path):
    # Fails when an Optuna release changes a table, column, unique key or helper the fast path relies on:
    # then update LAYOUT and the statements in eve_search/integrations/_optuna_adapter/_sql.py (or let the
    # public path take over, as it does at run time).
    from optuna.storages._rdb import models

    assert TESTED_NOW, f"Optuna {optuna.__version__} is outside the adapter's tested releases"
    assert layout_problems() == []
    assert models.SCHEMA_VERSION == SCHEMA_VERSION
    assert optuna.storages.RDBStorage(f"sqlite:///{tmp_path}/s.db").get_current_version() == "v3.2.0.a"
    for name, columns in LAYOUT.items():
        assert set(columns) <= set(getattr(models, name).__table__.c.keys()), name


def test_a_layout_the_fast_path_does_not_know_turns_it_off(tmp_path, monkeypatch):
    import eve_search.integrations._optuna_adapter._sql as sql

    monkeypatch.setitem(sql.LAYOUT, "TrialModel", (*sql.LAYOUT["TrialModel"], "a_column_optuna_never_had"))
    sql._usable.cache_clear()
    try:
        assert layout_problems() == ["TrialModel lacks the columns a_column_optuna_never_had"]
        storage, study, ids = _waiting_study(f"sqlite:///{tmp_path}/r.db", 1)
        assert sql.claim_at_once(storage, ids[0], heartbeat=True) is None  # the caller makes Optuna's calls
        assert not sql.record_results_at_once(storage, [(ids[0], "rung_10", {}, 10, 0.5)])
    finally:
        monkeypatch.undo()
        sql._usable.cache_clear()


def test_releases_are_compared_by_major_and_minor():
    assert in_tested_range("4.3.0") and in_tested_range("5.0.3")
    assert not in_tested_range("4.2.1") and not in_tested_range("5.1.0")


def test_the_tested_releases_are_the_ends_of_the_declared_range():
    from eve_search._hosts import declared
    from eve_search.integrations._optuna_adapter._version import TESTED, release

    bounds = {s.operator: release(s.version) for s in declared("optuna")}
    assert bounds[">="] == TESTED[0]  # the oldest, run by .ci/hosts.sh
    assert bounds["<"] == (TESTED[1][0], TESTED[1][1] + 1)  # the newest minor, run by the suite


def test_trials_added_at_once_are_numbered_after_those_the_study_holds(tmp_path):
    from eve_search.integrations._optuna_adapter._sql import add_trials_at_once

    url = f"sqlite:///{tmp_path}/r.db"
    storage = optuna.storages.RDBStorage(url)
    study = optuna.create_study(study_name="other", storage=storage)
    study.optimize(lambda trial: trial.suggest_float("lr", 1e-3, 1.0, log=True), n_trials=3)
    distributions = {"lr": optuna.distributions.FloatDistribution(1e-3, 1.0, log=True)}
    new = [optuna.trial.create_trial(state=optuna.trial.TrialState.RUNNING, params={"lr": 0.01 * (k + 1)},
                                     distributions=distributions, user_attrs={"k": k}) for k in range(4)]
    assert add_trials_at_once(storage, storage.get_study_id_from_name(study.study_name), new)
    trials = optuna.load_study(study_name="other", storage=url).trials
    assert [t.number for t in trials] == list(range(7))
    assert [t.user_attrs.get("k") for t in trials[3:]] == [0, 1, 2, 3]
    assert [t.params["lr"] for t in trials[3:]] == pytest.approx([0.01, 0.02, 0.03, 0.04])
    # A distribution the study's trials contradict is refused, as Optuna refuses it; nothing is written.
    other = {"lr": optuna.distributions.IntDistribution(1, 10)}
    with pytest.raises(ValueError):
        add_trials_at_once(storage, storage.get_study_id_from_name(study.study_name), [optuna.trial.create_trial(
            state=optuna.trial.TrialState.RUNNING, params={"lr": 3}, distributions=other)])
    assert len(optuna.load_study(study_name="other", storage=url).trials) == 7
    # Not a plain RUNNING trial, or not an RDB storage: the caller adds them one by one.
    done = optuna.trial.create_trial(params={"lr": 0.1}, distributions=distributions, value=1.0)
    assert not add_trials_at_once(storage, storage.get_study_id_from_name(study.study_name), [done])
    assert not add_trials_at_once(optuna.storages.InMemoryStorage(), 0, new)


def test_results_written_at_once_are_what_optunas_own_calls_write(tmp_path):
    from eve_search.integrations._optuna_adapter._sql import record_results_at_once

    values = {"budget": 10, "score": 0.5, "val": {"accuracy": 0.5}}
    rows = [(0, "rung_10", values, 10, 0.5), (1, "rung_10", {**values, "score": float("nan")}, 10, float("nan")),
            (2, "rung_10", values, 10, float("inf")), (0, "rung_30", {**values, "budget": 30}, 30, -float("inf")),
            (1, "rung_10", {**values, "score": 0.75}, 10, 0.75)]  # a later row for the same key replaces it
    stored = []
    for fast in (True, False):
        url = f"sqlite:///{tmp_path}/{fast}.db"
        storage = optuna.storages.RDBStorage(url)
        study = optuna.create_study(study_name="s", storage=storage)
        ids = _ask(storage, study, 3)
        named = [(ids[t], key, value, step, score) for t, key, value, step, score in rows]
        if fast:
            assert record_results_at_once(storage, named)
        else:
            for trial_id, key, value, step, score in named:
                storage.set_trial_user_attr(trial_id, key, value)
                storage.set_trial_intermediate_value(trial_id, step, score)
        trials = optuna.load_study(study_name="s", storage=url).get_trials(deepcopy=False)
        stored.append(repr([(t.user_attrs, t.intermediate_values) for t in trials]))
    assert stored[0] == stored[1]
    assert "0.75" in stored[0]


def test_results_for_an_ended_trial_are_left_to_optuna_which_refuses_them(tmp_path):
    from eve_search.integrations._optuna_adapter._sql import record_results_at_once

    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path}/r.db")
    study = optuna.create_study(study_name="s", storage=storage)
    live, ended = study.ask(), study.ask()
    study.tell(ended, 1.0)
    live_id, ended_id = (storage.get_trial_id_from_study_id_trial_number(storage.get_study_id_from_name("s"), t.number)
                         for t in (live, ended))
    rows = [(live_id, "rung_10", {"score": 0.5}, 10, 0.5), (ended_id, "rung_10", {"score": 0.5}, 10, 0.5)]
    assert not record_results_at_once(storage, rows)
    assert study.trials[0].user_attrs == {} and study.trials[0].intermediate_values == {}  # nothing written
    assert not record_results_at_once(optuna.storages.InMemoryStorage(), rows[:1])
    assert not record_results_at_once(storage, [])


@pytest.fixture
def away_from_utc(monkeypatch):
    """The process's local time zone five hours west of UTC (no time-zone database needed)."""
    import time

    monkeypatch.setenv("TZ", "WST+5")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


# Trials ended with every kind of ending: (index of the trial, state, values).
ENDS = [(0, optuna.trial.TrialState.PRUNED, [0.5]), (1, optuna.trial.TrialState.COMPLETE, [float("inf")]),
        (2, optuna.trial.TrialState.FAIL, None), (3, optuna.trial.TrialState.PRUNED, None)]


def _state_of(url, name="s"):
    trials = optuna.load_study(study_name=name, storage=url).get_trials(deepcopy=False)
    return [(t.state, t.values, t.user_attrs, t.intermediate_values, t.datetime_start is not None,
             t.datetime_complete is not None) for t in trials]


def _waiting_study(url, count):
    # Heartbeats on, with a grace period no test outlasts: a heartbeat is stale only where a test makes it old.
    storage = optuna.storages.RDBStorage(url, heartbeat_interval=1, grace_period=3600)
    study = optuna.create_study(study_name="s", storage=storage)
    ids = _ask(storage, study, count)
    for trial_id in ids:
        storage.set_trial_state_values(trial_id, optuna.trial.TrialState.WAITING)
    return storage, study, ids


def test_a_claim_at_once_is_what_optunas_three_calls_leave_and_never_starts_stale(tmp_path):
    from sqlalchemy import text

    from eve_search.integrations._optuna_adapter._sql import claim_at_once

    states = optuna.trial.TrialState
    stored = []
    for fast in (True, False):
        url = f"sqlite:///{tmp_path}/{fast}.db"
        storage, study, ids = _waiting_study(url, 3)
        storage.record_heartbeat(ids[0])  # an old heartbeat: the trial ran before, long ago (aged below, no sleep)
        with storage.engine.begin() as connection:
            connection.execute(text("UPDATE trial_heartbeats SET heartbeat = '2000-01-01 00:00:00.000000' "
                                    "WHERE trial_id = :trial_id"), {"trial_id": ids[0]})
        if fast:
            assert claim_at_once(storage, ids[0], heartbeat=True, attrs={"worker": "host:1"}) is True
            assert claim_at_once(storage, ids[1], heartbeat=False) is True
            assert claim_at_once(storage, ids[0], heartbeat=True, attrs={"worker": "host:2"}) is False  # taken
        else:
            storage.record_heartbeat(ids[0])
            assert storage.set_trial_state_values(ids[0], states.RUNNING)
            storage.set_trial_user_attr(ids[0], "worker", "host:1")
            assert storage.set_trial_state_values(ids[1], states.RUNNING)
        # The claimed trial's heartbeat is new: it is not stale (the other one has none, as in Optuna).
        assert optuna.storages.fail_stale_trials(study) is None
        stored.append(_state_of(url))
    assert stored[0] == stored[1]
    assert [row[0] for row in stored[0]] == [states.RUNNING, states.RUNNING, states.WAITING]
    # An ended trial is not WAITING: not claimed. Not an RDB storage: the caller makes Optuna's calls.
    study.tell(ids[0], 1.0)
    assert claim_at_once(storage, ids[0], heartbeat=True) is False
    assert claim_at_once(optuna.storages.InMemoryStorage(), 0, heartbeat=True) is None


def test_results_recorded_with_release_go_back_to_the_queue_on_either_path(tmp_path, monkeypatch):
    import eve_search.engine._stores as stores
    from eve_search.integrations._optuna_adapter._sql import RdbFastPath, claim_at_once

    details = {"score": 0.5, "val": {"accuracy": 0.5}}
    stored = []
    for fast in (True, False):
        monkeypatch.setattr(stores, "_fast_path", RdbFastPath() if fast else None)  # None: Optuna's public calls
        url = f"sqlite:///{tmp_path}/{fast}.db"
        storage, study, ids = _waiting_study(url, 2)
        assert claim_at_once(storage, ids[0], heartbeat=True) is True
        stores.record_results(storage, [(ids[0], 10, details)], release=True)
        stored.append(_state_of(url))
    assert stored[0] == stored[1]
    assert stored[0][0][0] == optuna.trial.TrialState.WAITING and stored[0][0][3] == {10: 0.5}


def test_waiting_trials_ended_at_once_are_what_optunas_calls_leave_each_by_one_worker(tmp_path, away_from_utc):
    import datetime

    from eve_search.integrations._optuna_adapter._sql import end_waiting_at_once

    states = optuna.trial.TrialState
    stored = []
    for fast in (True, False):
        url = f"sqlite:///{tmp_path}/{fast}.db"
        storage, study, ids = _waiting_study(url, 5)
        named = [(ids[k], state, values) for k, state, values in ENDS]
        if fast:
            assert end_waiting_at_once(storage, named) == set(ids[:4])
        else:
            for trial_id, state, values in named:
                assert storage.set_trial_state_values(trial_id, states.RUNNING)
                storage.set_trial_state_values(trial_id, state, values)
        trials = optuna.load_study(study_name="s", storage=url).get_trials(deepcopy=False)
        # Stored in local time, as Optuna stores it (not UTC: five hours apart here).
        now = datetime.datetime.now()
        assert all(abs((t.datetime_complete - now).total_seconds()) < 60 for t in trials[:4])
        stored.append(repr([(t.state, t.values) for t in trials]))
    assert stored[0] == stored[1]
    # A trial that is no longer WAITING (another worker ended it; this one claimed) is left as it is.
    storage.set_trial_state_values(ids[4], states.RUNNING)
    assert end_waiting_at_once(storage, [(ids[0], states.COMPLETE, [1.0]), (ids[4], states.PRUNED, None)]) == set()
    assert _state_of(url)[4][0] == states.RUNNING and _state_of(url)[0][0] == states.PRUNED
    assert end_waiting_at_once(storage, []) == set()
    assert end_waiting_at_once(optuna.storages.InMemoryStorage(), [(0, states.PRUNED, None)]) is None


def test_unclaimed_trials_requeued_at_once_leave_the_others(tmp_path):
    from eve_search.integrations._optuna_adapter._sql import requeue_at_once

    states = optuna.trial.TrialState
    storage, study, ids = _waiting_study(f"sqlite:///{tmp_path}/r.db", 3)
    storage.set_trial_state_values(ids[0], states.RUNNING)
    storage.set_trial_state_values(ids[1], states.RUNNING)
    storage.set_trial_state_values(ids[1], states.COMPLETE, [1.0])
    assert requeue_at_once(storage, [ids[0], ids[1], ids[0]])
    assert [row[0] for row in _state_of(storage.url)] == [states.WAITING, states.COMPLETE, states.WAITING]
    assert not requeue_at_once(optuna.storages.InMemoryStorage(), [0])


def test_trials_ended_at_once_are_what_optunas_own_calls_leave(tmp_path, away_from_utc):
    from eve_search.integrations._optuna_adapter._sql import end_trials_at_once

    states = optuna.trial.TrialState
    stored = []
    for fast in (True, False):
        url = f"sqlite:///{tmp_path}/{fast}.db"
        storage = optuna.storages.RDBStorage(url)
        study = optuna.create_study(study_name="s", storage=storage)
        ids = _ask(storage, study, 5)
        named = [(ids[k], state, values) for k, state, values in ENDS]
        if fast:
            assert end_trials_at_once(storage, named)
        else:
            for trial_id, state, values in named:
                storage.set_trial_state_values(trial_id, state, values)
        trials = optuna.load_study(study_name="s", storage=url).get_trials(deepcopy=False)
        # In local time, as Optuna stores it (five hours from UTC here): never before the start.
        assert all(t.datetime_complete is not None and t.datetime_complete >= t.datetime_start for t in trials[:4])
        assert trials[4].datetime_complete is None
        stored.append(repr([(t.state, t.values) for t in trials]))
    assert stored[0] == stored[1]
    # A trial that has ended already: nothing is written, and the caller ends the others one by one.
    assert not end_trials_at_once(storage, [(ids[4], states.PRUNED, None), (ids[0], states.PRUNED, None)])
    assert optuna.load_study(study_name="s", storage=url).trials[4].state == states.RUNNING
