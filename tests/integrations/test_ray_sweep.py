"""The ``--backend ray`` driver's store recorder, fed Tune's callbacks in the orders Tune can deliver them
(no Ray runtime: the recorder only reads the scheduler's saved state and the results it is handed)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

pytest.importorskip("ray.tune")

from eve_search.engine.ledger import RungLedger  # noqa: E402
from eve_search.engine.sweep import SweepSettings, prepare_sweep  # noqa: E402
from eve_search.integrations._ray import INDEX_KEY, STATE_FILE  # noqa: E402
from eve_search.integrations._ray_sweep import _recorder  # noqa: E402
from tests.integrations import ray_helpers  # noqa: E402,F401  (registers the ray-tiny task)

RUNGS = (100, 300)
SCORES = [0.5, 0.75, 0.625, 0.25, 0.375, 0.125]  # configurations 1 and 2 go on to 300


def fake_trial(index: int, staging) -> SimpleNamespace:
    return SimpleNamespace(trial_id=f"t{index}", config={INDEX_KEY: index},
                           storage=SimpleNamespace(experiment_driver_staging_path=str(staging)), last_result=None)


def result(index: int, budget: int) -> dict:
    val = {"accuracy": SCORES[index], "loss": 1.0 - SCORES[index]}
    return {"budget": budget, "eval_cost": float(budget), "val": val, "test": dict(val), "wall_seconds": 0.01,
            "backward_passes": budget, **val}


def save_ledger(staging, reported: dict[int, list[int]]) -> None:
    """The scheduler's state file with the scores of the trials ``reported[rung]`` at each rung."""
    ledger = RungLedger(RUNGS, 1 / 3, "max")
    for index in range(len(SCORES)):
        ledger.add(f"t{index}")
    for rung, indices in reported.items():
        for index in indices:
            ledger.report(f"t{index}", rung, SCORES[index])
        ledger.decide(rung)
    (staging / STATE_FILE).write_text(json.dumps({"ledger": ledger.state_dict()}))


@pytest.fixture
def recorder(tmp_path):
    settings = SweepSettings(task="ray-tiny", space="tiny", optimizer="eve", seed=0, configs=len(SCORES), rungs=RUNGS,
                             backward_ratio=2.0)
    sweep = prepare_sweep(settings, storage=f"sqlite:///{tmp_path}/ray.db", checkpoint_dir=tmp_path / "ckpt")
    made = _recorder(sweep, RUNGS, None, lambda: None)
    yield made
    made.writer.shutdown(wait=True)


def test_a_rung_decided_before_its_last_result_reaches_the_callback_waits_for_it(recorder, tmp_path):
    # Tune hands trial 2's result at 300 to the scheduler first; the scheduler decides the rung and,
    # stopping the parked trial 1 from inside that call, saves its state; Tune then tells the callbacks
    # that trial 1 completed, and only after that hands them trial 2's result.
    everyone = list(range(len(SCORES)))
    trials = [fake_trial(index, tmp_path) for index in everyone]
    save_ledger(tmp_path, {0: everyone})
    for index in everyone:
        recorder.on_trial_result(0, [], trials[index], result(index, 100))
    save_ledger(tmp_path, {0: everyone, 1: [1]})
    recorder.on_trial_result(0, [], trials[1], result(1, 300))
    save_ledger(tmp_path, {0: everyone, 1: [1, 2]})
    trials[1].last_result = result(1, 300)
    recorder.on_trial_complete(0, [], trials[1])
    assert recorder.flushed == {(0, 0)}  # (cohort, rung): the rung at 300 waits, trial 2's result is on its way
    recorder.on_trial_result(0, [], trials[2], result(2, 300))
    recorder.wait()
    assert recorder.flushed == {(0, 0), (0, 1)}
    assert recorder.trained == len(SCORES) + 2
    details = recorder._store.rung_details()
    assert sorted(details[1]) == sorted(details[2]) == [100, 300]


def test_the_final_flush_records_a_rung_whose_result_was_lost(recorder, tmp_path, caplog):
    # A killed driver's restored run: the scheduler's saved state has a score the new driver never saw.
    everyone = list(range(len(SCORES)))
    trials = [fake_trial(index, tmp_path) for index in everyone]
    save_ledger(tmp_path, {0: everyone})
    for index in everyone[:-1]:
        recorder.on_trial_result(0, [], trials[index], result(index, 100))
    recorder.index["t5"] = 5  # the restored trial, known from Tune's results at the end
    recorder.flush()
    assert recorder.flushed == set()
    recorder.flush(final=True)
    recorder.wait()
    assert recorder.flushed == {(0, 0)}
    assert recorder.trained == len(SCORES) - 1
    assert "the rung 100 result of configuration 5 was lost with the driver" in caplog.text
