"""The paper's training protocol on any registered task: every optimizer x learning rate x seed.

This is the experiment of the paper's Section "Neural Network Training: MLP on MNIST" (Appendix
"MLP/MNIST: Architecture and Hyperparameters"), written once for any :class:`~eve_search.tasks.Task`:

* each (optimizer, learning rate, seed) is one :class:`~eve_search.engine.trial.Trial` trained to the same
  evaluation-cost budget (the :class:`~eve_search.optim.budget.CostMeter` rule); every optimizer trains the
  same initial weights on the same batches at a given seed (configuration index 0);
* every ``eval_every`` charged units (and at the budget) the validation metrics are computed; the
  weights with the lowest validation ``select_by`` metric (loss by default) are kept, and the
  reported test metrics are those of that snapshot, not of the final weights;
* each method is reported at its own best learning rate, chosen by the mean validation metric over
  seeds; the paper chose it by the mean test metric, which is shown too;
* the wall time of a run is the time spent inside ``train_to`` (training only; validation, snapshots
  and test evaluation are excluded), i.e. the time to spend the budget; the process CPU time of the
  same spans is recorded beside it (``cpu_seconds``: every thread of the process, so it is steadier
  than wall time on a busy machine, but not a substitute for it).

Results go to an Optuna study on RDB storage (user attribute ``kind`` = ``"protocol"``), one
COMPLETE trial per finished run, written with ``Study.add_trial`` only; a run is recorded when it
finishes, so an interrupted protocol resumes by skipping finished runs (an unfinished run restarts).

Example:
    >>> import torch
    >>> from eve_search.tasks import Splits, Task, register_task
    >>> def blobs(data_dir=None):
    ...     g = torch.Generator().manual_seed(0)
    ...     x = torch.randn(700, 4, generator=g)
    ...     y = (x.sum(dim=1) > 0).long()
    ...     return Splits(x[:500], y[:500], x[500:600], y[500:600], x[600:], y[600:])
    >>> def linear(config, data, generator):
    ...     return torch.nn.Linear(4, 2)
    >>> register_task(Task("blobs-protocol", "doctest task", load_data=blobs, build_model=linear, batch_size=50))
    >>> settings = ProtocolSettings("blobs-protocol", optimizers=("eve", "adam"), lrs=(1e-2,), seeds=(0,),
    ...                             budget=60, eval_every=30, backward_ratio=2.0)
    >>> result = run_protocol(settings, storage="sqlite:///:memory:")
    >>> [(run["optimizer"], run["charged_units"] >= 60) for run in result.runs]
    [('eve', True), ('adam', True)]
    >>> sorted(summarize(result)["methods"])
    ['adam', 'eve']
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from eve_search._checks import InputError, check_int
from eve_search.analysis.summary import mean_std
from eve_search.optim.budget import check_backward_ratio, check_cost_mode
from eve_search.engine._stores import describe_failure, redact, safe_url
from eve_search.engine.store import StoreError, open_storage
from eve_search.tasks import Splits, Task, get_task

__all__ = [
    "KIND",
    "ProtocolResult",
    "ProtocolSettings",
    "RunKey",
    "protocol_study_name",
    "run_one",
    "run_protocol",
    "subset_splits",
    "summarize",
]

KIND = "protocol"
from eve_search.paper import PAPER_LR_GRID
RunKey = tuple[str, float, int]  # (optimizer, learning rate, seed)


@dataclass(frozen=True)
class ProtocolSettings:
    """Everything that defines a protocol run.

    Args:
        task: a registered task name.
        optimizers, lrs, seeds: the grid; may grow between resumed invocations (runs are keyed).
        budget: the evaluation-cost budget of every run, in units.
        eval_every: validation every this many charged units (and at the budget).
        weight_decay: passed to every optimizer (L2 or decoupled, as each one defines it).
        model: extra configuration keys for the task's model factory (e.g. ``width``, ``depth``).
        cost_mode: ``"calibrated"`` (default; the backward/forward ratio measured once per optimizer
            and stored with the study) or ``"measured"`` (the paper's per-pass rule).
        backward_ratio: pin the calibrated ratio for every optimizer instead of measuring it.
        subset: train on only the first ``subset`` training rows (validation and test stay whole).
        select_by: the validation metric whose lowest value picks the kept snapshot.
        data_dir: the task's data folder (None: its default data).
        dataset: what the data is, in words, for reports (e.g. "Fashion-MNIST").
        calibration_units: units of the throwaway run that measures a ratio.

    Example:
        >>> settings = ProtocolSettings("mnist", optimizers=("eve", "adam"), lrs=(1e-3, 1e-2), seeds=(0, 1))
        >>> len(settings.runs()), settings.runs()[:2]
        (8, [('eve', 0.001, 0), ('adam', 0.001, 0)])
        >>> settings.config(1e-3)
        {'lr': 0.001, 'weight_decay': 0.0005}
    """

    task: str
    optimizers: tuple[str, ...]
    lrs: tuple[float, ...] = PAPER_LR_GRID
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    budget: int = 3000
    eval_every: int = 250
    weight_decay: float = 5e-4
    model: Mapping[str, Any] = field(default_factory=dict)
    cost_mode: str = "calibrated"
    backward_ratio: float | None = None
    subset: int | None = None
    select_by: str = "loss"
    data_dir: str | None = None
    dataset: str = ""
    calibration_units: int = 200

    def __post_init__(self) -> None:
        from eve_search.optim import optimizer_names

        known = optimizer_names()
        for name in self.optimizers:
            if name not in known:
                raise InputError(f"Invalid optimizer: {name!r} (expected one of {', '.join(known)})")
        if not self.optimizers or not self.lrs or not self.seeds:
            raise InputError("Invalid grid: optimizers, lrs and seeds must each hold at least one value")
        for lr in self.lrs:
            if not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0):
                raise InputError(f"Invalid learning rate: {lr!r} (expected a finite number > 0)")
        for name, value in (("budget", self.budget), ("eval_every", self.eval_every),
                            ("calibration_units", self.calibration_units)):
            check_int(name, value, 1)
        if self.subset is not None:
            check_int("subset", self.subset, 1, detail=" or None")
        check_cost_mode(self.cost_mode)
        check_backward_ratio(self.backward_ratio, self.cost_mode)

    def defining(self) -> dict[str, Any]:
        """The settings a resumed protocol must share with the stored one (the grid may grow)."""
        return {"task": self.task, "budget": self.budget, "eval_every": self.eval_every,
                "weight_decay": self.weight_decay, "model": dict(self.model), "cost_mode": self.cost_mode,
                "backward_ratio": self.backward_ratio, "subset": self.subset, "select_by": self.select_by,
                "dataset": self.dataset}

    def config(self, lr: float) -> dict[str, Any]:
        return {"lr": float(lr), "weight_decay": float(self.weight_decay), **dict(self.model)}

    def runs(self) -> list[RunKey]:
        """Every (optimizer, lr, seed), seed-major: a partly finished protocol has whole seeds first,
        and within a seed every optimizer at a learning rate before the next learning rate."""
        return [(opt, float(lr), int(seed)) for seed in self.seeds for lr in self.lrs for opt in self.optimizers]


def protocol_study_name(settings: ProtocolSettings) -> str:
    """``{task}-protocol-B{budget}`` (``-subset{N}`` when training on a subset).

    Args:
        settings: the protocol's settings.

    Returns:
        The name of the Optuna study the protocol's runs are stored in.

    Example:
        >>> protocol_study_name(ProtocolSettings("mnist", optimizers=("eve",), budget=500, subset=1000))
        'mnist-protocol-B500-subset1000'
    """
    suffix = "" if settings.subset is None else f"-subset{settings.subset}"
    return f"{settings.task}-protocol-B{settings.budget}{suffix}"


def subset_splits(data: Splits, subset: int | None) -> Splits:
    """The splits with only the first ``subset`` training rows (None: unchanged).

    Args:
        data: the task's splits.
        subset: how many training rows to keep (validation and test stay whole); None keeps all.

    Returns:
        The (possibly) shortened splits; ``data`` itself when ``subset`` is None.

    Raises:
        InputError: ``subset`` is larger than the training split.

    Example:
        >>> import torch
        >>> data = Splits(torch.zeros(10, 2), torch.zeros(10), torch.zeros(3, 2), torch.zeros(3),
        ...               torch.zeros(3, 2), torch.zeros(3))
        >>> tuple(subset_splits(data, 4).x_train.shape), subset_splits(data, None) is data
        ((4, 2), True)
    """
    if subset is None:
        return data
    if subset > data.x_train.shape[0]:
        raise InputError(f"Invalid subset: {subset} (the training split has only {data.x_train.shape[0]} rows)")
    return Splits(data.x_train[:subset], data.y_train[:subset], data.x_val, data.y_val, data.x_test, data.y_test)


def _finite_or_inf(value: float) -> float:
    return value if math.isfinite(value) else math.inf


def run_one(task: Task, data: Splits, settings: ProtocolSettings, key: RunKey, backward_ratio: float | None,
            on_progress: Callable[[float], None] | None = None) -> dict[str, Any]:
    """Train one (optimizer, lr, seed) to the budget; return its record (see :func:`run_protocol`).

    Args:
        task: the task to train (it need not be registered).
        data: its splits (already cut to ``settings.subset``).
        settings: the protocol (budget, evaluation interval, weight decay, model keys, cost mode).
        key: the run's (optimizer, learning rate, seed).
        backward_ratio: the frozen backward/forward ratio (calibrated mode), or None (measured mode).
        on_progress: told the charged units after each validation.

    Returns:
        The run's record: its key, ``charged_units``, ``wall_seconds``, ``cpu_seconds``, the kept
        snapshot's ``kept_units``, ``val`` and ``test`` metrics, ``final_val`` and the validation ``curve``.

    Raises:
        InputError: the task does not report ``settings.select_by``.

    Example:
        >>> import torch
        >>> from eve_search.tasks import Splits, Task
        >>> def blobs(data_dir=None):
        ...     x = torch.randn(300, 4, generator=torch.Generator().manual_seed(0))
        ...     y = (x.sum(dim=1) > 0).long()
        ...     return Splits(x[:200], y[:200], x[200:250], y[200:250], x[250:], y[250:])
        >>> task = Task("blobs", "doctest task", load_data=blobs,
        ...             build_model=lambda config, data, generator: torch.nn.Linear(4, 2), batch_size=50)
        >>> settings = ProtocolSettings("blobs", optimizers=("adam",), budget=40, eval_every=20)
        >>> run = run_one(task, task.data(), settings, ("adam", 1e-2, 0), backward_ratio=2.0)
        >>> run["charged_units"] >= 40, len(run["curve"]), sorted(run["test"])
        (True, 2, ['accuracy', 'loss'])
    """
    from eve_search.engine.trial import Trial

    optimizer, lr, seed = key
    trial = Trial(task, settings.config(lr), optimizer, seed=seed, index=0, cost_mode=settings.cost_mode,
                  backward_ratio=backward_ratio, data=data)
    trained = [p for p in trial.model.parameters() if p.requires_grad]
    marks = [*range(settings.eval_every, settings.budget, settings.eval_every), settings.budget]
    curve: list[list[float]] = []
    best: dict[str, Any] | None = None
    snapshot: list[torch.Tensor] = []
    evaluation_seconds = cpu_seconds = 0.0
    for mark in marks:
        cpu_started = time.process_time()
        trial.train_to(mark)
        cpu_seconds += time.process_time() - cpu_started
        started = time.perf_counter()
        val = trial.evaluate("val")
        if settings.select_by not in val:
            raise InputError(f"Invalid select_by: {settings.select_by!r} (task {task.name!r} reports "
                             f"{', '.join(sorted(val))})")
        curve.append([trial.charged_units, val[settings.select_by], val[task.metric]])
        if best is None or _finite_or_inf(val[settings.select_by]) < _finite_or_inf(best["val"][settings.select_by]):
            best = {"units": trial.charged_units, "val": val}
            with torch.no_grad():
                if snapshot:
                    for kept, p in zip(snapshot, trained):
                        kept.copy_(p)
                else:
                    snapshot = [p.detach().clone() for p in trained]
        evaluation_seconds += time.perf_counter() - started
        if on_progress is not None:
            on_progress(trial.charged_units)
    assert best is not None
    started = time.perf_counter()
    final_val = curve[-1]
    with torch.no_grad():  # the run is over: the kept snapshot goes back into the model for the test
        for kept, p in zip(snapshot, trained):
            p.copy_(kept)
    test = trial.evaluate("test")
    evaluation_seconds += time.perf_counter() - started
    meter = trial.meter
    return {
        "optimizer": optimizer, "lr": lr, "seed": seed,
        "charged_units": trial.charged_units, "budget": settings.budget,
        "wall_seconds": trial.wall_seconds, "cpu_seconds": cpu_seconds, "evaluation_seconds": evaluation_seconds,
        "forward_points": meter.forward_points, "backward_passes": meter.backward_passes,
        "backward_ratio": backward_ratio,
        "kept_units": best["units"], "val": best["val"], "test": test,
        "final_val": {"units": final_val[0], settings.select_by: final_val[1], task.metric: final_val[2]},
        "curve": curve,
    }


@dataclass
class ProtocolResult:
    """Finished runs of a protocol (this invocation's and earlier ones'), and where they are stored.

    Attributes:
        settings: the protocol's settings.
        storage: the storage URL the runs are in.
        study: the Optuna study's name (:func:`protocol_study_name`).
        metric, mode: the task's ranked metric and whether higher (``"max"``) or lower is better.
        runs: the finished run records of the grid (see :func:`run_one`), in grid order.
        backward_ratios: the frozen backward/forward ratio of each optimizer (None: measured mode).
        trained: runs trained by this call (0 when every run came from the store).
        wall_seconds: this call's wall time.

    Example:
        >>> import torch
        >>> from eve_search.tasks import Splits, Task, register_task
        >>> def blobs(data_dir=None):
        ...     x = torch.randn(300, 4, generator=torch.Generator().manual_seed(0))
        ...     y = (x.sum(dim=1) > 0).long()
        ...     return Splits(x[:200], y[:200], x[200:250], y[200:250], x[250:], y[250:])
        >>> register_task(Task("blobs-protocol-result", "doctest task", load_data=blobs,
        ...                    build_model=lambda config, data, generator: torch.nn.Linear(4, 2), batch_size=50))
        >>> settings = ProtocolSettings("blobs-protocol-result", optimizers=("adam",), lrs=(1e-2,), seeds=(0,),
        ...                             budget=20, eval_every=20, backward_ratio=2.0)
        >>> result = run_protocol(settings, storage="sqlite:///:memory:")
        >>> result.study, result.metric, result.trained, result.backward_ratios
        ('blobs-protocol-result-protocol-B20', 'accuracy', 1, {'adam': 2.0})
    """

    settings: ProtocolSettings
    storage: str
    study: str
    metric: str
    mode: str
    runs: list[dict[str, Any]]
    backward_ratios: dict[str, float | None]
    trained: int
    wall_seconds: float


class _ProtocolStore:
    """One Optuna study per protocol; one COMPLETE trial per finished (optimizer, lr, seed)."""

    def __init__(self, url: str, settings: ProtocolSettings, direction: str, *, resume: bool,
                 create: bool = True) -> None:
        import optuna
        self._optuna = optuna
        self.url, self.name = url, protocol_study_name(settings)
        storage = open_storage(url)
        defining = settings.defining()
        try:
            existing = self.name in optuna.get_all_study_names(storage)
            if existing and not resume:
                raise StoreError(f"--storage {safe_url(url)!r} already holds protocol {self.name!r}; pass --resume to "
                                 "continue it (finished runs are skipped), or choose another --storage")
            if not existing and not create:
                raise StoreError(f"--storage {safe_url(url)!r} holds no protocol {self.name!r} to report (expected the "
                                 "store and settings of an earlier run; run without --report-only to train)")
            if not existing:
                self.study = optuna.create_study(study_name=self.name, storage=storage, direction=direction)
                self.study.set_user_attr("kind", KIND)
                self.study.set_user_attr("settings", defining)
                self.study.set_user_attr("backward_ratios", {})
            else:
                self.study = optuna.load_study(study_name=self.name, storage=storage)
                attrs = self.study.user_attrs
                if attrs.get("kind") != KIND:
                    raise StoreError(f"--storage {safe_url(url)!r}: study {self.name!r} is not an eve-search protocol")
                saved = attrs.get("settings", {})
                if saved != defining:
                    different = sorted(k for k in set(saved) | set(defining) if saved.get(k) != defining.get(k))
                    raise StoreError(f"protocol {self.name!r} was started with other settings "
                                     f"({', '.join(different)}); resume it with the same arguments or use "
                                     "another --storage")
        except StoreError:
            raise
        except Exception as error:  # noqa: BLE001 a broken or unreachable database: one line
            text = str(error).strip()
            reason = describe_failure(error) or redact(text.splitlines()[0] if text else type(error).__name__)
            raise StoreError(f"--storage {safe_url(url)!r}: {reason}") from None

    def finished(self) -> dict[RunKey, dict[str, Any]]:
        done = {}
        for frozen in self.study.get_trials(deepcopy=False, states=(self._optuna.trial.TrialState.COMPLETE,)):
            run = frozen.user_attrs.get("run")
            if run is not None:
                done[(run["optimizer"], float(run["lr"]), int(run["seed"]))] = run
        return done

    def ratios(self) -> dict[str, float | None]:
        return dict(self.study.user_attrs.get("backward_ratios", {}))

    def set_ratio(self, optimizer: str, ratio: float | None) -> None:
        ratios = self.ratios()
        ratios[optimizer] = ratio
        self.study.set_user_attr("backward_ratios", ratios)

    def add(self, run: dict[str, Any], metric: str) -> None:
        from eve_search.optim import optimizer_names

        d = self._optuna.distributions
        self.study.add_trial(self._optuna.trial.create_trial(
            params={"optimizer": run["optimizer"], "lr": run["lr"], "seed": run["seed"]},
            distributions={"optimizer": d.CategoricalDistribution(optimizer_names()),
                           "lr": d.FloatDistribution(1e-8, 10.0, log=True),
                           "seed": d.IntDistribution(0, 2**31 - 1)},
            value=run["val"][metric],
            user_attrs={"run": run, "test_" + metric: run["test"][metric], "wall_seconds": run["wall_seconds"]},
        ))


def run_protocol(settings: ProtocolSettings, *, storage: str, resume: bool = False, data: Splits | None = None,
                 progress: Callable[[str, Any], None] | None = None, train: bool = True) -> ProtocolResult:
    """Run every (optimizer, lr, seed) of ``settings`` not yet in the store; return all finished runs.

    ``train=False`` trains nothing: the finished runs of the grid are read from an existing store (a
    partly run grid can be reported; :func:`summarize` compares only rates run for every seed).

    ``progress(event, payload)`` is told ``"calibrating"`` (optimizer), ``"start"`` (key, done, total),
    ``"units"`` (charged units of the current run) and ``"finished"`` (the run record).

    Args:
        settings: the grid, budget and task.
        storage: an Optuna RDB storage URL (``sqlite:///...``, ``postgresql://...``).
        resume: continue the study already stored under :func:`protocol_study_name` (its defining
            settings must match).
        data: the task's splits (None: loaded from ``settings.data_dir``).
        progress: told ``(event, payload)`` as described above.
        train: False reads finished runs only.

    Returns:
        Every finished run of the grid, as a :class:`ProtocolResult`.

    Raises:
        StoreError: the storage cannot be opened, or the stored study disagrees with ``settings``.

    Example:
        >>> import torch
        >>> from eve_search.tasks import Splits, Task, register_task
        >>> def blobs(data_dir=None):
        ...     x = torch.randn(300, 4, generator=torch.Generator().manual_seed(0))
        ...     y = (x.sum(dim=1) > 0).long()
        ...     return Splits(x[:200], y[:200], x[200:250], y[200:250], x[250:], y[250:])
        >>> register_task(Task("blobs-run-protocol", "doctest task", load_data=blobs,
        ...                    build_model=lambda config, data, generator: torch.nn.Linear(4, 2), batch_size=50))
        >>> settings = ProtocolSettings("blobs-run-protocol", optimizers=("eve", "adam"), lrs=(1e-2,), seeds=(0,),
        ...                             budget=20, eval_every=20, backward_ratio=2.0)
        >>> events = []
        >>> result = run_protocol(settings, storage="sqlite:///:memory:", progress=lambda e, p: events.append(e))
        >>> [(run["optimizer"], run["seed"]) for run in result.runs], events.count("finished")
        ([('eve', 0), ('adam', 0)], 2)
    """
    task = get_task(settings.task)
    started = time.perf_counter()
    data = subset_splits(task.data(settings.data_dir) if data is None else data, settings.subset)
    direction = "maximize" if task.mode == "max" else "minimize"
    store = _ProtocolStore(storage, settings, direction, resume=resume or not train, create=train)
    tell = progress or (lambda event, payload: None)
    done = store.finished()
    ratios = store.ratios()
    todo = [key for key in settings.runs() if key not in done] if train else []
    trained = 0
    for position, key in enumerate(todo):
        optimizer = key[0]
        if settings.cost_mode == "calibrated" and optimizer not in ratios:
            if settings.backward_ratio is not None:
                ratio = float(settings.backward_ratio)
            else:
                from eve_search.engine.trial import Trial

                tell("calibrating", optimizer)
                lr = 1e-3 if 1e-3 in settings.lrs else settings.lrs[0]
                probe = Trial(task, settings.config(lr), optimizer, seed=settings.seeds[0], index=0,
                              backward_ratio=1.0, data=data)
                ratio = float(probe.calibrate(units=settings.calibration_units))
                if not probe.last_calibration["reliable"]:  # frozen all the same, and said so in one line
                    from eve_search.engine.sweep import calibration_note

                    print(f"eve-search: {calibration_note(optimizer, ratio, probe.last_calibration)}", file=sys.stderr)
            store.set_ratio(optimizer, ratio)
            ratios[optimizer] = ratio
        tell("start", (key, len(done) + position, len(done) + len(todo)))
        run = run_one(task, data, settings, key, ratios.get(optimizer),
                      on_progress=lambda units: tell("units", units))
        run["dataset"] = settings.dataset
        store.add(run, task.metric)
        done[key] = run
        trained += 1
        tell("finished", run)
    runs = [done[key] for key in settings.runs() if key in done]
    return ProtocolResult(settings=settings, storage=storage, study=store.name, metric=task.metric, mode=task.mode,
                          runs=runs, backward_ratios={o: ratios.get(o) for o in settings.optimizers},
                          trained=trained, wall_seconds=time.perf_counter() - started)


def summarize(result: ProtocolResult) -> dict[str, Any]:
    """Per method: every learning rate's mean metrics over its seeds, the rate chosen on validation
    (this package's rule) and on test (the paper's), and the wall time of the budget at each.

    Only learning rates run for every requested seed of that method compete, so an unfinished
    protocol never compares a 1-seed mean with a 5-seed mean.

    Args:
        result: the protocol's finished runs (:func:`run_protocol`).

    Returns:
        The report: ``task``, ``metric``, ``mode``, ``study``, ``storage`` (password hidden),
        ``settings``, ``backward_ratios``, run counts, and ``methods``: per optimizer its ``by_lr``
        means, ``lr_by_val``, ``lr_by_test``, ``all_seeds`` and ``wall_over_eve``.

    Example:
        >>> import torch
        >>> from eve_search.tasks import Splits, Task, register_task
        >>> def blobs(data_dir=None):
        ...     x = torch.randn(300, 4, generator=torch.Generator().manual_seed(0))
        ...     y = (x.sum(dim=1) > 0).long()
        ...     return Splits(x[:200], y[:200], x[200:250], y[200:250], x[250:], y[250:])
        >>> register_task(Task("blobs-summarize", "doctest task", load_data=blobs,
        ...                    build_model=lambda config, data, generator: torch.nn.Linear(4, 2), batch_size=50))
        >>> settings = ProtocolSettings("blobs-summarize", optimizers=("eve", "adam"), lrs=(1e-2,), seeds=(0,),
        ...                             budget=20, eval_every=20, backward_ratio=2.0)
        >>> report = summarize(run_protocol(settings, storage="sqlite:///:memory:"))
        >>> report["runs_finished"], report["methods"]["adam"]["lr_by_val"], report["methods"]["eve"]["wall_over_eve"]
        (2, 0.01, 1.0)
    """
    metric, sign = result.metric, (1.0 if result.mode == "max" else -1.0)
    seeds = set(result.settings.seeds)
    methods: dict[str, Any] = {}
    for optimizer in result.settings.optimizers:
        per_lr = {}
        for lr in result.settings.lrs:
            runs = [r for r in result.runs if r["optimizer"] == optimizer and float(r["lr"]) == float(lr)]
            if not runs:
                continue
            val, val_sd = mean_std([r["val"][metric] for r in runs])
            test, test_sd = mean_std([r["test"][metric] for r in runs])
            wall, wall_sd = mean_std([r["wall_seconds"] for r in runs])
            cpu = [r["cpu_seconds"] for r in runs if "cpu_seconds" in r]
            per_lr[float(lr)] = {"seeds": sorted(r["seed"] for r in runs), "val": val, "val_std": val_sd,
                                 "test": test, "test_std": test_sd, "wall_seconds": wall, "wall_std": wall_sd,
                                 "cpu_seconds": statistics.fmean(cpu) if cpu else None,
                                 "complete": {r["seed"] for r in runs} >= seeds}
        complete = {lr: v for lr, v in per_lr.items() if v["complete"]}
        pool = complete or per_lr

        def pick(split: str, pool: dict[float, Any] = pool) -> float | None:
            finite = {lr: v for lr, v in pool.items() if math.isfinite(v[split])}
            return max(finite, key=lambda lr: sign * finite[lr][split]) if finite else None

        methods[optimizer] = {"by_lr": {f"{lr:g}": v for lr, v in per_lr.items()},
                              "lr_by_val": pick("val"), "lr_by_test": pick("test"),
                              "all_seeds": bool(complete)}
    eve = methods.get("eve", {})
    eve_wall = eve.get("by_lr", {}).get(f"{eve['lr_by_val']:g}", {}).get("wall_seconds") if eve.get(
        "lr_by_val") is not None else None
    for info in methods.values():
        chosen = info["by_lr"].get(f"{info['lr_by_val']:g}") if info["lr_by_val"] is not None else None
        info["wall_over_eve"] = (chosen["wall_seconds"] / eve_wall) if chosen and eve_wall else None
    return {"task": result.settings.task, "dataset": result.settings.dataset, "metric": metric,
            "mode": result.mode, "study": result.study, "storage": safe_url(result.storage),
            "settings": asdict(result.settings) | {"model": dict(result.settings.model)},
            "backward_ratios": result.backward_ratios, "runs_finished": len(result.runs),
            "runs_requested": len(result.settings.runs()), "methods": methods}
