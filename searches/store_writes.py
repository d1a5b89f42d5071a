# Run it as a script: python searches/store_writes.py [POSTGRESQL_URL] (figures: searches/README.md, "Store writes").
"""Optuna's public storage calls against the adapter's fast path, on an SQLite store in WAL mode (as a sweep
opens it) or a PostgreSQL URL: wall and CPU milliseconds per operation, median of REPEATS runs."""

import statistics
import sys
import tempfile
import time

import optuna
from optuna.trial import TrialState

from eve_search.engine import _stores
from eve_search.engine.store import write_ahead
from eve_search.integrations._optuna_adapter import RdbFastPath, claim_at_once

optuna.logging.set_verbosity(optuna.logging.WARNING)
REPEATS = 3
N_TRIALS = 240
N_RESULTS = 120


def storage(url):
    store = optuna.storages.RDBStorage(url)
    write_ahead(store, url)
    return store


def fresh(url, name, trials=0):
    store = storage(url)
    study = optuna.create_study(study_name=name, storage=store)
    dist = {"x": optuna.distributions.FloatDistribution(0, 1)}
    new = [optuna.trial.create_trial(state=TrialState.RUNNING, params={"x": k / 1000}, distributions=dist,
                                     user_attrs={"config_index": k}) for k in range(trials)]
    if new:
        _stores.add_trials(store, study, store.get_study_id_from_name(name), new)
    sid = store.get_study_id_from_name(name)
    ids = [store.get_trial_id_from_study_id_trial_number(sid, k) for k in range(trials)]
    return store, study, sid, ids, dist


def timed(fn, count):
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return (time.perf_counter() - wall) * 1e3 / count, (time.process_time() - cpu) * 1e3 / count


def run(url_for):
    rows = {}
    for fast in (False, True):
        _stores.use_fast_path(RdbFastPath() if fast else None)
        path = "fast" if fast else "public"
        samples = {k: [] for k in ("add_trials", "record_result", "claim", "end_trials", "trial_id")}
        for r in range(REPEATS):
            tag = f"{path}{r}{int(time.time() * 1000) % 100000}"
            url = url_for(tag)
            store, study, sid, _, dist = fresh(url, tag + "a")
            new = [optuna.trial.create_trial(state=TrialState.RUNNING, params={"x": k / 1000}, distributions=dist,
                                             user_attrs={"config_index": k, "config": {"x": k / 1000}})
                   for k in range(N_TRIALS)]
            samples["add_trials"].append(timed(lambda: _stores.add_trials(store, study, sid, new), N_TRIALS))
            store, study, sid, ids, _ = fresh(url, tag + "b", N_RESULTS)
            details = {"score": 0.5, "val": {"accuracy": 0.5}, "charged_units": 100.0, "wall_seconds": 0.1,
                       "backward_passes": 10}
            samples["record_result"].append(timed(
                lambda: [_stores.record_results(store, [(i, 100, details)]) for i in ids], len(ids)))
            samples["end_trials"].append(timed(lambda: _end(store, ids), len(ids)))
            frozen = study.get_trials(deepcopy=False)
            samples["trial_id"].append(timed(lambda: [_stores.trial_id_of(store, sid, t) for t in frozen], len(frozen)))
            store, study, sid, ids, _ = fresh(url, tag + "c", N_RESULTS)
            for i in ids:
                store.set_trial_state_values(i, TrialState.WAITING)
            samples["claim"].append(timed(lambda: [_claim(store, i, fast) for i in ids], len(ids)))
        rows[path] = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v))
                      for k, v in samples.items()}
    return rows


def _end(store, ids):
    ends = [(i, TrialState.PRUNED, [0.5]) for i in ids]
    if not _stores.end_running_at_once(store, ends):
        for i, state, values in ends:
            store.set_trial_state_values(i, state, values)


def _claim(store, trial_id, fast):
    if fast:
        assert claim_at_once(store, trial_id, heartbeat=False, attrs={"worker": "host:1"})
    else:
        store.set_trial_state_values(trial_id, TrialState.RUNNING)
        store.set_trial_user_attr(trial_id, "worker", "host:1")


if __name__ == "__main__":
    folder = tempfile.mkdtemp()
    base = sys.argv[1] if len(sys.argv) > 1 else None
    url_for = (lambda tag: f"sqlite:///{folder}/{tag}.db") if base is None else (lambda tag: base)
    rows = run(url_for)
    print(f"optuna {optuna.__version__}; {'sqlite (WAL)' if base is None else 'postgresql'}; ms per operation, "
          f"wall / cpu, median of {REPEATS}")
    for op in rows["public"]:
        (pw, pc), (fw, fc) = rows["public"][op], rows["fast"][op]
        print(f"{op:14s} public {pw:7.2f} / {pc:6.2f}   fast {fw:7.2f} / {fc:6.2f}   x{pw / max(fw, 1e-9):5.1f} wall")
