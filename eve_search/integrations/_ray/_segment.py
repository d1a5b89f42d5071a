"""A segment: trials in arrival order whose cohorts one :class:`~eve_search.engine.stream.CohortStream`
runs, by configuration index (the scheduler's bookkeeping, which knows nothing of Tune).

Example:
    >>> segment = Segment(0, 2, (1, 3), 0.5, "max")
    >>> [segment.add(t) for t in ("a", "b")], segment.final(0)
    ([0, 1], True)
    >>> segment.report(0, 0, 0.9); segment.report(1, 0, 0.1)
    >>> segment.status(0), segment.status(1)
    ('train', 'stopped')
"""

from __future__ import annotations

from typing import Any

from eve_search.engine.ledger import RungLedger
from eve_search.engine.stream import CohortStream, Work

__all__ = ["Segment", "segments_of_ledgers"]


class Segment:
    """Trials in arrival order whose cohorts one :class:`~eve_search.engine.stream.CohortStream` runs
    (the segment's i-th trial is the stream's configuration i).

    With ``cohort_size=n`` the stream exists from the segment's first trial: cohort k holds its
    trials ``k*n .. k*n + n - 1``, the ones that have not arrived yet included, so a first rung
    waits for them. With ``cohort_size=None`` the segment is one cohort of every trial, whose size
    is known only when the segment ends: its first-rung scores wait in ``held`` and its stream is
    made then. A segment ends when the search algorithm is finished, or when its open cohort is cut
    (every trial waits and the search algorithm proposes none); the next trial starts a new segment.
    """

    def __init__(self, cohort: int, size: int | None, rungs: tuple[int, ...], fraction: float, mode: str) -> None:
        self.cohort = cohort  # the run's number of its first cohort
        self.size = size
        self._settings = (rungs, fraction, mode)
        self.trials: list[str] = []  # trial ids by configuration index
        self.held: dict[int, float] = {}  # first-rung scores, while the size of its one cohort is unknown
        self.failed: set[int] = set()  # trials that left before that
        self.stream: CohortStream | None = None if size is None else self._stream(None, size)
        self.done = 0  # its cohorts before this one are finished and their trials ended

    def _stream(self, configs: int | None, size: int | None) -> CohortStream:
        rungs, fraction, mode = self._settings
        return CohortStream(configs, size, rungs=rungs, fraction=fraction, mode=mode)

    @property
    def ended(self) -> bool:
        """No trial joins it any more."""
        return self.stream is not None and self.stream.configs is not None

    @property
    def cohorts(self) -> int:
        """How many of its cohorts have trials."""
        return 1 if self.stream is None else self.stream.opened

    def add(self, trial_id: str) -> int:
        """``trial_id`` arrives; returns its configuration index."""
        index = len(self.trials)
        self.trials.append(trial_id)
        if self.stream is not None:
            self.stream.ledger(self.stream.cohort_of(index))  # a cohort opens with its first trial
        return index

    def end(self) -> None:
        """No trial joins any more: the last cohort is decided with the trials it has."""
        if self.stream is not None:
            self.stream.end(len(self.trials))
            return
        self.stream = self._stream(len(self.trials), None)
        self.stream.ledger(0)
        for index in sorted(self.failed):
            self.stream.fail(index)
        for index, score in sorted(self.held.items()):
            self.stream.report(index, 0, score)
        self.held, self.failed = {}, set()

    # One trial ------------------------------------------------------------------------------------

    def _ledger(self, index: int) -> RungLedger | None:
        return None if self.stream is None else self.stream.ledger(self.stream.cohort_of(index))

    def status(self, index: int) -> str:
        """The ledger's status of configuration ``index`` ("wait" while its first-rung score is held)."""
        ledger = self._ledger(index)
        if ledger is None:
            return "failed" if index in self.failed else "wait" if index in self.held else "train"
        return ledger.status(index)

    def next_rung(self, index: int) -> int | None:
        ledger = self._ledger(index)
        if ledger is None:
            return None if index in self.failed or index in self.held else 0
        return ledger.next_rung(index)

    def score(self, index: int, rung: int) -> float | None:
        ledger = self._ledger(index)
        if ledger is None:
            return self.held.get(index) if rung == 0 else None
        return ledger.score(index, rung)

    def start(self, index: int, rung: int) -> None:
        """Tune runs configuration ``index`` to ``rung`` (the stream counts that work as running)."""
        if self.stream is not None and Work(index, rung) not in self.stream.running:
            self.stream.start(Work(index, rung))

    def report(self, index: int, rung: int, score: float) -> None:
        if self.stream is None:
            self.held[index] = score
        else:
            self.stream.report(index, rung, score)

    def fail(self, index: int) -> None:
        if self.stream is None:
            self.failed.add(index)
            self.held.pop(index, None)
        else:
            self.stream.fail(index)

    # Its cohorts -----------------------------------------------------------------------------------

    def final(self, cohort: int) -> bool:
        """Whether every trial of its ``cohort`` has arrived (none can join it any more)."""
        if self.ended:
            return True
        return self.stream is not None and (cohort + 1) * int(self.size or 0) <= len(self.trials)

    def members(self, cohort: int) -> list[str]:
        """The trials of its ``cohort`` that have arrived."""
        if self.stream is None:
            return list(self.trials)
        return [self.trials[i] for i in self.stream.members(cohort) if i < len(self.trials)]

    def finished(self, cohort: int) -> bool:
        return self.final(cohort) and self.stream is not None and self.stream.ledger(cohort).finished

    def view(self, cohort: int) -> tuple[RungLedger, dict[str, float]]:
        """Its ``cohort`` as a rung ledger of trial ids (the arrived trials), and the first-rung scores
        held apart while trials can still join it (as the saved state has always shown them)."""
        rungs, fraction, mode = self._settings
        ledger = RungLedger(rungs, fraction, mode)
        ids = self.trials
        if self.stream is None:
            for trial_id in ids:
                ledger.add(trial_id)
            for index in sorted(self.failed):
                ledger.fail(ids[index])
            return ledger, {ids[i]: s for i, s in sorted(self.held.items())}

        def named(indices: list[int]) -> list[str]:
            return [ids[i] for i in indices if i < len(ids)]

        state = self.stream.ledger(cohort).state_dict()
        scores = [[[ids[i], s] for i, s in rung if i < len(ids)] for rung in state["scores"]]
        early: dict[str, float] = {}
        if not self.final(cohort):
            early, scores[0] = {t: s for t, s in scores[0]}, []
        decisions = [None if d is None else {"promoted": named(d["promoted"]), "stopped": named(d["stopped"])}
                     for d in state["decisions"]]
        ledger.load_state_dict({**state, "members": named(state["members"]), "scores": scores,
                                "failed": named(state["failed"]), "decisions": decisions})
        return ledger, early

    # Persistence ----------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {"cohort": self.cohort, "size": self.size, "trials": list(self.trials),
                "held": [[i, s] for i, s in sorted(self.held.items())], "failed": sorted(self.failed),
                "stream": None if self.stream is None else self.stream.state_dict()}

    @classmethod
    def from_state(cls, state: dict[str, Any], rungs: tuple[int, ...], fraction: float, mode: str) -> Segment:
        segment = cls(int(state["cohort"]), state["size"], rungs, fraction, mode)
        segment.trials = [str(t) for t in state["trials"]]
        segment.held = {int(i): float(s) for i, s in state["held"]}
        segment.failed = {int(i) for i in state["failed"]}
        saved = state["stream"]
        if saved is not None:
            segment.stream = segment._stream(saved["configs"], saved["cohort_size"])
            segment.stream.load_state_dict(saved)
        return segment



