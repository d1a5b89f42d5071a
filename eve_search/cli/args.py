"""The command line's argument types and limits, in one place.

Every count, size and duration a command takes is bounded here, so that no value typed on the command
line can start a hundred thousand processes, allocate terabytes or run until killed. Each refusal is
one line naming the value, the limit and why (argparse prefixes the program and the argument), for
example ``eve-search adult: argument --configs: '200000' is more than 100,000 (one trial per
configuration is kept in the store and ranked at every rung)``.

Numbers are parsed without going through a float when they must be integers, so
``99999999999999999999`` is refused by comparison, never converted or allocated; floats must be
finite (``nan``, ``inf`` and ``1e400`` are refused).

This module imports nothing heavy: the command's parser is built before PyTorch loads.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable
from typing import Any

from eve_search._checks import MAX_CONFIGS, WHY_CONFIGS
from eve_search._openmp import available_cpus
from eve_search.engine import MAX_JOBS

__all__ = [
    "DEFAULT_WORKDIR",
    "UsageError",
    "COST_MODE_HELP",
    "add_cost_mode_option",
    "add_protocol_arguments",
    "add_store_options",
    "default_storage_url",
    "JOBS_PER_CPU",
    "MAX_BUDGET",
    "MAX_CONFIGS",
    "MAX_FORCED_JOBS",
    "MAX_RUNGS",
    "MAX_SEED",
    "MAX_SEEDS",
    "available_cpus",
    "bounded_float",
    "bounded_int",
    "check_processes",
    "dim_list",
    "fraction",
    "lr_list",
    "name",
    "name_list",
    "non_negative_int",
    "optimizer_list",
    "positive_float",
    "positive_int",
    "rung_list",
    "seed",
    "seed_list",
    "shown",
    "space_list",
]

#: Where a command keeps its results store and checkpoints unless --workdir says otherwise.
DEFAULT_WORKDIR = "eve-search-runs"


class UsageError(Exception):
    """Bad command-line input: printed as one line, exit code 2."""


#: Stands, in an argument's help, for the names of the registered search spaces. They are filled in
#: only when the help is shown: looking them up imports the tasks (and PyTorch), which parsing the
#: arguments, and answering bad ones, does not need.
SPACE_NAMES = "{space names}"


class _HelpFormatter(argparse.HelpFormatter):
    """argparse's help, with :data:`SPACE_NAMES` filled in."""

    def _expand_help(self, action: argparse.Action) -> str:
        text = super()._expand_help(action)
        if SPACE_NAMES in text:
            from eve_search.tasks.spaces import space_names

            text = text.replace(SPACE_NAMES, ", ".join(space_names()))
        return text


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # one line instead of usage + message
        raise UsageError(f"{self.prog}: {message}".replace("\r", "\\r").replace("\n", "\\n"))


# The limits (docs/tutorials/resuming-and-safety.md). Each says why in the message a value beyond it gets. ------------------

MAX_BUDGET = 10**9
WHY_BUDGET = "evaluation units per trial; a billion is days of training for the largest model here"
MAX_RUNGS = 100
MAX_SEEDS = 1000
WHY_SEEDS = "each seed is a whole run of the command"
MAX_SEED = 2**32 - 1
JOBS_PER_CPU = 4
MAX_FORCED_JOBS = MAX_JOBS
MAX_RATIO = 1000.0
WHY_RATIO = "a backward pass is charged R forward passes; measured ratios are about 1-4"
MAX_SECONDS = 3600.0
WHY_SECONDS = "one hour per measurement"
MAX_ROUNDS = 1000
WHY_ROUNDS = "each round repeats every measurement"
MAX_ITERATIONS = 1_000_000
MAX_RESAMPLES = 1_000_000
WHY_RESAMPLES = "each resample re-ranks every configuration; 1000 (the default) already gives 2-digit intervals"
MAX_LRS = 100
MAX_ROWS = 1_000_000_000
MAX_WIDTH = 65_536
MAX_DEPTH = 100
MAX_MLP_PARAMETERS = 100_000_000
MAX_RANK = 65_536
MAX_TOKENS = 131_072
MAX_ALPHA = 1e6
MAX_WEIGHT_DECAY = 1.0
MAX_DIMS = 100
MAX_DIM = 10**8

