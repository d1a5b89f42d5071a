"""The paper's synthetic scalable benchmarks: seven test functions, EvE against Adam at a fixed
evaluation-cost budget, paired Wilcoxon tests with Holm-Bonferroni, win/tie/loss per function.

The command is ``eve-search bench synthetic``; the parts are usable on their own.
"""

from eve_search.experiments.synthetic._functions import (
    FUNCTIONS,
    TestFunction,
    function_names,
    objective,
)
from eve_search.experiments.synthetic._stats import (
    PAPER_WIN_TIE_LOSS,
    CellStatistics,
    analyse,
    classify,
    holm,
    holm_adjusted,
    one_sided_wilcoxon,
    win_tie_loss,
)
from eve_search.experiments.synthetic._suite import (
    ADAM_LR,
    DEFAULT_DIMS,
    EVE_SETTINGS,
    RunRecord,
    SuiteStore,
    run_adam,
    run_eve,
    run_suite,
)

__all__ = [
    "ADAM_LR",
    "DEFAULT_DIMS",
    "EVE_SETTINGS",
    "FUNCTIONS",
    "PAPER_WIN_TIE_LOSS",
    "CellStatistics",
    "RunRecord",
    "SuiteStore",
    "TestFunction",
    "analyse",
    "classify",
    "function_names",
    "holm",
    "holm_adjusted",
    "objective",
    "one_sided_wilcoxon",
    "run_adam",
    "run_eve",
    "run_suite",
    "win_tie_loss",
]
