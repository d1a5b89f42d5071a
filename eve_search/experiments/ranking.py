"""The ranking-agreement study behind ``eve-search rank``: gather sweeps, compare rankings.

Sweeps come from the results store when they exist (nothing is retrained) and are run, resumably,
when they do not. The four reference comparisons are those of the paper (Appendix "Does EvE Rank
Configurations Like Adam Does?"), with the reference trainer configurable (``--against``).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from eve_search.analysis.ranking import (
    Agreement,
    Comparison,
    agreement,
    comparisons,
    final_ordering,
    rung_scores,
    verdict,
)
from eve_search.engine.sweep import ProgressCallback, SweepResult, SweepSettings, prepare_sweep
from eve_search.paper import PAPER_TAUS, PAPER_TOP_RANKS

__all__ = ["PAPER_TAUS", "PAPER_TOP_RANKS", "Comparison", "comparisons", "gather", "study"]

def gather(space: str, optimizers: list[str], seeds: list[int], *, storage: str, checkpoint_dir: Path,
           settings: dict[str, Any], data_dir: Path | None = None,
           progress: Callable[[SweepSettings], AbstractContextManager[ProgressCallback | None]] | None = None,
           ) -> dict[str, dict[int, SweepResult]]:
    """Every (optimizer, seed) sweep of ``space``, from the store or trained now (resumably).

    Every sweep is prepared (data loaded, store opened, settings checked) before the first trains.
    ``progress(settings)`` gives a context whose value is the sweep's progress callback.

    Args:
        space: the search space's name.
        optimizers: the optimizers to sweep it with.
        seeds: the training seeds (one sweep per optimizer and seed).
        storage: the results store's URL.
        checkpoint_dir: where trial checkpoints go.
        settings: further :class:`~eve_search.engine.sweep.SweepSettings` fields shared by every sweep.
        data_dir: the task's data folder (None: its default data).
        progress: a factory of per-sweep progress contexts (None: no progress).

    Returns:
        ``{optimizer: {seed: SweepResult}}``.

    Example (trains every sweep not stored yet: not run as a doctest):
        >>> results = gather("hp", ["eve", "adam", "adamw"], [0, 1], storage="sqlite:///runs/results.db",  # doctest: +SKIP
        ...                  checkpoint_dir=Path("runs/checkpoints"), settings={"backward_ratio": 2.0})
        >>> sorted(results["eve"])  # doctest: +SKIP
        [0, 1]
    """
    prepared = [prepare_sweep(SweepSettings(space=space, optimizer=optimizer, seed=seed, **settings), storage=storage,
                              checkpoint_dir=checkpoint_dir, resume=True, data_dir=data_dir)
                for seed in seeds for optimizer in optimizers]
    results: dict[str, dict[int, SweepResult]] = {name: {} for name in optimizers}
    for sweep in prepared:
        with progress(sweep.settings) if progress is not None else nullcontext() as update:
            results[sweep.settings.optimizer][sweep.settings.seed] = sweep.run(update)
    return results


def study(results: dict[str, dict[int, SweepResult]], seeds: list[int], against: str = "adam",
          resamples: int = 1000) -> dict[str, Any]:
    """All agreements of one space: per comparison at rung 1 (the paper's), at every rung, and of
    every rung against the reference's final SHA ordering; plus the verdict line.

    Args:
        results: ``{optimizer: {seed: sweep}}`` as :func:`gather` returns, holding ``"eve"``,
            ``"adamw"`` and ``against`` (only each sweep's ``trials`` are read).
        seeds: the seeds to compare, in order (the reference is paired with the next seed).
        against: the reference trainer.
        resamples: bootstrap resamples of each agreement's interval.

    Returns:
        ``comparisons`` (per comparison label: ``first_rung``, ``per_rung`` and
        ``against_reference_final_ordering`` agreements), ``verdict``, and the top configurations'
        ranks (``eve_top_config_rank_under_reference``, ``reference_top_config_rank_under_itself``).

    Example:
        >>> from types import SimpleNamespace
        >>> def sweep(shift):
        ...     return SimpleNamespace(trials=[{"index": i, "scores": {100: 0.5 + 0.1 * i + shift, 300: 0.6 + 0.1 * i}}
        ...                                    for i in range(5)])
        >>> results = {name: {seed: sweep(0.01 * seed) for seed in (0, 1)} for name in ("eve", "adam", "adamw")}
        >>> report = study(results, seeds=[0, 1], resamples=50)
        >>> list(report["comparisons"])
        ['eve vs adam', 'eve vs adamw', 'adam vs adam (different training seeds)', 'adam vs adamw']
        >>> report["eve_top_config_rank_under_reference"]
        [1, 1]
    """
    scores = {name: {seed: rung_scores((t["index"], int(b), s) for t in r.trials for b, s in t["scores"].items()) for seed, r in by_seed.items()} for name, by_seed in results.items()}
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