_MAX_DIGITS = 40  # longer integers are beyond every limit here (and beyond int()'s own 4300-digit cap)


# Parsing -----------------------------------------------------------------------------------------


def shown(text: str) -> str:
    """``text`` as a message shows it: quoted, and cut after 60 characters.

    Args:
        text: the user's input.

    Returns:
        Its ``repr``, or that of its first 57 characters followed by its length.

    Example:
        >>> shown("adult"), shown("x" * 100)[-20:]
        ("'adult'", '... (100 characters)')
    """
    return repr(text) if len(text) <= 60 else repr(text[:57]) + f"... ({len(text):,} characters)"


def _int(text: str) -> int | float:
    """``int(text)``, or +-inf for a run of more than 40 digits (compared with limits, never stored)."""
    stripped = text.strip()
    digits = stripped.lstrip("+-").replace("_", "")
    if len(digits) > _MAX_DIGITS and digits.isdecimal():
        return -math.inf if stripped.startswith("-") else math.inf
    return int(stripped)  # ValueError for anything else that is not an integer


def _float(text: str) -> float:
    value = float(text)  # ValueError
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{shown(text)} is not a finite number")
    return value


def _low_message(text: str, low: float, low_open: bool, integer: bool) -> str:
    if (integer and low == 1) or (low_open and low == 0):
        return f"{shown(text)} must be > 0"
    return f"{shown(text)} must be {'>' if low_open else '>='} {low:g}"


def _high_message(text: str, high: float, why: str) -> str:
    limit = f"{int(high):,}" if float(high).is_integer() else f"{high:g}"
    return f"{shown(text)} is more than {limit}" + (f" ({why})" if why else "")


def bounded_int(low: int, high: int | None, why: str = "") -> Callable[[str], int]:
    """An argparse type: an integer in [low, high] (no upper bound when ``high`` is None).

    Args:
        low: the smallest value accepted.
        high: the largest value accepted (None: no upper bound).
        why: the reason for ``high``, shown when a value exceeds it.

    Returns:
        The parser: text -> int, raising ``argparse.ArgumentTypeError`` with a one-line message.

    Example:
        >>> bounded_int(1, 10)("7")
        7
        >>> bounded_int(1, 10, "ten at most")("11")
        Traceback (most recent call last):
        argparse.ArgumentTypeError: '11' is more than 10 (ten at most)
    """

    def parse(text: str) -> int:
        """Parse one integer argument (a parser made by :func:`bounded_int`).

        Args:
            text: the argument as typed.

        Returns:
            The integer, within the parser's bounds.

        Example:
            >>> positive_int("3"), non_negative_int("0"), seed("42")
            (3, 0, 42)
        """
        try:
            value = _int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{shown(text)} is not an integer") from None
        if value < low:
            raise argparse.ArgumentTypeError(_low_message(text, low, False, True))
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(_high_message(text, high, why))
        if math.isinf(value):
            raise argparse.ArgumentTypeError(f"{shown(text)} has more than {_MAX_DIGITS} digits")
        return int(value)

    return parse


