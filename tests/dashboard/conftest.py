"""Results stores for the dashboard tests, written with Optuna's public API in the store's schema.

A sweep here is a real successive-halving run over made-up scores: every configuration is scored at
the first rung, the top third (the project's own promotion rule) goes on, and so on; pruned trials
end PRUNED, the last rung's COMPLETE, and a sweep cut short leaves its survivors RUNNING.
"""

from __future__ import annotations

import copy
import math
import shutil
from pathlib import Path

import numpy as np
import optuna
import pytest

from eve_search.engine.sha import promote_top_fraction

optuna.logging.set_verbosity(optuna.logging.WARNING)

XSS = "<script>alert(1)</script>"
XSS_VALUE = "</script><script>alert(2)</script>"
XSS_ATTR = '"><img src=x onerror=alert(3)>'
SPEED = {"eve": 0.004, "adam": 0.012}


def config_of(index: int) -> dict:
    return {"lr": 10 ** (-4 + 2 * ((index * 7) % 9) / 8), "weight_decay": 5e-4, "width": [64, 128, 256][index % 3],
            "depth": 1 + index % 2}


def score_of(index: int, optimizer: str, seed: int, budget: float) -> float:
    quality = 0.80 + 0.05 * ((index * 5) % 9) / 8  # shared across optimizers: rankings mostly agree
    noise = np.random.default_rng([index, seed, sum(map(ord, optimizer)), int(budget)]).normal(0, 0.004)
    return float(quality * (1 - 0.3 * math.exp(-budget / 200)) + noise)


