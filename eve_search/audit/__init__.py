"""The proxy audit: how much compute a trustworthy ranking costs, and which trainer buys it cheapest.

See :mod:`eve_search.audit._core` for the method; ``eve-search audit adult`` runs it. Importing this
package gives audit studies (kind ``"audit"``) their own section in ``eve-search dashboard``.
"""

from eve_search.audit._cli import configure_parser, run
from eve_search.audit._core import (
    AUDIT_KIND,
    DEFAULT_BUDGETS,
    AuditStore,
    audit_measures,
    audit_name,
    audit_report,
    budget_table,
    keeps_true_best,
    prepare_audit,
    run_audit,
    top1_regret,
    verdict,
)
from eve_search.audit._view import audit_section, register, render_audit_section

register()

__all__ = [
    "AUDIT_KIND",
    "DEFAULT_BUDGETS",
    "AuditStore",
    "audit_measures",
    "audit_name",
    "audit_report",
    "audit_section",
    "budget_table",
    "configure_parser",
    "keeps_true_best",
    "prepare_audit",
    "render_audit_section",
    "run",
    "run_audit",
    "top1_regret",
    "verdict",
]
