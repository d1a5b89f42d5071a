"""What the scheduler says about a run that is not the successive halving it was asked for: one warning
of each kind per run (:class:`SynchronousSHAWarning`), also logged.

Example:
    >>> shown_keys({"accuracy": 0.5, "training_iteration": 3, "config/lr": 0.1})
    "accuracy (and Tune's training_iteration, time_total_s, ...)"
"""

from __future__ import annotations

import logging
import math
import warnings
from typing import Any

from ray.tune.experiment import Trial as TuneTrial
from ray.tune.result import AUTO_RESULT_KEYS

from eve_search.engine.ledger import rank_order

__all__ = ["SynchronousSHAWarning", "Warnings", "shown_keys"]

logger = logging.getLogger(__package__)

_TUNE_KEYS = {"done", "trial_id", "experiment_tag", "should_checkpoint", "__duplicate__", "experiment_id"}


class SynchronousSHAWarning(UserWarning):
    """A run of :class:`SynchronousSHAScheduler` that is not the successive halving it was asked for:
    a rung decided with part of its cohort, a trial that restarted instead of resuming, a trial that
    ended before its rung, a rung passed without the metric, or a ``get_best_result()`` that will not
    return the search's winner. Each kind is issued once per run."""


def shown_keys(result: dict[str, Any]) -> str:
    """The keys a trainable reported, for an error message: its own first, then Tune's automatic ones."""
    own = sorted(k for k in result if k not in AUTO_RESULT_KEYS and k not in _TUNE_KEYS and not k.startswith("config/"))
    return f"{', '.join(own) or 'nothing of its own'} (and Tune's training_iteration, time_total_s, ...)"


class Warnings:
    """The scheduler's warnings (a part of :class:`SynchronousSHAScheduler`, which holds the state:
    ``_warned``, the kinds issued so far)."""

    def _warn(self, kind: str, message: str) -> None:
        if kind in self._warned:
            return
        self._warned.add(kind)
        logger.warning("SynchronousSHAScheduler: %s", message)
        warnings.warn(message, SynchronousSHAWarning, stacklevel=2)

    def _warn_restart(self, trial_id: str, elapsed: float, reached: int) -> None:
        self._warn("restart", f"trial {trial_id} came back at {self._time_attr}={elapsed:g} after a pause at "
                              f"rung {reached}: it started over instead of resuming. In a function "
                              "trainable, resume from tune.get_checkpoint() and report checkpoints with "
                              "tune.report(metrics, checkpoint=...); a class Trainable needs save_checkpoint "
                              "and load_checkpoint")

    def _warn_sparse(self, trial_id: str, elapsed: float, rung: int, shown: str) -> None:
        self._warn("sparse", f"trial {trial_id} passed rung {self._rungs[rung]} ({self._time_attr}="
                             f"{elapsed:g}) with a result without the metric {self._metric!r}: it goes "
                             "on, and its next result that has the metric counts for the rung (a "
                             f"trial that ends before one leaves the cohort); it reported: {shown}")

    def _ended_early(self, trial_id: str, result: dict[str, Any] | None) -> None:
        """Warn (once) about a trial that ended on its own before its next rung."""
        if not result or self._time_attr not in result:
            return
        elapsed = float(result[self._time_attr])
        segment, index = self._locate(trial_id)
        rung = segment.next_rung(index)
        if rung is None:
            return
        if elapsed >= self._rungs[rung]:  # past its rung, but no result there had the metric
            self._warn("sparse-end", f"trial {trial_id} ended at {self._time_attr}={elapsed:g}, past rung "
                                     f"{self._rungs[rung]}, without a result that has the metric {self._metric!r} "
                                     "since it passed the rung, so it left the cohort: report the metric at the "
                                     "rungs, or at least in the last result")
            return
        if rung == 0:
            self._warn("first-rung", f"trial {trial_id} ended at {self._time_attr}={elapsed:g}, before the first "
                                     f"rung ({self._rungs[0]}), so successive halving never applied to it: use "
                                     "a grace_period (or first rung) that trials reach, in the steps time_attr "
                                     "counts")
        else:
            self._warn("later-rung", f"trial {trial_id} ended at {self._time_attr}={elapsed:g}, before rung "
                                     f"{self._rungs[rung]}, and left the cohort: set max_t (the last rung) to "
                                     "the length of a trial")

    def _check_best(self, tune_controller: Any, ending: TuneTrial) -> None:
        """At the end of the run: warn (once) when ``results.get_best_result()`` will not give the winner."""
        if not self._searcher_finished(tune_controller):
            return
        trials = tune_controller.get_trials()
        if any(t is not ending and t.status not in (TuneTrial.TERMINATED, TuneTrial.ERROR) for t in trials):
            return
        last = {}
        for trial in trials:
            value = (getattr(trial, "metric_analysis", None) or {}).get(self._metric, {}).get("last")
            if isinstance(value, (int, float)) and math.isfinite(value):
                last[trial.trial_id] = float(value)
        winner = self.winner()
        if not last or winner is None or winner not in self._trials:
            return
        picked = rank_order(last, self._mode or "max")[0]
        if picked == winner:
            return
        chosen, won = self._trials[picked], self._trials[winner]
        lost = "" if chosen.checkpoint is not None else ", and it has no checkpoint"
        self._warn("best", f"results.get_best_result() ranks each trial by its last result, so it will return trial "
                           f"{picked} ({self._shown_at(chosen, last)}{lost}), not the search's winner {winner} "
                           f"({self._shown_at(won, last)}): take the winner, with its checkpoint, from "
                           "scheduler.best_result(results)")

    def _shown_at(self, trial: TuneTrial, last: dict[str, float]) -> str:
        """``metric=value at time_attr=steps`` of ``trial``'s last result, for a message."""
        steps = (trial.last_result or {}).get(self._time_attr)
        return f"{self._metric}={last.get(trial.trial_id, float('nan')):g}" + (
            "" if steps is None else f" at {self._time_attr}={float(steps):g}")
