"""Function trainables and searchers in the style of Ray Tune's own examples, for
tests/integrations/test_ray_dropin.py, and the trainables of tests/integrations/test_ray.py that train
nothing. Nothing here imports torch, so that each Ray actor that imports this module starts without
loading PyTorch."""

from __future__ import annotations

import json
import os
import random
import tempfile
import time
from pathlib import Path

try:
    from ray import tune
    from ray.tune.search import Searcher
except ImportError:  # the module is only imported where ray is installed
    tune = Searcher = None


def score_at(config, step):
    """A deterministic learning curve: rises with the step, ranked by ``config["quality"]``."""
    return float(config["quality"]) * (1.0 - 0.5 ** step)


def _report(config, step, started, checkpoint=None):
    metrics = {"score": score_at(config, step), "step": step, "started": started, "ended": time.time()}
    if checkpoint is None:
        tune.report(metrics)
    else:
        tune.report(metrics, checkpoint=checkpoint)


def objective_without_checkpoint(config):
    """A function trainable as most of Ray's examples write it: it reports each step and never
    loads or saves a checkpoint, so a paused trial starts over."""
    for step in range(1, int(config["steps"]) + 1):
        started = time.time()
        time.sleep(float(config.get("sleep", 0.0)))
        _report(config, step, started)


def objective_with_checkpoint(config):
    """A function trainable that resumes: it loads ``tune.get_checkpoint()`` and reports a checkpoint
    with every step."""
    first = 1
    checkpoint = tune.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as folder:
            first = json.loads((Path(folder) / "state.json").read_text())["step"] + 1
    for step in range(first, int(config["steps"]) + 1):
        started = time.time()
        time.sleep(float(config.get("sleep", 0.0)))
        with tempfile.TemporaryDirectory() as folder:
            (Path(folder) / "state.json").write_text(json.dumps({"step": step}))
            _report(config, step, started, tune.Checkpoint.from_directory(folder))



def objective_with_sparse_metric(config):
    """A resuming function trainable that reports its metric every second step only (the other reports
    carry the step alone), as a script that evaluates every other epoch does; a checkpoint with every
    report."""
    first = 1
    checkpoint = tune.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as folder:
            first = json.loads((Path(folder) / "state.json").read_text())["step"] + 1
    for step in range(first, int(config["steps"]) + 1):
        metrics = {"step": step}
        if step % 2 == 0:
            metrics["score"] = score_at(config, step)
        with tempfile.TemporaryDirectory() as folder:
            (Path(folder) / "state.json").write_text(json.dumps({"step": step}))
            tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(folder))


def objective_checkpointing_at_its_end(config):
    """As Ray's LightGBM example trains (``TuneReportCheckpointCallback``, whose default checkpoints only
    after the last boosting round): a report each step, a checkpoint with the last one only, and no
    resuming. Its metric falls with training after the first step (a model that overfits), so a trial
    stopped early keeps a better last score than the one that trained longest."""
    steps = int(config["steps"])
    for step in range(1, steps + 1):
        metrics = {"score": float(config["quality"]) * (1.5 - 0.3 * step), "step": step}
        if step < steps:
            tune.report(metrics)
            continue
        with tempfile.TemporaryDirectory() as folder:
            (Path(folder) / "model.json").write_text(json.dumps({"step": step, "quality": config["quality"]}))
            tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(folder))


class LazySearcher(Searcher if Searcher is not None else object):
    """A searcher that suggests ``batch`` configurations, then nothing until all of them have ended
    (as a batch Bayesian optimizer does); ``total`` in all, then it runs out."""

    def __init__(self, qualities, batch, metric="score", mode="max"):
        super().__init__(metric=metric, mode=mode)
        self.qualities = list(qualities)
        self.batch = batch
        self.live = set()
        self.given = 0

    def suggest(self, trial_id):
        if self.given >= len(self.qualities):
            return Searcher.FINISHED
        if self.live and (len(self.live) >= self.batch or self.given % self.batch == 0):
            return None
        self.live.add(trial_id)
        self.given += 1
        return {"quality": self.qualities[self.given - 1], "steps": 3}

    def on_trial_complete(self, trial_id, result=None, error=False):
        self.live.discard(trial_id)


class SlowSearcher(Searcher if Searcher is not None else object):
    """A searcher whose every ``suggest`` takes ``seconds`` (as a Bayesian optimizer fitting its model
    does), drawing ``total`` qualities from ``seed``; trial ``late_every``-th ones report late (their
    trainable sleeps ``late_seconds`` before each report)."""

    def __init__(self, seed, total, seconds, late_every=3, late_seconds=1.5, metric="score", mode="max"):
        super().__init__(metric=metric, mode=mode)
        rng = random.Random(seed)
        self.qualities = [round(rng.uniform(0.1, 1.0), 6) for _ in range(total)]
        self.seconds = seconds
        self.late_every, self.late_seconds = late_every, late_seconds
        self.given = 0

    def suggest(self, trial_id):
        time.sleep(self.seconds)
        if self.given >= len(self.qualities):
            return Searcher.FINISHED
        self.given += 1
        late = self.given % self.late_every == 0
        return {"quality": self.qualities[self.given - 1], "steps": 3, "sleep": self.late_seconds if late else 0.0}

    def on_trial_complete(self, trial_id, result=None, error=False):
        pass


def _wait_for(path):
    """Wait for another process to create ``path`` (an event, not a timer: the test's watchdog ends a hang)."""
    while not Path(path).exists():
        time.sleep(0.01)


class SlowSavingTrainable(tune.Trainable if tune is not None else object):
    """A class Trainable whose first checkpoint is still being saved when its cohort is decided: the
    ``leader`` reports its first step once the ``closer`` trains too, and its save then waits for
    ``signals/decided`` (written by the driver once the cohort is decided); the ``closer`` reports its
    first step only once that save has begun. Each step reports when it started (wall clock), and asks
    for a checkpoint."""

    def setup(self, config):
        self.step_count = 0
        self.signals = Path(config["signals"])

    def step(self):
        started = time.time()
        self.step_count += 1
        if self.step_count == 1 and self.config["role"] == "closer":
            (self.signals / "closer-training").touch()
            _wait_for(self.signals / "leader-saving")
        elif self.step_count == 1:
            _wait_for(self.signals / "closer-training")  # both trials on their actors: the leader will wait idle
        return {"score": score_at(self.config, self.step_count), "started": started, "should_checkpoint": True}

    def save_checkpoint(self, checkpoint_dir):
        if self.config["role"] == "leader" and self.step_count == 1:
            (self.signals / "leader-saving").touch()
            _wait_for(self.signals / "decided")
        (Path(checkpoint_dir) / "state.json").write_text(json.dumps({"step": self.step_count}))

    def load_checkpoint(self, checkpoint_dir):
        self.step_count = json.loads((Path(checkpoint_dir) / "state.json").read_text())["step"]


class NoCostTrainable(tune.Trainable if tune is not None else object):
    """Reports a metric but never the scheduler's time_attr."""

    def step(self):
        return {"accuracy": 0.5}


class EnvironmentTrainable(tune.Trainable if tune is not None else object):
    """Reports the variable Tune gives its trainable actors by default."""

    def step(self):
        return {"pl_disable_fork": os.environ.get("PL_DISABLE_FORK", ""), "done": True}
