"""Opening and closing results stores so that nothing is lost and no credential is shown.

A results store is an SQLAlchemy URL. An SQLite store is one file (``results.db``) while no process
has it open; while one does, SQLite's write-ahead log keeps the newest commits in ``results.db-wal``
(with its index ``results.db-shm``) until a checkpoint copies them into the file. This module:

* tracks every SQLite engine the process opens (through SQLAlchemy's public ``engine_connect``
  event, so engines Optuna creates internally count too) and, in :func:`close_stores`, checkpoints
  the log into the main file (``PRAGMA wal_checkpoint(TRUNCATE)``), puts a store no other
  connection has open back in rollback-journal mode, and closes the engines' pooled connections.
  The command line calls it when a command ends (success, error or Ctrl-C); an ``atexit`` hook calls
  it for library users. A copy of ``results.db`` alone then holds everything.
* creates the schema of a new store under a lock (an advisory ``flock`` on the SQLite file's folder,
  which creates no file) and retries a creation that lost a race with another process (any
  backend), so two sweeps started at once on a new store both work.
* masks passwords: :func:`safe_url` for every URL shown, :func:`redact` for any text that may hold
  one (the command line passes every error line through it).
* says in one line why a store cannot be used: in memory (:func:`in_memory`), read-only or missing
  folder (:func:`storage_problem`), or a failed write (:func:`describe_failure`).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import random
import re
import threading
import time
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["close_stores", "create_storage", "describe_failure", "in_memory", "redact", "safe_url", "sqlite_file",
           "storage_problem", "track_stores"]

_lock = threading.Lock()
_engines: weakref.WeakSet[Any] = weakref.WeakSet()
_tracking = False
_secrets: set[str] = set()
# userinfo of a URL (scheme://user:password@...), up to its last "@": more is masked rather than less
_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*://[^:/@]*):(.*)@")
# A query parameter named for a credential in some SQLAlchemy dialect or DBAPI driver (libpq's password
# and sslpassword, PyMySQL's passwd, pyodbc's PWD, tokens and private keys of cloud warehouses), or
# whose value holds one (an ODBC connection string).
_SECRET_KEY = re.compile(r"pass|pwd|secret|token|key|auth|credential", re.IGNORECASE)
_SECRET_VALUE = re.compile(r"(?:^|[;&?])\s*(?:pwd|password|passwd)\s*=", re.IGNORECASE)
# A URL inside a message (a repr's quotes, brackets and spaces end it), and what may follow one there.
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>`]+")
_TRAILING = ").,;:]}"
_SCHEMA_ATTEMPTS = 6
_LOCK_SECONDS = 60.0


# Credentials -------------------------------------------------------------------------------------


def _remember(secret: str | None) -> None:
    if secret:
        with _lock:
            _secrets.add(secret)


def _credential(key: str, value: str) -> bool:
    """Whether the query parameter ``key=value`` of a URL carries a credential."""
    return bool(_SECRET_KEY.search(key) or _SECRET_VALUE.search(value))


def safe_url(url: str) -> str:
    """``url`` as it may be shown: every credential an SQLAlchemy URL can carry replaced by ``***``, and
    remembered for :func:`redact`. The one place URLs are masked: every message, ``--json`` document,
    table and dashboard page that shows a store's URL goes through it.

    Masked: the password of the userinfo (``user:PASSWORD@host``, up to its last ``@``), and the value
    of every query parameter that names a credential in some dialect or driver (``password``,
    ``passwd``, ``pwd``, ``sslpassword``, ``secret``, ``token``, ``*key*``, ``auth*``, ``credential*``,
    e.g. ``?password=...`` which libpq reads) or that holds one (an ``odbc_connect`` string with
    ``PWD=``). Everything else keeps the user's own spelling. Text that is not a URL SQLAlchemy parses
    is masked the same way.

    Args:
        url: a store's URL (or any text that may be one).

    Returns:
        The URL with every credential replaced by ``***``.

    Example:

    >>> safe_url("postgresql+psycopg2://ann:s3cret@db.example/runs")
    'postgresql+psycopg2://ann:***@db.example/runs'
    >>> safe_url("postgresql+psycopg2://bob@db.example/runs?sslmode=require&password=s3cret")
    'postgresql+psycopg2://bob@db.example/runs?sslmode=require&password=***'
    >>> safe_url("mssql+pyodbc:///?odbc_connect=DRIVER%3D%7BODBC%7D%3BUID%3Dbob%3BPWD%3Ds3cret")
    'mssql+pyodbc:///?odbc_connect=***'
    >>> safe_url("sqlite:///runs/results.db")
    'sqlite:///runs/results.db'
    """
    from urllib.parse import unquote_plus

    url = str(url)
    match = _USERINFO.match(url)
    if match is not None:
        _remember(match.group(2))
        _remember(unquote_plus(match.group(2)))
        url = f"{match.group(1)}:***@{url[match.end():]}"
    head, mark, query = url.partition("?")
    if not mark:
        return url
    parts = re.split(r"([&;])", query)  # the separators kept, at the odd positions
    for position in range(0, len(parts), 2):
        key, equals, value = parts[position].partition("=")
        if equals and value and _credential(unquote_plus(key), unquote_plus(value)):
            _remember(value)
            _remember(unquote_plus(value))
            parts[position] = f"{key}=***"
    return head + mark + "".join(parts)


def redact(text: str) -> str:
    """``text`` with every URL in it masked by :func:`safe_url`, and every secret :func:`safe_url` has seen
    masked wherever it appears (one of six characters or more; a shorter one only inside a URL)."""
    from urllib.parse import quote

    def masked(match: re.Match[str]) -> str:
        word = match.group(0)
        kept = word.rstrip(_TRAILING)
        return safe_url(kept) + word[len(kept):]

    text = _URL_IN_TEXT.sub(masked, str(text))
    with _lock:
        secrets = sorted(_secrets, key=len, reverse=True)
    for secret in secrets:
        for form in {secret, quote(secret, safe=""), quote(secret)}:
            text = text.replace(f":{form}@", ":***@")
            if len(form) >= 6:  # a short one would mask ordinary words; in a URL it is masked above
                text = text.replace(form, "***")
    return text


# What a URL names ----------------------------------------------------------------------------------


def _parse(url: str) -> Any | None:
    try:
        from sqlalchemy.engine import make_url

        return make_url(url)
    except Exception:  # noqa: BLE001 an invalid URL: the store's opening reports it
        return None


def in_memory(url: str) -> bool:
    """Whether ``url`` is an SQLite database in memory (``sqlite://``, ``sqlite:///:memory:``): gone
    when its connection closes, invisible to any other process or later command."""
    parsed = _parse(url)
    if parsed is None or not parsed.drivername.startswith("sqlite"):
        return False
    database = parsed.database or ""
    return (database in ("", ":memory:") or database.startswith("file::memory:")
            or "mode=memory" in database or parsed.query.get("mode") == "memory")


def sqlite_file(url: str) -> Path | None:
    """The file of an SQLite store (relative to the current directory as SQLite reads it), or None for
    another database or one in memory."""
    parsed = _parse(url)
    if parsed is None or not parsed.drivername.startswith("sqlite") or in_memory(url):
        return None
    database = parsed.database
    if database.startswith("file:"):  # an SQLite URI filename (uri=true): file:PATH?options
        database = database[len("file:"):].split("?")[0]
    return Path(database)


def storage_problem(url: str, name: str | None = None) -> str | None:
    """Why a sweep cannot write to the SQLite store ``url``, as a phrase that names the store (``name``,
    default the URL, password masked), or None.

    Checked before any work: the store is in memory, the file is a directory, its folder is missing,
    or the file, its log or its folder is read-only for this user (SQLite writes ``-wal``/``-shm``/
    ``-journal`` files beside the store while it is open). Other databases are checked when opened.
    """
    name = name or repr(safe_url(url))
    if in_memory(url):
        return (f"{name} is an SQLite database in memory, which no worker, later --resume or dashboard can open "
                "(expected a file, e.g. sqlite:///runs/results.db, or a database server)")
    path = sqlite_file(url)
    if path is None:
        return None
    folder = path.parent
    if path.is_dir():
        return f"cannot open the results store {name}: {str(path)!r} is a directory (expected an SQLite file)"
    if not folder.is_dir():
        return f"cannot open the results store {name}: its folder {str(folder)!r} does not exist (create it first)"
    if path.exists():
        for candidate in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            if candidate.exists() and not os.access(candidate, os.R_OK | os.W_OK):
                return (f"{name} is read-only: {str(candidate)!r} cannot be written (a sweep records its results "
                        "there; make it writable, or copy the store somewhere writable and pass the copy)")
    if not os.access(folder, os.W_OK | os.X_OK):
        return (f"{name} is in the read-only folder {str(folder)!r} (SQLite writes the store and its -wal and -shm "
                "files there; make it writable, or copy the store somewhere writable and pass the copy)")
    return None


def _chain(error: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def describe_failure(error: BaseException, *, opening: bool = False) -> str | None:
    """One line for an error raised by a store's database (SQLAlchemy or Optuna's storage), or None for
    an error of another kind. A read-only or full store is named as such; ``opening``: the error came
    from opening the store."""
    chain = list(_chain(error))
    if not any(type(e).__module__.split(".")[0] in ("sqlalchemy", "sqlite3", "psycopg2", "psycopg")
               or type(e).__name__ == "StorageInternalError" for e in chain):
        return None
    text = " ".join(str(e) for e in chain).lower()
    cause = redact(_first_line(chain[-1]))
    if "readonly database" in text or "read-only" in text or "read only" in text:
        return (f"the results store is read-only ({cause}); make it writable, or copy it somewhere writable and "
                "pass the copy with --storage")
    if "disk is full" in text or "no space left" in text:
        return f"the results store's disk is full ({cause}); free space and continue with --resume"
    if opening:
        return f"cannot open the results store ({cause})"
    return f"the results store could not be read or written ({cause}); continue with --resume once it can"


# Opening -----------------------------------------------------------------------------------------


@contextlib.contextmanager
def _schema_lock(url: str) -> Iterator[None]:
    """An exclusive advisory lock on an SQLite store's folder while its schema may be created: the lock
    lives on the folder's open descriptor (no file is created) and ends when it is closed."""
    path = sqlite_file(url)
    try:
        import fcntl
    except ImportError:  # not POSIX: the retries in create_storage still resolve a race
        fcntl = None
    descriptor = None
    if path is not None and fcntl is not None:
        with contextlib.suppress(OSError):
            descriptor = os.open(path.resolve().parent, os.O_RDONLY)
    try:
        if descriptor is not None:
            deadline = time.monotonic() + _LOCK_SECONDS
            while True:
                try:
                    fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        break  # a hung holder: go on without the lock, the retries handle a race
                    time.sleep(0.02)
                except OSError:
                    break  # a file system without flock
        yield
    finally:
        if descriptor is not None:
            os.close(descriptor)


