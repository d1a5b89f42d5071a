"""The user-facing entry points document their arguments and carry a doctest (run by --doctest-modules).

Run as a script (``python tests/test_docstrings.py``) it lists every public name of the public modules
that still lacks a docstring, an Args or Returns section, or an example.
"""

import importlib
import inspect

import pytest

PUBLIC_MODULES = ["eve_search", "eve_search.optim", "eve_search.optim.budget", "eve_search.tasks",
                  "eve_search.tasks.spaces", "eve_search.engine.batches", "eve_search.engine.checkpoint",
                  "eve_search.engine.ledger", "eve_search.engine.sha", "eve_search.engine.store",
                  "eve_search.engine.sweep", "eve_search.engine.trial", "eve_search.analysis",
                  "eve_search.analysis.audit", "eve_search.analysis.ranking", "eve_search.analysis.summary",
                  "eve_search.integrations.optuna", "eve_search.testing"]

# The entry points users call, each with Args (and Returns) and an example that runs.
ENTRY_POINTS = [
    "eve_search.minimize", "eve_search.EvE", "eve_search.CostMeter", "eve_search.make_optimizer",
    "eve_search.register_optimizer", "eve_search.optimizer_names", "eve_search.get_task",
    "eve_search.register_task", "eve_search.task_names", "eve_search.Float", "eve_search.Int",
    "eve_search.Categorical", "eve_search.Fixed", "eve_search.SearchSpace", "eve_search.register_space",
    "eve_search.get_space", "eve_search.space_names", "eve_search.engine.sweep.SweepSettings",
    "eve_search.engine.sweep.prepare_sweep", "eve_search.analysis.ranking.kendall_tau_b",
    "eve_search.analysis.ranking.agreement", "eve_search.analysis.ranking.verdict",
    "eve_search.analysis.audit.budget_table", "eve_search.integrations.optuna.optimize_in_cohorts",
    "eve_search.integrations.optuna.worker_storage", "eve_search.integrations.optuna.SynchronousSHAPruner",
    "eve_search.optim.MinimizeOptions", "eve_search.integrations.optuna.ShaOptions",
]


def gaps(obj) -> list[str]:
    """What the docstring of a public function or class lacks: ``docstring``, ``Args``, ``Returns``, ``example``."""
    doc = obj.__doc__ or ""
    if not doc.strip():
        return ["docstring"]
    missing = []
    target = obj.__init__ if inspect.isclass(obj) else obj
    try:
        signature = inspect.signature(target)
        takes = any(p.name not in ("self", "cls") for p in signature.parameters.values())
    except (TypeError, ValueError):
        signature, takes = None, False
    if inspect.isclass(obj) and (obj.__init__ is object.__init__ or issubclass(obj, BaseException)):
        takes = False
    if takes and not any(word in doc for word in ("Args:", "Attributes:")):
        missing.append("Args")
    if (inspect.isfunction(obj) and signature is not None
            and signature.return_annotation not in (None, "None", inspect.Signature.empty)
            and not any(word in doc for word in ("Returns:", "Yields:"))):
        missing.append("Returns")
    if ">>>" not in doc and not (inspect.isclass(obj) and issubclass(obj, BaseException)):
        missing.append("example")
    return missing


def _resolve(path: str):
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("path", ENTRY_POINTS)
def test_an_entry_point_documents_its_arguments_and_shows_an_example(path):
    pytest.importorskip("optuna")
    assert gaps(_resolve(path)) == [], path


def test_gaps_names_what_a_bare_function_lacks():
    def bare(x: int) -> int:
        return x

    assert gaps(bare) == ["docstring"]
    bare.__doc__ = "Twice nothing."
    assert gaps(bare) == ["Args", "Returns", "example"]


if __name__ == "__main__":
    seen = set()
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        for name in getattr(module, "__all__", []):
            obj = getattr(module, name)
            if id(obj) in seen or not (inspect.isclass(obj) or inspect.isfunction(obj)):
                continue
            seen.add(id(obj))
            if gaps(obj):
                print(f"{module_name}.{name}: {', '.join(gaps(obj))}")
