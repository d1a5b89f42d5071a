"""Faster writes to Optuna's RDB storage: several of its public calls in one transaction.

Each function here writes exactly the rows that Optuna's public ``BaseStorage`` calls named in its
docstring would write, through the table models of Optuna's private ``optuna.storages._rdb`` module,
in one transaction instead of one per call. Each returns False (or None) before anything is written
where it cannot: a storage that is not an ``RDBStorage`` on SQLite or PostgreSQL, an Optuna release
outside the adapter's tested range, a table layout other than :data:`LAYOUT`, or a trial in another
state than expected. The caller then makes Optuna's public calls, which give the same store.

Why: Optuna's public calls cost a transaction and half a dozen ORM queries each, and a sweep makes
several per trial and rung (a claim, a result, an ending), on the same CPUs that train. What each
path costs is measured by ``tests/integrations/store_writes_timing.py``.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from eve_search.integrations._optuna_adapter._version import TESTED_NOW

__all__ = ["LAYOUT", "RdbFastPath", "add_trials_at_once", "claim_at_once", "end_trials_at_once", "end_waiting_at_once",
           "layout_problems", "record_results_at_once", "requeue_at_once"]

LAYOUT: dict[str, tuple[str, ...]] = {
    "StudyModel": ("study_id",),
    "TrialModel": ("trial_id", "number", "study_id", "state", "datetime_start", "datetime_complete"),
    "TrialParamModel": ("trial_id", "param_name", "param_value", "distribution_json"),
    "TrialUserAttributeModel": ("trial_id", "key", "value_json"),
    "TrialValueModel": ("trial_id", "objective", "value", "value_type"),
    "TrialIntermediateValueModel": ("trial_id", "step", "intermediate_value", "intermediate_value_type"),
    "TrialHeartbeatModel": ("trial_id", "heartbeat"),
}
"""The tables (Optuna's model classes) and columns the functions here write."""

_UNIQUE = {"TrialUserAttributeModel": ("trial_id", "key"), "TrialValueModel": ("trial_id", "objective"),
           "TrialIntermediateValueModel": ("trial_id", "step"), "TrialHeartbeatModel": ("trial_id",)}
_METHODS = {"StudyModel": ("find_or_raise_by_id",), "TrialValueModel": ("value_to_stored_repr",),
            "TrialIntermediateValueModel": ("intermediate_value_to_stored_repr",)}
SCHEMA_VERSION = 12  # optuna.storages._rdb.models.SCHEMA_VERSION of the releases in the tested range


def _unique_sets(table: Any) -> set[tuple[str, ...]]:
    sets = {tuple(sorted(c.name for c in constraint.columns)) for constraint in table.constraints
            if type(constraint).__name__ in ("UniqueConstraint", "PrimaryKeyConstraint")}
    sets |= {tuple(sorted(c.name for c in index.columns)) for index in table.indexes if index.unique}
    return sets


def layout_problems() -> list[str]:
    """What differs in the installed Optuna from the layout the functions here write: missing models,
    columns, unique keys (the upserts' conflict targets), helpers and the schema version; empty when
    they all match.

    Example:
        >>> layout_problems()
        []
    """
    try:
        from optuna.storages._rdb import models
        from optuna.storages._rdb.storage import _create_scoped_session  # noqa: F401 used by every write here
    except ImportError as error:
        return [f"cannot import Optuna's RDB models ({error})"]
    problems = []
    if getattr(models, "SCHEMA_VERSION", None) != SCHEMA_VERSION:
        problems.append(f"SCHEMA_VERSION is {getattr(models, 'SCHEMA_VERSION', None)!r}, expected {SCHEMA_VERSION}")
    for name, columns in LAYOUT.items():
        table = getattr(getattr(models, name, None), "__table__", None)
        if table is None:
            problems.append(f"no model {name}")
            continue
        missing = [c for c in columns if c not in table.c]
        if missing:
            problems.append(f"{name} lacks the columns {', '.join(missing)}")
        if name in _UNIQUE and tuple(sorted(_UNIQUE[name])) not in _unique_sets(table):
            problems.append(f"{name} has no unique key ({', '.join(_UNIQUE[name])})")
        problems += [f"{name} has no {method}" for method in _METHODS.get(name, ()) if
                     not hasattr(getattr(models, name), method)]
    return problems


@functools.lru_cache(maxsize=1)
def _usable() -> bool:
    """The installed Optuna is in the tested range and has the layout written here (checked once)."""
    return TESTED_NOW and not layout_problems()


def add_trials_at_once(storage: Any, study_id: int, trials: list[Any]) -> bool:
    """Add ``trials`` (RUNNING frozen trials with parameters and user attributes, from
    ``optuna.trial.create_trial``) to a study in one transaction; False where this cannot be done, and
    the caller adds them one by one (``study.add_trials``).

    ``study.add_trials`` costs a transaction, and half a dozen queries, per trial. This writes the same
    rows as Optuna's ``RDBStorage`` does, through its own table models, in one flush per table: the
    trials (each numbered as Optuna numbers them, by its place in the study), their parameters (the
    internal value and the distribution's JSON, checked against a distribution the study already holds
    for that name, as Optuna checks it) and their user attributes (JSON). The caller reads the trials
    back through Optuna's public API and checks them.
    """
    models = _rdb_tables(storage)
    if models is None:
        return False
    from optuna import distributions as optuna_distributions
    from optuna.storages._rdb.storage import _create_scoped_session
    from optuna.trial import TrialState
    from sqlalchemy import func

    if not trials or any(t.state != TrialState.RUNNING or t.system_attrs or t.intermediate_values or t.values
                         for t in trials):
        return False
    with _create_scoped_session(storage.scoped_session) as session:
        models.StudyModel.find_or_raise_by_id(study_id, session, for_update=True)
        names = {name: trial.distributions[name] for trial in trials for name in trial.params}
        for name, distribution in names.items():
            held = (session.query(models.TrialParamModel).join(models.TrialModel)
                    .filter(models.TrialModel.study_id == study_id, models.TrialParamModel.param_name == name).first())
            if held is not None:
                optuna_distributions.check_distribution_compatibility(
                    optuna_distributions.json_to_distribution(held.distribution_json), distribution)
        rows = [models.TrialModel(study_id=study_id, number=None, state=TrialState.RUNNING,
                                  datetime_start=trial.datetime_start) for trial in trials]
        session.add_all(rows)
        session.flush()  # the rows get their ids (and, on SQLite, this transaction the write lock)
        first = min(row.trial_id for row in rows)
        before = session.query(func.count(models.TrialModel.trial_id)).filter(
            models.TrialModel.study_id == study_id, models.TrialModel.trial_id < first).scalar()
        for row in sorted(rows, key=lambda r: r.trial_id):
            row.number = before
            before += 1
        session.add_all([
            models.TrialParamModel(trial_id=row.trial_id, param_name=name,
                                   param_value=trial.distributions[name].to_internal_repr(value),
                                   distribution_json=optuna_distributions.distribution_to_json(trial.distributions[name]))
            for row, trial in zip(rows, trials, strict=True) for name, value in trial.params.items()])
        session.add_all([
            models.TrialUserAttributeModel(trial_id=row.trial_id, key=key, value_json=json.dumps(value))
            for row, trial in zip(rows, trials, strict=True) for key, value in trial.user_attrs.items()])
    return True


def record_results_at_once(storage: Any, rows: list[tuple[int, str, Any, int, float]], *,
                           release: bool = False) -> bool:
    """Write rung results in one transaction: for each row ``(trial_id, key, value, step, score)`` the
    trial's user attribute ``key`` (JSON of ``value``) and its intermediate value ``score`` at ``step``,
    both replacing an earlier one, exactly as ``RDBStorage.set_trial_user_attr`` and
    ``set_trial_intermediate_value`` store them (non-finite scores by their type, as Optuna does). With
    ``release``, the trials also go back to WAITING in the same transaction (as
    ``set_trial_state_values(trial_id, WAITING)`` would, one transaction later).

    Those two calls cost two transactions, and half a dozen ORM queries, per result; this is two
    statements per batch. False, before anything is written, where :func:`claim_at_once` returns None
    or a trial has ended; the caller then makes Optuna's calls (which raise Optuna's own errors).
    """
    models = _rdb_tables(storage)
    if not rows or models is None:
        return False
    from optuna.storages._rdb.storage import _create_scoped_session
    from optuna.trial import TrialState

    values = models.TrialIntermediateValueModel
    sql = _statements(storage.engine.name)
    ids = sorted({row[0] for row in rows})
    with _create_scoped_session(storage.scoped_session, True) as session:
        states = dict(session.execute(sql["states"], {"p_ids": ids}).all())
        if len(states) != len(ids) or any(state != TrialState.RUNNING for state in states.values()):
            return False
        latest = {(trial_id, key): (value, step, score) for trial_id, key, value, step, score in rows}
        session.execute(sql["attr"], [{"p_trial_id": trial_id, "p_key": key, "p_value_json": json.dumps(value)}
                                      for (trial_id, key), (value, _, _) in latest.items()])
        scores = {(trial_id, step): score for (trial_id, _), (_, step, score) in latest.items()}
        stored = {key: values.intermediate_value_to_stored_repr(score) for key, score in scores.items()}
        session.execute(sql["intermediate"], [{"p_trial_id": trial_id, "p_step": step, "p_intermediate_value": value,
                                               "p_intermediate_value_type": kind}
                                              for (trial_id, step), (value, kind) in stored.items()])
        if release:
            session.execute(sql["requeue"], {"p_ids": ids, "p_from": TrialState.RUNNING, "p_to": TrialState.WAITING})
    return True


def end_trials_at_once(storage: Any, ends: list[tuple[int, Any, list[float] | None]]) -> bool:
    """End several RUNNING trials in one transaction: for each ``(trial_id, state, values)`` the state,
    the completion time and the values, as ``RDBStorage.set_trial_state_values`` stores them (one
    transaction, and a few ORM queries, per trial). False, before anything is written, where
    :func:`claim_at_once` returns None, or when a trial is not RUNNING; the caller then ends them one by
    one through Optuna.
    """
    models = _rdb_tables(storage)
    if not ends or models is None or len({trial_id for trial_id, _, _ in ends}) != len(ends):
        return False
    from optuna.storages._rdb.storage import _create_scoped_session
    from optuna.trial import TrialState

    sql = _statements(storage.engine.name)
    now = _stored_now(models)
    ends = sorted(ends, key=lambda end: end[0])  # rows in one order in every process (see end_waiting_at_once)
    with _create_scoped_session(storage.scoped_session, True) as session:
        states = dict(session.execute(sql["states"], {"p_ids": [trial_id for trial_id, _, _ in ends]}).all())
        if len(states) != len(ends) or any(state != TrialState.RUNNING for state in states.values()):
            return False
        session.execute(sql["end"], [{"p_id": trial_id, "p_from": TrialState.RUNNING, "p_to": state, "p_complete": now}
                                     for trial_id, state, _ in ends])
        rows = [{"p_trial_id": trial_id, "p_objective": objective, "p_value": stored, "p_value_type": kind}
                for trial_id, _, values in ends for objective, value in enumerate(values or [])
                for stored, kind in [models.TrialValueModel.value_to_stored_repr(value)]]
        if rows:
            session.execute(sql["value"], rows)
    return True


@functools.lru_cache(maxsize=None)
def _statements(dialect: str) -> dict[str, Any]:
    """The statements the functions of this module run on Optuna's tables, built once per dialect
    (``"sqlite"`` or ``"postgresql"``) with bound parameters (named ``p_<column>``), so that SQLAlchemy
    compiles each once: built for every call, with the values in them, building and compiling them
    cost several times the database's own work."""
    from optuna.storages._rdb import models
    from sqlalchemy import bindparam, func, select, update
    from sqlalchemy.dialects import postgresql, sqlite

    insert = (sqlite if dialect == "sqlite" else postgresql).insert
    trials = models.TrialModel.__table__

    def upsert(model: Any, keys: tuple[str, ...], columns: tuple[str, ...]) -> Any:
        table = model.__table__
        statement = insert(table).values({name: bindparam(f"p_{name}") for name in (*keys, *columns)})
        return statement.on_conflict_do_update(index_elements=[table.c[name] for name in keys],
                                               set_={name: statement.excluded[name] for name in columns})

    def move(**values: Any) -> Any:  # one trial from state p_from to p_to, with the given columns
        return update(trials).where(trials.c.trial_id == bindparam("p_id"), trials.c.state == bindparam("p_from")) \
            .values(state=bindparam("p_to"), **values)

    return {
        "states": select(trials.c.trial_id, trials.c.state).where(trials.c.trial_id.in_(bindparam("p_ids", expanding=True))),
        "take": move(datetime_start=bindparam("p_start")),
        "end": move(datetime_complete=bindparam("p_complete")),
        "requeue": update(trials).where(trials.c.trial_id.in_(bindparam("p_ids", expanding=True)),
                                        trials.c.state == bindparam("p_from")).values(state=bindparam("p_to")),
        "now": select(func.now()),
        "beat": upsert(models.TrialHeartbeatModel, ("trial_id",), ("heartbeat",)),
        "attr": upsert(models.TrialUserAttributeModel, ("trial_id", "key"), ("value_json",)),
        "intermediate": upsert(models.TrialIntermediateValueModel, ("trial_id", "step"),
                               ("intermediate_value", "intermediate_value_type")),
        "value": upsert(models.TrialValueModel, ("trial_id", "objective"), ("value", "value_type")),
    }


def _stored_now(models: Any) -> Any:
    """The time now as Optuna's trial table stores it: naive UTC where its model converts the times it
    gives (Optuna 4.x and later), else naive local time (as ``datetime.now()`` was stored before)."""
    import datetime

    now = datetime.datetime.now(datetime.timezone.utc)
    return (now if hasattr(models.TrialModel, "_datetime_start_utc") else now.astimezone()).replace(tzinfo=None)


def _rdb_tables(storage: Any) -> Any:
    """Optuna's private table models, for an ``RDBStorage`` on SQLite or PostgreSQL when the installed
    Optuna is in the tested range and has :data:`LAYOUT`; else None."""
    if not _usable():
        return None
    from optuna.storages import RDBStorage
    from optuna.storages._rdb import models

    if not isinstance(storage, RDBStorage) or storage.engine.name not in ("sqlite", "postgresql"):
        return None
    return models


def claim_at_once(storage: Any, trial_id: int, *, heartbeat: bool, attrs: dict[str, Any] | None = None) -> bool | None:
    """Take a WAITING trial in one transaction: RUNNING with its start time (the atomic transition
    ``set_trial_state_values(trial_id, RUNNING)`` makes), with ``heartbeat`` a heartbeat recorded at the
    same moment (``record_heartbeat``: the trial is never stale when it starts running), and the user
    attributes ``attrs`` (``set_trial_user_attr``), each stored as Optuna stores it.

    Optuna's three calls cost three transactions; a sweep makes one claim per trial and rung. True when
    this call took the trial, False when it was not WAITING (another worker took it, or it has ended),
    None, before anything is written, where the storage is not an ``RDBStorage`` on SQLite or PostgreSQL
    with the layout expected: the caller then makes Optuna's calls.
    """
    models = _rdb_tables(storage)
    if models is None:
        return None
    from optuna.storages._rdb.storage import _create_scoped_session
    from optuna.trial import TrialState

    sql = _statements(storage.engine.name)
    with _create_scoped_session(storage.scoped_session) as session:
        taken = session.execute(sql["take"], {"p_id": trial_id, "p_from": TrialState.WAITING,
                                              "p_to": TrialState.RUNNING, "p_start": _stored_now(models)})
        if taken.rowcount != 1:
            return False
        if heartbeat:
            now = session.execute(sql["now"]).scalar()  # the database's clock, as record_heartbeat reads it
            session.execute(sql["beat"], {"p_trial_id": trial_id, "p_heartbeat": now})
        if attrs:
            session.execute(sql["attr"], [{"p_trial_id": trial_id, "p_key": key, "p_value_json": json.dumps(value)}
                                          for key, value in attrs.items()])
    return True


def end_waiting_at_once(storage: Any, ends: list[tuple[int, Any, list[float] | None]]) -> set[int] | None:
    """End WAITING trials in one transaction: for each ``(trial_id, state, values)`` whose trial is still
    WAITING, its final state, completion time and values, as ``RDBStorage.set_trial_state_values`` stores
    them; the WAITING condition is checked by each update, so of several workers ending the same trial
    one does (in the order of their ids, in every worker). Returns the ids this call ended; None, before
    anything is written, where :func:`claim_at_once` would be: the caller then claims and ends them one by
    one through Optuna.
    """
    models = _rdb_tables(storage)
    if models is None or len({trial_id for trial_id, _, _ in ends}) != len(ends):
        return None
    from optuna.storages._rdb.storage import _create_scoped_session
    from optuna.trial import TrialState

    if not ends:
        return set()
    sql = _statements(storage.engine.name)
    now = _stored_now(models)
    ended: set[int] = set()
    rows = []
    with _create_scoped_session(storage.scoped_session) as session:
        # Rows in one order in every worker: two workers ending the same rung's trials at once on
        # PostgreSQL would otherwise each hold a row the other waits for (a deadlock, measured).
        for trial_id, state, values in sorted(ends, key=lambda end: end[0]):
            done = session.execute(sql["end"], {"p_id": trial_id, "p_from": TrialState.WAITING, "p_to": state,
                                                "p_complete": now})
            if done.rowcount == 1:
                ended.add(trial_id)
                rows += [{"p_trial_id": trial_id, "p_objective": objective, "p_value": stored, "p_value_type": kind}
                         for objective, value in enumerate(values or [])
                         for stored, kind in [models.TrialValueModel.value_to_stored_repr(value)]]
        if rows:
            session.execute(sql["value"], rows)
    return ended


def requeue_at_once(storage: Any, trial_ids: list[int]) -> bool:
    """Put RUNNING trials back in the queue (WAITING) in one transaction, as
    ``set_trial_state_values(trial_id, WAITING)`` would one transaction each (a trial no longer RUNNING is
    left as it is). False, before anything is written, where :func:`claim_at_once` returns None: the
    caller then makes Optuna's calls."""
    models = _rdb_tables(storage)
    if models is None:
        return False
    from optuna.storages._rdb.storage import _create_scoped_session
    from optuna.trial import TrialState

    if trial_ids:
        with _create_scoped_session(storage.scoped_session) as session:
            session.execute(_statements(storage.engine.name)["requeue"],
                            {"p_ids": sorted(set(trial_ids)), "p_from": TrialState.RUNNING, "p_to": TrialState.WAITING})
    return True

class RdbFastPath:
    """The engine's :class:`~eve_search.engine._stores.FastPath` on Optuna's RDB storage: each method is one
    of the functions above, or reads the storage id a frozen trial read from the storage carries."""

    def add_trials(self, storage: Any, study_id: int, trials: list[Any]) -> bool:
        return add_trials_at_once(storage, study_id, trials)

    def record_results(self, storage: Any, rows: list[tuple[int, str, Any, int, float]], *, release: bool) -> bool:
        return record_results_at_once(storage, rows, release=release)

    def end_running(self, storage: Any, ends: list[tuple[int, Any, list[float] | None]]) -> bool:
        return end_trials_at_once(storage, ends)

    def trial_id(self, frozen: Any) -> int | None:
        """The id a frozen trial read from a storage carries (Optuna's private ``_trial_id``), or None."""
        known = getattr(frozen, "_trial_id", None) if TESTED_NOW else None
        return known if isinstance(known, int) and not isinstance(known, bool) else None
