"""What a task is: the :class:`Task` record, its default loss and metrics, and the batch-size check."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from eve_search._checks import InputError, check_int
from eve_search.data._splits import Splits

__all__ = ["MODES", "Config", "Splits", "Task", "check_batch_size", "classification_metrics", "cross_entropy_loss",
           "describe_function"]

Config = dict[str, Any]
MODES = ("max", "min")


def cross_entropy_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of the model's logits: the default training loss of a classification task.

    Args:
        model: a classifier returning one row of logits per input row.
        x: a minibatch of inputs.
        y: its class indices.

    Returns:
        A 0-dim tensor with a gradient, ready for ``backward()``.

    Example:
        >>> import torch
        >>> model = torch.nn.Linear(3, 2)
        >>> _ = torch.nn.init.zeros_(model.weight), torch.nn.init.zeros_(model.bias)
        >>> round(cross_entropy_loss(model, torch.ones(4, 3), torch.tensor([0, 1, 0, 1])).item(), 4)
        0.6931
    """
    return torch.nn.functional.cross_entropy(model(x), y)


def classification_metrics(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
    """``accuracy`` and mean cross-entropy ``loss`` of a classifier on (x, y), in one forward pass.

    Args:
        model: a classifier returning one row of logits per input row.
        x: the inputs of a whole split.
        y: their class indices.

    Returns:
        ``{"accuracy": ..., "loss": ...}`` as Python floats.

    Example:
        >>> import torch
        >>> model = torch.nn.Linear(3, 2)
        >>> _ = torch.nn.init.zeros_(model.weight), torch.nn.init.zeros_(model.bias)
        >>> metrics = classification_metrics(model, torch.ones(4, 3), torch.tensor([0, 1, 0, 0]))
        >>> metrics["accuracy"], round(metrics["loss"], 4)
        (0.75, 0.6931)
    """
    logits = model(x)
    return {"accuracy": (logits.argmax(dim=1) == y).double().mean().item(),
            "loss": torch.nn.functional.cross_entropy(logits, y).item()}


def describe_function(function: Any) -> str:
    """A task's function as messages name it: its name and where it is defined, so that an error in a
    plugin's code names that code.

    Args:
        function: a callable (a function, a method, a ``functools.partial``, an object with ``__call__``).

    Returns:
        ``'name' (file.py:line)``, or just the quoted name when its source file is unknown.

    Example:
        >>> describe_function(cross_entropy_loss)
        "'cross_entropy_loss' (_task.py:24)"
    """
    inner = getattr(function, "func", function)  # a functools.partial names its function
    name = getattr(inner, "__qualname__", None) or getattr(inner, "__name__", None) or type(inner).__name__
    code = getattr(inner, "__code__", None) or getattr(getattr(inner, "__call__", None), "__code__", None)
    if code is None:
        return repr(name)
    return f"{name!r} ({os.path.basename(code.co_filename)}:{code.co_firstlineno})"


def _show(value: Any) -> str:
    text = repr(value).replace("\n", " ")
    return text if len(text) <= 60 else text[:57] + "..."


def _parameter_key(config: Config) -> str:
    """Configurations that differ only in optimizer settings train the same network."""
    return ",".join(f"{k}={config[k]}" for k in sorted(config) if k not in ("lr", "weight_decay")) or "model"


@dataclass(frozen=True)
class Task:
    """A learning problem the search can train configurations on.

    Args:
        name: registry key (``eve-search sweep --task NAME``).
        description: one line for ``--help`` and reports.
        load_data: ``load_data(data_dir)`` returns the :class:`Splits` (``data_dir`` None: the task's
            default data). Called once per process and directory; the result is cached.
        build_model: ``build_model(config, splits, generator)`` returns a fresh model whose initial
            weights come from ``generator`` only (one seed, one network).
        loss: ``loss(model, x, y)``, the training loss on a minibatch (default: cross-entropy).
        metrics: ``metrics(model, x, y)``, a dict of floats on a whole split, run without gradients
            (default: accuracy and loss). It must contain ``metric``. A ``--jobs`` worker may run it
            on a second thread while another trial trains, so it must not change shared state.
        metric: the validation metric the search ranks by; ``mode``: ``"max"`` or ``"min"``.
        batch_size: the training minibatch size.
        cost_key: configurations with the same key cost the same per pass, so they share one
            calibrated backward/forward ratio (default: every key except ``lr`` and ``weight_decay``).
        spaces: names of the search spaces made for this task (the CLI's defaults and choices).

    Example:
        >>> import torch
        >>> from eve_search.tasks.models import mlp
        >>> data = Splits(torch.randn(8, 3), torch.randint(0, 2, (8,)), torch.randn(4, 3),
        ...               torch.randint(0, 2, (4,)), torch.randn(4, 3), torch.randint(0, 2, (4,)))
        >>> task = Task("toy", "a random two-class problem", load_data=lambda data_dir: data,
        ...             build_model=lambda config, splits, g: mlp(3, [4], 2, generator=g), batch_size=4)
        >>> model = task.build_model({}, task.data(), torch.Generator().manual_seed(0))
        >>> sorted(task.evaluate(model, task.data()))
        ['accuracy', 'loss']
    """

    name: str
    description: str
    load_data: Callable[[Path | None], Splits]
    build_model: Callable[[Config, Splits, torch.Generator], nn.Module]
    loss: Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor] = cross_entropy_loss
    metrics: Callable[[nn.Module, torch.Tensor, torch.Tensor], Mapping[str, float]] = classification_metrics
    metric: str = "accuracy"
    mode: str = "max"
    batch_size: int = 256
    cost_key: Callable[[Config], str] = _parameter_key
    spaces: tuple[str, ...] = ()
    _cache: dict[Any, Splits] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or not self.name.replace("-", "").replace("_", "").isalnum():
            raise InputError(f"Invalid name: {self.name!r} (expected letters, digits, '-' or '_')")
        if self.mode not in MODES:
            raise InputError(f"Invalid mode: {self.mode!r} (expected 'max' or 'min')")
        check_int("batch_size", self.batch_size, 1)
        for name in ("load_data", "build_model", "loss", "metrics", "cost_key"):
            if not callable(getattr(self, name)):
                raise TypeError(f"Invalid {name}: {getattr(self, name)!r} (expected a callable)")

    def data(self, data_dir: str | os.PathLike | None = None) -> Splits:
        """The task's splits from ``data_dir`` (None: its default data), loaded once per process.

        Raises InputError when the training split has fewer rows than one minibatch (``batch_size``):
        no trial could draw a batch from it.
        """
        key = None if data_dir is None else Path(data_dir).resolve()
        if key not in self._cache:
            splits = self.load_data(key)
            check_batch_size(splits, self.batch_size, "the task's default data" if key is None else key,
                             task=self.name)
            self._cache[key] = splits
        return self._cache[key]

    def __getstate__(self) -> dict[str, Any]:
        # A task travels to other processes (Ray actors, worker processes) without its loaded data.
        return {**self.__dict__, "_cache": {}}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for key, value in state.items():
            object.__setattr__(self, key, value)

    def new_model(self, config: Config, data: Splits, generator: torch.Generator) -> nn.Module:
        """``build_model(config, data, generator)``, checked: a builder that returns anything but a
        ``torch.nn.Module`` (None, say) gets a one-line InputError naming the task and the builder.

        Example:
            >>> task = Task("toy", "nothing", load_data=lambda data_dir: None, build_model=lambda c, d, g: None)
            >>> task.new_model({}, None, torch.Generator())  # doctest: +ELLIPSIS
            Traceback (most recent call last):
            ...
            eve_search.InputError: task 'toy': its build_model '<lambda>' (...:1) returned None (expected a torch.nn.Module)
        """
        model = self.build_model(config, data, generator)
        if not isinstance(model, nn.Module):
            raise InputError(f"task {self.name!r}: its build_model {describe_function(self.build_model)} returned "
                             f"{_show(model)} (expected a torch.nn.Module)")
        return model

    def evaluate(self, model: nn.Module, data: Splits, split: str = "val") -> dict[str, float]:
        """The task's metrics of ``model`` on a split, without gradients.

        ``metrics`` must return a mapping of names to numbers (a float, an int, a one-element tensor or
        array); anything else gets a one-line InputError naming the task, its metrics function, the
        metric and the value.
        """
        x, y = data.split(split)
        was_training = model.training
        model.eval()
        try:
            with torch.inference_mode():
                returned = self.metrics(model, x, y)
                values = self._numbers(returned)
        finally:
            model.train(was_training)
        if self.metric not in values:
            raise InputError(f"task {self.name!r}: its metrics {describe_function(self.metrics)} returned "
                             f"{sorted(values)} without its metric {self.metric!r}")
        return values

    def _numbers(self, returned: Any) -> dict[str, float]:
        """The metrics a task's ``metrics`` function returned, as floats (see :meth:`evaluate`)."""
        where = f"task {self.name!r}: its metrics {describe_function(self.metrics)}"
        if not isinstance(returned, Mapping):
            raise InputError(f"{where} returned {_show(returned)} (expected a dict of metric names to numbers)")
        values = {}
        for key, value in returned.items():
            if not isinstance(key, str):
                raise InputError(f"{where} returned the metric name {_show(key)} (expected a str)")
            size = getattr(value, "numel", None) or getattr(value, "size", None)
            count = size() if callable(size) else size
            if isinstance(value, (str, bytes)) or (count is not None and count != 1):
                raise InputError(f"{where} returned {_show(value)} for metric {key!r} (expected one number)")
            try:
                values[key] = float(value)
            except (TypeError, ValueError, RuntimeError):
                raise InputError(f"{where} returned {_show(value)} for metric {key!r} (expected one number)") from None
        return values


