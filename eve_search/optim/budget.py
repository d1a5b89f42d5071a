"""Evaluation-cost accounting: the one place that knows what a forward or a backward pass costs.

The rule (paper, Appendix "Evaluation-Cost Accounting", Equation 7):

* a forward call that scores ``r`` points costs ``r``;
* a backward pass costs ``tau_bwd / C_f``, its wall time over the mean forward time of the same
  run so far (``measured``), or a ratio measured once before training and then frozen
  (``calibrated``: the average ratio the measured rule charges over a short run of the same
  training loop, see :meth:`CostMeter.measured_ratio`), so that a seed fixes the whole run and a
  resumed run charges exactly as an uninterrupted one;
* a run stops the first time ``cost >= budget``.

EvE and every baseline report their passes here; nothing else computes cost.

Example:
    >>> meter = CostMeter(budget=10.0, mode="calibrated", backward_ratio=2.0)
    >>> meter.charge_forward(points=4, seconds=0.004)
    >>> meter.charge_backward(seconds=0.002)
    >>> meter.cost, meter.exhausted
    (6.0, False)
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from eve_search._checks import InputError

__all__ = ["COST_MODES", "CostMeter", "PassTotals", "check_backward_ratio", "check_cost_mode"]

COST_MODES = ("measured", "calibrated")


def check_cost_mode(cost_mode: object) -> str:
    """``cost_mode`` if it is one of :data:`COST_MODES`, else a one-line InputError naming it.

    Args:
        cost_mode: the value to check.

    Returns:
        ``cost_mode`` itself, ``"measured"`` or ``"calibrated"``.

    Example:
        >>> check_cost_mode("measured")
        'measured'
        >>> check_cost_mode("wall")
        Traceback (most recent call last):
        ...
        eve_search.InputError: Invalid cost_mode: 'wall' (expected 'calibrated' or 'measured')
    """
    if cost_mode not in COST_MODES:
        raise InputError(f"Invalid cost_mode: {cost_mode!r} (expected 'calibrated' or 'measured')")
    return cost_mode  # type: ignore[return-value]


def check_backward_ratio(ratio: object, cost_mode: str = "calibrated", *, required: bool = False) -> float | None:
    """``ratio`` as a float (None stays None) once it fits ``cost_mode``, else a one-line InputError: the
    one check of a frozen backward/forward ratio, for every caller (the cost meter, sweep settings, the
    Optuna driver's options, the paper's protocols).

    Args:
        ratio: the backward/forward ratio to freeze, or None.
        cost_mode: ``"calibrated"`` (a ratio is frozen) or ``"measured"`` (none is: ``ratio`` must be None).
        required: whether a calibrated ratio must be given (the meter charges with it); else None means
            "measured once per model shape before training".

    Returns:
        ``float(ratio)``, or None.

    Example:
        >>> check_backward_ratio(2), check_backward_ratio(None)
        (2.0, None)
        >>> check_backward_ratio(0.0)
        Traceback (most recent call last):
        ...
        eve_search.InputError: Invalid backward_ratio: 0.0 (expected a finite number > 0, or None)
        >>> check_backward_ratio(2.0, "measured")
        Traceback (most recent call last):
        ...
        eve_search.InputError: Invalid backward_ratio: 2.0 (expected None: only the calibrated cost mode takes a frozen ratio)
    """
    if ratio is None:
        if not required or cost_mode == "measured":
            return None
        expected = "a finite number > 0: the calibrated cost mode charges each backward pass that many units"
    elif cost_mode == "measured":
        expected = "None: only the calibrated cost mode takes a frozen ratio"
    elif isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not (math.isfinite(ratio) and ratio > 0):
        expected = "a finite number > 0" + ("" if required else ", or None")
    else:
        return float(ratio)
    raise InputError(f"Invalid backward_ratio: {ratio!r} (expected {expected})")


def _check_budget(budget: float) -> float:
    if isinstance(budget, bool) or not isinstance(budget, (int, float)):
        raise TypeError(f"Invalid budget: {budget!r} (expected a positive number)")
    if not budget > 0:
        raise InputError(f"Invalid budget: {budget} (expected a positive number of evaluation units)")
    return float(budget)


class PassTotals(NamedTuple):
    """What a meter has timed so far; two snapshots bound a span of passes.

    Attributes:
        forward_points: points scored by forward passes (one unit each).
        forward_seconds: wall time of those forward passes.
        backward_passes: backward passes charged.
        backward_seconds: wall time of those backward passes.

    Example:
        >>> PassTotals()
        PassTotals(forward_points=0, forward_seconds=0.0, backward_passes=0, backward_seconds=0.0)
        >>> PassTotals(forward_points=8, forward_seconds=0.02).forward_points
        8
    """

    forward_points: int = 0
    forward_seconds: float = 0.0
    backward_passes: int = 0
    backward_seconds: float = 0.0


_RUN_START = PassTotals()


class CostMeter:
    """Charges forward and backward passes in forward-evaluation units and says when to stop.

    Args:
        budget: stop once the charged cost reaches this many units (``math.inf``: never).
        mode: ``"measured"`` charges each backward by its own wall time over the run's mean forward
            time (the paper); ``"calibrated"`` charges every backward ``backward_ratio`` units.
        backward_ratio: the frozen backward/forward time ratio; required in ``calibrated`` mode
            (see :meth:`measured_ratio`), not allowed in ``measured`` mode.
        clock: seconds as a float; injectable for tests.
        record_passes: also keep every pass's own time (forward: seconds per scored point), for
            :meth:`robust_ratio`; calibration runs set it, training runs do not need it.
        synchronize: called before every clock reading so that asynchronous device work is not
            mistaken for free (``torch.cuda.synchronize`` on a GPU). ``None`` on the CPU.

    Example:
        >>> meter = CostMeter(10, mode="calibrated", backward_ratio=2.0)
        >>> meter.charge_forward(4, 0.01)        # 4 scored points: 4 units
        >>> meter.charge_backward(0.5)           # a backward pass: the frozen ratio, 2 units
        >>> meter.cost, meter.exhausted
        (6.0, False)
        >>> meter.charge_forward(4, 0.01)
        >>> meter.exhausted
        True
    """

    def __init__(
        self,
        budget: float = math.inf,
        *,
        mode: str = "measured",
        backward_ratio: float | None = None,
        clock: Callable[[], float] = time.perf_counter,
        synchronize: Callable[[], Any] | None = None,
        record_passes: bool = False,
    ) -> None:
        if mode not in COST_MODES:
            raise InputError(f"Invalid mode: {mode!r} (expected one of {', '.join(COST_MODES)})")
        ratio = check_backward_ratio(backward_ratio, mode, required=True)
        self.budget = _check_budget(budget)
        self.mode = mode
        self.backward_ratio = ratio
        self.clock = clock
        self.synchronize = synchronize
        self.cost = 0.0
        self.forward_points = 0
        self.forward_seconds = 0.0
        self.backward_passes = 0
        self.backward_seconds = 0.0
        self.forward_times: list[float] | None = [] if record_passes else None  # seconds per point, per call
        self.backward_times: list[float] | None = [] if record_passes else None

    def start_recording(self) -> None:
        """Keep every pass's own time from now on (see :meth:`robust_ratio`)."""
        self.forward_times, self.backward_times = [], []

    @property
    def exhausted(self) -> bool:
        """True once the charged cost has reached the budget."""
        return self.cost >= self.budget

    @property
    def mean_forward_seconds(self) -> float:
        """C_f of Equation 7: measured forward seconds per scored point, so far."""
        if self.forward_points == 0:
            raise RuntimeError("no forward pass has been charged yet, so C_f is undefined")
        return self.forward_seconds / self.forward_points

    def pass_totals(self) -> PassTotals:
        """A snapshot of the timed passes, to measure a span with :meth:`measured_ratio`."""
        return PassTotals(self.forward_points, self.forward_seconds, self.backward_passes, self.backward_seconds)

    def measured_ratio(self, since: PassTotals = _RUN_START) -> float:
        """Mean backward time over mean forward time, over the whole run or the passes after the
        snapshot ``since``: the ratio the ``measured`` rule charges on average. Freezing it after a
        short run of the real training loop is how ``calibrated`` mode is calibrated."""
        forward_points = self.forward_points - since.forward_points
        backward_passes = self.backward_passes - since.backward_passes
        if backward_passes == 0:
            raise RuntimeError("no backward pass has been timed yet, so there is no ratio to measure")
        if forward_points == 0:
            raise RuntimeError("no forward pass has been charged yet, so C_f is undefined")
        mean_backward = (self.backward_seconds - since.backward_seconds) / backward_passes
        return mean_backward / ((self.forward_seconds - since.forward_seconds) / forward_points)

    def robust_ratio(self, quantile: float = 0.25, offset: int = 0, step: int = 1) -> float:
        """The backward/forward time ratio from low quantiles of the recorded per-pass times
        (``record_passes=True``): the ``quantile`` of backward seconds over the same quantile of
        forward seconds per point, over every ``step``-th pass from ``offset`` (offsets 0 and 1 of
        step 2 give two interleaved halves of one run, to check the estimate against itself).

        A pass slowed by another process (descheduled, cache evicted, a thread waiting for a busy
        sibling) only moves the upper part of its distribution, so on a busy machine the low
        quantiles stay near the quiet machine's while the means (:meth:`measured_ratio`) do not.

        Example:
            >>> meter = CostMeter(record_passes=True)
            >>> for f, b in [(1.0, 2.0), (1.0, 2.1), (9.0, 40.0), (1.1, 2.0)]:
            ...     meter.charge_forward(1, f); meter.charge_backward(b)
            >>> round(meter.robust_ratio(), 3), round(meter.measured_ratio(), 3)
            (2.0, 3.81)
        """
        if self.forward_times is None or self.backward_times is None:
            raise RuntimeError("this meter does not record per-pass times (create it with record_passes=True)")
        forward, backward = self.forward_times[offset::step], self.backward_times[offset::step]
        if not backward:
            raise RuntimeError("no backward pass has been timed yet, so there is no ratio to measure")
        if not forward:
            raise RuntimeError("no forward pass has been charged yet, so C_f is undefined")
        return _quantile(backward, quantile) / _quantile(forward, quantile)

    def set_budget(self, budget: float) -> None:
        """Raise (or set) the budget; a resumed trial continues from the cost already charged."""
        self.budget = _check_budget(budget)

    def charge_forward(self, points: int, seconds: float) -> None:
        """Charge one call that scored ``points`` points in ``seconds``."""
        if points < 1:
            raise InputError(f"Invalid points: {points} (a forward call scores at least one point)")
        self.forward_points += points
        self.forward_seconds += seconds
        self.cost += points
        if self.forward_times is not None:
            self.forward_times.append(seconds / points)

    def charge_backward(self, seconds: float) -> None:
        """Charge one backward pass that took ``seconds``."""
        if self.mode == "calibrated":
            charge = self.backward_ratio
        else:
            charge = seconds / self.mean_forward_seconds
        self.backward_passes += 1
        self.backward_seconds += seconds
        self.cost += charge
        if self.backward_times is not None:
            self.backward_times.append(seconds)

    def _now(self) -> float:
        if self.synchronize is not None:
            self.synchronize()
        return self.clock()

    def forward(self, points: int = 1) -> _Timed:
        """Context manager that times the enclosed forward call and charges ``points`` units."""
        return _Timed(self, points)

    def backward(self) -> _Timed:
        """Context manager that times the enclosed backward pass and charges it."""
        return _Timed(self, 0)

    def state_dict(self) -> dict[str, Any]:
        return {
            "budget": self.budget,
            "mode": self.mode,
            "backward_ratio": self.backward_ratio,
            "cost": self.cost,
            "forward_points": self.forward_points,
            "forward_seconds": self.forward_seconds,
            "backward_passes": self.backward_passes,
            "backward_seconds": self.backward_seconds,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["mode"] not in COST_MODES:
            raise InputError(f"Invalid mode in state: {state['mode']!r}")
        self.budget = float(state["budget"])
        self.mode = state["mode"]
        self.backward_ratio = state["backward_ratio"]
        self.cost = float(state["cost"])
        self.forward_points = int(state["forward_points"])
        self.forward_seconds = float(state["forward_seconds"])
        self.backward_passes = int(state["backward_passes"])
        self.backward_seconds = float(state["backward_seconds"])

    def __repr__(self) -> str:
        ratio = "" if self.backward_ratio is None else f", backward_ratio={self.backward_ratio:.4g}"
        return f"CostMeter(cost={self.cost:.6g}, budget={self.budget:.6g}, mode={self.mode!r}{ratio})"


def _quantile(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (linear interpolation between order statistics)."""
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


class _Timed:
    """Times one pass with the meter's clock; points > 0 is a forward call, 0 a backward."""

    __slots__ = ("_meter", "_points", "_start")

    def __init__(self, meter: CostMeter, points: int) -> None:
        self._meter = meter
        self._points = points

    def __enter__(self) -> None:
        self._start = self._meter._now()

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            return  # a pass that raised was not completed, so nothing is charged
        seconds = self._meter._now() - self._start
        if self._points:
            self._meter.charge_forward(self._points, seconds)
        else:
            self._meter.charge_backward(seconds)