def _lost_creation_race(error: BaseException) -> bool:
    text = " ".join(str(e) for e in _chain(error)).lower()
    return any(sign in text for sign in ("unique constraint", "duplicate key", "already exists", "database is locked",
                                         "integrityerror"))


def create_storage(url: str, **kwargs: Any) -> Any:
    """``optuna.storages.RDBStorage(url, **kwargs)``, its schema created under a lock and retried when
    another process created it at the same moment; its engine is tracked (see :func:`close_stores`)."""
    import optuna

    track_stores()
    for attempt in range(_SCHEMA_ATTEMPTS):
        try:
            with _schema_lock(url):
                return optuna.storages.RDBStorage(url, **kwargs)
        except Exception as error:
            if attempt + 1 == _SCHEMA_ATTEMPTS or not _lost_creation_race(error):
                raise
            time.sleep(0.05 * 2 ** attempt * (1 + random.random()))  # noqa: S311 jitter, not a secret
    raise AssertionError("unreachable")


# Closing -----------------------------------------------------------------------------------------


def _file_backed(engine: Any) -> bool:
    url = engine.url
    database = url.database or ""
    return (url.get_backend_name() == "sqlite" and database not in ("", ":memory:")
            and not database.startswith("file::memory:") and "mode=memory" not in database
            and url.query.get("mode") != "memory")


