"""Runs of the synthetic benchmark suite, recorded in the results store as they finish.

One run is one method on one (function, n) cell with one seed, under the evaluation-cost budget B
charged by :class:`~eve_search.optim.budget.CostMeter` in ``measured`` mode, the paper's rule (Appendix
"Evaluation-Cost Accounting", Equation 6), with every pass timed as the method performs it:

* ``eve``: :func:`~eve_search.optim.minimize` with the paper's synthetic settings (Appendix table
  "Shared parameters for the synthetic scalable-benchmark sweep"): Latin-hypercube start, polynomial
  mutation on (eta = 20, one gene), fallback lr 0.05, weight decay 1e-4 (L2), 7 Adam steps. Its final
  value is the best slot's value.
* ``adam``: Adam with lr 0.1 (PyTorch defaults otherwise, no weight decay) from the first point of
  the same Latin-hypercube draw that EvE starts from (the same seed gives the same four points), each
  step one forward of one point and one backward, clamped to the box after each step like EvE's
  fallback. Its final value is f at its last iterate, evaluated once after the budget is spent (a
  report, not charged).

Everything is float32 on the CPU, rows batched; an EvE iteration allocates nothing of size n
outside f's own arithmetic and its autograd graph. At n = 1e6 EvE's state is about twenty float32
vectors (80 MB: population, per-slot moments, child, mutant, rows, work point); a Rastrigin run's
peak resident memory grew by 233 MB over the interpreter's 220 MB.

The clock that times each pass is, by default, the calling thread's CPU time (``clock="cpu"``, with
torch on one thread, so every pass runs in that thread): on a dedicated machine it equals the wall
time the paper's rule measures, and on a shared one the time the operating system gives to other
processes is not charged to whichever pass it interrupted (on a 2-core machine at load 17, wall-clock
charges made single backward passes cost hundreds of units). ``clock="wall"`` is the rule read
literally, for a dedicated machine.

The store is an Optuna study (``synthetic-B2000`` for B = 2,000) on RDB storage with one COMPLETE
trial per (function, n, method, seed): its value is the final value and its user attributes hold the
run's identity, iterations, charged units, pass counts and times, and wall seconds. A suite skips
the runs already recorded, so an interrupted command continues where it stopped.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch.optim.adam import adam

from eve_search._checks import InputError
from eve_search.optim.budget import CostMeter
from eve_search.optim import minimize
from eve_search.optim._init import initial_population, make_generators
from eve_search.optim._minimize import charged_gradient
from eve_search.engine.store import StoreError
from eve_search.experiments.synthetic._functions import FUNCTIONS, objective

__all__ = [
    "ADAM_LR",
    "CLOCKS",
    "DEFAULT_DIMS",
    "EVE_SETTINGS",
    "METHODS",
    "RunRecord",
    "SuiteStore",
    "adam_from_lhs",
    "run_adam",
    "run_eve",
    "run_key",
    "run_suite",
    "study_name",
    "warm_up",
]

DEFAULT_DIMS = (2, 10, 20, 50, 100, 200, 500, 1_000, 100_000, 1_000_000)
METHODS = ("eve", "adam")
ADAM_LR = 0.1
CLOCKS: dict[str, Callable[[], float]] = {"cpu": time.thread_time, "wall": time.perf_counter}
EVE_SETTINGS: dict[str, Any] = {"init": "lhs", "polynomial_mutation": True, "eta": 20.0, "lr": 0.05, "n_adam": 7,
                                "weight_decay": 1e-4, "F": 0.5, "gamma": 1e-4, "population_size": 4}


@dataclass
class RunRecord:
    """What one run leaves in the store.

    Attributes:
        function, n: the cell.
        method: ``"eve"`` or ``"adam"``.
        seed: the run's seed.
        value: the final value (+inf for a run that overflowed).
        iterations: EvE's iterations, or Adam's steps.
        units: the evaluation units charged (at least the budget).
        forward_points, forward_seconds: the points evaluated forward and the time they took.
        backward_passes, backward_seconds: the backward passes and the time they took.
        wall_seconds: the run's wall time.

    Example:
        >>> record = run_adam("sphere", 2, seed=0, budget=100)
        >>> record.method, record.units >= 100, record.iterations == record.backward_passes
        ('adam', True, True)
    """

    function: str
    n: int
    method: str
    seed: int
    value: float
    iterations: int
    units: float
    forward_points: int
    forward_seconds: float
    backward_passes: int
    backward_seconds: float
    wall_seconds: float

    @property
    def units_per_backward(self) -> float:
        """Mean charge of one backward pass: the units not spent on forwards, per backward."""
        return (self.units - self.forward_points) / self.backward_passes if self.backward_passes else 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _finite(value: float) -> float:
    return value if math.isfinite(value) else math.inf


def _meter(budget: float, clock: str) -> CostMeter:
    if clock not in CLOCKS:
        raise InputError(f"Invalid clock: {clock!r} (expected one of {', '.join(CLOCKS)})")
    return CostMeter(budget, clock=CLOCKS[clock])


def run_eve(function: str, n: int, seed: int, budget: float, clock: str = "cpu") -> RunRecord:
    """EvE on one cell with one seed under budget ``budget`` (measured cost rule).

    Args:
        function: the test function (one of ``FUNCTIONS``).
        n: the dimension.
        seed: the run's seed.
        budget: the evaluation-cost budget, in units.
        clock: ``"cpu"`` (the thread's CPU time) or ``"wall"``: what times each pass.

    Returns:
        The run's :class:`RunRecord` (value: the best slot's).

    Example:
        >>> record = run_eve("sphere", 2, seed=0, budget=100)
        >>> record.method, record.units >= 100, record.value >= 0.0
        ('eve', True, True)
    """
    spec = FUNCTIONS[function]
    f = objective(function, n)
    meter = _meter(budget, clock)
    start = time.perf_counter()
    result = minimize(f, spec.lower, spec.upper, dim=n, budget=budget, seed=seed, meter=meter, **EVE_SETTINGS)
    wall = time.perf_counter() - start
    return RunRecord(function, n, "eve", seed, _finite(result.fun), result.iterations, meter.cost,
                     meter.forward_points, meter.forward_seconds, meter.backward_passes, meter.backward_seconds, wall)


def adam_from_lhs(f: Callable[[torch.Tensor], torch.Tensor], lower: torch.Tensor, upper: torch.Tensor, seed: int,
                  meter: CostMeter, lr: float = ADAM_LR) -> tuple[float, int]:
    """Adam on ``f`` over the box [lower, upper] from the first point of EvE's Latin-hypercube draw for
    ``seed``, one charged gradient per step, clamped to the box, until ``meter`` is exhausted.
    Returns f at the last iterate (evaluated once, not charged) and the number of steps."""
    n = lower.numel()
    init_generator, _ = make_generators(seed, lower.device)
    z = initial_population(str(EVE_SETTINGS["init"]), int(EVE_SETTINGS["population_size"]), n, init_generator,
                           sigma=0.1, anchor=None, dtype=lower.dtype, device=lower.device)
    x = torch.addcmul(lower, z[0], upper - lower).requires_grad_(True)
    del z
    exp_avg, exp_avg_sq = torch.zeros_like(x), torch.zeros_like(x)
    step = torch.zeros((), dtype=torch.float32)
    grad_output = torch.ones(1, dtype=lower.dtype)
    steps = 0
    while not meter.exhausted:
        _, grad = charged_gradient(f, x, meter, grad_output)
        with torch.no_grad():
            adam([x], [grad], [exp_avg], [exp_avg_sq], [], [step], fused=True, foreach=False, amsgrad=False,
                 beta1=0.9, beta2=0.999, lr=lr, weight_decay=0.0, eps=1e-8, maximize=False)
            torch.clamp(x, min=lower, max=upper, out=x)
        steps += 1
    with torch.no_grad():
        value = float(f(x.unsqueeze(0))[0])
    return _finite(value), steps


def run_adam(function: str, n: int, seed: int, budget: float, clock: str = "cpu", lr: float = ADAM_LR) -> RunRecord:
    """Adam on one cell with one seed under budget ``budget``, from EvE's first Latin-hypercube point.

    Args:
        function: the test function (one of ``FUNCTIONS``).
        n: the dimension.
        seed: the run's seed (the same seed as EvE's gives its first starting point).
        budget: the evaluation-cost budget, in units.
        clock: ``"cpu"`` or ``"wall"``: what times each pass.
        lr: Adam's learning rate.

    Returns:
        The run's :class:`RunRecord` (value: f at the last iterate).

    Example:
        >>> record = run_adam("rastrigin", 3, seed=1, budget=100)
        >>> record.function, record.n, record.units >= 100
        ('rastrigin', 3, True)
    """
    spec = FUNCTIONS[function]
    meter = _meter(budget, clock)
    start = time.perf_counter()
    lower = torch.full((n,), spec.lower, dtype=torch.float32)
    upper = torch.full((n,), spec.upper, dtype=torch.float32)
    value, steps = adam_from_lhs(objective(function, n), lower, upper, seed, meter, lr)
    wall = time.perf_counter() - start
    return RunRecord(function, n, "adam", seed, value, steps, meter.cost, meter.forward_points,
                     meter.forward_seconds, meter.backward_passes, meter.backward_seconds, wall)


RUNNERS: dict[str, Callable[..., RunRecord]] = {"eve": run_eve, "adam": run_adam}


def run_key(function: str, n: int, method: str, seed: int) -> str:
    return f"{function}/n={n}/{method}/seed={seed}"


def study_name(budget: float, clock: str = "cpu") -> str:
    return f"synthetic-B{budget:g}" + ("" if clock == "cpu" else f"-{clock}")


def suite_settings(budget: float, clock: str) -> dict[str, Any]:
    """Everything that must match for two runs to belong to one table."""
    return {"budget": float(budget), "cost_mode": "measured", "clock": clock, "torch_threads": 1, "dtype": "float32",
            "adam_lr": ADAM_LR,
            "adam_start": "first Latin-hypercube point of EvE's initial population", "eve": dict(EVE_SETTINGS),
            "boxes": {name: [spec.lower, spec.upper] for name, spec in FUNCTIONS.items()}}


class SuiteStore:
    """The suite's Optuna study: one COMPLETE trial per finished run (see the module docstring).

    Args:
        storage: an Optuna RDB storage URL.
        budget: the evaluation-cost budget of every run (it names the study).
        clock: ``"cpu"`` or ``"wall"``.

    Raises:
        InputError: an unknown ``clock``.
        StoreError: the store cannot be opened, or its study was recorded with other settings.

    Example:
        >>> store = SuiteStore("sqlite:///:memory:", budget=2000)
        >>> store.name, store.records()
        ('synthetic-B2000', {})
    """

    def __init__(self, storage: str, budget: float, clock: str = "cpu") -> None:
        import optuna
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self._optuna = optuna
        self.storage = storage
        if clock not in CLOCKS:
            raise InputError(f"Invalid clock: {clock!r} (expected one of {', '.join(CLOCKS)})")
        self.budget, self.clock = float(budget), clock
        self.name = study_name(budget, clock)
        settings = suite_settings(budget, clock)
        try:
            self.study = optuna.create_study(study_name=self.name, storage=storage, direction="minimize",
                                             load_if_exists=True)
        except Exception as error:  # noqa: BLE001 SQLAlchemy raises many kinds; the user needs one line of any
            first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise StoreError(f"cannot open the results store {storage!r} ({first_line})") from None
        saved = self.study.user_attrs.get("settings")
        if saved is None:
            self.study.set_user_attr("settings", settings)
        elif saved != settings:
            different = sorted(k for k in set(saved) | set(settings) if saved.get(k) != settings.get(k))
            raise StoreError(f"study {self.name!r} in {storage!r} was recorded with other settings "
                             f"({', '.join(different)}); use another store")

    def records(self) -> dict[str, RunRecord]:
        """Every finished run, by :func:`run_key`."""
        records = {}
        fields = RunRecord.__dataclass_fields__
        for frozen in self.study.get_trials(deepcopy=False, states=(self._optuna.trial.TrialState.COMPLETE,)):
            attrs = frozen.user_attrs
            if "run_key" in attrs:
                records[attrs["run_key"]] = RunRecord(**{k: attrs[k] for k in fields})
        return records

    def record(self, run: RunRecord) -> None:
        attrs = run.as_dict() | {"run_key": run_key(run.function, run.n, run.method, run.seed),
                                 "units_per_backward": run.units_per_backward, "torch_threads": torch.get_num_threads()}
        self.study.add_trial(self._optuna.trial.create_trial(
            state=self._optuna.trial.TrialState.COMPLETE, value=run.value, user_attrs=attrs))


def warm_up(functions: Sequence[str], clock: str = "cpu") -> None:
    """One short, discarded run of each method per function, so that no recorded run pays the process's
    first-call costs (the autograd engine's start, first allocations) inside a timed pass: in a fresh
    process the first run's first backward alone is charged tens of units."""
    for function in functions:
        for runner in RUNNERS.values():
            runner(function, max(2, FUNCTIONS[function].min_dim), 0, 50.0, clock)


def _work(n: int) -> float:
    """A rough relative duration of one run, for the time-left estimate (runs of large n dominate)."""
    return 1.0 + n / 2_000.0


def run_suite(store: SuiteStore, functions: Sequence[str], dims: Sequence[int], seeds: Sequence[int], *,
              progress: Callable[[str, float, float, bool], None] | None = None,
              run: bool = True) -> tuple[dict[str, RunRecord], int]:
    """Run every missing (function, n, method, seed) of the selection under the store's budget and
    clock, smallest n first, on one torch thread, recording each as it finishes.
    ``progress(description, work_done, work_total, ran)`` is called before and after each run.
    Returns the selection's records (finished earlier or now) and how many ran now.

    Args:
        store: the suite's store (its budget and clock apply to every run).
        functions: the test functions.
        dims: the dimensions.
        seeds: the seeds (each runs both methods).
        progress: told ``(description, work_done, work_total, ran)`` around each run.
        run: False runs nothing: only the records already stored are returned.

    Returns:
        ``(records, ran)``: the selection's records by :func:`run_key`, and how many ran now.

    Example:
        >>> store = SuiteStore("sqlite:///:memory:", budget=50)
        >>> records, ran = run_suite(store, ["sphere"], [2], [0])
        >>> sorted(records), ran
        (['sphere/n=2/adam/seed=0', 'sphere/n=2/eve/seed=0'], 2)
        >>> run_suite(store, ["sphere"], [2], [0])[1]  # every run is stored: none runs again
        0
    """
    budget, clock = store.budget, store.clock
    records = store.records()
    plan = [(function, n, method, seed) for n in sorted(dims) for function in functions
            for seed in seeds for method in METHODS]
    todo = [item for item in plan if run_key(*item) not in records] if run else []
    total = sum(_work(n) for _, n, _, _ in todo)
    done = 0.0
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # every pass in the calling thread, whose CPU time the "cpu" clock reads
    try:
        if todo:
            warm_up(sorted({function for function, *_ in todo}), clock)
        for function, n, method, seed in todo:
            if progress is not None:
                progress(f"{function} n={n:g} {method} seed {seed}", done, total, False)
            record = RUNNERS[method](function, n, seed, budget, clock)
            store.record(record)
            records[run_key(function, n, method, seed)] = record
            done += _work(n)
            if progress is not None:
                progress(f"{function} n={n:g} {method} seed {seed}", done, total, True)
    finally:
        torch.set_num_threads(threads)
    selected = {run_key(*item): records[run_key(*item)] for item in plan if run_key(*item) in records}
    return selected, len(todo)
