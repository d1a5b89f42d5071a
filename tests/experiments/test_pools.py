"""A recorded pool replayed through the simulator decides exactly as the real engine does on the same
configurations, and a pool file survives a round trip and refuses tampering in one line."""

import gzip
import json

import pytest

from eve_search.engine.pool import PoolError, load_pool, save_pool
from eve_search.engine.sha import SynchronousSuccessiveHalving
from eve_search.engine.simulator import simulate_pool
from eve_search.experiments.audit import prepare_audit
from eve_search.experiments.pools import pool_from_audit, record_pool

RUNGS = (20, 60, 120)


class Store:
    """A RungStore in memory (checkpoints in a folder)."""

    def __init__(self, folder):
        self.folder, self.details = folder, {}

    def rung_details(self):
        return self.details

    def checkpoint_path(self, index):
        return self.folder / f"{index}.pt"

    def record(self, index, budget, details, checkpoint):
        self.checkpoint_path(index).write_bytes(checkpoint)
        self.details.setdefault(index, {})[budget] = details

    def eliminate(self, indices):
        pass

    def complete(self, index, score):
        pass


@pytest.fixture(scope="module")
def tiny_pool(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pool")
    pool = record_pool("tiny", "tiny", ["adam", "eve"], configs=6, budgets=RUNGS, storage=f"sqlite:///{folder}/runs.db",
                       checkpoint_dir=folder / "checkpoints")
    return pool, folder


@pytest.mark.parametrize("trainer", ["adam", "eve"])
@pytest.mark.parametrize("cohort_size", [None, 3])
def test_a_replayed_pool_decides_as_the_real_engine_on_the_same_configurations(tiny_pool, tmp_path, trainer,
                                                                               cohort_size):
    pool, folder = tiny_pool
    prepared = prepare_audit("tiny", "tiny", [trainer], [0], storage=f"sqlite:///{folder}/runs.db",
                             checkpoint_dir=folder / "checkpoints", budgets=RUNGS, configs=6, backward_ratio=2.0)
    sweep = prepared[(trainer, 0)]
    engine = SynchronousSuccessiveHalving(6, sweep.make_trial, Store(tmp_path), rungs=RUNGS, cohort_size=cohort_size)
    real = sorted((r.cohort, r.budget, tuple(r.promoted), tuple(sorted(r.scores.items()))) for r in engine.run())
    for workers in (1, 3, 16):
        simulated = simulate_pool(pool, trainer, workers=workers, configs=6, cohort_size=cohort_size, jitter=0.3,
                                  jitter_seed=workers)
        ledger_scores = {(c, d.rung): d for c, d in simulated.decisions}
        assert sorted((c, RUNGS[d.rung], tuple(d.promoted)) for c, d in simulated.decisions) == \
            [(c, budget, promoted) for c, budget, promoted, _ in real]
        assert len(ledger_scores) == len(real)
        for c, budget, _, scores in real:  # the recorded scores are the engine's, bit for bit
            assert all(pool.score(trainer, index, RUNGS.index(budget)) == score for index, score in scores)
        assert simulated.winner == engine.winner()


def test_a_pool_round_trips_and_a_recording_in_progress_exports_its_finished_prefix(tiny_pool, tmp_path):
    pool, _ = tiny_pool
    path = tmp_path / "pool.json.gz"
    save_pool(pool, path)
    assert load_pool(path).as_dict() == pool.as_dict()
    prepared = prepare_audit("tiny", "tiny", ["adam", "eve"], [0], storage=f"sqlite:///{tmp_path}/runs.db",
                             checkpoint_dir=tmp_path / "checkpoints", budgets=RUNGS, configs=4, backward_ratio=2.0)
    assert pool_from_audit(prepared, "adam").size == 0  # nothing trained yet
    sweep = prepared[("adam", 0)]
    sweep.calibrate()
    trial = sweep.make_trial(0)
    for budget in RUNGS:  # one trainer's first configuration, recorded as the audit records it
        trial.train_to(budget)
        sweep.store.record(0, budget, {"score": trial.score(trial.evaluate()), "val": trial.evaluate(),
                                       "charged_units": trial.charged_units, "wall_seconds": trial.wall_seconds,
                                       "backward_passes": 0}, None)
    assert pool_from_audit(prepared, "adam").size == 0  # eve has not recorded it: not in the pool yet


@pytest.mark.parametrize("tamper", [
    lambda d: d.update(format="other"),
    lambda d: d.update(version=2),
    lambda d: d.pop("configs"),
    lambda d: d["trainers"]["adam"].update(score="x"),
    lambda d: d["trainers"]["adam"]["seconds"][0].__setitem__(0, -1.0),
    lambda d: d["trainers"]["adam"]["seconds"][0].__setitem__(1, float("nan")),
    lambda d: d["trainers"]["adam"]["score"].pop(),
    lambda d: d["trainers"]["adam"]["test"][0].append(0.5),
    lambda d: d.update(referee="sgd"),
    lambda d: d.update(budgets=[3, 1]),
    lambda d: d.update(mode="up"),
    lambda d: d["trainers"]["adam"]["score"][0].__setitem__(0, True),
])
def test_a_tampered_pool_is_refused_in_one_line(tiny_pool, tmp_path, tamper):
    pool, _ = tiny_pool
    document = json.loads(json.dumps(pool.as_dict()))
    tamper(document)
    path = tmp_path / "pool.json"
    path.write_text(json.dumps(document))
    with pytest.raises(PoolError) as caught:
        load_pool(path)
    assert len(str(caught.value).splitlines()) == 1 and str(path) in str(caught.value)


@pytest.mark.parametrize("content", [b"", b"\x1f\x8b broken", b"[" * 100_000, b"{not json", gzip.compress(b"[]", mtime=0)],
                         ids=["empty", "broken-gzip", "deep", "not-json", "gzip-list"])
def test_an_unreadable_pool_is_refused_in_one_line(tmp_path, content):
    path = tmp_path / "pool.json.gz"
    path.write_bytes(content)
    with pytest.raises(PoolError) as caught:
        load_pool(path)
    assert len(str(caught.value).splitlines()) == 1
    with pytest.raises(PoolError, match="No such file"):
        load_pool(tmp_path / "missing.json")


def test_profiled_seconds_keep_the_scores_and_give_each_model_shape_one_profile(tiny_pool):
    from eve_search.experiments.pools import profile_seconds
    from eve_search.tasks import get_task

    pool, _ = tiny_pool
    profiled = profile_seconds(pool, repeats=1)
    task = get_task("tiny")
    for name, record in profiled.trainers.items():
        assert record.score == pool.trainers[name].score and record.test == pool.trainers[name].test
        by_shape = {}
        for config, seconds in zip(profiled.configs, record.seconds, strict=True):
            assert seconds == sorted(seconds) and seconds[0] > 0
            assert by_shape.setdefault(task.cost_key(config), seconds) == seconds
    assert "profiled per model shape" in profiled.recorded["seconds"]


def test_two_recordings_from_both_ends_join_into_the_pool_one_recording_makes(tiny_pool, tmp_path):
    from eve_search.experiments.audit import run_audit

    pool, _ = tiny_pool  # six configurations, recorded in one store
    halves = []
    for name, order in (("forward", range(3)), ("backward", reversed(range(3, 6)))):
        prepared = prepare_audit("tiny", "tiny", ["adam", "eve"], [0], storage=f"sqlite:///{tmp_path}/{name}.db",
                                 checkpoint_dir=tmp_path / name, budgets=RUNGS, configs=6, backward_ratio=2.0)
        run_audit(prepared, order=order)
        halves.append(prepared)
    forward, backward = halves
    assert pool_from_audit(forward, "adam").size == 3  # the prefix it holds alone
    joined = pool_from_audit(forward, "adam", also=[backward]).as_dict()
    assert {k: v for k, v in joined.items() if k != "recorded"} == {k: v for k, v in pool.as_dict().items()
                                                                     if k != "recorded"} | {"trainers": joined["trainers"]}
    for trainer in ("adam", "eve"):
        assert joined["trainers"][trainer]["score"] == pool.as_dict()["trainers"][trainer]["score"]
        assert joined["trainers"][trainer]["test"] == pool.as_dict()["trainers"][trainer]["test"]
    other = prepare_audit("tiny", "tiny", ["adam", "eve"], [0], storage=f"sqlite:///{tmp_path}/other.db",
                          checkpoint_dir=tmp_path / "other", budgets=RUNGS, configs=5, backward_ratio=2.0)
    with pytest.raises(ValueError, match="not the same audit"):
        pool_from_audit(forward, "adam", also=[other])


@pytest.fixture(scope="module")
def fashion_pool(tmp_path_factory):
    """Five configurations of the Fashion-MNIST hp space (dropout included) at a tiny budget."""
    pytest.importorskip("eve_search.tasks.mnist")
    from eve_search.data import FASHION_MNIST_DIR

    if not FASHION_MNIST_DIR.exists():
        pytest.skip("the Debian package dataset-fashion-mnist is not installed")
    folder = tmp_path_factory.mktemp("fashion-pool")
    pool = record_pool("fashion-mnist", "fashion-hp", ["adam", "eve"], configs=5, budgets=(12, 36), backward_ratio=2.0,
                       storage=f"sqlite:///{folder}/runs.db", checkpoint_dir=folder / "checkpoints")
    return pool, folder


@pytest.mark.parametrize("trainer", ["adam", "eve"])
def test_a_replayed_fashion_mnist_pool_decides_as_the_real_engine_with_dropout_resumed(fashion_pool, tmp_path,
                                                                                       trainer):
    pool, folder = fashion_pool
    assert all("dropout" in config for config in pool.configs)
    prepared = prepare_audit("fashion-mnist", "fashion-hp", [trainer], [0], storage=f"sqlite:///{folder}/runs.db",
                             checkpoint_dir=folder / "checkpoints", budgets=(12, 36), configs=5, backward_ratio=2.0)
    engine = SynchronousSuccessiveHalving(5, prepared[(trainer, 0)].make_trial, Store(tmp_path), rungs=(12, 36))
    real = [(r.budget, tuple(r.promoted), dict(r.scores)) for r in engine.run()]
    simulated = simulate_pool(pool, trainer, workers=2, configs=5)
    assert [((12, 36)[d.rung], tuple(d.promoted)) for _, d in simulated.decisions] == [r[:2] for r in real]
    for budget, _, scores in real:  # a promoted trial resumed from its checkpoint scores as the one trajectory did
        assert all(pool.score(trainer, index, (12, 36).index(budget)) == score for index, score in scores.items())
    assert simulated.winner == engine.winner()


def test_a_pools_audit_is_the_audit_of_the_store_it_came_from(tiny_pool):
    from eve_search.experiments.audit import audit_report
    from eve_search.analysis.audit import audit_pool

    pool, folder = tiny_pool
    prepared = prepare_audit("tiny", "tiny", ["adam", "eve"], [0], storage=f"sqlite:///{folder}/runs.db",
                             checkpoint_dir=folder / "checkpoints", budgets=RUNGS, configs=6, backward_ratio=2.0)
    stored = audit_report(prepared, ["eve", "adam"], "adam", resamples=200)
    replayed = audit_pool(pool, ["eve", "adam"], resamples=200)

    def measures(report):  # everything but the charged units, which a pool does not record
        return {proxy: {budget: {k: v for k, v in row.items() if k != "charged_units"}
                        for budget, row in entry["budgets"].items()} for proxy, entry in report["proxies"].items()}

    assert measures(replayed) == measures(stored)
    assert replayed["truth_runs"]["0"]["best_index"] == stored["truth_runs"]["0"]["best_index"]
    assert replayed["truth_runs"]["0"]["best_config"] == stored["truth_runs"]["0"]["best_config"]
    assert {p: e["verdict"]["keeps_best"] for p, e in replayed["proxies"].items()} == \
           {p: e["verdict"]["keeps_best"] for p, e in stored["proxies"].items()}


def test_a_pool_audit_of_a_trainer_the_pool_lacks_is_one_line(tiny_pool):
    from eve_search import InputError
    from eve_search.analysis.audit import audit_pool

    with pytest.raises(InputError, match=r"^Invalid proxies: 'sgd' \(expected a trainer the pool recorded: adam, eve\)$"):
        audit_pool(tiny_pool[0], ["sgd"])
