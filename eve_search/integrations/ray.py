"""Ray Tune integration (extra ``ray``): :class:`SynchronousSHAScheduler`, :class:`EveTrainable` and
:func:`run_sweep_on_ray`, the ``--backend ray`` of ``eve-search``. See :mod:`eve_search.integrations._ray`.

Steps and rungs:
    A step is one unit of ``time_attr``, by default Tune's ``training_iteration``: one ``tune.report``
    of a function trainable, or one ``step()`` of a class ``Trainable`` (in most scripts, an epoch).
    Rungs start at ``grace_period`` and grow by ``reduction_factor`` up to ``max_t`` (defaults 1, 3,
    100); the best ``1/reduction_factor`` go on at each rung. ``time_attr="eval_cost"`` counts EvE's
    ``CostMeter`` units, with the paper's rungs (:data:`PAPER_RUNGS`) by default. Results without the
    metric (sparse reporting, ``TUNE_DISABLE_STRICT_METRIC_CHECKING=1``) are accepted between rungs; a
    rung counts the first result at or past it that has the metric (warned once when that is later).

Checkpoints:
    Unlike ASHA, the scheduler pauses each trial at a rung until its cohort has caught up, then
    resumes the winners, so a function trainable must load its checkpoint (``tune.get_checkpoint()``)
    and a class ``Trainable`` needs ``save_checkpoint`` and ``load_checkpoint``. A promoted trial that
    comes back below its rung started over: the scheduler warns once and names these lines. It warns
    too when a trial ends before the first rung (wrong units). EvE survives checkpoints of the model
    alone: when the weights change outside ``step()`` (``load_state_dict``, ``reset_config``), its
    population re-anchors around them; saving ``optimizer.state_dict()`` too continues bit for bit.
    No trial is stopped while a checkpoint of it is being saved, so every trial keeps the last one it
    reported. ``results.get_best_result()`` ranks trials by their *last* result, where a loser keeps
    its early-rung score; ``scheduler.best_result(results)`` is the search's winner, with its checkpoint
    (the scheduler warns at the end of a run where the two differ).

Cohorts:
    By default the cohort is every trial of the run, as in the paper. A paused trial gives its slot
    back to ``ConcurrencyLimiter`` and ``max_concurrent_trials``, so those limit how many trials
    train at once, never the cohort. ``cohort_size=n`` splits the run into cohorts of n in arrival
    order; it is required for ``num_samples=-1`` (refused at setup without it). The cohorts run as one
    :class:`~eve_search.engine.stream.CohortStream`: an actor whose trial waits at a rung takes a
    promoted trial of an older cohort, else the next cohort's trials, and the decisions are the same
    for any number of actors. A cohort closes on events, never on a timer: one that cannot fill (the
    searcher is finished, or proposes none while every trial waits) is decided with the trials
    present, warned (:class:`SynchronousSHAWarning`) and listed by ``scheduler.partial_cohorts()``.

What the scheduler cannot do:
    See a restart when a function trainable saves checkpoints but never reads them (Tune carries
    ``training_iteration`` on; report your own ``epoch`` and pass ``time_attr="epoch"``); save the
    compute of a promoted trial that has no checkpoint (it trains again, warned); hand back slots of
    searchers that limit concurrency themselves (HEBO, BOHB, ``ConcurrencyLimiter(batch=True)``: their
    cohorts close smaller, warned); decide the cohort under way when ``time_budget_s`` ends the run;
    use CPUs left idle while the rung of the only cohort waits (with ``cohort_size``, the next
    cohort's trials take them; ASHA has no barrier); run several brackets.

Ray versions:
    The range the ``ray`` extra declares, tested on Ray 2.60. Pausing a trial without wasting its
    actor, and giving its concurrency slot back while it waits, uses a few internals of Tune; they
    are all in one module (``eve_search/integrations/_ray/_compat.py``), which checks the version
    when imported: outside the declared range it refuses with the range, and on a version of it that
    the tests never ran it warns (``RuntimeWarning``) and names the tested one.

Example (needs Ray, so not run as a doctest):
    >>> from eve_search.integrations.ray import SynchronousSHAScheduler  # doctest: +SKIP
    >>> scheduler = SynchronousSHAScheduler(grace_period=1, reduction_factor=3, max_t=27)  # doctest: +SKIP
"""

from eve_search.integrations._ray import (
    INDEX_KEY,
    STATE_FILE,
    EveTrainable,
    SynchronousSHAScheduler,
    SynchronousSHAWarning,
    config_index,
    load_scheduler_state,
)
from eve_search.integrations._ray_sweep import run_sweep_on_ray
from eve_search.engine.ledger import DEFAULT_RUNGS as PAPER_RUNGS

__all__ = [
    "INDEX_KEY",
    "PAPER_RUNGS",
    "STATE_FILE",
    "EveTrainable",
    "SynchronousSHAScheduler",
    "SynchronousSHAWarning",
    "config_index",
    "load_scheduler_state",
    "run_sweep_on_ray",
]
