"""One configuration's training run: the unit every search driver shares.

A :class:`Trial` trains one configuration of a :class:`~eve_search.tasks.Task` with one optimizer (EvE
or a baseline from the registry). It owns its model, optimizer, :class:`~eve_search.optim.budget.CostMeter`,
minibatch stream and every random generator, all derived from (training seed, configuration index).
``train_to(budget)`` raises the budget and trains until the meter reaches it; calling it again with a
larger budget continues, never restarts. ``save``/``load`` (a file, atomically) and
``to_bytes``/``load_bytes`` capture everything, so save, load and continue equals never stopping, bit
for bit; loading never executes code (see :mod:`eve_search.engine.checkpoint`).
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from eve_search._checks import InputError, check_int
from eve_search.engine.batches import BatchStream
from eve_search.optim.budget import CostMeter
from eve_search.engine.checkpoint import (
    FORMAT,
    CheckpointError,
    load_state,
    save_atomically,
    state_bytes,
)
from eve_search.optim import make_optimizer
from eve_search.tasks import Config, Splits, Task, get_task
from eve_search.tasks.models import mlp

__all__ = ["KEEP_BYTES", "KeptTrials", "Trial", "evaluate_checkpoint", "trial_bytes", "trial_seeds", "warm_up"]

# Calibration (see Trial.calibrate): enough backward passes per group of passes, agreement between
# interleaved groups, and the range a backward/forward ratio of an MLP training loop lies in.
MIN_CALIBRATION_BACKWARDS = 8
MAX_CALIBRATION_UNITS_FACTOR = 4
CALIBRATION_AGREEMENT = 1.15
CALIBRATION_RANGE = (0.5, 8.0)


def trial_seeds(seed: int, index: int) -> tuple[int, int, int]:
    """(model initialization, batch order, optimizer) seeds of configuration ``index`` under training seed ``seed``.

    They depend on the training seed and the configuration, not on the optimizer, so every method
    trains a configuration from the same initial weights on the same batches (pairing by seed).

    Args:
        seed: the training seed.
        index: the configuration's index in its sweep.

    Returns:
        Three independent seeds, each an int in [0, 2**64).

    Example:
        >>> trial_seeds(0, 5) == trial_seeds(0, 5), trial_seeds(0, 5) == trial_seeds(1, 5)
        (True, False)
        >>> len(set(trial_seeds(0, 5)))
        3
    """
    states = np.random.SeedSequence([int(seed), int(index)]).generate_state(3, dtype=np.uint64)
    return tuple(int(s) for s in states)  # type: ignore[return-value]


def evaluate_checkpoint(task: Task, config: Config, content: bytes, split: str = "val", *, seed: int, index: int,
                        data: Splits, budget: int | None = None) -> dict[str, float]:
    """The task's metrics on ``split`` of the model saved in a trial checkpoint (:meth:`Trial.to_bytes`),
    without building the trial's optimizer or reading its state: what a process that only records
    results (the parent of ``--jobs`` workers) needs for test metrics. Equal to building the trial,
    loading the checkpoint and calling :meth:`Trial.evaluate`, bit for bit. A checkpoint of another
    trial, or one that does not fit, raises :class:`CheckpointError`.

    Args:
        task: the trial's task.
        config: its configuration.
        content: the checkpoint's bytes.
        split: ``"train"``, ``"val"`` or ``"test"``.
        seed: the trial's training seed (the checkpoint must carry the same).
        index: its configuration index (likewise).
        data: the task's splits.
        budget: the budget the checkpoint must hold (another raises :class:`CheckpointError`); None, any.

    Returns:
        The task's metrics (``task.metric`` among them).

    Example:
        >>> from eve_search.tasks import get_task
        >>> from eve_search.engine.trial import Trial, evaluate_checkpoint
        >>> config = {"lr": 3e-3, "width": 32, "depth": 1}
        >>> trial = Trial("adult", config, "eve", seed=0, index=5, backward_ratio=2.0)
        >>> trial.train_to(50)
        >>> saved = evaluate_checkpoint(get_task("adult"), config, trial.to_bytes(), "test", seed=0, index=5,
        ...                             data=trial.data)
        >>> saved == trial.evaluate("test")
        True
    """
    state = load_state(content)
    _check_owner(state, {"task": task.name, "config": dict(config), "seed": seed, "index": index})
    if budget is not None and state.get("budget") != budget:
        raise CheckpointError(f"checkpoint holds the state at budget {state.get('budget')!r}, not {budget}")
    # The same generator as the trial's: frozen weights (a LoRA base model) are rebuilt, never saved.
    model = task.new_model(dict(config), data, torch.Generator().manual_seed(trial_seeds(seed, index)[0]))
    try:
        _load_model_state(model, state["model"])
    except _UNFIT as error:
        raise _does_not_fit(error) from None
    return task.evaluate(model, data, split)


# What a checkpoint that does not fit its trial raises while it is loaded.
_UNFIT = (KeyError, ValueError, RuntimeError, TypeError, IndexError)


def _does_not_fit(error: BaseException) -> CheckpointError:
    first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return CheckpointError(f"checkpoint does not fit this trial ({first})")


def _check_owner(state: dict[str, Any], identity: dict[str, Any]) -> None:
    """Refuse a state of another format, or one that belongs to another trial or sweep."""
    if state.get("format") != FORMAT:
        raise CheckpointError(f"checkpoint format {state.get('format')!r} is not {FORMAT!r}")
    mismatch = [key for key, value in identity.items() if state.get(key) != value]
    if mismatch:
        raise CheckpointError(f"checkpoint belongs to another trial ({', '.join(mismatch)} differ)")


def _frozen_names(model: torch.nn.Module) -> set[str]:
    """Names of the model's frozen parameters: rebuilt by the task's factory, never saved (a LoRA
    trial saves its adapters, not a copy of the base model)."""
    return {name for name, p in model.named_parameters() if not p.requires_grad}


def _load_model_state(model: torch.nn.Module, saved: dict[str, Any]) -> None:
    """Load saved weights into ``model``; ValueError when its keys are not the model's unfrozen ones."""
    frozen = _frozen_names(model)
    missing, unexpected = model.load_state_dict(saved, strict=False)
    if unexpected or set(missing) - frozen:
        raise ValueError(f"model keys differ: {sorted(unexpected) or sorted(set(missing) - frozen)}")