def add_sweep(storage: str, *, optimizer: str, seed: int, task: str = "adult", space: str = "hp", configs: int = 9,
              rungs=(100, 300, 900), stop_after: int | None = None, name: str | None = None,
              config=config_of, mode: str = "max", extra_attrs: dict | None = None) -> dict:
    """Write one sweep; returns what the dashboard should find (rung members, winner, wall seconds)."""
    name = name or f"{task}-{space}-{optimizer}-seed{seed}"
    study = optuna.create_study(study_name=name, storage=storage, direction="maximize" if mode == "max" else "minimize")
    sign = 1.0 if mode == "max" else -1.0
    settings = {"task": task, "space": space, "optimizer": optimizer, "seed": seed, "config_seed": 0,
                "configs": configs, "rungs": list(rungs), "fraction": 1 / 3, "cost_mode": "calibrated",
                "backward_ratio": 2.0, "metric": "accuracy" if mode == "max" else "loss", "mode": mode}
    last = len(rungs) if stop_after is None else stop_after
    members, results = [list(range(configs))], {}
    for number, budget in enumerate(rungs[:last]):
        scores = {}
        for index in members[-1]:
            score = score_of(index, optimizer, seed, budget)
            if mode == "min":
                score = 1 - score
            seconds = budget * SPEED.get(optimizer, 0.01) * (1 + 0.1 * (index % 3))
            results.setdefault(index, {})[budget] = {
                "budget": budget, "score": score, "val": {"accuracy": score, "loss": 1 - score},
                "charged_units": budget + 0.5 * (index % 2), "wall_seconds": seconds, "backward_passes": budget // 3}
            scores[index] = sign * score
        if number < len(rungs) - 1 and number < last - 1:
            members.append(sorted(promote_top_fraction(scores)))
        elif number < len(rungs) - 1:
            members.append(None)  # cut short: the survivors of this rung are not decided yet
    finished = stop_after is None
    final = members[-1] if members[-1] is not None else members[-2]
    winner_index = max(final, key=lambda k: (sign * results[k][rungs[-1]]["score"], -k)) if finished else None
    trials = []
    for index in range(configs):
        cfg = config(index)
        distributions = {k: (optuna.distributions.CategoricalDistribution(sorted({config(i)[k] for i in range(configs)}))
                             if isinstance(v, str) else
                             optuna.distributions.FloatDistribution(1e-12, 1e12, log=True) if k == "lr" else
                             optuna.distributions.FloatDistribution(0.0, 1e12) if isinstance(v, float) else
                             optuna.distributions.IntDistribution(1, 1 << 20)) for k, v in cfg.items()}
        rung_attrs = {f"rung_{b:g}": dict(r) for b, r in results.get(index, {}).items()}
        if finished and index == winner_index:
            rung_attrs[f"rung_{rungs[-1]:g}"]["test"] = {"accuracy": 0.84, "loss": 0.33}
        recorded = sorted(results.get(index, {}))
        if finished and index in members[-1]:
            state, value = optuna.trial.TrialState.COMPLETE, results[index][rungs[-1]]["score"]
        elif finished or (recorded and index not in (members[-1] or members[-2])):
            state, value = optuna.trial.TrialState.PRUNED, None
        else:
            state, value = optuna.trial.TrialState.RUNNING, None
        trials.append(optuna.trial.create_trial(
            state=state, value=value, params=cfg, distributions=distributions,
            user_attrs={"config_index": index, "config": cfg, **rung_attrs},
            intermediate_values={int(b): results[index][b]["score"] for b in recorded}))
    study.add_trials(trials)
    wall = sum(max(r.values(), key=lambda d: d["budget"])["wall_seconds"] for r in results.values()) + 0.25
    study.set_user_attr("kind", "sha-sweep")
    study.set_user_attr("settings", settings)
    study.set_user_attr("wall_seconds", wall)
    study.set_user_attr("backward_ratios", {"64x1": 2.0})
    if finished:
        study.set_user_attr("winner", {"index": winner_index, "score": results[winner_index][rungs[-1]]["score"],
                                       "test": {"accuracy": 0.84, "loss": 0.33}})
    return {"name": name, "members": members, "results": results, "winner": winner_index, "wall_seconds": wall}


def add_generic(storage: str, name: str, kind: str | None, trials: int = 3, attrs: dict | None = None) -> None:
    study = optuna.create_study(study_name=name, storage=storage, direction="minimize")
    if kind is not None:
        study.set_user_attr("kind", kind)
    for key, value in (attrs or {}).items():
        study.set_user_attr(key, value)
    for number in range(trials):
        study.add_trial(optuna.trial.create_trial(
            value=1.0 / (number + 1), params={"x": float(number)},
            distributions={"x": optuna.distributions.FloatDistribution(0.0, 10.0)},
            user_attrs={"note": f"trial {number}"}, intermediate_values={1: 2.0 / (number + 1), 2: 1.0 / (number + 1)}))


def url_of(path: Path) -> str:
    return f"sqlite:///{path}"


@pytest.fixture(scope="session")
def _sweep_store_master(tmp_path_factory):
    path = tmp_path_factory.mktemp("master") / "results.db"
    url = url_of(path)
    expected = {(o, s): add_sweep(url, optimizer=o, seed=s) for o in ("eve", "adam") for s in (0, 1)}
    add_generic(url, "rosenbrock-d10-eve-seed0", "synthetic-benchmark", attrs={"settings": {"dim": 10}})
    add_generic(url, "scratch", None)
    return path, expected


@pytest.fixture
def sweep_store(_sweep_store_master, tmp_path):
    """Adult, space hp: EvE and Adam, seeds 0 and 1 (9 configurations, rungs 100/300/900), plus a
    synthetic study and one with no kind. Each test gets its own copy (some add to it)."""
    master, expected = _sweep_store_master
    shutil.copyfile(master, tmp_path / "results.db")
    return url_of(tmp_path / "results.db"), copy.deepcopy(expected)


@pytest.fixture
def xss_store(tmp_path):
    """Every string the store can carry, set to markup that would run if it were not escaped."""
    url = url_of(tmp_path / "xss.db")

    def config(index):
        return {"lr": 1e-3, "width": 64, "activation": XSS_VALUE if index % 2 else XSS_ATTR}

    add_sweep(url, optimizer="eve", seed=0, task=XSS, space=XSS_ATTR, name=XSS, config=config, configs=4,
              rungs=(100, 300))
    add_sweep(url, optimizer=XSS_ATTR, seed=1, task=XSS, space=XSS_ATTR, name=XSS_VALUE, config=config,
              configs=4, rungs=(100, 300))
    add_generic(url, f"generic {XSS}", XSS_VALUE, attrs={XSS_ATTR: XSS_VALUE, "nested": {"k": XSS}})
    return url