def bounded_float(low: float, high: float, why: str = "", *, low_open: bool = False,
                  high_open: bool = False) -> Callable[[str], float]:
    """An argparse type: a finite number in [low, high] (``low_open``/``high_open``: excluding that end).

    Args:
        low, high: the bounds.
        why: the reason for ``high``, shown when a value exceeds it.
        low_open: exclude ``low`` itself.
        high_open: exclude ``high`` itself.

    Returns:
        The parser: text -> float, raising ``argparse.ArgumentTypeError`` with a one-line message.

    Example:
        >>> parse = bounded_float(0.0, 1.0, low_open=True)
        >>> parse("0.25")
        0.25
        >>> parse("0")
        Traceback (most recent call last):
        argparse.ArgumentTypeError: '0' must be > 0
    """

    def parse(text: str) -> float:
        try:
            value = _float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{shown(text)} is not a number") from None
        if value < low or (low_open and value == low):
            raise argparse.ArgumentTypeError(_low_message(text, low, low_open, False))
        if value > high or (high_open and value == high):
            if high_open:
                raise argparse.ArgumentTypeError(f"{shown(text)} must be < {high:g}" + (f" ({why})" if why else ""))
            raise argparse.ArgumentTypeError(_high_message(text, high, why))
        return value

    return parse


positive_int = bounded_int(1, None)
"""An argparse type: an integer >= 1, unbounded (commands use a bounded type; kept for scripts)."""
non_negative_int = bounded_int(0, None)
"""An argparse type: an integer >= 0, unbounded (commands use a bounded type; kept for scripts)."""


def positive_float(text: str) -> float:
    """An argparse type: a finite number > 0, unbounded (commands use a bounded type; kept for scripts).

    Args:
        text: the argument as typed.

    Returns:
        The number.

    Example:
        >>> positive_float("2.5e3")
        2500.0
    """
    return bounded_float(0.0, math.inf, low_open=True)(text)


def name(what: str) -> Callable[[str], str]:
    """An argparse type: a non-empty name (``--task``, ``--space``): '' and blanks are refused, never
    taken as "the default". Whether the name is registered is checked after --plugin modules load.

    Args:
        what: what the name names, for the message (e.g. "a task name").

    Returns:
        The parser: text -> the name, stripped of surrounding blanks.

    Example:
        >>> name("a task name")("  adult ")
        'adult'
    """

    def parse(text: str) -> str:
        if not text.strip():
            raise argparse.ArgumentTypeError(f"{shown(text)} is empty (expected {what})")
        return text.strip()

    return parse


# The arguments several commands share -------------------------------------------------------------

configs = bounded_int(1, MAX_CONFIGS, WHY_CONFIGS)
backward_ratio = bounded_float(0.0, MAX_RATIO, WHY_RATIO, low_open=True)
seconds = bounded_float(0.0, MAX_SECONDS, WHY_SECONDS, low_open=True)
rounds = bounded_int(1, MAX_ROUNDS, WHY_ROUNDS)
budget = bounded_int(1, MAX_BUDGET, WHY_BUDGET)
iterations = bounded_int(1, MAX_ITERATIONS, "training iterations of one measurement")
resamples = bounded_int(1, MAX_RESAMPLES, WHY_RESAMPLES)
weight_decay = bounded_float(0.0, MAX_WEIGHT_DECAY, "the decay is multiplied into every weight at every step; "
                             "the paper uses 5e-4")
seed = bounded_int(0, MAX_SEED, "seeds are 32-bit")


def threads(text: str) -> int:
    """An argparse type: a PyTorch thread count, at most 4 x the CPUs this process may use."""
    cpus = available_cpus()
    return bounded_int(1, JOBS_PER_CPU * cpus, f"{JOBS_PER_CPU} x the {cpus} CPUs this process may use; more "
                       "threads than that only wait for a CPU")(text)


def configs_list(text: str) -> list[int]:
    """An argparse type: distinct configuration counts, e.g. ``48,480,4800`` (each as ``--configs``
    takes it; at most 10 of them), in the order given."""
    parts = [part.strip() for part in text.split(",")]
    if len(parts) > 10:
        raise argparse.ArgumentTypeError(f"{shown(text)}: {len(parts)} counts is more than 10 (each is a sweep)")
    values = [configs(part) for part in parts]
    if len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"{shown(text)} names a count twice")
    return values


def fraction(text: str) -> float:
    """An argparse type: a share in (0, 1].

    Args:
        text: the argument as typed.

    Returns:
        The share.

    Example:
        >>> fraction("0.5"), fraction("1")
        (0.5, 1.0)
    """
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{shown(text)} is not a number in (0, 1]")
    return value


