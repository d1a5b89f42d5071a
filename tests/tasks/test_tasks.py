import pickle

import pytest
import torch

from eve_search.tasks import Splits, Task, get_task, register_task, task_names


def test_adult_is_built_in_and_the_tiny_user_task_is_registered():
    assert {"adult", "tiny"} <= set(task_names())
    adult = get_task("adult")
    assert adult.metric == "accuracy" and adult.mode == "max" and adult.batch_size == 256
    assert adult.spaces == ("hp", "arch") and adult.cost_key({"width": 64, "depth": 2, "lr": 1}) == "64x2"


def test_data_is_loaded_once_and_does_not_travel_with_a_pickled_task(tiny_task):
    assert tiny_task.data() is tiny_task.data()
    copy = pickle.loads(pickle.dumps(get_task("adult")))
    assert copy._cache == {} and copy.name == "adult"


def test_evaluate_returns_the_tasks_metrics_without_gradients(tiny_task, tiny_splits):
    model = tiny_task.build_model({"width": 8, "depth": 1}, tiny_splits, torch.Generator().manual_seed(0))
    metrics = tiny_task.evaluate(model, tiny_splits, "test")
    assert set(metrics) == {"accuracy", "loss"} and 0 <= metrics["accuracy"] <= 1
    assert model.training


def test_a_min_mode_task_trains_its_metric_down_and_ranks_the_lower_value_first():
    from eve_search.engine.ledger import rank_order
    from eve_search.engine.trial import Trial

    def data(data_dir):
        x = torch.linspace(-1, 1, 64)[:, None]
        return Splits(x, 2 * x, x, 2 * x, x, 2 * x)

    task = Task("line", "y = 2x", load_data=data, build_model=lambda c, d, g: torch.nn.Linear(1, 1),
                loss=lambda m, x, y: torch.nn.functional.mse_loss(m(x), y),
                metrics=lambda m, x, y: {"mse": torch.nn.functional.mse_loss(m(x), y).item()},
                metric="mse", mode="min", batch_size=8)
    register_task(task)
    try:
        trial = Trial("line", {"lr": 0.05}, "adam", seed=0, index=0, backward_ratio=2.0)
        before = trial.evaluate("val")["mse"]
        trial.train_to(200)
        after = trial.evaluate("val")["mse"]
        assert after < 0.5 * before, (before, after)
        assert rank_order({0: before, 1: after}, get_task("line").mode) == [1, 0]
    finally:
        from eve_search.tasks import _registry

        del _registry._TASKS["line"]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"name": "bad name"}, "Invalid name: 'bad name'"),
    ({"mode": "up"}, "Invalid mode: 'up'"),
    ({"batch_size": 0}, "Invalid batch_size: 0"),
    ({"metric": "f1"}, "without its metric 'f1'"),
])
def test_bad_tasks_are_named(kwargs, message, tiny_splits):
    base = {"name": "t", "description": "", "load_data": lambda d: tiny_splits,
            "build_model": lambda c, d, g: torch.nn.Linear(12, 2)}
    with pytest.raises(ValueError, match=message):
        task = Task(**(base | kwargs))
        task.evaluate(torch.nn.Linear(12, 2), tiny_splits)
    with pytest.raises(ValueError, match="Unknown task: 'zzz'"):
        get_task("zzz")
    with pytest.raises(ValueError, match="Invalid split: 'train2'"):
        tiny_splits.split("train2")
