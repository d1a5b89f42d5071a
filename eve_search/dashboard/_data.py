"""What the dashboard shows, computed from a results store before anything is drawn.

The store is read once into plain records (:func:`read_store`), then :func:`build` turns the
records into one JSON-able document: per task, the sweep-time-against-best-score points (ours,
mean and std over training seeds, beside the paper's), each sweep's successive-halving ladder and
trial curves, the ranking agreement between EvE and Adam, and one table of every configuration.
The renderer draws that document and nothing else, and ``--json`` writes it unchanged.

Studies are dispatched on their ``kind`` user attribute: ``"sha-sweep"`` is one successive-halving
sweep; a kind registered with :func:`register_kind` gets its own section; every other study (any
kind, or none) is shown as a generic table of its trials, so a new kind of study never breaks the
page. A sweep's stored values are checked where the page uses them: one whose settings, config
indices or rung records are not what eve-search writes gives StoreError, one line naming the sweep,
the trial and the key.

Example:
    >>> record = {"name": "demo", "directions": ["maximize"], "user_attrs": {"kind": "toy"},
    ...           "trials": [{"number": 0, "state": "COMPLETE", "values": [0.5], "params": {"x": 1.0},
    ...                       "user_attrs": {}, "intermediate_values": {1: 0.4, 2: 0.5}}]}
    >>> data = build([record])
    >>> [(s["title"], s["view"]) for s in data["sections"]]
    [('Other studies: toy', 'trials')]
    >>> data["sections"][0]["studies"][0]["rows"][0][:3]
    [0, 'COMPLETE', 0.5]
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from eve_search._checks import InputError
from eve_search.analysis.summary import mean_std
from eve_search.engine._stores import redact, safe_url  # the one URL mask: every credential a URL can carry

__all__ = [
    "PAPER_ADULT_SWEEPS",
    "build",
    "dashboard_data",
    "fingerprint",
    "read_store",
    "register_kind",
    "safe_url",
    "sweep_view",
]

SWEEP_KIND = "sha-sweep"

# Paper, Appendix "UCI Adult", Tables tab:hpo-full and tab:nas-full: sweep wall time in seconds and
# best validation accuracy found, mean and std over 5 training seeds (their times are on a GPU).
PAPER_ADULT_SWEEPS: dict[str, dict[str, tuple[float, float, float, float]]] = {
    "hp": {
        "eve": (21.8, 0.3, 0.8544, 0.0018), "sgd_momentum": (73.6, 1.3, 0.8549, 0.0020),
        "nadam": (75.1, 0.5, 0.8591, 0.0018), "radam": (75.5, 0.9, 0.8584, 0.0009),
        "adabelief": (75.6, 0.8, 0.8579, 0.0010), "adam": (75.7, 0.9, 0.8582, 0.0019),
        "adamw": (75.7, 0.6, 0.8587, 0.0010), "amsgrad": (76.2, 0.4, 0.8580, 0.0010),
        "lookahead": (76.8, 1.0, 0.8587, 0.0019),
    },
    "arch": {
        "eve": (21.5, 0.9, 0.8544, 0.0010), "adabelief": (66.9, 1.2, 0.8587, 0.0017),
        "lookahead": (68.2, 1.1, 0.8588, 0.0006), "sgd_momentum": (69.6, 0.9, 0.8533, 0.0014),
        "amsgrad": (69.8, 2.1, 0.8588, 0.0017), "radam": (70.5, 1.7, 0.8585, 0.0012),
        "nadam": (70.6, 1.3, 0.8582, 0.0013), "adamw": (71.8, 1.5, 0.8589, 0.0008),
        "adam": (75.8, 3.7, 0.8585, 0.0013),
    },
}

TASK_TITLES = {"adult": "UCI Adult", "mnist": "MNIST", "lora": "LoRA fine-tuning", "synthetic": "Synthetic benchmarks"}

Record = Mapping[str, Any]
KindCollector = Callable[[list[Record]], dict[str, Any]]


def _audit_section(records: list[Record]) -> dict[str, Any]:
    from eve_search.dashboard._audit import audit_section

    return audit_section(records)


def _peer_runs_section(records: list[Record]) -> dict[str, Any]:
    from eve_search.dashboard._peers import peers_section

    return peers_section(records)


def _peer_referee_section(records: list[Record]) -> dict[str, Any]:
    from eve_search.dashboard._peers import referee_section

    return referee_section(records)


# Built in (searches/peers.py's comparison with other search tools included); register_kind adds more.
_KINDS: dict[str, KindCollector] = {"audit": _audit_section, "peer-run": _peer_runs_section,
                                    "peer-run-referee": _peer_referee_section}


def register_kind(kind: str, collect: KindCollector) -> None:
    """Give the studies whose ``kind`` user attribute is ``kind`` their own section.

    ``collect(records)`` receives every study record of that kind (see :func:`read_store`) and
    returns one section: a JSON-able dict with at least ``"title"`` and ``"view"``. ``"view"`` is
    ``"trials"`` (the generic trial tables: give ``"studies"`` as :func:`build` makes them) or a
    view registered with :func:`eve_search.dashboard.register_view`.

    Args:
        kind: the studies' ``kind`` user attribute (not ``"sha-sweep"``, which is built in).
        collect: builds the section from every study record of that kind.

    Raises:
        ValueError: ``kind`` is the built-in sweep kind.

    Example:
        >>> register_kind("doctest-count", lambda records: {"title": "Counted", "view": "trials",
        ...                                                  "studies": [], "count": len(records)})
        >>> record = {"name": "a", "directions": ["minimize"], "user_attrs": {"kind": "doctest-count"}, "trials": []}
        >>> [(section["title"], section["count"]) for section in build([record, record])["sections"]]
        [('Counted', 2)]
    """
    if kind == SWEEP_KIND:
        raise InputError(f"Invalid kind: {kind!r} (built in: successive-halving sweeps)")
    _KINDS[kind] = collect


# Reading -----------------------------------------------------------------------------------------


def _open_storage(url: str):
    from eve_search.engine.store import StoreError

    import optuna
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        from sqlalchemy.engine import make_url

        parsed = make_url(url)
    except Exception:  # noqa: BLE001 sqlalchemy raises several kinds for a malformed URL
        raise StoreError(f"--storage {safe_url(url)!r}: not an SQLAlchemy URL (expected e.g. sqlite:///runs/results.db "
                         "or postgresql+psycopg2://user@host/db)") from None
    local = parsed.drivername.startswith("sqlite") and parsed.database not in (None, "", ":memory:")
    if local and not Path(parsed.database).is_file():
        # Opening a missing SQLite file would create an empty store; a typo should say so instead.
        raise StoreError(f"--storage {safe_url(url)!r}: no results store there ({parsed.database} does not exist)")
    try:
        import sqlalchemy

        engine = sqlalchemy.create_engine(url)
        try:
            has_studies = sqlalchemy.inspect(engine).has_table("studies")
        finally:
            engine.dispose()
        if not has_studies:
            raise StoreError(f"--storage {safe_url(url)!r}: not a results store (the database has no Optuna "
                             "tables; sweeps create them)")
        # Read only: never create tables.
        return optuna.storages.RDBStorage(url, skip_table_creation=True)
    except StoreError:
        raise
    except Exception as error:  # noqa: BLE001 SQLAlchemy raises many kinds; the user needs one line of any
        text = str(error).strip()
        first_line = text.splitlines()[0] if text else type(error).__name__
        raise StoreError(f"--storage {safe_url(url)!r}: cannot open the results store ({redact(first_line)})") from None


def read_store(url: str) -> list[dict[str, Any]]:
    """Every study of the store as a plain record: name, directions, user attributes, trials.

    A trial record holds ``number``, ``state`` (the Optuna state's name), ``values``, ``params``,
    ``user_attrs``, ``intermediate_values`` ({step: value}), ``duration`` (seconds or None) and
    ``retry_of`` (the number of the failed trial a re-queued trial retries, or None).
    Nothing in the store is executed or modified (user attributes are JSON in Optuna's tables).

    Args:
        url: the store's SQLAlchemy URL.

    Returns:
        One record per study: ``name``, ``directions``, ``user_attrs`` and ``trials``.

    Raises:
        StoreError: the store cannot be opened.

    Example:
        >>> import pathlib, tempfile, optuna
        >>> optuna.logging.set_verbosity(optuna.logging.WARNING)
        >>> url = f"sqlite:///{pathlib.Path(tempfile.mkdtemp())}/runs.db"
        >>> study = optuna.create_study(study_name="demo", storage=url)
        >>> study.set_user_attr("kind", "doctest-notes")
        >>> study.optimize(lambda trial: trial.suggest_float("x", 0, 1), n_trials=2)
        >>> [(r["name"], r["directions"], [t["state"] for t in r["trials"]]) for r in read_store(url)]
        [('demo', ['minimize'], ['COMPLETE', 'COMPLETE'])]
    """
    storage = _open_storage(url)
    try:
        records = []
        for frozen in storage.get_all_studies():
            trials = []
            study_id = storage.get_study_id_from_name(frozen.study_name)
            for trial in storage.get_all_trials(study_id, deepcopy=False):
                duration = trial.duration.total_seconds() if trial.duration is not None else None
                trials.append({"number": trial.number, "state": trial.state.name, "values": trial.values,
                               "params": dict(trial.params), "user_attrs": dict(trial.user_attrs),
                               "intermediate_values": dict(trial.intermediate_values), "duration": duration,
                               "retry_of": trial.system_attrs.get("failed_trial")})
            records.append({"name": frozen.study_name, "directions": [d.name.lower() for d in frozen.directions],
                            "user_attrs": dict(frozen.user_attrs), "trials": trials})
        return records
    finally:
        storage.remove_session()
        storage.engine.dispose()


# Small helpers -----------------------------------------------------------------------------------


def _finite(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _json_safe(value: Any) -> Any:
    """NaN and infinities become None (JSON has neither); tuples become lists; keys become strings."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if value is None or isinstance(value, (bool, int, str)):
        return value
    return str(value)


def fingerprint(data: Mapping[str, Any]) -> str:
    """A short digest of a dashboard document: it changes whenever anything shown changes.

    Args:
        data: the document (its own ``fingerprint`` key is left out).

    Returns:
        16 hexadecimal digits.

    Example:
        >>> fingerprint({"a": 1}) == fingerprint({"a": 1, "fingerprint": "old"}) != fingerprint({"a": 2})
        True
    """
    text = json.dumps({k: v for k, v in data.items() if k != "fingerprint"}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# One successive-halving sweep --------------------------------------------------------------------


def _is_sweep(attrs: Mapping[str, Any]) -> bool:
    if attrs.get("kind") == SWEEP_KIND:
        return True
    # Sweeps recorded before studies carried a kind: settings with an optimizer and rungs.
    settings = attrs.get("settings")
    return "kind" not in attrs and isinstance(settings, Mapping) and "optimizer" in settings and "rungs" in settings


def _altered(sweep: str, key: str, value: Any, expected: str, trial: Any = None) -> Exception:
    from eve_search.engine.store import altered  # only on this path: building a page needs no PyTorch

    return altered(sweep, key, value, expected, trial)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _whole(value: Any, least: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


# What a sweep's settings may hold, where present: (check, what was expected).
_SETTINGS_CHECKS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "seed": (lambda v: _whole(v, 0), "an int >= 0"),
    "config_seed": (lambda v: _whole(v, 0), "an int >= 0"),
    "configs": (lambda v: _whole(v, 1), "an int >= 1"),
    "rungs": (lambda v: isinstance(v, list) and all(_number(b) and math.isfinite(b) and b > 0 for b in v),
              "a list of rung budgets > 0"),
    "fraction": (lambda v: _number(v) and 0 < v < 1, "a number in (0, 1)"),
    "mode": (lambda v: v in ("max", "min"), "'max' or 'min'"),
    **{key: (lambda v: isinstance(v, str), "a string") for key in ("task", "dataset", "space", "optimizer", "metric")},
}


def _sweep_settings(name: str, attrs: Mapping[str, Any]) -> dict[str, Any]:
    """A sweep's stored settings, checked where the page uses them (StoreError naming the key)."""
    settings = attrs.get("settings")
    if settings is None:
        return {}
    if not isinstance(settings, Mapping):
        raise _altered(name, "settings", settings, "a dict of the sweep's settings")
    for key, (check, expected) in _SETTINGS_CHECKS.items():
        if settings.get(key) is not None and not check(settings[key]):
            raise _altered(name, f"settings.{key}", settings[key], expected)
    ratios = attrs.get("backward_ratios")
    if ratios is not None and not (isinstance(ratios, Mapping) and all(_number(v) for v in ratios.values())):
        raise _altered(name, "backward_ratios", ratios, "a dict of model shapes to ratios")
    return dict(settings)


def _current_trials(name: str, trials: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Per configuration index, its current trial: an int ``config_index`` >= 0 on one trial only,
    except a failed trial's retries (Optuna re-queues a copy naming the original), the last of which
    is current. Trials without an index (none in a sweep eve-search wrote) are left out."""
    chains: dict[int, list[Mapping[str, Any]]] = {}
    for trial in trials:
        index = trial["user_attrs"].get("config_index")
        if index is None:
            continue
        if not _whole(index, 0):
            raise _altered(name, "config_index", index, "an int >= 0", f"#{trial['number']}")
        chains.setdefault(index, []).append(trial)
    current = []
    for index, chain in sorted(chains.items()):
        chain = sorted(chain, key=lambda t: t["number"])
        first = chain[0]["number"]
        if any(t["state"] != "FAIL" for t in chain[:-1]) or any(t.get("retry_of") != first for t in chain[1:]):
            from eve_search.engine.store import ALTERED, StoreError

            raise StoreError(f"results store: sweep {name!r}: trials #{chain[0]['number']} and #{chain[1]['number']} "
                             f"both hold config_index {index} (expected one trial per configuration, or retries "
                             f"of a failed one); {ALTERED}")
        current.append(chain[-1])
    return current


def _rung_results(name: str, trial: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A trial's rung results, by budget; a record of the wrong shape is StoreError (NaN scores of a
    diverged trial are left out, as they are not drawn)."""
    results = []
    where = f"#{trial['number']} (configuration {trial['user_attrs']['config_index']})"
    for key, value in trial["user_attrs"].items():
        if not key.startswith("rung_"):
            continue
        if not isinstance(value, Mapping):
            raise _altered(name, key, value, "a dict of one rung's results", where)
        budget = value.get("budget")
        if not (_number(budget) and math.isfinite(budget) and budget > 0):
            raise _altered(name, f"{key}.budget", budget, "a number > 0", where)
        score = value.get("score", value.get("val_acc"))
        if not _number(score):
            raise _altered(name, f"{key}.score", score, "a number", where)
        for field in ("val", "test"):
            if value.get(field) is not None and not isinstance(value[field], Mapping):
                raise _altered(name, f"{key}.{field}", value[field], "a dict of metrics", where)
        result = _rung_result(value)
        if result is not None:
            results.append(result)
    return sorted(results, key=lambda r: r["budget"])


def _rung_result(details: Mapping[str, Any]) -> dict[str, Any] | None:
    """One rung's result in the store's schema; older stores wrote val_acc / val_loss / test_acc."""
    budget = _finite(details.get("budget"))
    score = _finite(details.get("score", details.get("val_acc")))
    if budget is None or score is None:
        return None
    val = details.get("val")
    if not isinstance(val, Mapping):
        val = {name: details[key] for name, key in (("accuracy", "val_acc"), ("loss", "val_loss")) if key in details}
    test = details.get("test")
    if not isinstance(test, Mapping):
        test = {"accuracy": details["test_acc"]} if details.get("test_acc") is not None else None
    return {"budget": budget, "score": score, "val": dict(val), "test": dict(test) if test else None,
            "charged_units": _finite(details.get("charged_units")),
            "wall_seconds": _finite(details.get("wall_seconds")),
            "backward_passes": details.get("backward_passes")}


def _better(mode: str) -> Callable[[float, float], bool]:
    return (lambda a, b: a > b) if mode == "max" else (lambda a, b: a < b)


def _trial_views(record: Record, better: Callable[[float, float], bool]) -> list[dict[str, Any]]:
    """Each current trial of a sweep: its configuration, state, rung results, last and best scores; in
    configuration order."""
    trials = []
    for trial in _current_trials(record["name"], record["trials"]):
        user = trial["user_attrs"]
        index = user["config_index"]
        results = _rung_results(record["name"], trial)
        config = user.get("config") if isinstance(user.get("config"), Mapping) else trial["params"]
        best = None
        for r in results:
            if best is None or better(r["score"], best["score"]):
                best = r
        trials.append({"index": int(index), "number": trial["number"], "state": trial["state"],
                       "config": dict(config), "rungs": results,
                       "last_budget": results[-1]["budget"] if results else None,
                       "last_score": results[-1]["score"] if results else None,
                       "best_score": best["score"] if best else None})
    trials.sort(key=lambda t: t["index"])
    return trials


def _best_found(trials: list[dict[str, Any]], better: Callable[[float, float], bool]) -> dict[str, Any] | None:
    """The best score found at any rung (the paper's "best validation accuracy found"), first recorded on ties."""
    best_found = None
    for t in trials:
        for r in t["rungs"]:
            if best_found is None or better(r["score"], best_found["score"]) or (
                    r["score"] == best_found["score"] and (r["budget"], t["index"]) < (best_found["budget"],
                                                                                        best_found["index"])):
                best_found = {"index": t["index"], "budget": r["budget"], "score": r["score"], "test": r["test"]}
    return best_found


def _winner(attrs: Mapping[str, Any], trials: list[dict[str, Any]],
            better: Callable[[float, float], bool]) -> dict[str, Any] | None:
    """The sweep's winner as stored, else the best trial that completed once every trial has ended."""
    winner = attrs.get("winner") if isinstance(attrs.get("winner"), Mapping) else None
    if winner is not None:
        return {"index": winner.get("index"), "score": winner.get("score"), "test": winner.get("test")}
    complete = [t for t in trials if t["state"] == "COMPLETE" and t["last_score"] is not None]
    if complete and all(t["state"] in ("COMPLETE", "PRUNED") for t in trials):
        top = complete[0]
        for t in complete[1:]:
            if better(t["last_score"], top["last_score"]):
                top = t
        test = attrs.get("winner_test_accuracy")
        return {"index": top["index"], "score": top["last_score"],
                "test": {"accuracy": test} if test is not None else None}
    return None


def sweep_view(record: Record) -> dict[str, Any]:
    """One sweep's settings, best score found, ladder and per-trial curves.

    The ladder has one entry per rung: ``trained`` (results recorded there), ``promoted`` (went on
    to the next rung, or were kept for it), ``stopped`` (pruned there), ``waiting`` (recorded there,
    no decision yet), ``planned`` (the successive-halving rule's rung size) and, at the last rung,
    ``completed``.

    Args:
        record: the sweep's study record (see :func:`read_store`).

    Returns:
        The sweep's ``name``, ``task``, ``optimizer``, ``settings``, ``best``, ``winner``, ``ladder``,
        per-trial ``trials``, times and charged units, as one JSON-able dict.

    Raises:
        StoreError: a stored setting the page uses has been altered to an unexpected value.

    Example:
        >>> record = {"name": "adult-hp-eve-seed0", "directions": ["maximize"], "trials": [],
        ...           "user_attrs": {"kind": "sha-sweep", "settings": {
        ...               "task": "adult", "space": "hp", "optimizer": "eve", "seed": 0, "configs": 4,
        ...               "rungs": [100, 300], "fraction": 0.5}}}
        >>> view = sweep_view(record)
        >>> [(rung["budget"], rung["planned"], rung["trained"]) for rung in view["ladder"]]
        [(100.0, 4, 0), (300.0, 2, 0)]
    """
    attrs = record["user_attrs"]
    settings = _sweep_settings(record["name"], attrs)
    directions = record.get("directions") or ["maximize"]
    mode = settings.get("mode") or ("min" if directions[0] == "minimize" else "max")
    better = _better(mode)
    rungs = sorted(float(b) for b in settings.get("rungs") or [])
    trials = _trial_views(record, better)
    for budget in sorted({r["budget"] for t in trials for r in t["rungs"]} - set(rungs)):
        rungs.append(budget)  # a rung the settings do not list (older or hand-written stores)
    rungs.sort()
    best_found = _best_found(trials, better)
    winner = _winner(attrs, trials, better)
    ladder = _ladder(trials, rungs, settings, winner)
    finished = bool(trials) and all(t["state"] in ("COMPLETE", "PRUNED") for t in trials)
    last = [t["rungs"][-1] for t in trials if t["rungs"]]
    return {
        "name": record["name"],
        "task": str(settings.get("task", settings.get("dataset", "unknown"))),
        "space": str(settings.get("space", "")),
        "optimizer": str(settings.get("optimizer", "")),
        "seed": settings.get("seed"),
        "config_seed": settings.get("config_seed", 0),
        "metric": str(settings.get("metric", "accuracy")),
        "mode": mode,
        "settings": settings,
        "rungs": rungs,
        "finished": finished,
        "wall_seconds": _finite(attrs.get("wall_seconds")),
        "training_seconds": sum(r["wall_seconds"] or 0.0 for r in last),
        "charged_units": sum(r["charged_units"] or 0.0 for r in last),
        "backward_ratios": dict(attrs.get("backward_ratios") or {}),
        "best": best_found,
        "winner": winner,
        "ladder": ladder,
        "trials": trials,
    }


def _ladder(trials: list[dict[str, Any]], rungs: list[float], settings: Mapping[str, Any],
            winner: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    planned: list[int | None] = [None] * len(rungs)
    configs = settings.get("configs")
    if isinstance(configs, int) and rungs:
        from eve_search.engine.sha import PROMOTED_FRACTION, rung_sizes

        planned = list(rung_sizes(configs, rungs, float(settings.get("fraction") or PROMOTED_FRACTION)))
    ladder = []
    for number, budget in enumerate(rungs):
        here = [t for t in trials if any(r["budget"] == budget for r in t["rungs"])]
        last_here = [t for t in here if t["last_budget"] == budget]
        stopped = [t["index"] for t in last_here if t["state"] in ("PRUNED", "FAIL")]
        completed = [t["index"] for t in last_here if t["state"] == "COMPLETE"]
        open_here = [t["index"] for t in last_here if t["state"] not in ("PRUNED", "FAIL", "COMPLETE")]
        went_on = [t["index"] for t in here if t["last_budget"] != budget]
        # A rung's decision is visible once a trial went on or was stopped there; until then the
        # survivors recorded there are waiting for it.
        decided = bool(went_on or stopped) and number < len(rungs) - 1
        promoted = went_on + (open_here if decided else [])
        ladder.append({"budget": budget, "planned": planned[number], "trained": len(here),
                       "promoted": len(promoted), "stopped": len(stopped), "completed": len(completed),
                       "waiting": 0 if decided else len(open_here), "promoted_indices": sorted(promoted),
                       "winner_here": bool(winner) and number == len(rungs) - 1
                       and any(t["index"] == winner.get("index") for t in here)})
    return ladder


# Across sweeps -----------------------------------------------------------------------------------


def _time_vs_best(sweeps: list[dict[str, Any]], task: str) -> list[dict[str, Any]]:
    """Per space: per optimizer, sweep wall seconds and best score found, mean and std over seeds."""
    panels = []
    for space in sorted({s["space"] for s in sweeps}):
        groups: dict[str, list[dict[str, Any]]] = {}
        for s in sweeps:
            if s["space"] == space and s["best"] is not None and s["wall_seconds"] is not None:
                groups.setdefault(s["optimizer"], []).append(s)
        ours = []
        for optimizer, runs in sorted(groups.items()):
            seconds, seconds_std = mean_std([r["wall_seconds"] for r in runs])
            best, best_std = mean_std([r["best"]["score"] for r in runs])
            ours.append({"optimizer": optimizer, "seeds": sorted(r["seed"] for r in runs if r["seed"] is not None),
                         "running": sum(not r["finished"] for r in runs), "wall_seconds": seconds,
                         "wall_seconds_std": seconds_std, "best": best, "best_std": best_std,
                         "metric": runs[0]["metric"]})
        paper = []
        if task == "adult" and space in PAPER_ADULT_SWEEPS:
            paper = [{"optimizer": name, "seeds": 5, "wall_seconds": t, "wall_seconds_std": ts, "best": a,
                      "best_std": as_} for name, (t, ts, a, as_) in PAPER_ADULT_SWEEPS[space].items()]
        if ours:
            panels.append({"space": space, "ours": ours, "paper": paper})
    return panels


def _frozen(scores: Mapping[int, Mapping[int, float]]) -> tuple:
    return tuple((seed, tuple(sorted(values.items()))) for seed, values in sorted(scores.items()))


@functools.lru_cache(maxsize=1024)
def _agreement(method: tuple, reference: tuple, pairs: tuple) -> dict[str, Any]:
    """:func:`eve_search.analysis.ranking.agreement` of frozen scores, remembered: a served page asks again
    every few seconds and only the rungs that received results need their bootstrap again."""
    from eve_search.analysis.ranking import agreement

    return agreement({seed: dict(values) for seed, values in method},
                     {seed: dict(values) for seed, values in reference}, list(pairs)).as_dict()


def _ranking(sweeps: list[dict[str, Any]], task: str) -> list[dict[str, Any]]:
    """EvE against Adam (and the paper's other reference comparisons the store can make), per space."""
    from scipy.stats import rankdata

    from eve_search.analysis.ranking import comparisons, rung_scores
    from eve_search.paper import PAPER_TAUS

    panels = []
    for space in sorted({s["space"] for s in sweeps}):
        by_name: dict[str, dict[int, dict[float, dict[int, float]]]] = {}
        modes = {}
        for s in sweeps:
            if s["space"] == space and s["seed"] is not None:
                by_name.setdefault(s["optimizer"], {})[int(s["seed"])] = rung_scores(
                    (t["index"], r["budget"], r["score"]) for t in s["trials"] for r in t["rungs"])
                modes[s["optimizer"]] = s["mode"]
        if "eve" not in by_name or "adam" not in by_name:
            continue
        rows = []
        for comparison in comparisons("adam"):
            method, reference = by_name.get(comparison.method), by_name.get(comparison.reference)
            if method is None or reference is None:
                continue
            seeds = sorted(set(method) & set(reference))
            if comparison.pairing == "next" and len(seeds) < 2:
                continue
            pairs = comparison.pairs(seeds)
            budgets = sorted(set.intersection(*(set(method[a]) & set(reference[b]) for a, b in pairs))) if pairs else []
            per_rung = []
            for budget in budgets:
                result = _agreement(_frozen({a: method[a][budget] for a, _ in pairs}),
                                    _frozen({b: reference[b][budget] for _, b in pairs}), tuple(pairs))
                per_rung.append({"budget": budget, **result})
            paper = PAPER_TAUS.get((comparison.method, comparison.reference, comparison.pairing), {}).get(space) \
                if task == "adult" else None
            if per_rung:
                rows.append({"label": comparison.label, "method": comparison.method,
                             "reference": comparison.reference, "pairing": comparison.pairing,
                             "per_rung": per_rung, "paper_first_rung": list(paper) if paper else None})
        eve, adam = by_name["eve"], by_name["adam"]
        points = []
        sign = {"max": -1.0, "min": 1.0}
        for seed in sorted(set(eve) & set(adam)):
            first = min(set(eve[seed]) & set(adam[seed]), default=None)
            if first is None:
                continue
            keys = sorted(set(eve[seed][first]) & set(adam[seed][first]))
            if not keys:
                continue
            # Rank 1 = best; tied scores share their mean rank.
            eve_ranks = rankdata([sign[modes["eve"]] * eve[seed][first][k] for k in keys])
            adam_ranks = rankdata([sign[modes["adam"]] * adam[seed][first][k] for k in keys])
            points += [{"seed": seed, "budget": first, "index": k, "eve_rank": float(e), "adam_rank": float(a),
                        "eve_score": eve[seed][first][k], "adam_score": adam[seed][first][k]}
                       for k, e, a in zip(keys, eve_ranks, adam_ranks, strict=True)]
        if rows:
            panels.append({"space": space, "comparisons": rows, "rank_points": points})
    return panels


def _sweep_section(task: str, sweeps: list[dict[str, Any]]) -> dict[str, Any]:
    sweeps = sorted(sweeps, key=lambda s: (s["space"], s["optimizer"], s["seed"] if s["seed"] is not None else -1,
                                           s["name"]))
    return {"title": TASK_TITLES.get(task, task), "view": "sha-sweeps", "task": task,
            "time_vs_best": _time_vs_best(sweeps, task), "ranking": _ranking(sweeps, task), "sweeps": sweeps}


def _configurations(sweeps: list[dict[str, Any]]) -> dict[str, Any]:
    """One row per (sweep, configuration), for the sortable table."""
    keys: list[str] = []
    for s in sweeps:
        for t in s["trials"]:
            keys += [k for k in t["config"] if k not in keys]
    test_metrics: list[str] = []
    for s in sweeps:
        for t in s["trials"]:
            for r in t["rungs"]:
                test_metrics += [k for k in (r["test"] or {}) if k not in test_metrics]
    columns = ([{"key": "sweep", "label": "sweep", "numeric": False},
                {"key": "task", "label": "task", "numeric": False},
                {"key": "space", "label": "space", "numeric": False},
                {"key": "optimizer", "label": "optimizer", "numeric": False},
                {"key": "seed", "label": "seed", "numeric": True},
                {"key": "index", "label": "config", "numeric": True}]
               + [{"key": f"config.{k}", "label": k, "numeric": None} for k in keys]
               + [{"key": "state", "label": "state", "numeric": False},
                  {"key": "last_budget", "label": "last rung", "numeric": True},
                  {"key": "last_score", "label": "score there", "numeric": True},
                  {"key": "best_score", "label": "best score", "numeric": True},
                  {"key": "charged_units", "label": "charged units", "numeric": True},
                  {"key": "wall_seconds", "label": "training s", "numeric": True}]
               + [{"key": f"test.{k}", "label": f"test {k}", "numeric": True} for k in test_metrics])
    rows = []
    for s in sweeps:
        for t in s["trials"]:
            last = t["rungs"][-1] if t["rungs"] else {}
            tested = next((r["test"] for r in reversed(t["rungs"]) if r["test"]), None) or {}
            state = t["state"]
            if s["winner"] and s["winner"].get("index") == t["index"]:
                state = f"{state} (winner)"
            rows.append([s["name"], s["task"], s["space"], s["optimizer"], s["seed"], t["index"]]
                        + [t["config"].get(k) for k in keys]
                        + [state, t["last_budget"], t["last_score"], t["best_score"], last.get("charged_units"),
                           last.get("wall_seconds")]
                        + [tested.get(k) for k in test_metrics])
    for number, column in enumerate(columns):
        if column["numeric"] is None:  # a configuration value: numeric when every present value is
            present = [row[number] for row in rows if row[number] is not None]
            column["numeric"] = bool(present) and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                      for v in present)
    return {"columns": columns, "rows": rows}


# Any other study ----------------------------------------------------------------------------------


def _trials_view(record: Record) -> dict[str, Any]:
    """A generic study: a table of its trials (number, state, values, parameters, user attributes)
    and its intermediate values as curves."""
    trials = record["trials"]
    directions = record.get("directions") or ["maximize"]
    param_keys: list[str] = []
    attr_keys: list[str] = []
    for t in trials:
        param_keys += [k for k in t["params"] if k not in param_keys]
        attr_keys += [k for k in t["user_attrs"] if k not in attr_keys]
    value_labels = ["value"] if len(directions) == 1 else [f"value {k}" for k in range(len(directions))]
    columns = (["number", "state"] + value_labels + param_keys + attr_keys + ["duration s"])
    rows = []
    for t in trials:
        values = list(t.get("values") or [None] * len(directions))
        values += [None] * (len(directions) - len(values))
        attrs = [t["user_attrs"].get(k) for k in attr_keys]
        rows.append([t["number"], t["state"]] + values[:len(directions)] + [t["params"].get(k) for k in param_keys]
                    + [v if v is None or isinstance(v, (int, float, str, bool)) else json.dumps(v, sort_keys=True,
                                                                                              default=str)
                       for v in attrs] + [t.get("duration")])
    curves = [{"number": t["number"], "state": t["state"],
               "points": sorted([float(step), value] for step, value in t["intermediate_values"].items()
                                if _finite(value) is not None)}
              for t in trials if t["intermediate_values"]]
    attrs = record["user_attrs"]
    return {"name": record["name"], "directions": directions,
            "user_attrs": {k: v if isinstance(v, (int, float, str, bool)) or v is None
                           else json.dumps(v, sort_keys=True, default=str) for k, v in attrs.items()},
            "columns": columns, "rows": rows, "curves": curves}


# The whole document --------------------------------------------------------------------------------


def build(records: Iterable[Record], storage: str | None = None) -> dict[str, Any]:
    """The dashboard document of a store's study records (see :func:`read_store`).

    Args:
        records: the study records.
        storage: the store's URL, shown on the page with its password masked (None: not shown).

    Returns:
        The JSON-able document: ``format``, ``storage``, counts of ``studies`` and ``sweeps``, the
        ``sections`` (sweeps by task, registered kinds, other studies), ``configurations`` and a
        ``fingerprint``.

    Example:
        >>> record = {"name": "adult-hp-eve-seed0", "directions": ["maximize"], "trials": [],
        ...           "user_attrs": {"kind": "sha-sweep", "settings": {
        ...               "task": "adult", "space": "hp", "optimizer": "eve", "seed": 0, "configs": 4,
        ...               "rungs": [100, 300], "fraction": 0.5}}}
        >>> data = build([record], "postgresql://ann:secret@db/runs")
        >>> data["storage"], data["sweeps"], [section["view"] for section in data["sections"]]
        ('postgresql://ann:***@db/runs', 1, ['sha-sweeps'])
    """
    records = list(records)
    sweeps_by_task: dict[str, list[dict[str, Any]]] = {}
    by_kind: dict[str, list[Record]] = {}
    others: dict[str, list[Record]] = {}
    for record in records:
        attrs = record["user_attrs"]
        kind = attrs.get("kind")
        if _is_sweep(attrs):
            sweep = sweep_view(record)
            sweeps_by_task.setdefault(sweep["task"], []).append(sweep)
        elif isinstance(kind, str) and kind in _KINDS:
            by_kind.setdefault(kind, []).append(record)
        else:
            others.setdefault(str(kind) if kind is not None else "", []).append(record)
    order = list(TASK_TITLES)
    sections = [_sweep_section(task, sweeps) for task, sweeps in
                sorted(sweeps_by_task.items(), key=lambda item: (order.index(item[0]) if item[0] in order
                                                                 else len(order), item[0]))]
    for kind, kind_records in sorted(by_kind.items()):
        section = dict(_KINDS[kind](kind_records))
        section.setdefault("kind", kind)
        sections.append(section)
    for kind, kind_records in sorted(others.items()):
        sections.append({"title": f"Other studies: {kind}" if kind else "Other studies", "view": "trials",
                         "kind": kind or None,
                         "studies": [_trials_view(r) for r in sorted(kind_records, key=lambda r: r["name"])]})
    all_sweeps = [s for section in sections if section["view"] == "sha-sweeps" for s in section["sweeps"]]
    data = _json_safe({"format": 1, "storage": safe_url(storage) if storage else None,
                       "studies": len(records), "sweeps": len(all_sweeps), "sections": sections,
                       "configurations": _configurations(all_sweeps)})
    data["fingerprint"] = fingerprint(data)
    return data


def dashboard_data(storage: str) -> dict[str, Any]:
    """Read the store at ``storage`` (an SQLAlchemy URL) and build its dashboard document.

    Args:
        storage: the store's URL.

    Returns:
        The document :func:`build` makes of :func:`read_store`'s records.

    Example:
        >>> import pathlib, tempfile, optuna
        >>> optuna.logging.set_verbosity(optuna.logging.WARNING)
        >>> url = f"sqlite:///{pathlib.Path(tempfile.mkdtemp())}/runs.db"
        >>> study = optuna.create_study(study_name="demo", storage=url)
        >>> study.set_user_attr("kind", "doctest-notes")
        >>> study.optimize(lambda trial: trial.suggest_float("x", 0, 1), n_trials=2)
        >>> data = dashboard_data(url)
        >>> data["studies"], [section["title"] for section in data["sections"]]
        (1, ['Other studies: doctest-notes'])
    """
    return build(read_store(storage), storage)