def rung_list(text: str) -> tuple[int, ...]:
    """An argparse type: cumulative rung budgets, e.g. ``100,300,900``: whole evaluation units, strictly
    increasing, each at most 10^9, at most 100 rungs.

    Args:
        text: the argument as typed.

    Returns:
        The budgets, as ints.

    Example:
        >>> rung_list("100,300,900")
        (100, 300, 900)
    """
    from eve_search.engine.ledger import check_rungs

    parts = text.split(",")
    if len(parts) > MAX_RUNGS:
        raise argparse.ArgumentTypeError(f"{shown(text)}: {len(parts)} rungs is more than {MAX_RUNGS} (each rung "
                                         "re-ranks every surviving trial)")
    values: list[float] = []
    for part in parts:
        try:
            values.append(_int(part))
        except ValueError:
            try:
                values.append(float(part))
            except ValueError:
                raise argparse.ArgumentTypeError(f"{shown(text)} is not a comma-separated list of budgets (e.g. "
                                                 "100,300,900)") from None
    if any(v > MAX_BUDGET for v in values):
        raise argparse.ArgumentTypeError(f"{shown(text)}: a budget is more than {MAX_BUDGET:,} ({WHY_BUDGET})")
    try:
        return check_rungs(values)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{shown(text)}: {error}") from None


def seed_list(text: str) -> list[int]:
    """Training seeds from ``0-4`` or ``0,2,5`` (an argparse type; scripts in searches/ use it too): at most
    1000 seeds, each a 32-bit integer.

    Args:
        text: comma-separated seeds and inclusive ranges.

    Returns:
        The seeds, in the order given; a seed named twice is refused.

    Example:
        >>> seed_list("0-2,7")
        [0, 1, 2, 7]
    """
    ranges: list[tuple[int, int]] = []
    count = 0
    try:
        for part in text.split(","):
            low, dash, high = part.strip().partition("-")
            first, last = _int(low), _int(high) if dash else _int(low)
            if first < 0 or last < first:
                raise ValueError
            if last > MAX_SEED:
                raise argparse.ArgumentTypeError(f"{shown(text)}: seed {shown(high if dash else low)} is more than "
                                                 f"{MAX_SEED:,} (seeds are 32-bit)")
            count += last - first + 1
            if count > MAX_SEEDS:  # counted before any list is built
                raise argparse.ArgumentTypeError(f"{shown(text)} names more than {MAX_SEEDS} seeds ({WHY_SEEDS})")
            ranges.append((int(first), int(last)))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{shown(text)} is not a seed list (expected e.g. 0-4 or 0,2,5)") from None
    seeds = [s for first, last in ranges for s in range(first, last + 1)]
    if len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"{shown(text)} repeats a seed")
    return seeds


def lr_list(text: str) -> list[float]:
    """An argparse type: distinct learning rates, comma-separated, each in [1e-8, 10], at most 100.

    Args:
        text: the argument as typed.

    Returns:
        The rates, in the order given.

    Example:
        >>> lr_list("1e-3,3e-3")
        [0.001, 0.003]
    """
    parts = [part for part in text.split(",") if part.strip()]
    if len(parts) > MAX_LRS:
        raise argparse.ArgumentTypeError(f"{shown(text)}: {len(parts)} learning rates is more than {MAX_LRS} "
                                         "(each is a run per optimizer and seed)")
    try:
        values = [float(part) for part in parts]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{shown(text)} is not a comma-separated list of numbers") from None
    if not values or any(not (math.isfinite(v) and 1e-8 <= v <= 10.0) for v in values):
        raise argparse.ArgumentTypeError(f"{shown(text)}: expected learning rates in [1e-8, 10]")
    if len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"{shown(text)} repeats a learning rate")
    return values


