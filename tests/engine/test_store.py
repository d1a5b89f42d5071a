import optuna
import pytest

from eve_search.tasks.spaces import get_space
from eve_search.engine.store import StoreError, SweepStore, rung_key, study_name
from eve_search.engine.trial import Trial

SPACE = get_space("tiny")
CONFIGS = SPACE.sample(4, seed=0)
SETTINGS = {"task": "tiny", "space": "tiny", "optimizer": "adam", "seed": 0}


def open_store(url, tmp_path, resume=False, settings=SETTINGS, name="sweep-a"):
    return SweepStore(url, name, CONFIGS, SPACE, tmp_path / "checkpoints", settings, resume=resume)


def exercise(url, tmp_path):
    store = open_store(url, tmp_path)
    study = optuna.load_study(study_name="sweep-a", storage=url)
    assert [t.params["lr"] for t in study.trials] == pytest.approx([c["lr"] for c in CONFIGS])
    assert [t.user_attrs["config_index"] for t in study.trials] == [0, 1, 2, 3]
    # Real distributions, not placeholders.
    assert study.trials[0].distributions == SPACE.distributions()
    assert study.user_attrs["kind"] == "sha-sweep" and study.user_attrs["settings"] == SETTINGS

    t = Trial("tiny", CONFIGS[1], "adam", seed=0, index=1, backward_ratio=2.0, owner=store.sweep_id)
    t.train_to(40)
    details = {"score": 0.75, "val": {"accuracy": 0.75, "loss": 0.5}, "charged_units": t.charged_units,
               "wall_seconds": t.wall_seconds, "backward_passes": t.meter.backward_passes}
    store.record(1, 40, details, t.to_bytes())
    assert store.checkpoint_path(1).exists() and store.sweep_id[:12] in str(store.checkpoint_path(1))
    assert store.rung_details() == {0: {}, 1: {40: {"budget": 40, **details}}, 2: {}, 3: {}}
    store.record(2, 40, {**details, "score": 0.5}, None)  # no checkpoint: kept by the engine until promoted
    assert not store.checkpoint_path(2).exists()
    store.eliminate([0, 2])
    store.complete(1, 0.75)
    store.set("backward_ratios", {"16x1": 2.0})

    study = optuna.load_study(study_name="sweep-a", storage=url)
    states = [t.state for t in study.trials]
    assert states == [optuna.trial.TrialState.PRUNED, optuna.trial.TrialState.COMPLETE,
                      optuna.trial.TrialState.PRUNED, optuna.trial.TrialState.RUNNING]
    assert study.trials[1].intermediate_values == {40: 0.75}
    assert study.trials[1].user_attrs[rung_key(40)]["charged_units"] == t.charged_units
    assert not store.checkpoint_path(0).exists()

    # Reopening (another process, --resume) sees everything recorded, and the same checkpoint folder.
    reopened = open_store(url, tmp_path, resume=True)
    assert reopened.rung_details()[1][40]["score"] == 0.75
    assert reopened.get("backward_ratios") == {"16x1": 2.0}
    assert reopened.checkpoint_path(1) == store.checkpoint_path(1)
    loaded = Trial("tiny", CONFIGS[1], "adam", seed=0, index=1, backward_ratio=2.0, owner=reopened.sweep_id)
    loaded.load(reopened.checkpoint_path(1))
    assert loaded.charged_units == t.charged_units
    reopened.eliminate([0])  # idempotent after a crash between the two writes
    assert len(optuna.load_study(study_name="sweep-a", storage=url).trials) == 4
    assert reopened.finished() == {0, 1, 2}
    store.record(3, 40, {**details, "score": 0.6}, None)
    open_store(url, tmp_path, resume=True).eliminate([3])  # another process: the last score is read back
    store.complete(1, 0.1)  # already COMPLETE: left as it is
    trials = optuna.load_study(study_name="sweep-a", storage=url).trials
    # A pruned trial's value is its last intermediate value, as Optuna's study.tell(state=PRUNED) leaves it.
    assert [t.value for t in trials] == [None, 0.75, 0.5, 0.6]
    assert trials[3].state == optuna.trial.TrialState.PRUNED

    with pytest.raises(StoreError, match="already holds sweep 'sweep-a'; pass --resume"):
        open_store(url, tmp_path)
    with pytest.raises(StoreError, match=r"other settings \(seed\)"):
        open_store(url, tmp_path, resume=True, settings=SETTINGS | {"seed": 1})


def test_sweep_store_on_sqlite(tmp_path):
    exercise(f"sqlite:///{tmp_path / 'results.db'}", tmp_path)


def test_sweep_store_on_postgresql(postgres_url, tmp_path):
    exercise(postgres_url, tmp_path)


