"""Ray Tune integration: synchronous successive halving that pauses and resumes trials.

Ray's own early-stopping schedulers do not run the paper's search (Appendix "UCI Adult"): ASHA
never pauses a trial, so there is no cohort and a promoted trial is never resumed at a rung;
HyperBand runs several brackets with its own geometric milestones; and ``Tuner.restore`` rebuilds a
scheduler from the pickle written when the run started, without the state it gathered since.

In an existing Ray Tune script, swap the scheduler line (ASHA's vocabulary is accepted; a step is
one ``tune.report`` or one ``Trainable.step()``) and make the trainable resume from its checkpoint::

    scheduler=SynchronousSHAScheduler(grace_period=1, reduction_factor=3, max_t=27)

    def train_fn(config):
        start = 0
        checkpoint = tune.get_checkpoint()          # resume where the pause left off
        if checkpoint:
            with checkpoint.as_directory() as folder:
                start = load_state(folder) + 1
        for epoch in range(start, 27):
            ...
            with tempfile.TemporaryDirectory() as folder:
                save_state(folder, epoch)
                tune.report({"accuracy": accuracy}, checkpoint=tune.Checkpoint.from_directory(folder))

:class:`SynchronousSHAScheduler` pauses a trial (Tune checkpoints it) when its ``time_attr`` reaches
a rung, waits until every live trial of the rung's cohort has reached it or ended, then lets
:class:`~eve_search.engine.ledger.RungLedger` decide: the losers are stopped, the winners resumed from their
checkpoints. The cohorts run as a :class:`~eve_search.engine.stream.CohortStream` (the project's one
scheduling core), which also says what a free actor takes next: a promoted trial of the oldest
cohort, then first-rung trials, then the search algorithm's next trial. Cohorts close on events
(the search algorithm is finished, or proposes none while every trial waits), never on a timer. A
paused trial gives its concurrency slot back, so ``ConcurrencyLimiter`` and
``max_concurrent_trials`` limit how many trials train at once, never the cohort. The scheduler's
state is written beside Tune's experiment state (the driver staging folder that Tune syncs to
``storage_path``), so a restored run continues it exactly.

:class:`EveTrainable` is a ``tune.Trainable`` over :class:`~eve_search.engine.trial.Trial`: each ``step()``
trains to the next rung budget and reports ``eval_cost``, the task's validation metrics and
``wall_seconds``; its checkpoint is the whole trial (model, optimizer with EvE's population and
moments, cost meter, batch stream, generators), so a paused or restored trial continues bit for bit.

Example (the paper's search; see ``searches/ray_tune_example.py`` for a user's own model)::

    from ray import tune
    from eve_search.integrations.ray import EveTrainable, SynchronousSHAScheduler

    rungs = (100, 300, 900)  # evaluation units (eval_cost)
    tuner = tune.Tuner(
        tune.with_parameters(EveTrainable, task="adult", rungs=rungs, backward_ratio=2.0),
        param_space={"lr": tune.loguniform(1e-4, 1e-2), "weight_decay": 1e-4,
                     "width": tune.choice([64, 256]), "depth": 2},
        tune_config=tune.TuneConfig(metric="accuracy", mode="max", num_samples=27, reuse_actors=True,
                                    scheduler=SynchronousSHAScheduler(time_attr="eval_cost", rungs=rungs)),
    )
    results = tuner.fit()

The package's modules, one idea each: ``_scheduler`` (the class and its public methods), ``_callbacks``
(Tune's callbacks), ``_cohorts`` and ``_segment`` (the cohorts as streams, knowing no Tune), ``_slots``
(concurrency slots), ``_actors`` (pause, idle, hand over an actor), ``_closing`` (the events that close a
cohort without a callback, and the last guard), ``_warnings``, ``_options`` (the arguments), ``_state``
(the state file), ``_trainable`` (:class:`EveTrainable`), and ``_compat``: every private part of Ray Tune
used, with the supported Ray versions, checked at import.
"""

from __future__ import annotations

from eve_search._imports import require

require("ray", "ray")
require("ray.tune", "ray")

# _compat first: it checks the Ray version. GUARD_SECONDS, MODES and _follow_ray_threads are importable
# from here as they were from the module this package replaced.
from eve_search.integrations._ray import _compat  # noqa: E402, F401
from eve_search.integrations._ray._closing import GUARD_SECONDS  # noqa: E402, F401
from eve_search.integrations._ray._options import MODES  # noqa: E402, F401
from eve_search.integrations._ray._scheduler import SynchronousSHAScheduler  # noqa: E402
from eve_search.integrations._ray._state import STATE_FILE, load_scheduler_state  # noqa: E402
from eve_search.integrations._ray._trainable import (  # noqa: E402, F401
    INDEX_KEY,
    EveTrainable,
    _follow_ray_threads,
    config_index,
)
from eve_search.integrations._ray._warnings import SynchronousSHAWarning  # noqa: E402

__all__ = ["INDEX_KEY", "STATE_FILE", "EveTrainable", "SynchronousSHAScheduler", "SynchronousSHAWarning",
           "config_index", "load_scheduler_state"]
