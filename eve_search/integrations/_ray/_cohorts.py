"""The scheduler's cohorts: the trials Tune creates, in arrival order, fed to one
:class:`~eve_search.engine.stream.CohortStream` per segment (:class:`~._segment.Segment`), and the
state file that a restored run reads back. Nothing here pauses, stops or starts a trial.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from ray.tune.experiment import Trial as TuneTrial

from eve_search._checks import InputError
from eve_search.engine.ledger import RungLedger
from eve_search.engine.stream import Work
from eve_search.integrations._ray._segment import Segment, segments_of_ledgers
from eve_search.integrations._ray._state import STATE_FILE, write_state
from eve_search.integrations._ray._warnings import shown_keys

__all__ = ["CohortBook"]

logger = logging.getLogger(__package__)


class CohortBook:
    """The bookkeeping of the cohorts (a part of :class:`SynchronousSHAScheduler`, which holds the state:
    ``_segments``, ``_where``, ``_first_live``, ``_partial``, ``_tags``, ``_version`` and the caches)."""

    # State on disk --------------------------------------------------------------------------------

    def _open(self, trial: TuneTrial) -> None:
        """Load the state a previous driver saved in ``trial``'s experiment (``Tuner.restore``), once."""
        self._check_metric_and_mode()
        path = Path(trial.storage.experiment_driver_staging_path) / STATE_FILE
        if self._state_path == path:
            return
        self._reset()
        self._state_path = path
        if not path.exists():
            return
        state = json.loads(path.read_text())
        if state.get("time_attr") != self._time_attr or state.get("metric") != self._metric:
            raise InputError(f"Invalid scheduler: time_attr {self._time_attr!r} and metric {self._metric!r} "
                             f"differ from the restored run's ({state.get('time_attr')!r}, {state.get('metric')!r})")
        self._load(state)
        logger.info("SynchronousSHAScheduler: restored %d cohorts, %d trials, %d rungs decided, from %s",
                    len(self._views()), len(self._where), len(self.decisions()), path)

    def _views(self) -> list[tuple[RungLedger, dict[str, float], bool]]:
        """Every cohort as (rung ledger of trial ids, first-rung scores held apart, closed), computed once
        per change: what the saved state, :attr:`ledgers` and :meth:`debug_string` show."""
        if self._shown[0] != self._version:
            views = []
            for segment in self._segments:
                for cohort in range(segment.cohorts):
                    ledger, early = segment.view(cohort)
                    views.append((ledger, early, segment.final(cohort)))
            self._shown = (self._version, views)
        return self._shown[1]

    def _state(self) -> dict[str, Any]:
        views = self._views()
        cohorts = [ledger.state_dict() for ledger, _, _ in views]
        return {"time_attr": self._time_attr, "metric": self._metric, "rungs": list(self._rungs),
                "cohort_size": self._cohort_size, "ledger": cohorts[0] if cohorts else None, "cohorts": cohorts,
                "closed": [closed for _, _, closed in views], "partial": self._partial,
                "early": {t: s for _, early, _ in views for t, s in early.items()}, "trials": self._tags,
                "segments": [segment.state_dict() for segment in self._segments]}

    def _load(self, state: dict[str, Any]) -> None:
        settings = (self._rungs, self._fraction, self._mode or "max")
        if "segments" in state:
            self._segments = [Segment.from_state(saved, *settings) for saved in state["segments"]]
        else:  # written before the cohorts ran as a stream
            self._segments = segments_of_ledgers(state, settings, self._cohort_size)
        self._where = {t: (s, i) for s, segment in enumerate(self._segments) for i, t in enumerate(segment.trials)}
        self._first_live = 0
        self._partial = [dict(p) for p in state.get("partial", [])]
        self._tags = dict(state.get("trials", {}))
        self._version += 1

    def _save(self) -> None:
        if self._state_path is None or self._saved == (self._state_path, self._version):
            return
        # Written beside Tune's driver staging folder, then renamed into it (see write_state).
        write_state(self._state(), self._state_path, scratch=self._state_path.parent.parent)
        self._saved = (self._state_path, self._version)

    # The stream of cohorts ------------------------------------------------------------------------

    def _locate(self, trial_id: str) -> tuple[Segment, int]:
        segment, index = self._where[trial_id]
        return self._segments[segment], index

    def _arrive(self, trial_id: str) -> None:
        """A new trial: the next configuration of the open segment (a new one after an end)."""
        if not self._segments or self._segments[-1].ended:
            last = self._segments[-1] if self._segments else None
            first = 0 if last is None else last.cohort + last.cohorts
            self._segments.append(Segment(first, self._cohort_size, self._rungs, self._fraction,
                                          self._mode or "max"))
        index = self._segments[-1].add(trial_id)
        self._where[trial_id] = (len(self._segments) - 1, index)
        self._version += 1

    def _end(self, reason: str) -> bool:
        """The open segment takes no more trials (``reason``: "finished", the search algorithm is, or
        "cut", it proposes none while every trial waits); True when one was open."""
        if not self._segments or self._segments[-1].ended:
            return False
        segment = self._segments[-1]
        size = len(segment.trials) - (0 if segment.size is None else (segment.cohorts - 1) * segment.size)
        segment.end()
        self._version += 1
        if reason == "cut":
            why = ("no new trial could start (the search algorithm suggested none while every trial of the "
                   "cohort waited at the first rung)")
        elif segment.size is not None and size < segment.size:
            why = f"the search ended with {size} of its {segment.size} trials (the last cohort)"
        elif segment.size is None and len(self._segments) > 1:
            why = "the search ended (the trials that came after the previous cohort closed)"
        else:
            return True
        number = segment.cohort + segment.cohorts - 1
        self._partial.append({"cohort": number, "trials": size, "reason": why})
        self._warn(f"partial:{why.split(' ')[0]}",
                   f"cohort {number} is decided with {size} trial{'s' if size != 1 else ''}: {why}")
        return True

    def _next_work(self) -> tuple[Segment, Work] | None:
        """The work a free actor should take now, as :meth:`CohortStream.next_work` orders it, over the
        segments that cuts and ends begin: promoted work of the oldest cohort first, then first-rung work
        (a configuration that has not arrived is the search algorithm's next trial)."""
        first = None
        for segment in self._segments[self._first_live:]:
            work = segment.stream.next_work() if segment.stream is not None else None
            if work is not None and work.rung > 0:
                return segment, work
            if work is not None and first is None:
                first = (segment, work)
        return first

    def _handed(self, trial_id: str) -> bool:
        """Whether ``trial_id``'s next work was handed to it (the stream counts it as running)."""
        segment, index = self._locate(trial_id)
        rung = segment.next_rung(index)
        return rung is not None and segment.stream is not None and Work(index, rung) in segment.stream.running

    # Feeding the stream ---------------------------------------------------------------------------

    def _record(self, trial: TuneTrial, result: dict[str, Any], fresh: bool = True) -> None:
        """Report every rung that ``result`` reaches and the stream expects from this trial (``fresh``:
        a new result, not the last one repeated when the trial ends)."""
        trial_id = trial.trial_id
        shown = shown_keys(result)
        if self._time_attr not in result:
            raise InputError(f"Invalid result: trial {trial_id} reported no {self._time_attr!r} (the scheduler's "
                             f"time_attr); it reported: {shown}")
        elapsed = float(result[self._time_attr])
        segment, index = self._locate(trial_id)
        reached = self._reached(trial_id)
        # The first result after a pause must lie past the rung the trial had reached; at or below
        # it, the trainable began from scratch.
        if fresh and trial_id in self._paused:
            self._paused.discard(trial_id)
            if result.get("iterations_since_restore") == 1 and not result.get("done") and elapsed <= reached:
                self._warn_restart(trial_id, elapsed, reached)
        while True:
            rung = segment.next_rung(index)
            if rung is None or elapsed < self._rungs[rung]:
                return
            if self._metric not in result:
                # Sparse reporting (TUNE_DISABLE_STRICT_METRIC_CHECKING=1): the trial goes on, and its next result
                # that has the metric counts for the rung, as a result past several rungs counts for each.
                if fresh:
                    self._warn_sparse(trial_id, elapsed, rung, shown)
                return
            segment.report(index, rung, float(result[self._metric]))
            self._version += 1

    def _leave(self, trial_id: str) -> None:
        """``trial_id`` ended or failed for good: it leaves every rung not yet decided."""
        segment, index = self._locate(trial_id)
        segment.fail(index)
        self._version += 1

    def _status(self, trial_id: str) -> str:
        """The ledger's status of a trial ("wait" while its first-rung score is held), computed once
        per change of the stream: Tune asks for it on every step."""
        if self._cached[0] != self._version:
            self._cached = (self._version, {})
        statuses = self._cached[1]
        if trial_id not in statuses:
            segment, index = self._locate(trial_id)
            statuses[trial_id] = segment.status(index)
        return statuses[trial_id]

    def _reached(self, trial_id: str) -> int:
        """The budget of the highest rung this trial has reported (0: none)."""
        segment, index = self._locate(trial_id)
        reported = [self._rungs[k] for k in range(len(self._rungs)) if segment.score(index, k) is not None]
        return max(reported, default=0)

    def _start_next(self, trial_id: str) -> None:
        """Tune runs ``trial_id`` on: its next rung's work is running."""
        segment, index = self._locate(trial_id)
        rung = segment.next_rung(index)
        if rung is not None:
            segment.start(index, rung)

    def _members(self) -> list[str]:
        """The trials of every cohort still under way (a finished cohort whose trials all ended is
        skipped: an endless search piles them up)."""
        out: list[str] = []
        for number in range(self._first_live, len(self._segments)):
            segment = self._segments[number]
            for cohort in range(segment.done, segment.cohorts):
                members = segment.members(cohort)
                if cohort == segment.done and segment.finished(cohort) and all(
                        t in self._trials and self._trials[t].status in (TuneTrial.TERMINATED, TuneTrial.ERROR)
                        for t in members):
                    segment.done += 1
                    continue
                out.extend(members)
            if number == self._first_live and segment.ended and segment.done == segment.cohorts:
                self._first_live += 1
        return out

    # Tune's views of the state ----------------------------------------------------------------------

    def debug_string(self) -> str:
        views = self._views()
        if not views:
            return "Using synchronous successive halving (no trials yet)."
        shown = []
        for index, (ledger, early, closed) in enumerate(views):
            parts = []
            for rung, budget in enumerate(self._rungs):
                cohort = ledger.cohort(rung)
                if not cohort and rung > 0:
                    break
                held = len(early) if rung == 0 else 0
                parts.append(f"{budget:g}: {len(ledger.scores(rung)) + held}/{len(cohort)}")
            shown.append(f"cohort {index}{'' if closed else ' (open)'} {', '.join(parts)}")
        if len(shown) > 3:
            shown = [f"{len(shown) - 3} earlier cohorts", *shown[-3:]]
        return f"Synchronous SHA ({self._time_attr} rungs, reported/cohort): {'; '.join(shown)}"

    def save(self, checkpoint_path: str) -> None:
        write_state(self._state(), Path(checkpoint_path))

    def restore(self, checkpoint_path: str) -> None:
        self._load(json.loads(Path(checkpoint_path).read_text()))
