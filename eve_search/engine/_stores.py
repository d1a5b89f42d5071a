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
* writes rung results (:func:`record_results`), new trials (:func:`add_trials`) and trial endings
  through Optuna's public storage API, or through a :class:`FastPath` an integration registers
  (:func:`use_fast_path`), which writes the same rows in one transaction.
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
from typing import Any, Protocol

__all__ = ["FastPath", "add_trials", "close_stores", "create_storage", "describe_failure", "end_running_at_once",
           "in_memory", "known_trial_id", "record_results", "redact", "rung_key", "safe_url", "sqlite_file",
           "storage_problem", "track_stores", "trial_id_of", "use_fast_path"]

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


# Writing results: Optuna's public storage API, or a faster path an integration registers -----------


class FastPath(Protocol):
    """Faster equivalents of some of Optuna's public storage calls, which an integration may register
    (:func:`use_fast_path`): the engine imports no integration and knows no host internals.

    Each method writes exactly what the public calls named in its docstring would, or writes nothing
    and returns False where it cannot (another kind of storage, a trial in another state); the caller
    then makes those public calls. ``eve_search.integrations._optuna_adapter`` registers one for
    Optuna's RDB storage when it is imported.
    """

    def add_trials(self, storage: Any, study_id: int, trials: list[Any]) -> bool:
        """``study.add_trials(trials)``, for RUNNING trials with parameters and user attributes."""

    def record_results(self, storage: Any, rows: list[tuple[int, str, Any, int, float]], *, release: bool) -> bool:
        """Per row ``(trial_id, key, value, step, score)``: ``set_trial_user_attr(trial_id, key, value)`` and
        ``set_trial_intermediate_value(trial_id, step, score)``; with ``release``, then
        ``set_trial_state_values(trial_id, WAITING)`` for each trial."""

    def end_running(self, storage: Any, ends: list[tuple[int, Any, list[float] | None]]) -> bool:
        """``set_trial_state_values(trial_id, state, values)`` per RUNNING trial."""

    def trial_id(self, frozen: Any) -> int | None:
        """The storage's id of a frozen trial read from it, without a query (None: unknown)."""


_fast_path: FastPath | None = None


def use_fast_path(fast_path: FastPath | None) -> FastPath | None:
    """Register ``fast_path`` for the writes of this module (None: Optuna's public calls only); returns the
    one registered before.

    Example:
        >>> previous = use_fast_path(None)  # every write through Optuna's public storage API
        >>> use_fast_path(previous) is None
        True
    """
    global _fast_path
    with _lock:
        previous, _fast_path = _fast_path, fast_path
    return previous


def add_trials(storage: Any, study: Any, study_id: int, trials: list[Any]) -> None:
    """Add RUNNING ``trials`` to ``study`` (id ``study_id`` in ``storage``): ``study.add_trials``, or the
    registered fast path's one transaction."""
    fast = _fast_path
    if fast is None or not fast.add_trials(storage, study_id, trials):
        study.add_trials(trials)


def record_results(storage: Any, results: list[tuple[int, int, dict[str, Any]]], *, release: bool = False) -> None:
    """Write rung results, ``(trial_id, budget, details)`` each, the one layout of a result in a study:
    the user attribute :func:`rung_key` holding ``{"budget": budget, **details}`` and the intermediate
    value ``details["score"]`` at step ``budget`` (the commit point), through Optuna's
    ``set_trial_user_attr`` and ``set_trial_intermediate_value``, row by row (which raise Optuna's errors,
    e.g. for a trial that has ended), or in one transaction where the registered fast path can. With
    ``release`` the trials then go back to WAITING."""
    rows = [(trial_id, rung_key(budget), {"budget": int(budget), **details}, int(budget), float(details["score"]))
            for trial_id, budget, details in results]
    fast = _fast_path
    if fast is not None and rows and fast.record_results(storage, rows, release=release):
        return
    from optuna.trial import TrialState

    for trial_id, key, value, step, score in rows:
        storage.set_trial_user_attr(trial_id, key, value)
        storage.set_trial_intermediate_value(trial_id, step, score)
    if release:
        for trial_id in sorted({row[0] for row in rows}):
            storage.set_trial_state_values(trial_id, state=TrialState.WAITING)


def end_running_at_once(storage: Any, ends: list[tuple[int, Any, list[float] | None]]) -> bool:
    """End RUNNING trials, ``(trial_id, state, values)`` each, in one transaction where the registered fast
    path can; False, with nothing written, where it cannot (the caller ends them one by one through
    ``set_trial_state_values``)."""
    fast = _fast_path
    return fast is not None and bool(ends) and fast.end_running(storage, ends)


def known_trial_id(frozen: Any) -> int | None:
    """The storage's id of ``frozen`` (a trial read from a storage) where the registered fast path knows it
    without a query, else None."""
    fast = _fast_path
    return None if fast is None else fast.trial_id(frozen)


def trial_id_of(storage: Any, study_id: int, frozen: Any) -> int:
    """The storage's id of ``frozen``, a trial of study ``study_id``: :func:`known_trial_id`, else asked
    for by number (``get_trial_id_from_study_id_trial_number``)."""
    known = known_trial_id(frozen)
    return known if known is not None else storage.get_trial_id_from_study_id_trial_number(study_id, frozen.number)
