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


def test_a_new_store_holds_the_trials_optunas_add_trials_would_write(tmp_path):
    from eve_search.engine._stores import use_fast_path
    from eve_search.integrations._optuna_adapter import RdbFastPath

    configs = get_space("hp").sample(30, seed=3)
    previous = use_fast_path(RdbFastPath())
    try:
        fast = SweepStore(f"sqlite:///{tmp_path}/fast.db", "sweep-a", configs, get_space("hp"), tmp_path / "c1",
                          SETTINGS, resume=False)
        use_fast_path(None)  # Optuna's public calls only
        slow = SweepStore(f"sqlite:///{tmp_path}/slow.db", "sweep-a", configs, get_space("hp"), tmp_path / "c2",
                          SETTINGS, resume=False)
    finally:
        use_fast_path(previous)
    assert _stored(fast.url, "sweep-a") == _stored(slow.url, "sweep-a")
    assert [row[0] for row in _stored(fast.url, "sweep-a")] == list(range(30))


def test_a_store_records_many_results_in_order_and_on_postgresql(postgres_url, tmp_path):
    store = open_store(postgres_url, tmp_path, name="sweep-many")
    details = [{"score": s, "val": {"accuracy": s}, "charged_units": 40.0, "wall_seconds": 0.1, "backward_passes": 3}
               for s in (0.5, 0.25, 0.75)]
    store.record_many([(0, 40, details[0], None), (2, 40, details[1], None), (3, 40, details[2], None)])
    assert {i: sorted(done) for i, done in store.rung_details().items()} == {0: [40], 1: [], 2: [40], 3: [40]}
    assert store.rung_details()[3][40]["score"] == 0.75
    study = optuna.load_study(study_name="sweep-many", storage=postgres_url)
    assert [t.intermediate_values for t in study.trials] == [{40: 0.5}, {}, {40: 0.25}, {40: 0.75}]
