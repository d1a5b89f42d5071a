"""What the CLI shows: a live progress line per sweep, the final table and the JSON document."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from eve_search.engine._stores import safe_url
from eve_search.engine.sha import rung_sizes
from eve_search.engine.sweep import SweepResult, SweepSettings

__all__ = ["SweepProgress", "diverged_trials", "print_rank_tables", "print_summary", "score_text", "summary_json",
           "time_ratio"]


class SweepProgress:
    """A one-line live display: optimizer, rung, trials done, best so far, elapsed.

    Written to stderr, so that stdout carries only the final table.
    """

    def __init__(self, settings: SweepSettings, *, enabled: bool = True) -> None:
        self.settings = settings
        self.enabled = enabled
        self.sizes = rung_sizes(settings.configs, settings.rungs)
        self._console = Console(stderr=True)
        self._live: Live | None = None
        self._started = time.perf_counter()

    def __enter__(self) -> Callable[[str, int, int, int, float | None], None]:
        """Start the display; returns the callback a sweep reports its progress to."""
        if self.enabled:
            self._live = Live(self._line("starting", 0, 0, 0, None), console=self._console, refresh_per_second=4,
                              transient=True)
            self._live.__enter__()
        return self.update

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(*exc)

    def _line(self, phase: str, rung: int, done: int, total: int, best: float | None) -> Text:
        s = self.settings
        elapsed = time.perf_counter() - self._started
        if phase == "training":
            budget = s.rungs[rung]
            shown = score_text(best)
            status = f"rung {rung + 1}/{len(s.rungs)} (budget {budget:g}): {done}/{total} trials | best val {shown}"
        else:
            status = phase
        return Text(f"{s.optimizer} on {s.task}/{s.space}, seed {s.seed} | {status} | {elapsed:.1f}s")

    def update(self, phase: str, rung: int, done: int, total: int, best: float | None) -> None:
        if self._live is not None:
            self._live.update(self._line(phase, rung, done, total, best))


def time_ratio(results: list[SweepResult], numerator: str = "eve",
               denominator: str = "adam") -> dict[str, float] | None:
    """Wall and training time of one optimizer's sweep over another's, when both ran."""
    by_name = {r.optimizer: r for r in results}
    if numerator not in by_name or denominator not in by_name:
        return None
    a, b = by_name[numerator], by_name[denominator]
    return {"wall_seconds": a.wall_seconds / b.wall_seconds,
            "training_seconds": a.training_seconds / b.training_seconds}


def _describe(config: dict[str, Any]) -> str:
    """A configuration in a few words: an MLP's shape first, then learning rate and weight decay."""
    shape = {"width", "depth"} <= set(config)
    parts = [f"{config['width']}x{config['depth']}"] if shape else []
    parts += [f"{key} {value:.2e}" if isinstance(value, float) else f"{key} {value}" for key, value in config.items()
              if key not in ("lr", "weight_decay") and not (shape and key in ("width", "depth"))]
    if "lr" in config:
        parts.append(f"lr {config['lr']:.2e}")
    if "weight_decay" in config:
        parts.append(f"wd {config['weight_decay']:.1e}")
    return ", ".join(parts)


def _metric_label(result: SweepResult) -> str:
    return "acc" if result.metric == "accuracy" else result.metric


def score_text(score: float | None) -> str:
    """A score as the table shows it: four decimals, in exponent form when large (a diverged loss), and
    ``diverged (nan)`` for a score that is not finite.

    Example:
        >>> score_text(0.85123), score_text(3.4e34), score_text(float("nan")), score_text(None)
        ('0.8512', '3.400e+34', 'diverged (nan)', '-')
    """
    if score is None:
        return "-"
    if not math.isfinite(score):
        return f"diverged ({score})"
    return f"{score:.4f}" if abs(score) < 1e6 else f"{score:.3e}"


def diverged_trials(result: SweepResult) -> list[int]:
    """The configurations of ``result`` with a score that is not finite at some rung (training diverged,
    or the metric gave no number): they rank last at that rung."""
    return [trial["index"] for trial in result.trials
            if any(not math.isfinite(score) for score in trial["scores"].values())]


def _divergence_note(result: SweepResult) -> str | None:
    diverged = diverged_trials(result)
    if not diverged:
        return None
    note = (f"{result.optimizer}: training diverged for {len(diverged)} of {len(result.trials)} configurations (a "
            f"validation {result.metric} that is NaN or infinite, ranked last)")
    if not math.isfinite(result.winner["score"]):
        note += (f"; even the configuration kept to the last rung diverged (its {result.metric}: "
                 f"{result.winner['score']})")
    if not math.isfinite(result.best["score"]):
        note += "; no configuration scored a finite value"
    return note