def _remember_engine(connection: Any, *args: Any) -> None:
    engine = connection.engine
    if engine not in _engines and _file_backed(engine):
        with _lock:
            _engines.add(engine)


def track_stores() -> None:
    """Track every SQLite engine that connects from now on (once per process), and close them at exit."""
    global _tracking
    with _lock:
        if _tracking:
            return
        import sqlalchemy

        sqlalchemy.event.listen(sqlalchemy.engine.Engine, "engine_connect", _remember_engine)
        atexit.register(close_stores)
        _tracking = True


def close_stores() -> None:
    """Leave every tracked SQLite store whole in its main file, and close the engines' idle connections.

    Per store file: its write-ahead log is checkpointed into the file (``wal_checkpoint(TRUNCATE)``)
    and, when no other connection has it open, it is put back in rollback-journal mode, so at rest the
    store is that one file (copyable alone, readable from read-only media); the next command that
    writes turns the log on again. A store another process still has open keeps its log until that
    process ends; the checkpoint here copies what this process wrote. Safe to call at any time: an
    engine used again afterwards opens new connections (and is tracked again).
    """
    if not _tracking:
        return
    with _lock:
        engines = list(_engines)
        _engines.clear()
    for engine in engines:  # first every idle connection, so that this process holds no store open
        with contextlib.suppress(Exception):
            engine.dispose()
    done: set[str] = set()
    for engine in engines:
        database = str(Path(engine.url.database).resolve())
        if database not in done:
            done.add(database)
            try:
                with engine.connect() as connection:
                    # Wait at most a second for another process's writer: at worst the log keeps the
                    # newest commits until that process, the last to close the store, checkpoints it.
                    connection.exec_driver_sql("PRAGMA busy_timeout = 1000")
                    connection.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
                    with contextlib.suppress(Exception):  # "database is locked": another connection has it open
                        connection.exec_driver_sql("PRAGMA journal_mode=DELETE")
            except Exception:  # noqa: BLE001,S110 one that cannot be checkpointed now is by its next opener
                pass
        with contextlib.suppress(Exception):
            engine.dispose()
        with _lock:
            _engines.discard(engine)  # its checkpoint connected it again