def test_two_stores_in_one_workdir_never_share_checkpoints(tmp_path):
    first = open_store(f"sqlite:///{tmp_path / 'one.db'}", tmp_path)
    second = open_store(f"sqlite:///{tmp_path / 'two.db'}", tmp_path)
    assert first.sweep_id != second.sweep_id
    assert first.checkpoint_path(0) != second.checkpoint_path(0)


def test_a_study_that_is_not_a_sweep_is_refused(tmp_path):
    url = f"sqlite:///{tmp_path / 'r.db'}"
    optuna.create_study(study_name="sweep-a", storage=url)
    with pytest.raises(StoreError, match="study 'sweep-a' is not an eve-search sweep"):
        open_store(url, tmp_path, resume=True)


def test_an_unreachable_store_is_a_one_line_error(tmp_path):
    with pytest.raises(StoreError, match="--storage 'nosuchdb://x': cannot open the results store") as error:
        open_store("nosuchdb://x", tmp_path)
    assert "\n" not in str(error.value)


def test_study_names():
    assert study_name("adult", "arch", "eve", 3) == "adult-arch-eve-seed3"
    assert study_name("adult", "hp", "adam", 0, config_seed=2) == "adult-hp-adam-seed0-configs2"


def _stored(url: str, name: str) -> list[tuple]:
    study = optuna.load_study(study_name=name, storage=url)
    return [(t.number, t.state, t.params, t.distributions, t.user_attrs, t.system_attrs, t.intermediate_values,
             t.values, t.datetime_start is not None, t.datetime_complete) for t in study.get_trials(deepcopy=False)]


def test_a_new_store_holds_the_trials_optunas_add_trials_would_write(tmp_path, monkeypatch):
    import eve_search.engine.store as store_module

    configs = get_space("hp").sample(30, seed=3)
    fast = SweepStore(f"sqlite:///{tmp_path}/fast.db", "sweep-a", configs, get_space("hp"), tmp_path / "c1", SETTINGS,
                      resume=False)
    monkeypatch.setattr(store_module, "add_trials_at_once", lambda *args: False)  # Optuna's own path
    slow = SweepStore(f"sqlite:///{tmp_path}/slow.db", "sweep-a", configs, get_space("hp"), tmp_path / "c2", SETTINGS,
                      resume=False)
    assert _stored(fast.url, "sweep-a") == _stored(slow.url, "sweep-a")
    assert [row[0] for row in _stored(fast.url, "sweep-a")] == list(range(30))


def test_trials_added_at_once_are_numbered_after_those_the_study_holds(tmp_path):
    from eve_search.engine._stores import add_trials_at_once

    url = f"sqlite:///{tmp_path}/r.db"
    storage = optuna.storages.RDBStorage(url)
    study = optuna.create_study(study_name="other", storage=storage)
    study.optimize(lambda trial: trial.suggest_float("lr", 1e-3, 1.0, log=True), n_trials=3)
    distributions = {"lr": optuna.distributions.FloatDistribution(1e-3, 1.0, log=True)}
    new = [optuna.trial.create_trial(state=optuna.trial.TrialState.RUNNING, params={"lr": 0.01 * (k + 1)},
                                     distributions=distributions, user_attrs={"k": k}) for k in range(4)]
    assert add_trials_at_once(storage, study._study_id, new)
    trials = optuna.load_study(study_name="other", storage=url).trials
    assert [t.number for t in trials] == list(range(7))
    assert [t.user_attrs.get("k") for t in trials[3:]] == [0, 1, 2, 3]
    assert [t.params["lr"] for t in trials[3:]] == pytest.approx([0.01, 0.02, 0.03, 0.04])
    # A distribution the study's trials contradict is refused, as Optuna refuses it; nothing is written.
    other = {"lr": optuna.distributions.IntDistribution(1, 10)}
    with pytest.raises(ValueError):
        add_trials_at_once(storage, study._study_id, [optuna.trial.create_trial(
            state=optuna.trial.TrialState.RUNNING, params={"lr": 3}, distributions=other)])
    assert len(optuna.load_study(study_name="other", storage=url).trials) == 7
    # Not a plain RUNNING trial, or not an RDB storage: the caller adds them one by one.
    done = optuna.trial.create_trial(params={"lr": 0.1}, distributions=distributions, value=1.0)
    assert not add_trials_at_once(storage, study._study_id, [done])
    assert not add_trials_at_once(optuna.storages.InMemoryStorage(), 0, new)


