import optuna
import pytest

from eve_search.store import StoreError, SweepStore, study_name
from eve_search.trial import Evaluation, Trial

CONFIGS = [{"lr": 1e-3 * (k + 1), "weight_decay": 1e-4, "width": 16, "depth": 1} for k in range(4)]
SETTINGS = {"space": "test", "optimizer": "adam", "seed": 0}


def trial(splits, index):
    return Trial(CONFIGS[index], splits, "adam", seed=0, index=index, cost_mode="calibrated", backward_ratio=2.0)


def open_store(url, tmp_path, resume=False, settings=SETTINGS):
    return SweepStore(url, "sweep-a", CONFIGS, tmp_path / "checkpoints", settings, resume=resume)


def exercise(url, tmp_path, splits):
    store = open_store(url, tmp_path)
    study = optuna.load_study(study_name="sweep-a", storage=url)
    assert [t.params["lr"] for t in study.trials] == pytest.approx([c["lr"] for c in CONFIGS])
    assert [t.user_attrs["config_index"] for t in study.trials] == [0, 1, 2, 3]

    t = trial(splits, 1)
    t.train_to(40)
    store.record(1, 40, Evaluation(accuracy=0.75, loss=0.5), t)
    assert (tmp_path / "checkpoints" / "sweep-a" / "trial-0001.pt").exists()
    assert store.recorded(1, 40) == 0.75 and store.recorded(1, 80) is None
    store.eliminate([0, 2], 40)
    store.finish(1, 40, 0.75)
    store.set("backward_ratios", {"16x1": 2.0})

    study = optuna.load_study(study_name="sweep-a", storage=url)
    states = [t.state for t in study.trials]
    assert states == [optuna.trial.TrialState.PRUNED, optuna.trial.TrialState.COMPLETE,
                      optuna.trial.TrialState.PRUNED, optuna.trial.TrialState.RUNNING]
    assert study.trials[1].intermediate_values == {40: 0.75}
    details = study.trials[1].user_attrs["rung_40"]
    assert details["charged_units"] == t.charged_units and details["val_loss"] == 0.5
    assert 0 < details["test_acc"] <= 1  # a new best found: its test accuracy is taken while the weights exist

    # Reopening (another process, --resume) sees everything recorded.
    reopened = open_store(url, tmp_path, resume=True)
    assert reopened.recorded(1, 40) == 0.75
    assert reopened.get("backward_ratios") == {"16x1": 2.0}
    loaded = trial(splits, 1)
    loaded.load_state_dict(reopened.checkpoint(1))
    assert loaded.charged_units == t.charged_units
    reopened.eliminate([0], 40)  # idempotent after a crash between the two writes
    assert len(optuna.load_study(study_name="sweep-a", storage=url).trials) == 4

    with pytest.raises(StoreError, match="already holds sweep 'sweep-a'; pass --resume"):
        open_store(url, tmp_path)
    with pytest.raises(StoreError, match=r"other settings \(seed\)"):
        open_store(url, tmp_path, resume=True, settings=SETTINGS | {"seed": 1})


def test_sweep_store_on_sqlite(tmp_path, tiny_splits):
    exercise(f"sqlite:///{tmp_path / 'results.db'}", tmp_path, tiny_splits)


def test_sweep_store_on_postgresql(postgres_url, tmp_path, tiny_splits):
    exercise(postgres_url, tmp_path, tiny_splits)


def test_an_unreachable_store_is_a_one_line_error(tmp_path):
    with pytest.raises(StoreError, match="--storage 'nosuchdb://x': cannot open the results store") as error:
        SweepStore("nosuchdb://x", "s", CONFIGS, tmp_path, SETTINGS, resume=False)
    assert "\n" not in str(error.value)


def test_study_names():
    assert study_name("adult", "arch", "eve", 3) == "adult-arch-eve-seed3"
    assert study_name("adult", "hp", "adam", 0, config_seed=2) == "adult-hp-adam-seed0-configs2"