def add_trials_at_once(storage: Any, study_id: int, trials: list[Any]) -> bool:
    """Add ``trials`` (RUNNING frozen trials with parameters and user attributes, from
    ``optuna.trial.create_trial``) to a study in one transaction; False where this cannot be done, and
    the caller adds them one by one (``study.add_trials``).

    ``study.add_trials`` spends about 14 ms per trial on SQLite (a transaction, and half a dozen queries,
    for each): 65 seconds before a 4,800-configuration sweep could start. This writes the same rows as
    Optuna's ``RDBStorage`` does, through its own table models, in one flush per table: the trials (each
    numbered as Optuna numbers them, by its place in the study), their parameters (the internal value
    and the distribution's JSON, checked against a distribution the study already holds for that name,
    as Optuna checks it) and their user attributes (JSON). It relies on the layout of Optuna's private
    ``optuna.storages._rdb`` module; anything unexpected there, or a storage that is not an
    ``RDBStorage``, returns False before anything is written. The caller reads the trials back through
    Optuna's public API and checks them.
    """
    import json

    try:
        from optuna import distributions as optuna_distributions
        from optuna.storages import RDBStorage
        from optuna.storages._rdb import models
        from optuna.storages._rdb.storage import _create_scoped_session
        from optuna.trial import TrialState
        from sqlalchemy import func
    except ImportError:
        return False
    needed = ("StudyModel", "TrialModel", "TrialParamModel", "TrialUserAttributeModel")
    if not isinstance(storage, RDBStorage) or not all(hasattr(models, name) for name in needed) or \
            any(t.state != TrialState.RUNNING or t.system_attrs or t.intermediate_values or t.values
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

    Those two calls cost two transactions, and half a dozen ORM queries, per result: the store's writer
    thread spent more CPU on them than the training of a small rung, on the same two cores. This is two
    statements per batch through the table models of Optuna's private ``optuna.storages._rdb``. False,
    before anything is written, for a storage that is not an ``RDBStorage`` on SQLite or PostgreSQL,
    a layout it does not expect, or a trial that has ended; the caller then makes Optuna's calls (which
    raise Optuna's own errors).
    """
    import json

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


def rung_key(budget: int) -> str:
    """The user-attribute key of a trial's details at rung ``budget``.

    Args:
        budget: the rung's cumulative budget, in evaluation units.

    Returns:
        ``rung_<budget>``.

    Example:
        >>> rung_key(300)
        'rung_300'
    """
    return f"rung_{int(budget)}"


def record_results(storage: Any, results: list[tuple[int, int, dict[str, Any]]], *, release: bool = False) -> None:
    """Write rung results, ``(trial_id, budget, details)`` each, the one layout of a result in a study:
    the user attribute :func:`rung_key` holding ``{"budget": budget, **details}`` and the intermediate
    value ``details["score"]`` at step ``budget`` (the commit point). In one transaction where
    :func:`record_results_at_once` can, else through Optuna's ``set_trial_user_attr`` and
    ``set_trial_intermediate_value``, row by row (which raise Optuna's errors, e.g. for a trial that has
    ended). With ``release`` the trials then go back to WAITING (in the same transaction where it can)."""
    rows = [(trial_id, rung_key(budget), {"budget": int(budget), **details}, int(budget), float(details["score"]))
            for trial_id, budget, details in results]
    if not record_results_at_once(storage, rows, release=release):
        from optuna.trial import TrialState

        for trial_id, key, value, step, score in rows:
            storage.set_trial_user_attr(trial_id, key, value)
            storage.set_trial_intermediate_value(trial_id, step, score)
        if release:
            for trial_id in sorted({row[0] for row in rows}):
                storage.set_trial_state_values(trial_id, state=TrialState.WAITING)


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
    compiles each once. Built for every call, with the values in them, they cost several times the
    database's own work: 1.7 ms for a claim and 2.2 ms for a result on SQLite, most of it building and
    compiling statements."""
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
    """Optuna's private table models of an ``RDBStorage`` on SQLite or PostgreSQL that have the layout the
    functions of this module write (trials, values, intermediate values, heartbeats, user attributes), or
    None."""
    try:
        from optuna.storages import RDBStorage
        from optuna.storages._rdb import models
    except ImportError:
        return None
    if not isinstance(storage, RDBStorage) or storage.engine.name not in ("sqlite", "postgresql"):
        return None
    trials = getattr(models.TrialModel, "__table__", None)
    needed = ("TrialValueModel", "TrialHeartbeatModel", "TrialUserAttributeModel", "TrialIntermediateValueModel")
    if trials is None or not all(hasattr(models, name) for name in needed) or \
            not {"state", "datetime_start", "datetime_complete"} <= set(trials.c.keys()) or \
            not hasattr(models.TrialValueModel, "value_to_stored_repr") or \
            not hasattr(models.TrialIntermediateValueModel, "intermediate_value_to_stored_repr"):
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
    import json

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