def segments_of_ledgers(state: dict[str, Any], settings: tuple[tuple[int, ...], float, str],
                        cohort_size: int | None) -> list[Segment]:
    """The segments of a state saved before the cohorts ran as a stream (ledgers of trial ids, the
    first-rung scores of the open cohort held in ``"early"``): a closed cohort becomes a segment of
    one cohort, the open one (the last) a segment that trials go on joining.

    Args:
        state: the saved state (see :func:`~eve_search.integrations._ray.load_scheduler_state`).
        settings: the scheduler's ``(rungs, fraction, mode)``.
        cohort_size: the scheduler's ``cohort_size``.

    Returns:
        The segments, in the order of the saved cohorts.
    """
    cohorts = state.get("cohorts")
    if cohorts is None:
        cohorts = [] if state.get("ledger") is None else [state["ledger"]]
    early = {str(k): float(v) for k, v in state.get("early", {}).items()}
    closed = state.get("closed") or [not any(t in early for t in saved["members"]) for saved in cohorts]
    segments = []
    for number, saved in enumerate(cohorts):
        ledger = RungLedger(*settings)
        ledger.load_state_dict(saved)
        members = [str(t) for t in ledger.members]
        if closed[number] and members:
            segments.append(_closed_segment(number, saved, members, settings))
        else:
            segments.append(_open_segment(number, ledger, early, settings, cohort_size))
    return segments


def _closed_segment(number: int, saved: dict[str, Any], members: list[str],
                    settings: tuple[tuple[int, ...], float, str]) -> Segment:
    index = {t: i for i, t in enumerate(members)}
    segment = Segment(number, None, *settings)
    segment.trials = members
    segment.stream = segment._stream(len(members), None)
    stream = segment.stream.state_dict()
    stream["ledgers"] = [{**saved, "members": list(range(len(members))),
                          "scores": [[[index[t], s] for t, s in rung] for rung in saved["scores"]],
                          "failed": [index[t] for t in saved["failed"]],
                          "decisions": [None if d is None else
                                        {key: [index[t] for t in d[key]] for key in ("promoted", "stopped")}
                                        for d in saved["decisions"]]}]
    segment.stream.load_state_dict(stream)
    return segment


def _open_segment(number: int, ledger: RungLedger, early: dict[str, float],
                  settings: tuple[tuple[int, ...], float, str], cohort_size: int | None) -> Segment:
    members = [str(t) for t in ledger.members]
    index = {t: i for i, t in enumerate(members)}
    segment = Segment(number, cohort_size, *settings)
    for trial_id in members:
        segment.add(trial_id)
    for trial_id in members:
        if ledger.status(trial_id) == "failed":
            segment.fail(index[trial_id])
        elif trial_id in early:
            segment.report(index[trial_id], 0, early[trial_id])
    return segment