def dim_list(text: str) -> list[int]:
    """An argparse type: distinct problem dimensions, e.g. ``2,10,1e5``: integers from 2 to 1e8 (a
    population of four points of 1e8 float32 coordinates is 1.6 GB), at most 100 of them; sorted.

    Args:
        text: the argument as typed.

    Returns:
        The dimensions, increasing.

    Example:
        >>> dim_list("100,2,1e5")
        [2, 100, 100000]
    """
    parts = text.split(",")
    if len(parts) > MAX_DIMS:
        raise argparse.ArgumentTypeError(f"{shown(text)}: {len(parts)} dimensions is more than {MAX_DIMS} (each is "
                                         "a run per function, method and seed)")
    dims = []
    for part in parts:
        part = part.strip()
        try:
            value = float(part)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{shown(part)} is not a dimension (expected integers such as "
                                             "2,10,1e5)") from None
        if not (math.isfinite(value) and value == int(value) and 2 <= value <= MAX_DIM):
            raise argparse.ArgumentTypeError(f"{shown(part)} is not a dimension (expected an integer from 2 to 1e8: "
                                             "four points of 1e8 float32 coordinates are 1.6 GB)")
        dims.append(int(value))
    if len(set(dims)) != len(dims):
        raise argparse.ArgumentTypeError(f"{shown(text)} repeats a dimension")
    return sorted(dims)


def name_list(text: str, known: list[str], noun: str, *, normalize=str.strip) -> list[str]:
    """Names from a comma-separated ``text``, each one of ``known`` and given once (the argparse
    check behind :func:`optimizer_list`, :func:`space_list` and the synthetic suite's functions).

    Args:
        text: the argument as typed.
        known: the names accepted.
        noun: what a name is, for the message (e.g. "optimizer").
        normalize: applied to each comma-separated part before it is checked.

    Returns:
        The names, in the order given.

    Example:
        >>> name_list("sphere, ackley", ["ackley", "sphere"], "function")
        ['sphere', 'ackley']
    """
    names = [normalize(part) for part in text.split(",") if part.strip()]
    unknown = [name for name in names if name not in known]
    if not names or unknown:
        raise argparse.ArgumentTypeError(f"unknown {noun} {', '.join(map(shown, unknown[:3] or [text]))} (expected "
                                         f"a comma-separated list of: {', '.join(known)})")
    if len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"{shown(text)} names {'an' if noun[0] in 'aeiou' else 'a'} {noun} twice")
    return names


def optimizer_list(text: str) -> list[str]:
    """An argparse type: registered optimizers, comma-separated, each once.

    Args:
        text: the argument as typed.

    Returns:
        The optimizer names, in the order given.

    Example:
        >>> optimizer_list("eve,adam")
        ['eve', 'adam']
    """
    from eve_search.optim import optimizer_names

    return name_list(text, list(optimizer_names()), "optimizer")


def space_list(text: str) -> list[str]:
    """An argparse type: registered search spaces, comma-separated, each once.

    Args:
        text: the argument as typed.

    Returns:
        The space names, in the order given.

    Example:
        >>> space_list("hp")
        ['hp']
    """
    from eve_search.tasks.spaces import space_names

    return name_list(text, list(space_names()), "space")


def adult_space(text: str) -> str:
    """An argparse type: one of UCI Adult's search spaces (``bench sweep``, whose sweeps run in fresh
    processes that know no plugin)."""
    from eve_search.tasks import get_task

    known = list(get_task("adult").spaces)
    if text.strip() not in known:
        raise argparse.ArgumentTypeError(f"unknown space {shown(text)} (expected one of: {', '.join(sorted(known))})")
    return text.strip()


# Processes --------------------------------------------------------------------------------------