def test_results_written_at_once_are_what_optunas_own_calls_write(tmp_path):
    from eve_search.engine._stores import record_results_at_once

    values = {"budget": 10, "score": 0.5, "val": {"accuracy": 0.5}}
    rows = [(0, "rung_10", values, 10, 0.5), (1, "rung_10", {**values, "score": float("nan")}, 10, float("nan")),
            (2, "rung_10", values, 10, float("inf")), (0, "rung_30", {**values, "budget": 30}, 30, -float("inf")),
            (1, "rung_10", {**values, "score": 0.75}, 10, 0.75)]  # a later row for the same key replaces it
    stored = []
    for fast in (True, False):
        url = f"sqlite:///{tmp_path}/{fast}.db"
        storage = optuna.storages.RDBStorage(url)
        study = optuna.create_study(study_name="s", storage=storage)
        ids = [study.ask()._trial_id for _ in range(3)]
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
    from eve_search.engine._stores import record_results_at_once

    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path}/r.db")
    study = optuna.create_study(study_name="s", storage=storage)
    live, ended = study.ask(), study.ask()
    study.tell(ended, 1.0)
    rows = [(live._trial_id, "rung_10", {"score": 0.5}, 10, 0.5), (ended._trial_id, "rung_10", {"score": 0.5}, 10, 0.5)]
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
    ids = [study.ask()._trial_id for _ in range(count)]
    for trial_id in ids:
        storage.set_trial_state_values(trial_id, optuna.trial.TrialState.WAITING)
    return storage, study, ids


def test_a_claim_at_once_is_what_optunas_three_calls_leave_and_never_starts_stale(tmp_path):
    from sqlalchemy import text

    from eve_search.engine._stores import claim_at_once

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
        assert optuna.storages.fail_stale_trials(study) is None and storage._get_stale_trial_ids(study._study_id) == []
        stored.append(_state_of(url))
    assert stored[0] == stored[1]
    assert [row[0] for row in stored[0]] == [states.RUNNING, states.RUNNING, states.WAITING]
    # An ended trial is not WAITING: not claimed. Not an RDB storage: the caller makes Optuna's calls.
    study.tell(ids[0], 1.0)
    assert claim_at_once(storage, ids[0], heartbeat=True) is False
    assert claim_at_once(optuna.storages.InMemoryStorage(), 0, heartbeat=True) is None


def test_results_recorded_with_release_go_back_to_the_queue_on_either_path(tmp_path, monkeypatch):
    import eve_search.engine._stores as stores

    details = {"score": 0.5, "val": {"accuracy": 0.5}}
    stored = []
    for fast in (True, False):
        if not fast:
            monkeypatch.setattr(stores, "record_results_at_once", lambda *args, **kwargs: False)
        url = f"sqlite:///{tmp_path}/{fast}.db"
        storage, study, ids = _waiting_study(url, 2)
        assert stores.claim_at_once(storage, ids[0], heartbeat=True) is True
        stores.record_results(storage, [(ids[0], 10, details)], release=True)
        stored.append(_state_of(url))
    assert stored[0] == stored[1]
    assert stored[0][0][0] == optuna.trial.TrialState.WAITING and stored[0][0][3] == {10: 0.5}


def test_waiting_trials_ended_at_once_are_what_optunas_calls_leave_each_by_one_worker(tmp_path, away_from_utc):
    import datetime

    from eve_search.engine._stores import end_waiting_at_once

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
    from eve_search.engine._stores import requeue_at_once

    states = optuna.trial.TrialState
    storage, study, ids = _waiting_study(f"sqlite:///{tmp_path}/r.db", 3)
    storage.set_trial_state_values(ids[0], states.RUNNING)
    storage.set_trial_state_values(ids[1], states.RUNNING)
    storage.set_trial_state_values(ids[1], states.COMPLETE, [1.0])
    assert requeue_at_once(storage, [ids[0], ids[1], ids[0]])
    assert [row[0] for row in _state_of(storage.url)] == [states.WAITING, states.COMPLETE, states.WAITING]
    assert not requeue_at_once(optuna.storages.InMemoryStorage(), [0])


def test_a_store_records_many_results_in_order_and_on_postgresql(postgres_url, tmp_path):
    store = open_store(postgres_url, tmp_path, name="sweep-many")
    details = [{"score": s, "val": {"accuracy": s}, "charged_units": 40.0, "wall_seconds": 0.1, "backward_passes": 3}
               for s in (0.5, 0.25, 0.75)]
    store.record_many([(0, 40, details[0], None), (2, 40, details[1], None), (3, 40, details[2], None)])
    assert {i: sorted(done) for i, done in store.rung_details().items()} == {0: [40], 1: [], 2: [40], 3: [40]}
    assert store.rung_details()[3][40]["score"] == 0.75
    study = optuna.load_study(study_name="sweep-many", storage=postgres_url)
    assert [t.intermediate_values for t in study.trials] == [{40: 0.5}, {}, {40: 0.25}, {40: 0.75}]


def test_trials_ended_at_once_are_what_optunas_own_calls_leave(tmp_path, away_from_utc):
    from eve_search.engine._stores import end_trials_at_once

    states = optuna.trial.TrialState
    stored = []
    for fast in (True, False):
        url = f"sqlite:///{tmp_path}/{fast}.db"
        storage = optuna.storages.RDBStorage(url)
        study = optuna.create_study(study_name="s", storage=storage)
        ids = [study.ask()._trial_id for _ in range(5)]
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
