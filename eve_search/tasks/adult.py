"""The built-in ``"adult"`` task: UCI Adult income > 50K with a ReLU MLP (the paper's search spaces ``hp`` and ``arch``)."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from eve_search.tasks._task import Config, Splits, Task
from eve_search.tasks.models import architecture_key, hidden_layers

__all__ = ["adult_task", "architecture_key"]


def _adult_data(data_dir: Path | None) -> Splits:
    from eve_search.data import load_adult

    return load_adult(data_dir)


def _adult_model(config: Config, data: Splits, generator: torch.Generator) -> nn.Module:
    from eve_search.tasks.models import mlp

    classes = int(max(data.y_train.max(), data.y_val.max())) + 1
    return mlp(data.x_train.shape[1], hidden_layers(config), classes, generator=generator)


def adult_task() -> Task:
    """The built-in ``"adult"`` task (UCI Adult, the paper's MLP search spaces ``hp`` and ``arch``).

    Returns:
        The task; its data (the bundled copy, or ``task.data(folder)``) is read on first use.

    Example:
        >>> task = adult_task()
        >>> task.name, task.metric, task.spaces
        ('adult', 'accuracy', ('hp', 'arch'))
    """
    return Task(
        "adult", "UCI Adult income > 50K: a ReLU MLP of `depth` x `width`, batch 256, ranked by validation accuracy",
        load_data=_adult_data, build_model=_adult_model, cost_key=architecture_key, spaces=("hp", "arch"))
