"""A user-defined task and space, registered the way a user's own code (or a ``--plugin`` module) does.

The whole search (SHA, store, resume, ranking, CLI, Ray, Optuna) runs on it in milliseconds per trial:
``eve-search sweep --task tiny --plugin tests.tiny_task``.
"""

import torch

from eve_search.tasks.models import mlp
from eve_search.tasks.spaces import Categorical, Fixed, Float, SearchSpace, register_space
from eve_search.tasks import Splits, Task, register_task


def make_tiny_splits(seed: int = 0, features: int = 12) -> Splits:
    """A small linearly separable-ish problem, for fast trial tests."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(features, generator=g)

    def draw(rows):
        x = torch.randn(rows, features, generator=g)
        y = ((x @ w + 0.3 * torch.randn(rows, generator=g)) > 0).long()
        return x, y

    x_train, y_train = draw(1024)
    x_val, y_val = draw(256)
    x_test, y_test = draw(256)
    return Splits(x_train, y_train, x_val, y_val, x_test, y_test)


def _tiny_model(config, data, generator):
    return mlp(data.x_train.shape[1], [int(config["width"])] * int(config["depth"]), 2, generator=generator)


# A user-defined task and space, registered the way a user's own code (or a --plugin module) would:
# the whole search (SHA, store, resume, ranking, CLI, Ray, Optuna) runs on it in milliseconds per trial.
def _tiny_data(data_dir):
    return make_tiny_splits()


TINY_TASK = Task("tiny", "12 Gaussian features, a noisy linear label; an MLP of depth x width",
                 load_data=_tiny_data, build_model=_tiny_model, batch_size=32,
                 spaces=("tiny",))
register_task(TINY_TASK)
TINY_SPACE = SearchSpace("tiny", (Categorical("width", (8, 16)), Fixed("depth", 1),
                                  Float("lr", 1e-3, 3e-2, log=True), Fixed("weight_decay", 1e-4)))
register_space(TINY_SPACE)



