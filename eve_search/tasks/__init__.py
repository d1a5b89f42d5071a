"""Tasks: what a trial trains. Data splits, a model built from a configuration, the loss, the metrics.

A :class:`Task` is everything the search needs to know about a learning problem; the engine, the
results store, resume, ranking and the CLI work on any registered task unchanged. The built-in tasks
(``"adult"``, ``"fashion-mnist"``, ``"mnist"``, ``"lora"``) are made on first use; register your own
with :func:`register_task`.

Example:
    >>> import torch
    >>> from eve_search.tasks import Splits, Task, register_task, get_task
    >>> def blobs(data_dir=None):
    ...     g = torch.Generator().manual_seed(0)
    ...     x = torch.randn(600, 4, generator=g)
    ...     y = (x.sum(dim=1) > 0).long()
    ...     return Splits(x[:400], y[:400], x[400:500], y[400:500], x[500:], y[500:])
    >>> def linear(config, data, generator):
    ...     model = torch.nn.Linear(data.x_train.shape[1], 2)
    ...     with torch.no_grad():
    ...         model.weight.uniform_(-0.5, 0.5, generator=generator)
    ...         model.bias.zero_()
    ...     return model
    >>> register_task(Task("blobs", "sign of a sum of four Gaussians", load_data=blobs, build_model=linear,
    ...                    batch_size=32))
    >>> get_task("blobs").data().x_train.shape
    torch.Size([400, 4])
"""

from eve_search.tasks._registry import get_task, register_task, task_names
from eve_search.tasks._task import (
    Config,
    Splits,
    Task,
    check_batch_size,
    classification_metrics,
    cross_entropy_loss,
)

__all__ = [
    "Config",
    "Splits",
    "Task",
    "check_batch_size",
    "classification_metrics",
    "cross_entropy_loss",
    "get_task",
    "register_task",
    "task_names",
]
