"""The paper's MLP/MNIST tasks on MNIST-format data (the command is :mod:`eve_search.cli.commands.mnist`).

Makes two tasks, ``"fashion-mnist"`` (default data: the Debian package dataset-fashion-mnist) and
``"mnist"`` (MNIST-format data from a folder you give), both a ReLU MLP of ``depth`` x ``width``
(784-1024-1024-10, 1,863,690 weights, by default), batch 256, pixels scaled to [0, 1], a fixed 10%
validation split of the training file (split seed 42), ranked by validation accuracy.

Which dataset ran is decided by the files' checksums (or ``--dataset-name``) and printed with every
result: Fashion-MNIST is never reported as MNIST. No MNIST copy ships with this package.
"""

from __future__ import annotations

from pathlib import Path

import torch

from eve_search.data._idx import FASHION_MNIST_DIR, IdxError, load_idx_splits
from eve_search.tasks._task import Config, Splits, Task
from eve_search.tasks.models import architecture_key, hidden_layers

__all__ = ["MLP_CONFIG", "fashion_mnist_task", "mlp_weights", "mnist_task"]

MLP_CONFIG = {"width": 1024, "depth": 2}

def _classes(data: Splits) -> int:
    return int(max(data.y_train.max(), data.y_val.max(), data.y_test.max())) + 1


def _mlp(config: Config, data: Splits, generator: torch.Generator) -> torch.nn.Module:
    from eve_search.tasks.models import mlp

    return mlp(data.x_train.shape[1], hidden_layers(config), _classes(data), generator=generator,
               dropout=float(config.get("dropout", 0.0)))


def _fashion_data(data_dir: Path | None) -> Splits:
    return load_idx_splits(FASHION_MNIST_DIR if data_dir is None else data_dir)[0]


def _mnist_data(data_dir: Path | None) -> Splits:
    if data_dir is None:
        raise IdxError("no MNIST copy ships with eve-search: pass the folder of the four MNIST IDX files "
                       "(--data-dir)")
    return load_idx_splits(data_dir)[0]


_DESCRIPTION = ("a ReLU MLP of `depth` x `width` (paper: 784-1024-1024-10; `dropout` after each hidden layer "
                "when the configuration has it), batch 256, pixels in [0, 1], 10% validation split (seed 42), "
                "ranked by validation accuracy")


def fashion_mnist_task() -> Task:
    """The built-in ``"fashion-mnist"`` task (default data: the Debian package dataset-fashion-mnist).

    Returns:
        The task; its data is read on first use (``task.data()``), not here.

    Example:
        >>> task = fashion_mnist_task()
        >>> task.name, task.metric, task.batch_size
        ('fashion-mnist', 'accuracy', 256)
    """
    return Task("fashion-mnist", f"Fashion-MNIST (Debian dataset-fashion-mnist): {_DESCRIPTION}",
                load_data=_fashion_data, build_model=_mlp, cost_key=architecture_key,
                spaces=("fashion-hp", "fashion-arch"))


def mnist_task() -> Task:
    """The built-in ``"mnist"`` task (MNIST-format data from a folder you give).

    Returns:
        The task; ``task.data(folder)`` reads the four MNIST IDX files of ``folder``.

    Example:
        >>> task = mnist_task()
        >>> task.name, task.mode
        ('mnist', 'max')
    """
    return Task("mnist", f"MNIST-format data from --data-dir: {_DESCRIPTION}", load_data=_mnist_data,
                build_model=_mlp)


def mlp_weights(width: int, depth: int, inputs: int = 784, classes: int = 10) -> int:
    """The weights and biases of the ``inputs``-``width`` x ``depth``-``classes`` MLP.

    Args:
        width: units of each hidden layer.
        depth: hidden layers.
        inputs: input features (784: a 28 x 28 image).
        classes: outputs.

    Returns:
        The number of parameters.

    Example:
    >>> mlp_weights(1024, 2)
    1863690
    """
    return (inputs + 1) * width + (depth - 1) * (width + 1) * width + (width + 1) * classes