def _check_whole(name: str, value: Any) -> int:
    return check_int(name, value, 0, types=(int, np.integer))


class Trial:
    """Train one configuration of a task with one optimizer under an evaluation-cost budget.

    Args:
        task: a :class:`~eve_search.tasks.Task` or the name of a registered one.
        config: a configuration of a search space; ``lr`` and ``weight_decay`` (default 0) go to the
            optimizer, the rest to the task's model factory.
        optimizer: a registry name (``eve``, ``adam``, ...).
        seed: the training seed; ``index``: the configuration's index in its sweep.
        cost_mode, backward_ratio: see :class:`~eve_search.optim.budget.CostMeter`.
        data: the task's splits (default: ``task.data()``).
        owner: what the trial belongs to (a sweep's id); a checkpoint of another owner is refused.

    Example:
        >>> from eve_search.engine.trial import Trial
        >>> config = {"lr": 3e-3, "weight_decay": 5e-4, "width": 64, "depth": 1}
        >>> trial = Trial("adult", config, "eve", seed=0, index=0, backward_ratio=2.0)
        >>> trial.train_to(100)
        >>> trial.charged_units >= 100, 0.5 < trial.evaluate()["accuracy"] <= 1.0
        (True, True)
        >>> copy = Trial("adult", config, "eve", seed=0, index=0, backward_ratio=2.0)
        >>> copy.load_bytes(trial.to_bytes())
        >>> copy.train_to(200); trial.train_to(200)
        >>> copy.evaluate() == trial.evaluate()
        True
    """

    def __init__(self, task: Task | str, config: Config, optimizer: str, *, seed: int, index: int,
                 cost_mode: str = "calibrated", backward_ratio: float | None = None, data: Splits | None = None,
                 owner: str = "") -> None:
        self.task = get_task(task) if isinstance(task, str) else task
        if not isinstance(self.task, Task):
            raise TypeError(f"Invalid task: {task!r} (expected a Task or a registered task name)")
        self.config = dict(config)
        for key in ("lr",):
            if key not in self.config:
                raise InputError(f"Invalid config: {self.config!r} (expected an 'lr' key)")
        self.optimizer_name = optimizer
        self.seed = _check_whole("seed", seed)
        self.index = _check_whole("index", index)
        self.owner = str(owner)
        self.data = self.task.data() if data is None else data
        init_seed, batch_seed, optimizer_seed = trial_seeds(self.seed, self.index)
        self.model = self.task.new_model(self.config, self.data, torch.Generator().manual_seed(init_seed))
        on_cuda = any(p.is_cuda for p in self.model.parameters())
        # On a GPU the clock is read only after the device has finished (paper, Appendix "Evaluation-Cost
        # Accounting": asynchronous kernels are not free).
        self.meter = CostMeter(mode=cost_mode, backward_ratio=backward_ratio,
                               synchronize=torch.cuda.synchronize if on_cuda else None)
        self.optimizer = make_optimizer(optimizer, [p for p in self.model.parameters() if p.requires_grad],
                                        lr=float(self.config["lr"]),
                                        weight_decay=float(self.config.get("weight_decay", 0.0)),
                                        meter=self.meter, seed=optimizer_seed)
        self.stream = BatchStream(self.data.x_train, self.data.y_train, self.task.batch_size,
                                  generator=torch.Generator().manual_seed(batch_seed))
        self.budget = 0
        self.wall_seconds = 0.0
        self.last_calibration: dict[str, Any] | None = None

    @property
    def charged_units(self) -> float:
        return self.meter.cost

    def train_to(self, budget: int) -> None:
        """Raise the budget to ``budget`` units and train until the meter reaches it."""
        if isinstance(budget, bool) or not isinstance(budget, (int, float, np.integer)) or budget != int(budget):
            raise InputError(f"Invalid budget: {budget!r} (expected a whole number of evaluation units)")
        if not budget >= self.budget:
            raise InputError(f"Invalid budget: {budget} (a trial resumes, so it must be >= its current "
                             f"budget {self.budget})")
        self.meter.set_budget(budget)
        self.budget = int(budget)
        model, loss, stream, optimizer, meter = self.model, self.task.loss, self.stream, self.optimizer, self.meter
        start = time.perf_counter()
        while not meter.exhausted:
            x, y = stream.next()
            optimizer.step(lambda: loss(model, x, y))
        self.wall_seconds += time.perf_counter() - start

    def evaluate(self, split: str = "val") -> dict[str, float]:
        """The task's metrics on ``split`` (EvE: its member with the lowest recorded value, which the
        module holds after every step)."""
        return self.task.evaluate(self.model, self.data, split)

    def score(self, metrics: dict[str, float]) -> float:
        """The metric the search ranks by, out of :meth:`evaluate`'s result."""
        return metrics[self.task.metric]

    def calibrate(self, units: float = 200.0, chunks: int = 2, attempts: int = 3) -> float:
        """The backward/forward ratio of this trial's training loop under the measured rule, from a
        throwaway copy trained for ``units`` or more (this trial is not touched).

        Measuring the real loop, not an isolated pass, times forwards exactly as this optimizer
        performs them (EvE mostly scores without a graph; a baseline records one) and in the same
        company (cache and threads after an optimizer update). The meter records every pass, and the
        ratio is taken between low quantiles of the per-pass times
        (:meth:`~eve_search.optim.budget.CostMeter.robust_ratio`): passes slowed by other processes only
        fill the upper tail, so a busy machine freezes about the quiet machine's ratio. The run is
        extended until it holds enough backward passes, and the estimate is checked against itself
        (``chunks`` interleaved groups of passes must agree within 15%, the ratio must lie in
        [0.5, 8]); otherwise it is measured again, up to ``attempts`` times, and the median estimate
        is kept. ``self.last_calibration`` says how it went (``reliable``: False when no attempt passed;
        ``spread``: by how much, as a fraction, the interleaved groups of the closest attempt disagreed).
        """
        chunks = max(2, int(chunks))
        estimates = []
        spreads = []
        for _ in range(max(1, int(attempts))):
            probe = Trial(self.task, self.config, self.optimizer_name, seed=self.seed, index=self.index,
                          cost_mode="measured", data=self.data)
            meter = probe.meter
            meter.start_recording()
            budget = max(1, round(units))
            probe.train_to(budget)
            while (meter.backward_passes < MIN_CALIBRATION_BACKWARDS * chunks // 2
                   and budget < MAX_CALIBRATION_UNITS_FACTOR * units):
                budget += max(1, round(units))
                probe.train_to(budget)
            ratio = meter.robust_ratio()
            groups = [meter.robust_ratio(offset=k, step=chunks) for k in range(chunks)
                      if meter.backward_times[k::chunks] and meter.forward_times[k::chunks]]
            estimates.append(ratio)
            spreads.append(max(groups) / min(groups) - 1.0 if len(groups) == chunks and min(groups) > 0 else math.inf)
            agree = len(groups) == chunks and max(groups) <= CALIBRATION_AGREEMENT * min(groups)
            if agree and CALIBRATION_RANGE[0] <= ratio <= CALIBRATION_RANGE[1]:
                self.last_calibration = {"ratio": ratio, "reliable": True, "estimates": estimates,
                                         "spread": spreads[-1]}
                return ratio
        ratio = statistics.median(estimates)
        self.last_calibration = {"ratio": ratio, "reliable": False, "estimates": estimates, "spread": min(spreads)}
        return ratio

    # State ------------------------------------------------------------------------------------------

    def _identity(self) -> dict[str, Any]:
        return {"task": self.task.name, "config": self.config, "optimizer_name": self.optimizer_name,
                "seed": self.seed, "index": self.index, "owner": self.owner}


    def state_dict(self) -> dict[str, Any]:
        frozen = _frozen_names(self.model)
        return {
            "format": FORMAT,
            **self._identity(),
            "model": {k: v for k, v in self.model.state_dict().items() if k not in frozen},
            "optimizer": self.optimizer.state_dict(),
            "meter": self.meter.state_dict(),
            "stream": self.stream.state_dict(),
            "budget": self.budget,
            "wall_seconds": self.wall_seconds,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state``; one that belongs to another trial or sweep raises :class:`CheckpointError`."""
        _check_owner(state, self._identity())
        try:
            _load_model_state(self.model, state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            self.meter.load_state_dict(state["meter"])
            self.stream.load_state_dict(state["stream"])
            self.budget = int(state["budget"])
            self.wall_seconds = float(state["wall_seconds"])
        except _UNFIT as error:
            raise _does_not_fit(error) from None

    def to_bytes(self) -> bytes:
        """The whole trial state, serialized (see :mod:`eve_search.engine.checkpoint`)."""
        return state_bytes(self.state_dict())

    def load_bytes(self, content: bytes) -> None:
        """Continue from :meth:`to_bytes`'s output; never executes code."""
        self.load_state_dict(load_state(content))

    def save(self, path: str | os.PathLike) -> None:
        """Write the whole trial state to ``path`` atomically."""
        save_atomically(self.state_dict(), path)

    def load(self, path: str | os.PathLike) -> None:
        """Continue from a file written by :meth:`save`; never executes code."""
        try:
            self.load_state_dict(load_state(path))
        except CheckpointError as error:
            message = str(error)
            if not message.startswith("checkpoint "):
                message = f"checkpoint {path}: {message.removeprefix('checkpoint ')}"
            raise CheckpointError(message) from None

    def __repr__(self) -> str:
        return (f"Trial(task={self.task.name!r}, optimizer={self.optimizer_name!r}, seed={self.seed}, "
                f"index={self.index}, budget={self.budget}, charged={self.charged_units:.1f})")


def warm_up(optimizer: str) -> None:
    """Pay one-time costs (lazy imports inside torch.optim, first-call kernel setup) before the
    sweep's clock starts, so that whichever sweep a process runs first is not charged for them.

    Args:
        optimizer: a registered optimizer's name; four steps of it run on a tiny network.

    Example:
        >>> warm_up("eve")
        >>> warm_up("nosuch")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        eve_search.InputError: ...nosuch...
    """
    model = mlp(4, [4], 2, generator=torch.Generator().manual_seed(0))
    opt = make_optimizer(optimizer, model.parameters(), lr=1e-3)
    x, y = torch.zeros(8, 4), torch.zeros(8, dtype=torch.long)
    for _ in range(4):
        opt.step(lambda: torch.nn.functional.cross_entropy(model(x), y))


KEEP_BYTES = 512 * 2**20
"""Default memory for trials kept between rungs (their weights, buffers and checkpointed state)."""


def trial_bytes(trial: Trial, checkpoint: bytes | None = None) -> int:
    """Memory a kept trial holds, counted generously: every parameter and buffer of its model (frozen
    ones included, which its checkpoint leaves out) plus the size of its checkpoint (the optimizer's
    state, the batch stream, the meter), or, without one, the model's and the optimizer's tensors
    again (what its checkpoint will hold).

    Args:
        trial: the trial to keep.
        checkpoint: its serialized state (:meth:`~eve_search.engine.trial.Trial.to_bytes`), if made.

    Returns:
        The bytes counted against ``keep_bytes``.

    Example:
        >>> from eve_search.engine.trial import Trial
        >>> trial = Trial("adult", {"lr": 1e-3, "width": 8, "depth": 1}, "adam", seed=0, index=0,
        ...               backward_ratio=2.0)
        >>> trial_bytes(trial) > trial_bytes(trial, checkpoint=b"") > 0
        True
    """
    tensors = [*trial.model.parameters(), *trial.model.buffers()]
    size = sum(t.numel() * t.element_size() for t in tensors)
    if checkpoint is not None:
        return size + len(checkpoint)
    return 2 * size + _tensor_bytes(trial.optimizer.state_dict())


class KeptTrials:
    """Trials kept in memory between rungs, each counted at its :func:`trial_bytes`, within ``budget``
    bytes in all: the one budget rule of the in-process engine, the ``--jobs`` workers and the Optuna
    worker driver.

    A trial kept ``unsaved`` is one whose checkpoint of its last result is not written yet (it waits
    for its rung's decision): it stays unsaved until :meth:`mark_saved` or until it is no longer kept.

    Args:
        budget: the bytes the kept trials may count together (``keep_bytes``; 0 keeps none).

    Example:
        >>> kept = KeptTrials(budget=100)
        >>> kept.keep(0, "trial 0", 60), kept.keep(1, "trial 1", 60), kept.keep(2, "trial 2", 40, unsaved=True)
        (True, False, True)
        >>> sorted(kept), kept.bytes, kept.pop(0), kept.pop(0), kept.bytes
        ([0, 2], 100, 'trial 0', None, 40)
        >>> kept.unsaved(), kept.is_unsaved(2), kept.mark_saved(2), kept.unsaved()
        ([2], True, None, [])
    """

    def __init__(self, budget: int) -> None:
        self.budget = check_int("keep_bytes", budget, 0)
        self.bytes = 0
        self._trials: dict[int, tuple[Any, int]] = {}
        self._unsaved: set[int] = set()

    def keep(self, index: int, trial: Any, size: int, *, unsaved: bool = False) -> bool:
        """Keep ``trial`` as configuration ``index`` (replacing any kept before) if ``size`` more bytes fit;
        ``unsaved``: its checkpoint is not written yet.

        Returns:
            Whether it is kept.
        """
        self.pop(index)
        if self.bytes + size > self.budget:
            return False
        self._trials[index] = (trial, size)
        self.bytes += size
        if unsaved:
            self._unsaved.add(index)
        return True

    def mark_saved(self, index: int) -> None:
        """Trial ``index``'s checkpoint of its last result is written (or need not be)."""
        self._unsaved.discard(index)

    def is_unsaved(self, index: int) -> bool:
        """Whether trial ``index`` is kept with its checkpoint not written yet."""
        return index in self._unsaved

    def unsaved(self) -> list[int]:
        """The kept trials whose checkpoint is not written yet, in index order."""
        return sorted(self._unsaved)

    def get(self, index: int) -> Any:
        """The kept trial ``index`` (it stays kept), or None.

        Returns:
            The trial, or None.
        """
        kept = self._trials.get(index)
        return None if kept is None else kept[0]

    def pop(self, index: int) -> Any:
        """Stop keeping trial ``index``.

        Returns:
            The trial, or None if it was not kept.
        """
        self._unsaved.discard(index)
        kept = self._trials.pop(index, None)
        if kept is None:
            return None
        self.bytes -= kept[1]
        return kept[0]

    def __contains__(self, index: object) -> bool:
        return index in self._trials

    def __iter__(self) -> Iterator[int]:
        return iter(list(self._trials))

    def __len__(self) -> int:
        return len(self._trials)


def _tensor_bytes(value: Any) -> int:
    """Bytes of every tensor in a nest of dicts, lists and tuples (an optimizer's state dict)."""
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, dict):
        return sum(_tensor_bytes(item) for item in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_tensor_bytes(item) for item in value)
    return 0
