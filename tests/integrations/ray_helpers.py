"""Trainables and a tiny task for the Ray tests, importable by Ray's worker processes."""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch

from eve_search import CostMeter, EvE
from eve_search.integrations.ray import EveTrainable
from eve_search.tasks.models import mlp
from eve_search.tasks import Task, register_task
from tests.tiny_task import make_tiny_splits

try:
    from ray import tune
except ImportError:  # the module is only imported where ray is installed
    tune = None


def ray_tiny_data(data_dir):
    return make_tiny_splits()


def ray_tiny_model(config, data, generator):
    return mlp(data.x_train.shape[1], [int(config["width"])] * int(config["depth"]), 2, generator=generator)


RAY_TINY = Task("ray-tiny", "the tiny task with importable functions (for Ray actors)", load_data=ray_tiny_data,
                build_model=ray_tiny_model, batch_size=32, spaces=("tiny",))
register_task(RAY_TINY)

CONFIGS = [{"width": w, "depth": 1, "lr": lr, "weight_decay": 1e-4}
           for w, lr in [(8, 3e-3), (16, 1e-2), (8, 2e-2), (16, 3e-3), (8, 1e-2), (16, 2e-2), (8, 5e-3),
                         (16, 5e-3), (16, 1.5e-2)]]


def param_space(configs=CONFIGS):
    """Configuration ``trial_index`` of ``configs`` for each trial, in index order."""
    space = {"trial_index": tune.grid_search(list(range(len(configs))))}
    for key in configs[0]:
        space[key] = tune.sample_from(lambda config, key=key: configs[config["trial_index"]][key])
    return space


class MarkedTrainable(EveTrainable):
    """EveTrainable that leaves a marker file per step (so a test knows how far a run got), can be
    slowed down, and reports the node it ran on; ``die_at`` kills the actor's process once (a marker
    remembers it) when trial ``die_at[0]`` reaches budget ``die_at[1]``; ``fail_at`` makes a trial
    raise every time it reaches a budget."""

    def setup(self, config, marks=None, delay=0.0, die_at=None, fail_at=None, actors=0, **kwargs):
        super().setup(config, **kwargs)
        self._marks = None if marks is None else Path(marks)
        self._delay = delay
        self._die_at = die_at
        self._fail_at = fail_at
        self._actors = actors
        if actors and self._marks is not None:  # this actor process exists
            self._marks.mkdir(parents=True, exist_ok=True)
            (self._marks / f"actor-{os.getpid()}").touch()

    def _wait_for_actors(self):
        """With ``actors=n``, the first step waits until n actor processes exist, so that a slow-starting
        node is not left out by actors that are reused before it is up (the deadline only guards a hang,
        sized for a machine ten times slower than any start seen)."""
        deadline = time.monotonic() + 600
        while len(list(self._marks.glob("actor-*"))) < self._actors and time.monotonic() < deadline:
            time.sleep(0.2)

    def reset_config(self, new_config):
        return super().reset_config(new_config)

    def step(self):
        index = int(self.config["trial_index"])
        later = [rung for rung in self._rungs if rung > self.trial.budget]
        target = later[0] if later else self.trial.budget
        if self._fail_at is not None and [index, target] == list(self._fail_at):
            raise RuntimeError(f"trial {index} fails for good at {target}")
        if self._die_at is not None and [index, target] == list(self._die_at) and self._marks is not None:
            died = self._marks / f"died-{index}-{target}"
            if not died.exists():
                self.trial.train_to((self.trial.budget + target) // 2)  # mid-rung
                died.touch()
                os._exit(1)
        if self._actors and self._marks is not None and self.trial.budget == 0:
            self._wait_for_actors()
        if self._delay:
            time.sleep(self._delay)
        result = super().step()
        if self._marks is not None:
            self._marks.mkdir(parents=True, exist_ok=True)
            (self._marks / f"step-{index}-{result['budget']}-{time.monotonic_ns()}").touch()
        import ray

        result["node_id"] = ray.get_runtime_context().get_node_id()
        return result


class UserEveTrainable(tune.Trainable if tune is not None else object):
    """A user's own Trainable: a model of their own, trained with eve_search.EvE, reporting the cost a
    CostMeter charged. Each step trains 50 more units."""

    def setup(self, config):
        g = torch.Generator().manual_seed(int(config["seed"]))
        self.x = torch.randn(512, 6, generator=g)
        self.y = (self.x[:, 0] - self.x[:, 1] > 0).long()
        self.model = torch.nn.Sequential(torch.nn.Linear(6, int(config["width"])), torch.nn.ReLU(),
                                         torch.nn.Linear(int(config["width"]), 2))
        for p in self.model.parameters():
            with torch.no_grad():
                p.uniform_(-0.3, 0.3, generator=g)
        self.meter = CostMeter(mode="calibrated", backward_ratio=2.0)
        self.optimizer = EvE(self.model.parameters(), lr=config["lr"], meter=self.meter, seed=int(config["seed"]))
        self.batches = torch.Generator().manual_seed(int(config["seed"]) + 1)

    def reset_config(self, new_config):  # lets Tune reuse the actor (reuse_actors=True)
        self.setup(new_config)
        return True

    def step(self):
        self.meter.set_budget(self.meter.cost + 50)
        while not self.meter.exhausted:
            rows = torch.randint(0, len(self.x), (64,), generator=self.batches)
            x, y = self.x[rows], self.y[rows]
            self.optimizer.step(lambda: torch.nn.functional.cross_entropy(self.model(x), y))
        with torch.no_grad():
            accuracy = (self.model(self.x).argmax(1) == self.y).double().mean().item()
        return {"cost": self.meter.cost, "accuracy": accuracy}

    def save_checkpoint(self, checkpoint_dir):
        torch.save({"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                    "meter": self.meter.state_dict(), "batches": self.batches.get_state()},
                   Path(checkpoint_dir) / "state.pt")

    def load_checkpoint(self, checkpoint_dir):
        state = torch.load(Path(checkpoint_dir) / "state.pt", weights_only=True)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.meter.load_state_dict(state["meter"])
        self.batches.set_state(state["batches"])


class ModelOnlyTrainable(tune.Trainable if tune is not None else object):
    """A class Trainable as Ray's MNIST example writes it (a small model on synthetic data, EvE in place
    of the torch optimizer): its checkpoint holds the model's state_dict only."""

    def setup(self, config):
        g = torch.Generator().manual_seed(7)
        self.x = torch.randn(256, 4, generator=g)
        self.y = (self.x[:, 0] + 0.5 * self.x[:, 1] > 0).long()
        torch.manual_seed(int(config["seed"]))
        self.model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
        self.optimizer = EvE(self.model.parameters(), lr=float(config["lr"]), seed=int(config["seed"]))

    def step(self):
        for _ in range(3):
            self.optimizer.step(lambda: torch.nn.functional.cross_entropy(self.model(self.x), self.y))
        with torch.no_grad():
            accuracy = (self.model(self.x).argmax(1) == self.y).double().mean().item()
        return {"accuracy": accuracy}

    def save_checkpoint(self, checkpoint_dir):
        torch.save(self.model.state_dict(), Path(checkpoint_dir) / "model.pth")

    def load_checkpoint(self, checkpoint_dir):
        self.model.load_state_dict(torch.load(Path(checkpoint_dir) / "model.pth", weights_only=True))