def print_summary(results: list[SweepResult], storage: str, console: Console | None = None) -> None:
    # A pipe or a file gets a width that fits the table instead of rich's 80-column default.
    console = console or Console(width=None if Console().is_terminal else 160)
    first = results[0]
    title = "UCI Adult" if first.task == "adult" else f"task {first.task}"
    label = _metric_label(first)
    table = Table(title=f"{title}, space {first.space}, training seed {first.seed}: synchronous SHA over "
                        f"{len(first.trials)} configurations")
    for column in ("optimizer", "wall s", "training s", "charged units", f"best val {label} found",
                   f"its test {label}", "its configuration (rung)"):
        table.add_column(column, justify="left" if column in ("optimizer", "its configuration (rung)") else "right")
    for r in results:
        test = (r.best.get("test") or {}).get(r.metric)
        table.add_row(r.optimizer, f"{r.wall_seconds:.1f}", f"{r.training_seconds:.1f}", f"{r.charged_units:,.0f}",
                      score_text(r.best["score"]), score_text(test),
                      f"{_describe(r.best['config'])} ({r.best['budget']:g})")
    console.print(table)
    for r in results:
        note = _divergence_note(r)
        if note is not None:
            console.print(note)
    ratio = time_ratio(results)
    if ratio is not None:
        console.print(f"EvE/Adam time ratio: {ratio['wall_seconds']:.2f} (whole sweep), "
                      f"{ratio['training_seconds']:.2f} (training only)")
    modes = {(r.cost_mode, tuple(sorted(r.backward_ratios.items()))) for r in results}
    for r in results:
        if r.cost_mode == "calibrated":
            shown = ", ".join(f"{k}: {v:.3f}" for k, v in sorted(r.backward_ratios.items()))
            console.print(f"{r.optimizer}: calibrated cost, backward/forward ratio {shown}", style="dim")
        elif len(modes) == 1:
            console.print(f"{r.optimizer}: measured cost (each backward charged by its own time)", style="dim")
    console.print(f"results store: {safe_url(storage)}", style="dim")


def summary_json(results: list[SweepResult], storage: str) -> dict[str, Any]:
    """The ``--json`` document of one or several optimizers' sweeps of one task, space and seed."""
    ratio = time_ratio(results)
    first = results[0]
    return {
        "task": first.task,
        "space": first.space,
        "seed": first.seed,
        "metric": first.metric,
        "storage": safe_url(storage),  # never a password
        "optimizers": {r.optimizer: {**{key: value for key, value in r.as_dict().items()
                                        if key not in ("task", "optimizer", "space", "seed", "metric")},
                                     "diverged": diverged_trials(r)} for r in results},
        "eve_over_adam_time": ratio,
    }


def _rung_cell(agreement: dict[str, Any]) -> str:
    shared = min(agreement["configurations"])
    # SHA trains few configurations at late rungs, and two methods keep different ones: a tau over
    # fewer than five shared configurations says nothing.
    return f"{agreement['mean']:.3f} ({shared})" if shared >= 5 else f"- ({shared})"


def print_rank_tables(document: dict[str, Any], console: Console | None = None) -> None:
    """The paper's agreement table (rows = comparisons, columns = spaces) with the paper beside ours,
    then agreement at every rung, the verdicts and the top-configuration ranks."""
    from eve_search.analysis.ranking import comparisons
    from eve_search.paper import PAPER_TAUS, PAPER_TOP_RANKS

    console = console or Console(width=None if Console().is_terminal else 160)
    spaces = list(document["spaces"])
    seeds = document["seeds"]
    table = Table(title=f"Kendall tau-b at the first rung, mean +- std over training seeds {seeds} "
                        f"(paper: 5 seeds)")
    table.add_column("comparison")
    for space in spaces:
        table.add_column(f"{space}: ours", justify="right")
        table.add_column(f"{space}: 95% interval", justify="right")
        table.add_column(f"{space}: paper", justify="right")
    for comparison in comparisons(document["against"]):
        row = [comparison.label]
        for space in spaces:
            first = document["spaces"][space]["comparisons"][comparison.label]["first_rung"]
            paper = PAPER_TAUS.get((comparison.method, comparison.reference, comparison.pairing), {}).get(space)
            row += [f"{first['mean']:.3f} +- {first['std']:.3f}",
                    f"[{first['interval'][0]:.3f}, {first['interval'][1]:.3f}]",
                    f"{paper[0]:.3f} +- {paper[1]:.3f}" if paper else "-"]
        table.add_row(*row)
    console.print(table)
    for space in spaces:
        report = document["spaces"][space]
        labels = list(report["comparisons"])
        budgets = list(report["comparisons"][labels[0]]["per_rung"])
        rungs = Table(title=f"{space}: tau-b at every rung over the configurations both trained (in brackets: the "
                            f"fewest shared by a seed pair; '-' below 5), and of each rung against the reference's "
                            f"final SHA ordering")
        rungs.add_column("comparison")
        for budget in budgets:
            rungs.add_column(f"rung {budget}", justify="right")
        for label in labels:
            per_rung = report["comparisons"][label]["per_rung"]
            rungs.add_row(label, *(_rung_cell(per_rung[b]) for b in budgets))
        for label in labels[:1] + labels[2:3]:
            final = report["comparisons"][label]["against_reference_final_ordering"]
            method = report["comparisons"][label]["method"]
            rungs.add_row(f"{method} rung vs {document['against']} final ordering",
                          *(_rung_cell(final[b]) for b in budgets))
        console.print(rungs)
        ranks = report["eve_top_config_rank_under_reference"]
        paper_ranks = PAPER_TOP_RANKS.get(space) if document["against"] == "adam" else None
        own = report["reference_top_config_rank_under_itself"]
        console.print(f"{space}: rank under {document['against']} of EvE's rung-1 top configuration, per seed: "
                      f"{ranks} (mean {sum(ranks) / len(ranks):.1f})"
                      + (f"; paper: {paper_ranks} (mean {sum(paper_ranks) / len(paper_ranks):.1f})"
                         if paper_ranks else "")
                      + f"; {document['against']}'s own top under its next seed: {own} "
                        f"(mean {sum(own) / len(own):.1f})")
        console.print(f"{space}: {report['verdict']}")
    console.print(f"wall time {document['wall_seconds']:.1f} s; trial-rungs trained by this run: "
                  f"{document['trained_trial_rungs']}, every other result read from {safe_url(document['storage'])}",
                  style="dim")
