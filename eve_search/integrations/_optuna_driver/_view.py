"""The study as one read sees it: each cohort's rung ledger replayed from the stored scores.

Workers share no state but the database: before each work item a worker reads the study and replays
the stream of cohorts (:class:`~eve_search.engine.stream.CohortStream`) from it, every cohort's ledger
fed with the scores stored at the rung budgets (the configurations that failed for good leaving it),
and the trials some worker holds counted as work in flight.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from eve_search._checks import check_int
from eve_search.engine.ledger import RungLedger, check_fraction, check_rungs, rank_order
from eve_search.engine.sha import KEEP_BYTES
from eve_search.engine.stream import CohortStream, Work
from eve_search.integrations._optuna_driver._storage import retry_due

__all__ = ["ERROR_ATTR", "RETRY_GUARD_SECONDS", "View", "WorkerSettings", "all_done", "best_score", "ending",
           "progress", "read_view"]

ERROR_ATTR = "error"  # user attribute of a trial whose training raised: it failed for good
# A last guard, never a decision: a configuration whose trial failed as stale and whose retry is due
# (the storage's retry callback has retries left) waits for that retry, which the process that failed
# the trial adds right after; if that process died in between, the retry never comes, and after this
# long (sized for a machine ten times slower than any seen) the worker stops in one line.
RETRY_GUARD_SECONDS = 600.0


@dataclass(frozen=True)
class WorkerSettings:
    """What a :class:`~eve_search.integrations.optuna.ShaWorker` runs: the study's configurations, rung rule
    and cohorts (every worker of a study agrees on these), and its own polling, memory and name.

    Args:
        trials: configurations in the study (``config_index`` 0..trials-1).
        rungs, fraction, mode: the rung rule's parameters (:class:`~eve_search.engine.ledger.RungLedger`).
        cohort_size: configurations per cohort, in index order (None: one cohort of all).
        poll_interval: seconds a worker waits when no work item is ready.
        keep_bytes: memory for trials the worker keeps between rungs, as the in-process engine keeps them
            (see :func:`~eve_search.engine.sha.trial_bytes`); 0 keeps none.
        name: the worker's name (default host:pid).

    Example:
        >>> WorkerSettings(trials=4, rungs=[10, 30], fraction=0.5, mode="max").rungs
        (10, 30)
    """

    trials: int
    rungs: tuple[int, ...]
    fraction: float
    mode: str
    cohort_size: int | None = None
    poll_interval: float = 0.2
    keep_bytes: int = KEEP_BYTES
    name: str | None = None

    def __post_init__(self) -> None:
        check_int("trials", self.trials, 1)
        if self.cohort_size is not None:
            check_int("cohort_size", self.cohort_size, 1)
        object.__setattr__(self, "rungs", check_rungs(self.rungs))
        object.__setattr__(self, "fraction", check_fraction(self.fraction))
        check_int("keep_bytes", self.keep_bytes, 0)


@dataclass
class View:
    """The study as one read sees it: per configuration its trials, the stream of cohorts replayed (every
    cohort's ledger fed with the stored scores; the trials some worker holds count as running work)."""

    chains: dict[int, list[FrozenTrial]]
    stream: CohortStream

    def live(self, index: int) -> FrozenTrial | None:
        """The configuration's current trial (not FAIL), if any."""
        alive = [t for t in self.chains.get(index, []) if t.state != TrialState.FAIL]
        return alive[0] if alive else None

    def ledger(self, index: int) -> RungLedger:
        """The rung ledger of configuration ``index``'s cohort."""
        return self.stream.ledger(self.stream.cohort_of(index))

    def status(self, index: int) -> str:
        return self.ledger(index).status(index)

    @property
    def ledgers(self) -> list[RungLedger]:
        """Every cohort's ledger, in cohort order."""
        return [self.stream.ledger(k) for k in range(self.stream.opened)]


def read_view(study: optuna.Study, storage: Any, settings: WorkerSettings) -> View:
    """The study as stored now: each cohort's ledger replayed from the stored scores (rung by rung, the
    configurations that failed for good leaving it), and the trials some worker holds (RUNNING) as work
    in flight at their next rung."""
    chains: dict[int, list[FrozenTrial]] = {}
    for trial in study.get_trials(deepcopy=False):
        index = trial.user_attrs.get("config_index")
        if isinstance(index, int) and 0 <= index < settings.trials:
            chains.setdefault(index, []).append(trial)
    for chain in chains.values():
        chain.sort(key=lambda t: t.number)
    stream = CohortStream(settings.trials, settings.cohort_size, rungs=settings.rungs, fraction=settings.fraction,
                          mode=settings.mode)
    view = View(chains, stream)
    for cohort in range(stream.cohorts or 0):
        _replay(study, storage, view, stream.ledger(cohort))  # every cohort opened: next_work's order is the same
    for index in range(settings.trials):
        live = view.live(index)
        rung = view.ledger(index).next_rung(index)
        if live is not None and live.state == TrialState.RUNNING and rung is not None:
            stream.start(Work(index, rung))  # held by a worker: not offered to another
    return view


def _replay(study: optuna.Study, storage: Any, view: View, ledger: RungLedger) -> None:
    """Feed one cohort's ledger the stored scores, rung by rung, until a rung cannot be decided."""
    for rung, budget in enumerate(ledger.rungs):
        for index in ledger.cohort(rung):
            for trial in view.chains.get(index, []):
                if budget in trial.intermediate_values:
                    view.stream.report(index, rung, float(trial.intermediate_values[budget]))
                    break
        for index in ledger.waiting_for(rung):
            if _gone(study, storage, view, index):
                view.stream.fail(index)
        if ledger.decide(rung) is None:
            return


def _gone(study: optuna.Study, storage: Any, view: View, index: int) -> bool:
    """A configuration whose trials all failed for good: its last trial is FAIL and no retry will come
    (its training raised, the storage has no retry callback, or the retries are used up)."""
    chain = view.chains.get(index, [])
    if not chain or view.live(index) is not None:
        return False
    last = chain[-1]
    if ERROR_ATTR in last.user_attrs or not retry_due(storage, last):
        return True
    # Failed as stale, its retry due: the process that failed it adds the retry right after.
    ended = last.datetime_complete.timestamp() if last.datetime_complete else time.time()
    if time.time() - ended > RETRY_GUARD_SECONDS:
        raise RuntimeError(f"study {study.study_name!r}: configuration {index} (trial {last.number}) failed "
                           f"as stale {time.time() - ended:.0f} s ago and its retry never came (the process that "
                           "failed it may have died): run the sweep again with --resume")
    return False


def _last_score(view: View, index: int) -> float | None:
    """The score configuration ``index`` reported at its last rung (the ledger's view), or None."""
    ledger = view.ledger(index)
    for rung in reversed(range(len(ledger.rungs))):
        score = ledger.score(index, rung)
        if score is not None:
            return float(score)
    return None


def ending(view: View, index: int) -> tuple[TrialState, list[float] | None]:
    """What Optuna's ``study.tell`` would store for a configuration the ledger ended: its final score
    (FAIL for a non-finite one), or for a pruned one its last reported score when that is a number."""
    ledger = view.ledger(index)
    if ledger.status(index) == "complete":
        score = ledger.scores(len(ledger.rungs) - 1)[index]
        return (TrialState.COMPLETE, [float(score)]) if math.isfinite(score) else (TrialState.FAIL, None)
    last = _last_score(view, index)
    return TrialState.PRUNED, None if last is None or math.isnan(last) else [last]


def best_score(view: View, mode: str) -> float | None:
    """The best score recorded at any rung of any cohort (None: none yet, or it is NaN)."""
    scores = {(i, r): s for ledger in view.ledgers for r in range(len(ledger.rungs))
              for i, s in ledger.scores(r).items()}
    if not scores:
        return None
    best = scores[rank_order(scores, mode)[0]]
    return None if math.isnan(best) else best


def all_done(view: View, trials: int) -> bool:
    """Every configuration has ended (its trial finished, or it failed for good)."""
    for index in range(trials):
        chain = view.chains.get(index, [])
        live = view.live(index)
        if not chain or (live is not None and not live.state.is_finished()):
            return False
        if live is None and view.status(index) != "failed":
            return False
    return True


def progress(view: View, last_rung: int) -> tuple[int, int, int]:
    """The lowest rung still open in some cohort, with its reports and trials summed over the cohorts."""
    ledgers = [ledger for ledger in view.ledgers if not ledger.finished] or view.ledgers[-1:]
    rung = min(min(len(ledger.decisions()), last_rung) for ledger in ledgers)
    reported = trials = 0
    for ledger in view.ledgers:
        cohort = ledger.cohort(rung)
        scores = ledger.scores(rung)
        reported += len([i for i in cohort if i in scores])
        trials += len(cohort)
    return rung, reported, trials
