"""The comparison's results store: Optuna studies on an RDB storage (eve-search's store conventions:
SQLite in write-ahead mode by default, a PostgreSQL URL for a shared store).

* One study per run (task, space, tool, search seed, budget multiple, problem signature), user attribute
  ``kind`` = ``"peer-run"``: the run's settings, charged units, wall and CPU seconds, versions, its
  event log, the pick and the referee's verdict on it, the anytime curve. Its trials are the tool's
  trials (parameters, a report per step as intermediate values). A run counts once its ``status`` is
  ``"done"``, written last; a study left without it (an interrupted run) is deleted and run again.
* One study per (task, space, max units, backward ratio), ``kind`` = ``"peer-run-referee"``: the referee's
  scores, one trial per (configuration, referee seed), computed once and reused by every run.

Both are in the record format that :mod:`eve_search.analysis.peer_records` documents; a run is checked
against it before it is stored, and the dashboard reads the same studies through it.
"""

from __future__ import annotations

import math
from typing import Any

from _peers.problem import Problem, config_key

from eve_search.analysis.peer_records import REFEREE_KIND, RUN_KIND, check_run

__all__ = ["PeerStore"]


class PeerStore:
    """Runs and referee scores on the storage at ``url`` (an SQLAlchemy URL)."""

    def __init__(self, url: str) -> None:
        import optuna

        from eve_search.engine.store import open_storage, write_ahead

        self.url = url
        self.optuna = optuna
        self.storage = open_storage(url)
        write_ahead(self.storage, url)
        self._referee: dict[str, dict[tuple[str, int], dict[str, Any]]] = {}

    # Runs ---------------------------------------------------------------------------------------------

    @staticmethod
    def run_name(problem: Problem, tool: str, seed: int, multiplier: float) -> str:
        return (f"peers:{problem.task}:{problem.space}:{tool}:seed{seed}:x{multiplier:g}:"
                f"{problem.signature()}")

    def _study_attrs(self) -> dict[str, dict[str, Any]]:
        return {s.study_name: dict(s.user_attrs) for s in self.storage.get_all_studies()}

    def done_run(self, name: str) -> dict[str, Any] | None:
        """The attributes of a finished run; an unfinished study of that name is deleted."""
        try:
            study_id = self.storage.get_study_id_from_name(name)
        except KeyError:
            return None
        attrs = self.storage.get_study_user_attrs(study_id)
        if attrs.get("status") == "done":
            return dict(attrs)
        self.optuna.delete_study(study_name=name, storage=self.storage)
        return None

    def save_run(self, name: str, attrs: dict[str, Any], trials: list[dict[str, Any]],
                 space: Any) -> None:
        """Record a finished run: its trials, then its attributes, ``status`` = ``done`` last."""
        from optuna.trial import TrialState, create_trial

        check_run({**attrs, "status": "done"})

        study = self.optuna.create_study(study_name=name, storage=self.storage, direction="maximize")
        distributions = space.distributions()
        for t in trials:
            values = {int(step): float(v) for step, v in t["reports"].items() if v is not None and math.isfinite(v)}
            complete = t["complete"] and t["score"] is not None and math.isfinite(t["score"])
            study.add_trial(create_trial(
                params={k: v for k, v in t["config"].items() if k in distributions},
                distributions={k: d for k, d in distributions.items() if k in t["config"]},
                value=float(t["score"]) if complete else None,
                state=TrialState.COMPLETE if complete else TrialState.PRUNED,
                intermediate_values=values, user_attrs={"tool_trial": t["key"], "units": t["units"]}))
        for key, value in attrs.items():
            if key != "status":
                study.set_user_attr(key, value)
        study.set_user_attr("status", "done")

    def update_run(self, name: str, attrs: dict[str, Any]) -> None:
        study_id = self.storage.get_study_id_from_name(name)
        check_run({**self.storage.get_study_user_attrs(study_id), **attrs})
        for key, value in attrs.items():
            self.storage.set_study_user_attr(study_id, key, value)

    def runs(self, signature: str | None = None) -> dict[str, dict[str, Any]]:
        """Every finished run (of one problem signature), by study name."""
        return {name: attrs for name, attrs in self._study_attrs().items()
                if attrs.get("kind") == RUN_KIND and attrs.get("status") == "done"
                and (signature is None or attrs.get("signature") == signature)}

    # The referee's cache ---------------------------------------------------------------------------------

    @staticmethod
    def referee_name(problem: Problem) -> str:
        return (f"peers:referee:{problem.task}:{problem.space}:u{problem.max_units}:"
                f"r{problem.backward_ratio:g}")

    def _referee_study(self, problem: Problem) -> Any:
        name = self.referee_name(problem)
        study = self.optuna.create_study(study_name=name, storage=self.storage, direction="maximize",
                                         load_if_exists=True)
        if study.user_attrs.get("kind") != REFEREE_KIND:
            study.set_user_attr("kind", REFEREE_KIND)
            study.set_user_attr("task", problem.task)
            study.set_user_attr("space", problem.space)
            study.set_user_attr("max_units", problem.max_units)
            study.set_user_attr("backward_ratio", problem.backward_ratio)
        return study

    def referee_scores(self, problem: Problem) -> dict[tuple[str, int], dict[str, Any]]:
        """Every stored referee score of the problem's space: (configuration key, referee seed) -> result."""
        name = self.referee_name(problem)
        if name not in self._referee:
            scores: dict[tuple[str, int], dict[str, Any]] = {}
            study = self._referee_study(problem)
            for t in study.get_trials(deepcopy=False):
                attrs = t.user_attrs
                if isinstance(attrs.get("config_key"), str) and isinstance(attrs.get("referee_seed"), int):
                    scores[(attrs["config_key"], attrs["referee_seed"])] = dict(attrs)
            self._referee[name] = scores
        return self._referee[name]

    def add_referee_score(self, problem: Problem, config: dict[str, Any], seed: int, result: dict[str, Any]) -> None:
        from optuna.trial import TrialState, create_trial

        distributions = problem.declared.distributions()
        attrs = {"config_key": config_key(config), "referee_seed": int(seed), "config": config, **result}
        self._referee_study(problem).add_trial(create_trial(
            params={k: v for k, v in config.items() if k in distributions}, distributions=distributions,
            value=float(result["test"]), state=TrialState.COMPLETE, user_attrs=attrs))
        self.referee_scores(problem)[(attrs["config_key"], int(seed))] = attrs
