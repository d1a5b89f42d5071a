"""One sweep, end to end: sample the configurations, calibrate the cost, run SHA, summarize.

A sweep is (dataset, search space, optimizer, training seed): the same configurations for every
optimizer, the same initial weights and batches for every optimizer at a given training seed. Its
results and checkpoints live in a :class:`~eve_search.store.SweepStore`, so a killed sweep resumes
and ends exactly as an uninterrupted one would.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from eve_search.models import mlp
from eve_search.optim import make_optimizer
from eve_search.sha import (
    DEFAULT_RUNGS,
    SynchronousSuccessiveHalving,
    check_rungs,
    rung_sizes,
)
from eve_search.spaces import Config, get_space
from eve_search.store import SweepStore, study_name
from eve_search.trial import Splits, Trial

__all__ = ["SweepResult", "SweepSettings", "architecture_key", "run_sweep"]


def architecture_key(config: Config) -> str:
    """Configurations with the same key train the same-shaped network (same cost per pass)."""
    return f"{int(config['width'])}x{int(config['depth'])}"


@dataclass(frozen=True)
class SweepSettings:
    """Everything that defines a sweep; resuming with other settings is refused.

    ``backward_ratio`` pins the calibrated ratio for every architecture (reproducible across
    machines and runs); None measures it once per architecture at the start of the sweep.
    """

    space: str
    optimizer: str
    seed: int = 0
    config_seed: int = 0
    configs: int = 48
    rungs: tuple[float, ...] = DEFAULT_RUNGS
    cost_mode: str = "calibrated"
    backward_ratio: float | None = None
    dataset: str = "adult"

    def __post_init__(self) -> None:
        object.__setattr__(self, "rungs", check_rungs(self.rungs))
        if self.cost_mode == "measured" and self.backward_ratio is not None:
            raise ValueError(f"Invalid backward_ratio: {self.backward_ratio} (only the calibrated cost mode "
                             "takes a frozen ratio)")

    @property
    def name(self) -> str:
        return study_name(self.dataset, self.space, self.optimizer, self.seed, self.config_seed)

    def as_dict(self) -> dict[str, Any]:
        values = asdict(self)
        values["rungs"] = list(self.rungs)
        return values


@dataclass
class SweepResult:
    """A finished sweep, as printed and written by ``--json``.

    ``best`` is the best validation accuracy found at any rung (the paper's "best validation
    accuracy found"), with its configuration, rung budget and test accuracy; ``winner`` is the
    configuration SHA kept to the last rung, with its final validation and test accuracy.
    """

    optimizer: str
    space: str
    seed: int
    wall_seconds: float
    training_seconds: float
    charged_units: float
    cost_mode: str
    backward_ratios: dict[str, float]
    best: dict[str, Any]
    winner: dict[str, Any]
    rungs: list[dict[str, Any]]
    trials: list[dict[str, Any]] = field(repr=False)
    trained: int = 0  # trial-rungs trained by this call (0 when every result came from the store)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


ProgressCallback = Callable[[str, int, int, int, float | None], None]


def _calibrated_ratios(settings: SweepSettings, configs: list[Config], data: Splits,
                       store: SweepStore) -> dict[str, float]:
    """One frozen backward/forward ratio per architecture, measured before any training (SPEC 2)."""
    ratios: dict[str, float] = dict(store.get("backward_ratios") or {})
    for index, config in enumerate(configs):
        key = architecture_key(config)
        if key in ratios:
            continue
        if settings.backward_ratio is not None:
            ratios[key] = settings.backward_ratio
        else:
            ratios[key] = Trial(config, data, settings.optimizer, seed=settings.seed, index=index,
                                cost_mode="measured").calibrate()
        store.set("backward_ratios", ratios)  # stored at once: a resumed sweep charges identically
    return ratios


def _warm_up(optimizer: str) -> None:
    """Pay one-time costs (lazy imports inside torch.optim, first-call kernel setup) before the
    sweep's clock starts, so that whichever sweep a process runs first is not charged for them."""
    model = mlp(4, [4], 2, generator=torch.Generator().manual_seed(0))
    opt = make_optimizer(optimizer, model.parameters(), lr=1e-3)
    x, y = torch.zeros(8, 4), torch.zeros(8, dtype=torch.long)
    for _ in range(4):
        opt.step(lambda: torch.nn.functional.cross_entropy(model(x), y))


def run_sweep(settings: SweepSettings, data: Splits, *, storage: str, checkpoint_dir: Path, resume: bool = False,
              progress: ProgressCallback | None = None) -> SweepResult:
    """Run (or resume, or just report) one sweep.

    Args:
        progress: called as (phase, rung number, trials done in the rung, trials in the rung, best so far).
    """
    configs = get_space(settings.space).sample(settings.configs, settings.config_seed)
    store = SweepStore(storage, settings.name, configs, checkpoint_dir, settings.as_dict(), resume=resume)
    _warm_up(settings.optimizer)
    started = time.perf_counter()
    elapsed_before = float(store.get("wall_seconds", 0.0))

    def elapsed() -> float:
        return elapsed_before + time.perf_counter() - started

    if progress is not None:
        progress("calibrating", 0, 0, 0, None)
    ratios = _calibrated_ratios(settings, configs, data, store) if settings.cost_mode == "calibrated" else {}

    def make_trial(index: int) -> Trial:
        config = configs[index]
        return Trial(config, data, settings.optimizer, seed=settings.seed, index=index, cost_mode=settings.cost_mode,
                     backward_ratio=ratios.get(architecture_key(config)))

    sizes = rung_sizes(settings.configs, settings.rungs)
    state = {"done": 0, "rung": 0, "best": None, "trained": 0}

    def on_result(rung: int, index: int, accuracy: float, resumed: bool) -> None:
        if rung != state["rung"]:
            state.update(rung=rung, done=0)
        state["done"] += 1
        state["best"] = accuracy if state["best"] is None else max(state["best"], accuracy)
        if not resumed:
            state["trained"] += 1
            store.set("wall_seconds", elapsed())
        if progress is not None:
            progress("training", rung, state["done"], sizes[rung], state["best"])

    engine = SynchronousSuccessiveHalving(len(configs), make_trial, store, rungs=settings.rungs, on_result=on_result)
    reports = engine.run()
    final = reports[-1]
    winner = max(final.trials, key=lambda index: (final.scores[index], -index))
    winner_test = store.get("winner_test_accuracy")
    if winner_test is None:
        winner_test = engine.trial(winner).evaluate("test").accuracy
        store.set("winner_test_accuracy", winner_test)
        store.set("wall_seconds", elapsed())
    wall_seconds = float(store.get("wall_seconds"))

    details = store.rung_details()
    best = store.best_found(details)
    last_rung = {index: rungs[max(rungs)] for index, rungs in details.items() if rungs}
    return SweepResult(
        optimizer=settings.optimizer,
        space=settings.space,
        seed=settings.seed,
        wall_seconds=wall_seconds,
        training_seconds=sum(d["wall_seconds"] for d in last_rung.values()),
        charged_units=sum(d["charged_units"] for d in last_rung.values()),
        cost_mode=settings.cost_mode,
        backward_ratios=ratios,
        best={**best, "config": configs[best["index"]]},
        winner={"index": winner, "config": configs[winner], "val_acc": final.scores[winner], "test_acc": winner_test},
        rungs=[{"budget": r.budget, "trials": len(r.trials), "promoted": len(r.promoted)} for r in reports],
        trials=[{"index": index, "config": configs[index],
                 "val_acc": {f"{budget:g}": d["val_acc"] for budget, d in sorted(details[index].items())}}
                for index in range(len(configs))],
        trained=state["trained"],
    )