def check_processes(value: int | None, argument: str, *, configs: int, force: bool) -> str | None:
    """Why ``value`` worker processes (``--jobs``, ``--workers``) are too many, or None when they are not.

    At most one per configuration (a worker trains one trial at a time, so more stay idle) and at most
    4 x the CPUs this process may use, unless ``force`` (``--force-jobs``), which still stops at 1024.

    Args:
        value: the requested number of processes (None: not given).
        argument: the option's name, for the message.
        configs: the sweep's configuration count.
        force: whether ``--force-jobs`` was given.

    Returns:
        The one-line reason, or None.

    Example:
        >>> check_processes(None, "--jobs", configs=8, force=False) is None
        True
        >>> check_processes(9, "--jobs", configs=8, force=False)[:40]
        'argument --jobs: 9 is more than --config'
    """
    if value is None:
        return None
    if value > configs:
        return (f"argument {argument}: {value} is more than --configs {configs} (a worker trains one trial at a "
                "time, so the others would stay idle)")
    cpus = available_cpus()
    if not force and value > JOBS_PER_CPU * cpus:
        return (f"argument {argument}: {value} is more than {JOBS_PER_CPU} x the {cpus} CPUs this process may use "
                f"({JOBS_PER_CPU * cpus}): every worker is a process holding its own PyTorch and only waits for a "
                "CPU; pass --force-jobs to start them anyway")
    if value > MAX_FORCED_JOBS:
        return (f"argument {argument}: {value} is more than {MAX_FORCED_JOBS:,}, the most worker processes even "
                "--force-jobs starts")
    return None


COST_MODE_HELP = (
    "how a backward pass is charged (paper, Appendix \"Evaluation-Cost Accounting\", Equation 7; docs/how-it-works.md, "
    "\"The cost rule\"). 'calibrated' (default): the backward/forward time "
    "ratio is measured once per architecture before training, frozen and stored with the sweep, so a "
    "resumed sweep charges exactly like an uninterrupted one and the seed fixes every result on this "
    "machine. 'measured': the paper's rule, each backward charged by its own wall time over the run's mean "
    "forward time; stopping points then depend on timing noise, so two runs with the same seed can "
    "differ and --resume cannot reproduce an uninterrupted run exactly.")


def add_protocol_arguments(parser: Any, *, budget: int, eval_every: int) -> None:
    """The grid, budget, cost, store and output arguments of a protocol command (``eve-search mnist``,
    ``eve-search lora``), with the command's default ``budget`` and ``eval_every``.

    Args:
        parser: the command's ``argparse`` parser (arguments are added to it).
        budget: the default ``--budget``.
        eval_every: the default ``--eval-every``.

    Example:
        >>> import argparse
        >>> parser = argparse.ArgumentParser()
        >>> add_protocol_arguments(parser, budget=3000, eval_every=250)
        >>> options = parser.parse_args(["--seeds", "0-1", "--optimizer", "eve,adam"])
        >>> options.budget, options.eval_every, options.seeds, options.optimizer, options.cost_mode
        (3000, 250, [0, 1], ['eve', 'adam'], 'calibrated')
    """
    from pathlib import Path

    from eve_search.optim import optimizer_names
    from eve_search.paper import PAPER_LR_GRID

    types = sys.modules[__name__]

    parser.add_argument("--optimizer", type=types.optimizer_list, default=optimizer_names(), metavar="NAMES",
                        help="comma-separated optimizers (default: all nine)")
    parser.add_argument("--lrs", type=types.lr_list, default=list(PAPER_LR_GRID), metavar="LRS",
                        help="learning-rate grid, run in this order (default 1e-4,3e-4,1e-3,3e-3,1e-2)")
    parser.add_argument("--seeds", type=types.seed_list, default=list(range(5)), metavar="SEEDS",
                        help=f"training seeds, e.g. 0-4 (default) or 0,2 (at most {types.MAX_SEEDS})")
    parser.add_argument("--budget", type=types.budget, default=budget, metavar="UNITS",
                        help=f"evaluation-cost budget of every run (default {budget}, at most {types.MAX_BUDGET:.0e})")
    parser.add_argument("--eval-every", type=types.budget, default=eval_every, metavar="UNITS",
                        help=f"validate every this many charged units, and at the budget (default {eval_every})")
    parser.add_argument("--weight-decay", type=types.weight_decay, default=5e-4, metavar="WD",
                        help=f"default 5e-4, at most {types.MAX_WEIGHT_DECAY:g}")
    add_cost_mode_option(parser)
    parser.add_argument("--backward-ratio", type=types.backward_ratio, metavar="R", help="pin the calibrated "
                        "backward/forward ratio of every optimizer instead of measuring it once per optimizer")
    add_store_options(parser, checkpoints=False)
    parser.add_argument("--resume", action="store_true", help="continue a protocol already in the store: "
                        "finished runs are skipped, the grid may grow (more seeds, optimizers or rates)")
    parser.add_argument("--report-only", action="store_true", help="train nothing: report the runs of this grid "
                        "that the store already holds (a learning rate competes only when every seed has run)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the summary and every run as JSON")
    parser.add_argument("--quiet", action="store_true", help="no progress display and no table")


