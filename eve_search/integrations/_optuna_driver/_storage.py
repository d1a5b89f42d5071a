"""The storage a driver's workers share: heartbeats, and a dead worker's trial re-queued with its reports."""

from __future__ import annotations

import inspect
import threading
import warnings
from collections.abc import Callable
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from eve_search._checks import check_int
from eve_search.engine.store import write_ahead
from eve_search.integrations._optuna_adapter import retry_limit

__all__ = ["Heartbeat", "quiet", "retry_due", "worker_storage"]


def quiet(call: Callable[[], Any]) -> Any:
    """``call()`` without Optuna's experimental-feature and renamed-argument warnings."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        warnings.simplefilter("ignore", FutureWarning)
        return call()


def worker_storage(url: str, *, heartbeat_interval: int = 2, grace_period: int | None = None,
                   max_retry: int | None = 3) -> optuna.storages.RDBStorage:
    """An RDB storage for SHA workers: heartbeats, and a dead worker's trial re-queued with its reports.

    Args:
        url: SQLAlchemy URL (``sqlite:///sweep.db``, ``postgresql+psycopg2://user@host/db``).
        heartbeat_interval: seconds between heartbeats of a claimed trial.
        grace_period: seconds without a heartbeat after which a trial is stale (default 4 intervals).
        max_retry: times one configuration is re-queued after its worker died (None: no limit).

    Returns:
        An ``optuna.storages.RDBStorage`` to pass to ``create_study`` and :func:`run_sha`.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     storage = worker_storage(f"sqlite:///{folder}/sha.db")
        ...     print(storage.heartbeat_interval, storage.grace_period)
        ...     storage.remove_session()
        2 8
    """
    for name, value in (("heartbeat_interval", heartbeat_interval), ("grace_period", grace_period)):
        if value is not None:
            check_int(name, value, 1, detail=" of seconds")
    grace = 4 * heartbeat_interval if grace_period is None else grace_period
    sqlite = url.startswith("sqlite")
    engine_kwargs = {"connect_args": {"timeout": 60}} if sqlite else {}
    # Optuna 4.9 renamed RetryFailedTrialCallback / failed_trial_callback; older releases have the old names.
    retry = getattr(optuna.storages, "RetryHeartbeatStaleTrialCallback", None) or optuna.storages.RetryFailedTrialCallback
    callback = quiet(lambda: retry(max_retry=max_retry, inherit_intermediate_values=True))
    keyword = ("heartbeat_stale_trial_callback" if "heartbeat_stale_trial_callback" in
               inspect.signature(optuna.storages.RDBStorage).parameters else "failed_trial_callback")
    storage = quiet(lambda: optuna.storages.RDBStorage(
        url, engine_kwargs=engine_kwargs, heartbeat_interval=heartbeat_interval, grace_period=grace,
        **{keyword: callback}))
    write_ahead(storage, url)  # several workers on one SQLite file: readers do not block the writer
    return storage


def retry_due(storage: optuna.storages.BaseStorage, trial: FrozenTrial) -> bool:
    """Whether the storage's heartbeat callback re-queues ``trial`` (a FAIL trial that went stale): a
    :class:`optuna.storages.RetryHeartbeatStaleTrialCallback` with retries left for it."""
    getter = getattr(storage, "get_heartbeat_stale_trial_callback", None) or getattr(
        storage, "get_failed_trial_callback", None)
    interval = getattr(storage, "get_heartbeat_interval", lambda: None)()
    if getter is None or not interval:
        return False  # no heartbeats: nothing fails as stale, nothing is retried
    callback = quiet(getter)
    retry = getattr(optuna.storages, "RetryHeartbeatStaleTrialCallback", None)
    if not isinstance(callback, retry or optuna.storages.RetryFailedTrialCallback):
        return False
    limit = retry_limit(callback)
    return limit is None or len(trial.system_attrs.get("retry_history", [])) < limit


class Heartbeat:
    """Records heartbeats for the trial this worker holds, from a background thread."""

    def __init__(self, storage: optuna.storages.RDBStorage) -> None:
        self.storage = storage
        self.interval = float(storage.get_heartbeat_interval() or 0)
        self.trial_id: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if self.interval > 0:
            self._thread = threading.Thread(target=self._beat, name="eve-search-heartbeat", daemon=True)
            self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(self.interval):
            trial_id = self.trial_id
            if trial_id is not None:
                try:
                    self.storage.record_heartbeat(trial_id)
                except Exception:  # noqa: BLE001, S110 a missed beat is retried; a long outage makes the trial stale
                    pass

    def hold(self, trial_id: int | None, *, beat: bool = True) -> None:
        """Beat for ``trial_id`` from now on (None: for no trial); ``beat``: record one at once."""
        if trial_id is not None and beat and self.interval > 0:
            self.storage.record_heartbeat(trial_id)
        self.trial_id = trial_id

    def stop(self) -> None:
        self._stop.set()
