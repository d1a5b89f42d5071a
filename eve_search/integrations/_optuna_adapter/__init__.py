"""Everything eve-search takes from Optuna beyond its public API, in one place.

eve-search writes its results through Optuna's public storage API (``BaseStorage``'s
``set_trial_user_attr``, ``set_trial_intermediate_value``, ``set_trial_state_values``, ...). This
package holds what that API does not offer, and nothing else imports Optuna's private names:

- :mod:`._sql`: the same writes in one transaction each on an ``RDBStorage`` (SQLite, PostgreSQL),
  through Optuna's private table models, where the public calls cost a transaction each. The engine,
  which imports no integration, gets them as a :class:`~eve_search.engine._stores.FastPath`
  registered when this package is imported (:func:`eve_search.engine._stores.use_fast_path`); on
  any storage, release or layout they do not fit, they write nothing and the public calls are made.
- :mod:`._study`: a study's storage and identity, heartbeat settings, ``study.stop()``, and what the
  ``study.optimize`` loops of this process are doing, which the pruner reads.

Releases: the internals were checked against Optuna :data:`TESTED` (oldest and newest, by major and
minor). On another release the fast path stays off (every write is a public call), the rest is used
where it is found, and one :class:`OptunaVersionWarning` says so.
"""

from __future__ import annotations

import warnings

import optuna

from eve_search.engine._stores import use_fast_path
from eve_search.integrations._optuna_adapter._sql import (
    LAYOUT,
    RdbFastPath,
    claim_at_once,
    end_waiting_at_once,
    layout_problems,
    requeue_at_once,
)
from eve_search.integrations._optuna_adapter._study import (
    Activity,
    activity,
    heartbeats,
    in_memory,
    on_stop,
    own_loop,
    retry_limit,
    stop_requested,
    storage_of,
    study_key,
)
from eve_search.integrations._optuna_adapter._version import TESTED, TESTED_NOW

__all__ = ["LAYOUT", "TESTED", "TESTED_NOW", "Activity", "OptunaVersionWarning", "RdbFastPath", "activity",
           "claim_at_once", "end_waiting_at_once", "heartbeats", "in_memory", "layout_problems", "on_stop", "own_loop",
           "requeue_at_once", "retry_limit", "stop_requested", "storage_of", "study_key"]


class OptunaVersionWarning(UserWarning):
    """The installed Optuna is outside the releases whose internals eve-search was checked against."""


if TESTED_NOW:
    use_fast_path(RdbFastPath())
else:
    (oldest, newest) = TESTED
    warnings.warn(f"eve-search was checked against Optuna {oldest[0]}.{oldest[1]} to {newest[0]}.{newest[1]}, not "
                  f"{optuna.__version__}: results are written through Optuna's public storage API only (slower), and "
                  "the pruner reads the study.optimize loops where it finds them", OptunaVersionWarning, stacklevel=2)