def add_cost_mode_option(parser: Any) -> None:
    """``--cost-mode`` (:data:`eve_search.optim.budget.COST_MODES`, default calibrated), as every command declares it.

    Args:
        parser: the command's ``argparse`` parser.

    Example:
        >>> import argparse
        >>> parser = argparse.ArgumentParser()
        >>> add_cost_mode_option(parser)
        >>> parser.parse_args([]).cost_mode, parser.parse_args(["--cost-mode", "measured"]).cost_mode
        ('calibrated', 'measured')
    """
    from eve_search.optim.budget import COST_MODES

    parser.add_argument("--cost-mode", choices=sorted(COST_MODES), default="calibrated", help=COST_MODE_HELP)


def default_storage_url(workdir: str | os.PathLike = DEFAULT_WORKDIR) -> str:
    """The results store of a work directory, used when ``--storage`` is not given: its ``results.db``.

    Args:
        workdir: the work directory (default: ``./eve-search-runs``, relative to the current folder).

    Returns:
        An SQLAlchemy URL of the SQLite file, with an absolute path (the same store from any folder
        the command later changes to).

    Example:
        >>> from pathlib import Path
        >>> default_storage_url("runs") == "sqlite:///" + str((Path("runs") / "results.db").resolve())
        True
        >>> default_storage_url().endswith("/eve-search-runs/results.db")
        True
    """
    from pathlib import Path

    return f"sqlite:///{(Path(workdir) / 'results.db').resolve()}"


def add_store_options(parser: Any, *, checkpoints: bool, workdir: bool = True) -> None:
    """``--storage`` and ``--workdir`` (default ``./eve-search-runs``), as every command with a results store
    declares them.

    Args:
        parser: the command's ``argparse`` parser.
        checkpoints: the command also keeps trial checkpoints in the work directory (its help says so).
        workdir: declare ``--workdir``; False for a command that only reads a store (``dashboard``): its
            store is ``--storage``, else the default work directory's (:func:`default_storage_url`).

    Example:
        >>> import argparse
        >>> parser = argparse.ArgumentParser()
        >>> add_store_options(parser, checkpoints=False, workdir=False)
        >>> parser.parse_args([])
        Namespace(storage=None)
        >>> parser = argparse.ArgumentParser()
        >>> add_store_options(parser, checkpoints=True)
        >>> args = parser.parse_args(["--workdir", "runs"])
        >>> args.storage, str(args.workdir)
        (None, 'runs')
    """
    from pathlib import Path

    where = "<workdir>" if workdir else DEFAULT_WORKDIR
    parser.add_argument("--storage", metavar="URL", help="SQLAlchemy URL of the results store (default: "
                        f"sqlite:///{where}/results.db; e.g. postgresql+psycopg2://user@host/db)")
    if not workdir:
        return
    kept = "the default store and the trial checkpoints live" if checkpoints else "the default store lives"
    parser.add_argument("--workdir", type=Path, default=Path(DEFAULT_WORKDIR), metavar="DIR",
                        help=f"where {kept} (default: ./{DEFAULT_WORKDIR})")
