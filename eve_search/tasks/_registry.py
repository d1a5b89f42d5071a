"""The task registry: the tasks a search can train, by name; the built-in ones are made on first use."""

from __future__ import annotations

from collections.abc import Callable

from eve_search._checks import InputError
from eve_search.tasks._task import Task
from eve_search.tasks.adult import adult_task

__all__ = ["get_task", "register_task", "task_names"]

_TASKS: dict[str, Task] = {}


def _fashion_mnist() -> Task:
    from eve_search.tasks.mnist import fashion_mnist_task

    return fashion_mnist_task()


def _mnist() -> Task:
    from eve_search.tasks.mnist import mnist_task

    return mnist_task()


def _lora() -> Task:
    from eve_search.tasks.lora import lora_task

    return lora_task()


# The built-in tasks, made on first use (their modules, and their heavy dependencies, load only then);
# a task a user registers under one of these names replaces it.
_BUILT_INS: dict[str, Callable[[], Task]] = {"adult": lambda: adult_task(), "fashion-mnist": _fashion_mnist,
                                             "mnist": _mnist, "lora": _lora}


def register_task(task: Task) -> None:
    """Add (or replace) a task under ``task.name``; every command and driver can then train it.

    Args:
        task: the task to register (a name of a built-in task replaces that task).

    Raises:
        TypeError: ``task`` is not a :class:`~eve_search.tasks.Task`.

    Example:
        >>> import torch
        >>> from eve_search.tasks import Splits, Task
        >>> def data(data_dir=None):
        ...     x = torch.linspace(-1, 1, 40)[:, None]
        ...     y = (x[:, 0] > 0).long()
        ...     return Splits(x[:20], y[:20], x[20:30], y[20:30], x[30:], y[30:])
        >>> register_task(Task("sign", "the sign of x", load_data=data, batch_size=8,
        ...                    build_model=lambda config, splits, generator: torch.nn.Linear(1, 2)))
        >>> "sign" in task_names()
        True
        >>> _ = _TASKS.pop("sign")  # this example leaves the registry as it found it
    """
    if not isinstance(task, Task):
        raise TypeError(f"Invalid task: {task!r} (expected an eve_search.tasks.Task)")
    _TASKS[task.name] = task


def task_names() -> list[str]:
    """Registered task names (the built-in ones included), sorted.

    Returns:
        The names :func:`get_task` accepts.

    Example:
        >>> {"adult", "fashion-mnist", "lora", "mnist"} <= set(task_names())
        True
    """
    return sorted(set(_TASKS) | set(_BUILT_INS))


def get_task(name: str) -> Task:
    """The task registered as ``name`` (a built-in task is made on first use).

    Args:
        name: a name from :func:`task_names`.

    Returns:
        The :class:`~eve_search.tasks.Task`.

    Raises:
        InputError: no task has that name (the message lists those that do).

    Example:
        >>> task = get_task("adult")
        >>> task.metric, task.mode, task.batch_size
        ('accuracy', 'max', 256)
    """
    if name not in _TASKS and name in _BUILT_INS:
        _TASKS[name] = _BUILT_INS[name]()
    try:
        return _TASKS[name]
    except KeyError:
        raise InputError(f"Unknown task: {name!r} (expected one of {', '.join(task_names())})") from None
