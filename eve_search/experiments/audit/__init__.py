"""The proxy audit: how much compute a trustworthy ranking costs, and which trainer buys it cheapest.

See :mod:`eve_search.experiments.audit._core` for the method; ``eve-search audit adult`` runs it
(:mod:`eve_search.cli.commands.audit`) and ``eve-search dashboard`` draws it (:mod:`eve_search.dashboard._audit`).
"""

from eve_search.analysis.audit import (
    AUDIT_KIND,
    DEFAULT_BUDGETS,
    audit_measures,
    budget_table,
    keeps_true_best,
    top1_regret,
    verdict,
)
from eve_search.experiments.audit._core import (
    AuditRunOptions,
    AuditStore,
    audit_name,
    audit_report,
    prepare_audit,
    run_audit,
)

__all__ = [
    "AUDIT_KIND",
    "DEFAULT_BUDGETS",
    "AuditRunOptions",
    "AuditStore",
    "audit_measures",
    "audit_name",
    "audit_report",
    "budget_table",
    "keeps_true_best",
    "prepare_audit",
    "run_audit",
    "top1_regret",
    "verdict",
]