def check_batch_size(data: Splits, batch_size: int, source: str | os.PathLike, *, task: str | None = None,
                     hint: str = "") -> None:
    """Raise a one-line InputError when ``data`` has fewer training rows than ``batch_size``.

    Args:
        data: the loaded splits.
        batch_size: the task's minibatch size.
        source: the data set's path (or words for it), for the message.
        task: the task's name, for the message.
        hint: what to do instead, for the message (default: a larger data set or a smaller batch size).

    Example:
        >>> import torch
        >>> data = Splits(*[torch.zeros(3, 1)] * 6)
        >>> check_batch_size(data, 3, "toy data")
        >>> check_batch_size(data, 4, "toy data", hint="use --batch-size 2")
        Traceback (most recent call last):
        ...
        eve_search.InputError: the data set toy data has only 3 training rows, so batch size 4 cannot be used (every minibatch takes 4 rows): use --batch-size 2
    """
    rows = int(data.x_train.shape[0])
    if rows >= batch_size:
        return
    where = f"at {source}" if isinstance(source, Path) else str(source)
    prefix = f"task {task!r}: " if task else ""
    raise InputError(f"{prefix}the data set {where} has only {rows} training rows, so batch size {batch_size} cannot "
                     f"be used (every minibatch takes {batch_size} rows): "
                     + (hint or f"give a data set with at least {batch_size} training rows, or use a task with a "
                                "smaller batch_size"))
