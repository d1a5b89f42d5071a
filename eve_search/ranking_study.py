"""The ranking-agreement study behind ``eve-search rank``: gather sweeps, compare rankings.

Sweeps come from the results store when they exist (nothing is retrained) and are run, resumably,
when they do not. The four reference comparisons are those of the paper (Appendix "Does EvE Rank
Configurations Like Adam Does?"), with the reference trainer configurable (``--against``).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eve_search.ranking import Agreement, agreement, final_ordering, verdict
from eve_search.sweep import ProgressCallback, SweepResult, SweepSettings, prepare_sweep

__all__ = ["PAPER_TAUS", "Comparison", "comparisons", "gather", "study"]

# Paper, Table tab:rank-agreement: rung-1 tau-b, mean and std over 5 seeds, per space.
PAPER_TAUS = {
    ("eve", "adam", "same"): {"hp": (0.663, 0.093), "arch": (0.691, 0.032)},
    ("eve", "adamw", "same"): {"hp": (0.677, 0.063), "arch": (0.709, 0.041)},
    ("adam", "adam", "next"): {"hp": (0.694, 0.061), "arch": (0.670, 0.029)},
    ("adam", "adamw", "same"): {"hp": (0.714, 0.078), "arch": (0.848, 0.018)},
}
# Paper: rank under Adam of EvE's rung-1 top configuration, per seed 0-4.
PAPER_TOP_RANKS = {"hp": [4, 5, 3, 10, 2], "arch": [5, 4, 3, 16, 6]}


@dataclass(frozen=True)
class Comparison:
    """``method`` against ``reference``, pairing seed s with s ("same") or with the next seed ("next")."""

    method: str
    reference: str
    pairing: str

    @property
    def label(self) -> str:
        if self.method == self.reference:
            return f"{self.method} vs {self.reference} (different training seeds)"
        return f"{self.method} vs {self.reference}"

    def pairs(self, seeds: list[int]) -> list[tuple[int, int]]:
        if self.pairing == "same":
            return [(s, s) for s in seeds]
        return [(s, seeds[(k + 1) % len(seeds)]) for k, s in enumerate(seeds)]


def comparisons(against: str = "adam") -> list[Comparison]:
    """EvE vs the reference, EvE vs AdamW, the reference vs itself, the reference vs AdamW."""
    return [Comparison("eve", against, "same"), Comparison("eve", "adamw", "same"),
            Comparison(against, against, "next"), Comparison(against, "adamw", "same")]


def gather(space: str, optimizers: list[str], seeds: list[int], *, storage: str, checkpoint_dir: Path,
           settings: dict[str, Any], data_dir: Path | None = None,
           progress: Callable[[SweepSettings], AbstractContextManager[ProgressCallback | None]] | None = None,
           ) -> dict[str, dict[int, SweepResult]]:
    """Every (optimizer, seed) sweep of ``space``, from the store or trained now (resumably).

    Every sweep is prepared (data loaded, store opened, settings checked) before the first trains.
    ``progress(settings)`` gives a context whose value is the sweep's progress callback.
    """
    prepared = [prepare_sweep(SweepSettings(space=space, optimizer=optimizer, seed=seed, **settings), storage=storage,
                              checkpoint_dir=checkpoint_dir, resume=True, data_dir=data_dir)
                for seed in seeds for optimizer in optimizers]
    results: dict[str, dict[int, SweepResult]] = {name: {} for name in optimizers}
    for sweep in prepared:
        with progress(sweep.settings) if progress is not None else nullcontext() as update:
            results[sweep.settings.optimizer][sweep.settings.seed] = sweep.run(update)
    return results


def _rung_scores(result: SweepResult) -> dict[float, dict[int, float]]:
    rungs: dict[float, dict[int, float]] = {}
    for trial in result.trials:
        for budget, score in trial["scores"].items():
            rungs.setdefault(int(budget), {})[trial["index"]] = score
    return rungs


def study(results: dict[str, dict[int, SweepResult]], seeds: list[int], against: str = "adam",
          resamples: int = 1000) -> dict[str, Any]:
    """All agreements of one space: per comparison at rung 1 (the paper's), at every rung, and of
    every rung against the reference's final SHA ordering; plus the verdict line."""
    scores = {name: {seed: _rung_scores(r) for seed, r in by_seed.items()} for name, by_seed in results.items()}
    budgets = sorted(next(iter(scores[against].values())))
    report: dict[str, Any] = {"comparisons": {}}
    first: dict[Comparison, Agreement] = {}
    for comparison in comparisons(against):
        pairs = comparison.pairs(seeds)
        method, reference = scores[comparison.method], scores[comparison.reference]
        per_rung = {}
        for budget in budgets:
            per_rung[f"{budget:g}"] = agreement({s: method[s][budget] for s in seeds},
                                                {s: reference[s][budget] for s in seeds}, pairs,
                                                resamples=resamples).as_dict()
        versus_final = {}
        finals = {s: final_ordering(reference[s]) for s in seeds}
        for budget in budgets:
            versus_final[f"{budget:g}"] = agreement({s: method[s][budget] for s in seeds}, finals, pairs,
                                                    resamples=resamples).as_dict()
        first[comparison] = agreement({s: method[s][budgets[0]] for s in seeds},
                                      {s: reference[s][budgets[0]] for s in seeds}, pairs, resamples=resamples)
        report["comparisons"][comparison.label] = {
            "method": comparison.method, "reference": comparison.reference, "pairing": comparison.pairing,
            "first_rung": first[comparison].as_dict(),
            "per_rung": per_rung,
            "against_reference_final_ordering": versus_final,
        }
    eve, itself = first[comparisons(against)[0]], first[comparisons(against)[2]]
    report["verdict"] = verdict(eve, itself, "EvE", against)
    report["eve_top_config_rank_under_reference"] = eve.top_ranks
    report["reference_top_config_rank_under_itself"] = itself.top_ranks
    return report
