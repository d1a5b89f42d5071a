import pytest

from eve_search.engine.store import StoreError
from eve_search.engine.sweep import SweepSettings, prepare_sweep
from eve_search.engine.trial import Trial


def settings(**kwargs):
    return SweepSettings(**({"task": "tiny", "space": "tiny", "optimizer": "eve", "configs": 6, "rungs": (30, 60),
                             "backward_ratio": 2.0} | kwargs))


def test_a_prepared_sweep_runs_and_summarizes(tmp_path):
    sweep = prepare_sweep(settings(), storage=f"sqlite:///{tmp_path / 'r.db'}", checkpoint_dir=tmp_path)
    phases = []
    result = sweep.run(lambda phase, rung, done, total, best: phases.append((phase, rung, done, total)))
    assert phases[0] == ("calibrating", 0, 0, 0)
    assert [p[1:] for p in phases[1:]] == [(0, k, 6) for k in range(1, 7)] + [(1, k, 2) for k in range(1, 3)]
    assert result.task == "tiny" and result.metric == "accuracy" and result.trained == 8
    assert [r["trials"] for r in result.rungs] == [6, 2]
    assert result.winner["index"] in [t["index"] for t in result.trials if "60" in t["scores"]]
    assert set(result.backward_ratios.values()) == {2.0}
    assert sweep.store.get("winner")["index"] == result.winner["index"]


def test_test_metrics_are_taken_only_for_strict_improvements(tmp_path):
    sweep = prepare_sweep(settings(), storage=f"sqlite:///{tmp_path / 'r.db'}", checkpoint_dir=tmp_path)
    sweep.run()
    details = sweep.store.rung_details()
    tested = sorted(((budget, index), d["score"]) for index, rungs in details.items() for budget, d in rungs.items()
                    if "test" in d)
    scores_in_order = [d["score"] for _, rungs in sorted(details.items()) for _, d in sorted(rungs.items())]
    assert tested and len(tested) <= len(scores_in_order)
    best = max(scores_in_order)
    assert max(score for _, score in tested) == best


def test_everything_that_can_fail_fails_before_training(tmp_path, monkeypatch):
    def must_not_train(self, budget):
        raise AssertionError("trained")

    monkeypatch.setattr(Trial, "train_to", must_not_train)
    with pytest.raises(StoreError, match="cannot open the results store"):
        prepare_sweep(settings(), storage="nosuchdb://x", checkpoint_dir=tmp_path)
    url = f"sqlite:///{tmp_path / 'r.db'}"
    prepare_sweep(settings(), storage=url, checkpoint_dir=tmp_path)
    with pytest.raises(StoreError, match=r"other settings \(rungs\)"):
        prepare_sweep(settings(rungs=(30, 90)), storage=url, checkpoint_dir=tmp_path, resume=True)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"rungs": (30.5, 60)}, "Invalid rungs: 30.5, 60"),
    ({"fraction": 0}, "Invalid fraction: 0"),
    ({"optimizer": "adamq"}, "Invalid optimizer: 'adamq'"),
    ({"space": "zzz"}, "Unknown space: 'zzz'"),
    ({"seed": -2}, "Invalid seed: -2"),
    ({"configs": 0}, "Invalid configs: 0"),
    ({"cost_mode": "measured"}, "only the calibrated cost mode takes a frozen ratio"),
    ({"backward_ratio": float("nan")}, "Invalid backward_ratio: nan"),
])
def test_settings_are_checked(kwargs, message):
    with pytest.raises(ValueError, match=message):
        settings(**kwargs)
