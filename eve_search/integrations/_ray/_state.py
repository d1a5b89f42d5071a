"""The scheduler's state on disk: one JSON file beside Tune's experiment state, written whole.

Tune's ``Tuner.restore`` rebuilds a scheduler from the pickle written when the run started, without
what it gathered since; so :class:`~eve_search.integrations._ray.SynchronousSHAScheduler` writes its
cohorts to :data:`STATE_FILE` in the driver staging folder (which Tune syncs to ``storage_path``) at
every change, and reads it back when a restored run adds its first trial.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from eve_search._atomic import write_atomically
from eve_search._checks import InputError

__all__ = ["STATE_FILE", "load_scheduler_state", "write_state"]

STATE_FILE = "eve_sha_scheduler.json"


def load_scheduler_state(experiment_path: str | os.PathLike) -> dict[str, Any]:
    """The scheduler state a run saved under ``experiment_path`` (Tune's experiment folder on local
    storage): ``{"cohorts": [RungLedger.state_dict(), ...], "ledger": the first cohort's, "closed":
    [...], "partial": [...], "early": ..., "trials": {trial_id: tag}, "time_attr": ..., "metric": ...,
    "segments": [...]}``. The ledgers have trial ids as keys; a cohort that trials can still join keeps
    its first-rung scores in ``"early"``. ``"segments"`` is the scheduling state itself: the
    :class:`~eve_search.engine.stream.CohortStream` of each run of cohorts, by configuration index.

    Args:
        experiment_path: the experiment's folder (``tuner.get_results().experiment_path``).

    Returns:
        The saved state, as parsed from its JSON file; InputError when the folder holds none.

    Example:
        >>> import json, tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     _ = (Path(folder) / STATE_FILE).write_text(json.dumps({"cohorts": [], "metric": "accuracy"}))
        ...     load_scheduler_state(folder)["metric"]
        'accuracy'
        >>> load_scheduler_state("/nonexistent")
        Traceback (most recent call last):
        ...
        eve_search.InputError: Invalid experiment_path: '/nonexistent' (no eve_sha_scheduler.json there)
    """
    path = Path(experiment_path) / STATE_FILE
    if not path.exists():
        raise InputError(f"Invalid experiment_path: {str(experiment_path)!r} (no {STATE_FILE} there)")
    return json.loads(path.read_text())


def write_state(state: dict[str, Any], path: Path, scratch: Path | None = None) -> None:
    """Write ``state`` as JSON to ``path``, whole (:func:`~eve_search._atomic.write_atomically`).

    With ``scratch`` (a folder on the same file system), the file is written there first and then
    renamed into ``path``'s folder, so that folder never holds a temporary file, not even for a moment:
    Tune copies its driver staging folder to storage from another thread, and a temporary file it
    listed that was renamed before it was copied failed the whole copy, with a traceback on the
    terminal.

    Args:
        state: a JSON-serialisable dict.
        path: the file to write.
        scratch: where the file is written before it takes its place (None: ``path``'s folder).

    Example:
        >>> import tempfile
        >>> folder = Path(tempfile.mkdtemp())
        >>> (folder / "staging").mkdir()
        >>> write_state({"metric": "accuracy"}, folder / "staging" / STATE_FILE, scratch=folder)
        >>> sorted(p.name for p in folder.iterdir()), load_scheduler_state(folder / "staging")
        (['staging'], {'metric': 'accuracy'})
    """
    content = json.dumps(state)
    if scratch is None:
        write_atomically(path, content)
        return
    whole = Path(scratch) / f".{path.name}.{os.getpid()}"
    write_atomically(whole, content)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        os.replace(whole, path)
    except BaseException:
        whole.unlink(missing_ok=True)
        raise
