"""The Optuna pruner with the scripts Optuna users already have.

The objective is written the way Optuna's own PyTorch examples are (suggest a learning rate and a
width, train an epoch, report the validation accuracy with ``step=epoch``, ask ``should_prune()``),
on tiny local data. Each case ends with the recorded decisions checked against the reported scores
(the top third promoted at every rung) and runs under a watchdog, so a hang fails instead of stalling.
"""

from __future__ import annotations

import threading
import time
import warnings

import optuna
import pytest
import torch
import torch.nn.functional as F
from optuna.trial import TrialState

from eve_search.integrations.optuna import (
    CohortStalledError,
    PartialRungWarning,
    RungScheduleWarning,
    SequentialStudyError,
    StaleTrialWarning,
    SynchronousSHAPruner,
    optimize_in_cohorts,
)
from eve_search.engine.ledger import DEFAULT_RUNGS, promote_top_fraction
from eve_search.tasks.models import mlp
from tests.load import hang_guard
from tests.tiny_task import make_tiny_splits

optuna.logging.set_verbosity(optuna.logging.WARNING)
EPOCHS = 10
DATA = make_tiny_splits()
WATCHDOG = 120  # seconds: far above any case's run time on a loaded machine
torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)  # torch's one-time optimizer import, outside timings


class Training:
    """How many trials are inside an epoch's training at once (the most seen)."""

    def __init__(self) -> None:
        self.now = 0
        self.most = 0
        self._lock = threading.Lock()

    def __enter__(self) -> None:
        with self._lock:
            self.now += 1
            self.most = max(self.most, self.now)

    def __exit__(self, *exc) -> None:
        with self._lock:
            self.now -= 1


class Learner:
    """One trial's model as Optuna's PyTorch examples build it: a learning rate and a width suggested, then
    trained an epoch at a time (seeded by the trial's number, so a trial's scores depend only on it and
    its parameters, whatever thread trains it and whenever)."""

    def __init__(self, trial) -> None:
        lr = trial.suggest_float("lr", 1e-4, 3e-1, log=True)
        width = trial.suggest_categorical("width", [4, 16])
        self.generator = torch.Generator().manual_seed(trial.number)
        self.model = mlp(DATA.x_train.shape[1], [width], 2, generator=self.generator)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=lr)

    def epoch(self) -> float:
        """Train one epoch; the validation accuracy after it."""
        self.model.train()
        for batch in torch.randperm(len(DATA.y_train), generator=self.generator).split(128):
            self.optimizer.zero_grad()
            F.cross_entropy(self.model(DATA.x_train[batch]), DATA.y_train[batch]).backward()
            self.optimizer.step()
        self.model.eval()
        with torch.no_grad():
            return (self.model(DATA.x_val).argmax(1) == DATA.y_val).float().mean().item()


def make_objective(training: Training | None = None, epoch_seconds: float = 0.0, before_report=None):
    """An objective in Optuna's example style; ``before_report(trial, epoch)`` runs before each report."""
    training = training or Training()

    def objective(trial):
        learner = Learner(trial)
        for epoch in range(EPOCHS):
            with training:
                accuracy = learner.epoch()
                time.sleep(epoch_seconds)
            if before_report is not None:
                before_report(trial, epoch)
            trial.report(accuracy, epoch)
            if trial.should_prune():
                raise optuna.TrialPruned()
        return accuracy

    return objective


def _study(storage=None, **pruner_kwargs):
    pruner_kwargs.setdefault("poll_interval", 0.02)
    return optuna.create_study(direction="maximize", pruner=SynchronousSHAPruner(**pruner_kwargs), storage=storage,
                               sampler=optuna.samplers.RandomSampler(seed=0))


# Twelve configurations queued with study.enqueue_trial (Optuna's way to try given parameters first): trial n
# gets configuration n whichever thread asks for it, so runs with any number of jobs are comparable.
CONFIGS = [{"lr": lr, "width": width} for lr in (3e-3, 1e-2, 3e-2, 1e-1, 2e-1, 3e-1) for width in (4, 16)]


def _queued_study(storage=None, **pruner_kwargs):
    study = _study(storage, **pruner_kwargs)
    for params in CONFIGS:
        study.enqueue_trial(params)
    return study


def _outcome(study):
    """Every rung decision (promoted and stopped trial numbers) and the best trial: what a search decided."""
    decisions = check_decisions(study)
    return {k: (d["promoted"], d["stopped"]) for k, d in sorted(decisions.items())}, study.best_trial.number


def within(seconds, run):
    """Run ``run()`` in a thread; fail if it has not returned after ``seconds`` (a hang)."""
    box = {}

    def target():
        try:
            box["value"] = run()
        except BaseException as error:  # noqa: BLE001 - re-raised below
            box["error"] = error

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"hung: still running after {seconds} s"
    if "error" in box:
        raise box["error"]
    return box.get("value")


def _first_at_or_past(trial, budget):
    steps = [s for s in trial.intermediate_values if s >= budget]
    return trial.intermediate_values[min(steps)] if steps else None


def check_decisions(study):
    """Every recorded rung decision promoted the top third of the trials it judged, by the scores they
    reported; every trial that reached a rung was judged there (or reported after a timeout decided
    without it, and was pruned); PRUNED and COMPLETE states agree with the decisions. Returns them."""
    pruner = study.pruner
    trials = {t.number: t for t in study.trials}
    decisions = {k: v for k, v in study.user_attrs.items() if k.startswith("sha:cohort")}
    judged_at: dict[tuple[int, int], str] = {}
    for key, decision in decisions.items():
        budget = decision["budget"]
        judged = sorted(decision["promoted"] + decision["stopped"])
        scores = {n: _first_at_or_past(trials[n], budget) for n in judged}
        assert {str(n): s for n, s in scores.items()} == decision["scores"], key
        last = budget == pruner.rungs[-1]
        assert decision["promoted"] == ([] if last else promote_top_fraction(scores, pruner.fraction)), key
        assert decision["reporters"] == len(judged), key
        assert decision["partial"] == (len(judged) < decision["cohort"]), key
        for n in judged:
            assert (n, budget) not in judged_at, f"trial {n} judged twice at rung {budget}"
            judged_at[(n, budget)] = "promoted" if n in decision["promoted"] else "stopped"
    late_allowed = any(d.get("reason") in ("timeout", "sequential") for d in decisions.values())
    for number, trial in trials.items():
        assert trial.state in (TrialState.COMPLETE, TrialState.PRUNED), (number, trial.state)
        reached = [b for b in pruner.rungs if trial.last_step is not None and trial.last_step >= b]
        outcomes = [judged_at.get((number, b)) for b in reached]
        promoted = 0
        while promoted < len(outcomes) and outcomes[promoted] == "promoted":
            promoted += 1
        rest = outcomes[promoted:]  # after its promotions: stopped once, or absent, then out of the cohorts
        if trial.state == TrialState.COMPLETE:
            assert rest in ([], ["stopped"]) and (not rest or reached[-1] == pruner.rungs[-1]), (number, outcomes)
        elif rest[0] is None:  # reported a rung after it was decided without it (timeout): pruned there
            assert late_allowed and set(rest) == {None}, (number, outcomes)
        else:
            assert rest[0] == "stopped" and set(rest[1:]) <= {None}, (number, outcomes)
    return decisions


def _kept(study, steps):
    return [sum(1 for t in study.trials if step in t.intermediate_values) for step in steps]


# A sequential script ------------------------------------------------------------------------------


def test_a_sequential_study_is_refused_at_its_first_should_prune_with_the_fix():
    study = _study(cohort_size=9)
    with pytest.raises(SequentialStudyError, match=r"optimize_in_cohorts\(study, objective.*n_jobs=9"):
        study.optimize(make_objective(), n_trials=9)  # n_jobs=1, in this (main) thread, in-memory storage
    assert [t.state for t in study.trials] == [TrialState.FAIL]
    assert study.trials[0].last_step == 0  # refused after the first epoch, before training to the first rung


def test_a_sequential_study_on_sqlite_is_refused_at_its_first_should_prune_too(tmp_path):
    # The usual single script that keeps its study in a file (storage="sqlite:///..."): refused at once, not
    # after trial 0 trained to its first rung and then waited for worker processes that never come.
    study = _study(f"sqlite:///{tmp_path / 'alone.db'}", cohort_size=9)
    with pytest.raises(SequentialStudyError, match=r"optimize_in_cohorts\(study, objective.*n_jobs=9.*if other "
                                                  r"worker processes run this study.*workers=N\)$") as error:
        within(WATCHDOG, lambda: study.optimize(make_objective(), n_trials=9))
    assert "\n" not in str(error.value)
    assert [(t.state, t.last_step) for t in study.trials] == [(TrialState.FAIL, 0)]


def test_a_sequential_script_counting_epochs_runs_in_cohorts():
    training = Training()
    study = _study(cohort_size=9)  # rungs at steps 1, 3, 9, ... : epochs
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        within(WATCHDOG, lambda: optimize_in_cohorts(study, make_objective(training), n_trials=9))
    assert training.most == 1  # one trial trains at a time, as in the sequential script
    assert _kept(study, (1, 3, 9)) == [9, 3, 1]
    states = [t.state for t in study.trials]
    assert states.count(TrialState.COMPLETE) == 1 and states.count(TrialState.PRUNED) == 8
    decisions = check_decisions(study)
    assert sorted(d["budget"] for d in decisions.values()) == [1, 3, 9]
    assert not any(d["partial"] for d in decisions.values())
    assert not [w for w in caught if issubclass(w.category, (PartialRungWarning, RungScheduleWarning))]
    complete = study.best_trial
    assert complete.value == complete.intermediate_values[EPOCHS - 1]


# Fewer jobs than the cohort -----------------------------------------------------------------------


def test_fewer_jobs_than_the_cohort_take_turns():
    training = Training()
    study = _study(cohort_size=6, max_resource=EPOCHS - 1)  # rungs 1, 3, 9; the last promotes nobody
    within(WATCHDOG, lambda: optimize_in_cohorts(study, make_objective(training), n_trials=12, n_jobs=2))
    assert training.most <= 2
    assert _kept(study, (1, 3, 9)) == [12, 4, 2]  # two cohorts: 6 -> 2 -> 1 each
    assert [t.state for t in study.trials].count(TrialState.COMPLETE) == 2
    decisions = check_decisions(study)
    assert len(decisions) == 6 and not any(d["partial"] for d in decisions.values())
    for cohort in (0, 1):
        assert study.user_attrs[f"sha:cohort{cohort}:rung9"]["promoted"] == []  # the last rung


def test_plain_optimize_with_fewer_jobs_names_optimize_in_cohorts():
    # Both threads wait at the first rung for four trials no thread is free to start: refused when that
    # happens (an event), not after a stall timer.
    study = _study(cohort_size=6)
    with pytest.raises(CohortStalledError, match=r"all 2 threads of study.optimize.*n_jobs=6.*optimize_in_cohorts"), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore", PartialRungWarning)  # the other trial goes on in the closed cohort
        within(WATCHDOG, lambda: study.optimize(make_objective(), n_trials=6, n_jobs=2))
    assert len(study.trials) == 2  # no trial started after the error
    assert TrialState.FAIL in [t.state for t in study.trials]


# The same decisions for any number of jobs; ask and tell --------------------------------------------


def test_the_same_decisions_and_winner_for_one_two_and_four_jobs(tmp_path):
    # Three cohorts of four: a free job takes a promoted trial of an older cohort first, then a new trial,
    # so cohorts overlap; each cohort is still decided on its own four trials.
    runs = {}
    for n_jobs in (1, 2, 4):
        study = _queued_study(cohort_size=4, max_resource=EPOCHS - 1)  # rungs 1, 3, 9: 4 -> 2 -> 1
        within(WATCHDOG, lambda: optimize_in_cohorts(study, make_objective(), n_trials=12, n_jobs=n_jobs))
        runs[f"optimize_in_cohorts(n_jobs={n_jobs})"] = _outcome(study)
    study = _queued_study(f"sqlite:///{tmp_path / 'jobs.db'}", cohort_size=4, max_resource=EPOCHS - 1)
    within(WATCHDOG, lambda: optimize_in_cohorts(study, make_objective(), n_trials=12, n_jobs=2))
    runs["optimize_in_cohorts(n_jobs=2) on SQLite"] = _outcome(study)
    study = _queued_study(cohort_size=4, max_resource=EPOCHS - 1)
    within(WATCHDOG, lambda: study.optimize(make_objective(), n_trials=12, n_jobs=4))
    runs["study.optimize(n_jobs=4)"] = _outcome(study)
    decisions, best = runs["optimize_in_cohorts(n_jobs=1)"]
    assert len(decisions) == 9 and not any(key.startswith("sha:cohort3") for key in decisions)
    assert {name: run for name, run in runs.items() if run != (decisions, best)} == {}


def _batched(study, cohort_size, batches):
    """Optuna's batched ask-and-tell (tutorial "Ask-and-Tell Interface"), with pruning: a batch of trials is
    asked, then trained in turn, epoch by epoch, each reported and checked, in this one thread."""
    for _ in range(batches):
        trials = [study.ask() for _ in range(cohort_size)]
        learners = {trial.number: Learner(trial) for trial in trials}
        accuracy = {}
        live = list(trials)
        for epoch in range(EPOCHS):
            for trial in list(live):
                accuracy[trial.number] = learners[trial.number].epoch()
                trial.report(accuracy[trial.number], epoch)
                if trial.should_prune():
                    study.tell(trial, state=TrialState.PRUNED)
                    live.remove(trial)
        for trial in live:
            study.tell(trial, accuracy[trial.number])


def test_batched_ask_and_tell_completes_with_the_decisions_of_optimize_in_cohorts():
    reference = _queued_study(cohort_size=4, max_resource=EPOCHS - 1)
    within(WATCHDOG, lambda: optimize_in_cohorts(reference, make_objective(), n_trials=12))
    study = _queued_study(cohort_size=4, max_resource=EPOCHS - 1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        within(WATCHDOG, lambda: _batched(study, cohort_size=4, batches=3))  # it used to hang at trial 0's first rung
    assert not [w for w in caught if issubclass(w.category, PartialRungWarning)]
    assert [t.state for t in study.trials] == [t.state for t in reference.trials]
    assert _outcome(study) == _outcome(reference)
    # should_prune() never waits in ask-and-tell: a trial learns its rung's verdict at its next call, so a
    # pruned trial trained at most one epoch past its rung (rungs 1 and 3), the cohort's last reporter none.
    last_steps = {t.last_step for t in study.trials if t.state == TrialState.PRUNED}
    assert 2 in last_steps and last_steps <= {1, 2, 3, 4}


@pytest.mark.parametrize("storage", ["memory", "sqlite"])
def test_ask_and_tell_one_trial_at_a_time_is_refused_at_its_first_should_prune_naming_the_batched_pattern(
        tmp_path, storage):
    # Optuna's ask-and-tell loop, one trial at a time: trial 0 cannot be judged before the cohort's three other
    # trials report, and they are asked only after it is told. Known at its first should_prune().
    study = _study(None if storage == "memory" else f"sqlite:///{tmp_path / 'ask.db'}", cohort_size=4)
    told = []
    with pytest.raises(SequentialStudyError, match=r"ask the whole cohort first \(trials = \[study\.ask\(\) "
                                                  r"for _ in range\(4\)\]\) and train them in turn") as error:
        for _ in range(8):
            trial = study.ask()
            learner = Learner(trial)
            for epoch in range(EPOCHS):
                accuracy = learner.epoch()
                trial.report(accuracy, epoch)
                if trial.should_prune():
                    study.tell(trial, state=TrialState.PRUNED)
                    break
            else:
                study.tell(trial, accuracy)
            told.append(trial.number)
    assert "\n" not in str(error.value) and "study.optimize" not in str(error.value)  # a fix for this script
    assert told == [] and study.trials[0].last_step == 0  # at the first should_prune, before the first rung


# n_trials not a multiple of the cohort; timeout= --------------------------------------------------------


def test_plain_optimize_closes_its_last_cohort_when_it_stops_asking():
    # study.optimize's n_trials ends the study in the middle of cohort 1; the pruner is not told: it sees
    # the optimize loop stop asking while trial 9 waits at a rung, and closes the cohort (no stall, no FAIL).
    study = _study(cohort_size=9)
    with pytest.warns(PartialRungWarning, match=r"cohort 1 \(trial 9\) was decided among 1 of 9 trials because no "
                                                r"more trials joined"):
        within(WATCHDOG, lambda: study.optimize(make_objective(), n_trials=10, n_jobs=9))
    assert study.user_attrs["sha:cut10"]["reason"] == "n_trials"
    check_decisions(study)
    assert [t.state for t in study.trials].count(TrialState.COMPLETE) == 2  # one per cohort


@pytest.mark.parametrize("storage", ["memory", "sqlite"])
def test_plain_optimize_with_a_timeout_ends_cleanly_with_its_last_partial_cohort_closed(tmp_path, storage):
    study = _study(None if storage == "memory" else f"sqlite:///{tmp_path / 'timeout.db'}", cohort_size=5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        within(WATCHDOG, lambda: study.optimize(make_objective(epoch_seconds=0.01), n_jobs=5, timeout=1.0))
    states = [t.state for t in study.trials]
    assert TrialState.FAIL not in states and TrialState.RUNNING not in states
    check_decisions(study)
    started = len(study.trials)
    partial = [str(w.message) for w in caught if issubclass(w.category, PartialRungWarning)]
    if started % 5:  # the usual case: the time ran out in the middle of a cohort
        assert study.user_attrs[f"sha:cut{started}"]["reason"] == "timeout"
        assert len(partial) == 1 and f"among {started % 5} of 5 trials because no more trials joined" in partial[0]
    else:
        assert partial == []


@pytest.mark.parametrize("storage", ["memory", "sqlite"])
def test_a_slow_trial_keeps_its_cohort_open_past_the_optimize_timeout(tmp_path, storage):
    # Trial 2 reports its first rung late: only after the other two have waited there through many reads of
    # the study, and after study.optimize's timeout stopped new trials. Nothing may close the cohort before.
    study = _study(None if storage == "memory" else f"sqlite:///{tmp_path / 'slow.db'}", cohort_size=3)
    read = threading.Condition()
    reads = [0]
    get_trials = study.get_trials

    def counted(*args, **kwargs):
        with read:
            reads[0] += 1
            read.notify_all()
        return get_trials(*args, **kwargs)

    study.get_trials = counted  # every look of a waiting trial's pruner reads the study
    timeout = 0.5
    started = time.monotonic()

    def before_report(trial, epoch):
        if trial.number != 2 or epoch != 1:
            return
        others_at_rung = lambda: sum(1 in t.intermediate_values for t in get_trials(deepcopy=False)) == 2  # noqa: E731
        with read:
            assert read.wait_for(others_at_rung, WATCHDOG)
            since = reads[0]
            assert read.wait_for(lambda: reads[0] - since >= 100 and time.monotonic() - started > timeout, WATCHDOG)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        within(WATCHDOG, lambda: study.optimize(make_objective(before_report=before_report), n_jobs=3,
                                                timeout=timeout))
    assert len(study.trials) == 3
    first = study.user_attrs["sha:cohort0:rung1"]
    assert (first["reporters"], first["partial"]) == (3, False)
    assert not [w for w in caught if issubclass(w.category, PartialRungWarning)]
    check_decisions(study)


# n_trials not a multiple of the cohort (optimize_in_cohorts) ------------------------------------------


def test_the_last_partial_cohort_is_decided_with_the_trials_that_exist():
    study = _study(cohort_size=4)
    with pytest.warns(PartialRungWarning, match=r"cohort 2 \(trials 8-10\) was decided among 3 of 4"):
        within(WATCHDOG, lambda: optimize_in_cohorts(study, make_objective(), n_trials=11, n_jobs=2))
    assert len(study.trials) == 11
    decisions = check_decisions(study)  # no FAIL, every rung decided
    last = study.user_attrs["sha:cohort2:rung1"]
    assert (last["reporters"], last["cohort"], last["partial"], last["reason"]) == (3, 4, True, "closed")
    assert sorted(last["promoted"] + last["stopped"]) == [8, 9, 10]
    assert [k for k, d in decisions.items() if d["partial"]] == ["sha:cohort2:rung1"]
    assert study.user_attrs["sha:cut11"]["members"] == [8, 9, 10]


def test_plain_optimize_with_n_trials_given_to_the_pruner():
    study = _study(cohort_size=9, n_trials=10)
    with pytest.warns(PartialRungWarning, match=r"cohort 1 \(trial 9\) was decided among 1 of 9"):
        within(WATCHDOG, lambda: study.optimize(make_objective(), n_trials=10, n_jobs=9))
    check_decisions(study)
    assert [t.state for t in study.trials].count(TrialState.COMPLETE) == 2  # one per cohort


def test_study_stop_and_an_objective_error_close_the_cohort():
    stopping = _study(cohort_size=3)

    def stop_at_the_first_end(study, trial):
        study.stop()  # no new trial starts once this is seen; the running ones finish

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        within(WATCHDOG, lambda: optimize_in_cohorts(stopping, make_objective(), n_trials=30,
                                                     callbacks=[stop_at_the_first_end]))
    started = len(stopping.trials)
    assert 3 <= started < 30
    partial = [str(w.message) for w in caught if issubclass(w.category, PartialRungWarning)]
    if started % 3:
        assert stopping.user_attrs[f"sha:cut{started}"]["reason"] == "stopped"
        assert len(partial) == 1 and f"among {started % 3} of 3 trials because no more trials joined" in partial[0]
    else:
        assert partial == []
    check_decisions(stopping)

    for n_jobs in (1, 2):
        failing = _study(cohort_size=3)
        train = make_objective()

        def objective(trial):
            if trial.number == 4:
                raise RuntimeError("out of memory")
            return train(trial)

        with pytest.raises(RuntimeError, match="out of memory"), \
                pytest.warns(PartialRungWarning, match="rung 1 of cohort 1 .* was decided among"):  # 4 failed
            within(WATCHDOG, lambda: optimize_in_cohorts(failing, objective, n_trials=9, n_jobs=n_jobs))
        states = [t.state for t in failing.trials]
        assert states[4] == TrialState.FAIL and TrialState.RUNNING not in states, n_jobs
        # No trial starts once the error is seen. Trial 4 raises as soon as it starts, holding one of the
        # n_jobs turns: only a trial started on another turn before that can follow it (none if n_jobs=1).
        assert len(states) - 5 <= n_jobs - 1, (n_jobs, states)
        assert failing.user_attrs["sha:cohort0:rung1"]["reporters"] == 3  # what was computed is kept


def test_study_stop_in_an_objective_is_not_erased_by_a_trial_starting_beside_it():
    # Trial 0 calls study.stop() and then goes on until the next trial has started on the other turn:
    # that trial's study.optimize clears Optuna's stop flag as it begins. No trial may start after the
    # call (trial 1 may have started just before it); the sequential study would stop the same way.
    study = _study(cohort_size=3)
    train = make_objective()
    second_started = threading.Event()

    def objective(trial):
        if trial.number == 0:
            trial.study.stop()
            second_started.wait(2.0)  # under the fix nothing starts: it times out
        else:
            second_started.set()
        return train(trial)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PartialRungWarning)
        within(WATCHDOG, lambda: optimize_in_cohorts(study, objective, n_trials=12, n_jobs=2))
    assert len(study.trials) <= 2, [t.number for t in study.trials]
    assert study.user_attrs[f"sha:cut{len(study.trials)}"]["reason"] == "stopped"
    assert "stop" not in vars(study)  # the study's own stop() again after the call
    check_decisions(study)


# timeout= ------------------------------------------------------------------------------------------


def test_optimize_in_cohorts_timeout_closes_the_cohort_recorded_and_warned():
    study = _study(cohort_size=40)  # far more than can start in the time allowed
    with pytest.warns(PartialRungWarning, match=r"decided among \d+ of 40 trials because no more trials joined"):
        within(WATCHDOG, lambda: optimize_in_cohorts(study, make_objective(epoch_seconds=0.05), timeout=1.0))
    started = len(study.trials)
    assert 1 <= started < 40
    first = study.user_attrs["sha:cohort0:rung1"]
    assert (first["reporters"], first["cohort"], first["partial"], first["reason"]) == (started, 40, True, "closed")
    check_decisions(study)


def test_pruner_timeout_decides_without_late_trials_recorded_and_warned():
    study = _study(cohort_size=4, timeout=2)
    with pytest.warns(PartialRungWarning, match=r"among 2 of 4 trials after waiting timeout=2 s"):
        within(WATCHDOG, lambda: study.optimize(make_objective(), n_trials=4, n_jobs=2))
    decision = study.user_attrs["sha:cohort0:rung1"]
    assert (decision["reporters"], decision["cohort"], decision["partial"], decision["reason"]) == \
        (2, 4, True, "timeout")
    check_decisions(study)  # the two late trials were pruned at rung 1 without being judged


def test_pruner_timeout_in_a_sequential_study_is_not_silent():
    # Nothing to wait for: decided at once. Waiting out the pruner's timeout instead would be a hang here
    # (the hang guard ends it; the study runs in this, the main, thread, as a sequential script's does).
    study = _study(cohort_size=3, timeout=3600)
    with pytest.warns(PartialRungWarning, match="runs one trial at a time.*optimize_in_cohorts"), hang_guard():
        study.optimize(make_objective(), n_trials=3)
    decision = study.user_attrs["sha:cohort0:rung1"]
    assert (decision["reporters"], decision["partial"], decision["reason"]) == (1, True, "sequential")
    check_decisions(study)


# Heartbeats -----------------------------------------------------------------------------------------


def _beating(tmp_path, name, interval, grace):
    """An SQLite study with Optuna's heartbeats, as a multi-worker script builds it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / name}", heartbeat_interval=interval,
                                             grace_period=grace)
    return storage, _study(storage, cohort_size=3)


def test_a_grace_period_not_above_the_heartbeat_interval_is_refused_at_the_first_should_prune(tmp_path):
    _, study = _beating(tmp_path, "beats.db", interval=2, grace=2)
    refusal = (r"^Invalid grace_period: 2 \(the storage's heartbeat_interval is 2 s, so a live trial is stale between "
               r"two of its heartbeats: expected grace_period above heartbeat_interval.*grace_period=12\)\)$")
    with pytest.raises(ValueError, match=refusal):
        within(WATCHDOG, lambda: study.optimize(make_objective(), n_trials=3))
    assert [(t.state, t.last_step) for t in study.trials] == [(TrialState.FAIL, 0)]
    _, study = _beating(tmp_path, "cohorts.db", interval=2, grace=1)
    with pytest.raises(ValueError, match=r"^Invalid grace_period: 1 "):
        optimize_in_cohorts(study, make_objective(), n_trials=3)
    assert study.trials == []  # before any trial


@pytest.mark.parametrize("driver,when", [("optimize_in_cohorts", "waiting"), ("optimize_in_cohorts", "training"),
                                         ("study.optimize", "waiting")])
def test_a_live_trial_failed_as_stale_by_another_worker_is_dropped_with_one_warning(tmp_path, driver, when):
    # Another worker's heartbeat check fails trial 0 while this process still runs it (on a busy machine its
    # heartbeats came late): here the other worker is another Study object on the same storage, and the
    # check is what optuna.storages.fail_stale_trials does to a stale trial. Trial 0 is dropped with one
    # warning: it never raises UpdateFinishedTrialError out of its objective, and the others finish.
    storage, study = _beating(tmp_path, "stale.db", interval=1, grace=60)  # nothing goes stale by itself
    other_worker = optuna.load_study(study_name=study.study_name, storage=storage)
    at_rung = threading.Event()
    left = {}

    def objective(trial):
        learner = Learner(trial)
        try:
            for epoch in range(EPOCHS):
                accuracy = learner.epoch()
                if when == "waiting" and trial.number == 2 and epoch == 1:
                    assert at_rung.wait(WATCHDOG)  # trial 0 reported rung 1 and waits there
                    other_worker.tell(0, state=TrialState.FAIL)
                if when == "training" and trial.number == 0 and epoch == 1:
                    other_worker.tell(0, state=TrialState.FAIL)  # between two of its reports
                trial.report(accuracy, epoch)
                if trial.number == 0 and epoch == 1:
                    at_rung.set()
                if trial.should_prune():
                    raise optuna.TrialPruned()
            return accuracy
        except BaseException as error:
            left[trial.number] = type(error).__name__
            raise

    def run():
        if driver == "optimize_in_cohorts":
            optimize_in_cohorts(study, objective, n_trials=6)
        else:
            study.optimize(objective, n_trials=3, n_jobs=3)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        within(WATCHDOG, run)
    stale = [str(w.message) for w in caught if issubclass(w.category, StaleTrialWarning)]
    assert len(stale) == 1 and stale[0].startswith("SynchronousSHAPruner: trial 0 was failed as stale")
    # Waiting at a rung, the pruner's should_prune() ends it as a pruned trial ends; training, its own next
    # trial.report raises (Optuna's), and optimize_in_cohorts drops it there. No other trial is touched.
    assert left.pop(0) == ("TrialPruned" if when == "waiting" else "UpdateFinishedTrialError")
    assert set(left.values()) <= {"TrialPruned"}
    states = {t.number: t.state for t in study.trials}
    assert states[0] == TrialState.FAIL
    assert set(states.values()) - {TrialState.FAIL} <= {TrialState.COMPLETE, TrialState.PRUNED}
    assert len(states) == (6 if driver == "optimize_in_cohorts" else 3)  # the study went on without it
    if when == "waiting":  # it had reported rung 1 before it was failed: judged there with its score
        assert study.user_attrs["sha:cohort0:rung1"]["reporters"] == 3


def test_a_trial_failed_while_the_study_is_read_is_still_dropped(tmp_path, monkeypatch):
    # The race CI met on a busy machine, made to happen every time. Optuna reads a study's trials in several
    # queries (the trials, then their reports), and neither SQLite nor PostgreSQL holds one snapshot across
    # them: waiting at rung 1, trial 0 can read its own state (running) before another worker fails it as
    # stale, and the others' reports after trial 2 has reported rung 1 and so decided it. Here that torn read
    # is put together from two reads of the study. Trial 0 must still learn that it was failed, not go on
    # with the verdict "promoted" into a report that raises UpdateFinishedTrialError.
    storage, study = _beating(tmp_path, "race.db", interval=1, grace=60)
    other_worker = optuna.load_study(study_name=study.study_name, storage=storage)
    here = threading.local()  # in trial 0's thread, at rung 1: its first read of the study is the torn one
    trials_read, decided = threading.Event(), threading.Event()
    get_trials = optuna.Study.get_trials

    def torn_read(self, *args, **kwargs):
        if not getattr(here, "armed", False):
            return get_trials(self, *args, **kwargs)
        here.armed = False
        before = get_trials(self, *args, **kwargs)  # trial 0 still running
        trials_read.set()
        assert decided.wait(WATCHDOG)  # trial 0 failed, trial 2's report decided the rung
        after = get_trials(self, *args, **kwargs)
        return [before[0], *after[1:]]

    monkeypatch.setattr(optuna.Study, "get_trials", torn_read)
    left = {}

    def objective(trial):
        try:
            for epoch in range(EPOCHS):
                accuracy = (0.9, 0.6, 0.5)[trial.number] + epoch / 1000  # trial 0 is promoted at rung 1
                if trial.number == 2 and epoch == 1:
                    assert trials_read.wait(WATCHDOG)
                    other_worker.tell(0, state=TrialState.FAIL)
                trial.report(accuracy, epoch)
                here.armed = trial.number == 0 and epoch == 1
                pruned = trial.should_prune()
                if trial.number == 2 and epoch == 1:
                    decided.set()
                if pruned:
                    raise optuna.TrialPruned()
            return accuracy
        except BaseException as error:
            left[trial.number] = type(error).__name__
            raise

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        within(WATCHDOG, lambda: study.optimize(objective, n_trials=3, n_jobs=3))
    assert trials_read.is_set() and decided.is_set()
    stale = [str(w.message) for w in caught if issubclass(w.category, StaleTrialWarning)]
    assert len(stale) == 1 and stale[0].startswith("SynchronousSHAPruner: trial 0 was failed as stale")
    assert left == {0: "TrialPruned", 1: "TrialPruned", 2: "TrialPruned"}  # not UpdateFinishedTrialError
    assert study.user_attrs["sha:cohort0:rung1"]["promoted"] == [0]  # judged with the score it had reported
    assert [t.state for t in study.trials] == [TrialState.FAIL, TrialState.PRUNED, TrialState.PRUNED]


# Steps and rungs ------------------------------------------------------------------------------------


def test_optuna_vocabulary_derives_the_rungs():
    assert SynchronousSHAPruner().rungs[:5] == (1, 3, 9, 27, 81)
    assert SynchronousSHAPruner().fraction == pytest.approx(1 / 3)
    assert SynchronousSHAPruner(min_resource=1, reduction_factor=3, max_resource=10).rungs == (1, 3, 9, 10)
    halving = SynchronousSHAPruner(min_resource=2, reduction_factor=2, max_resource=16)
    assert (halving.rungs, halving.fraction) == ((2, 4, 8, 16), 0.5)
    assert SynchronousSHAPruner(rungs=DEFAULT_RUNGS).rungs == (100, 300, 900, 2700, 3000)
    with pytest.raises(ValueError, match=r"Invalid rungs: .* together with min_resource"):
        SynchronousSHAPruner(rungs=DEFAULT_RUNGS, min_resource=1)
    with pytest.raises(ValueError, match="Invalid reduction_factor: 1"):
        SynchronousSHAPruner(reduction_factor=1)
    with pytest.raises(ValueError, match="Invalid max_resource: 0.5"):
        SynchronousSHAPruner(max_resource=0.5)
    with pytest.raises(ValueError, match="Invalid n_trials: 0"):
        SynchronousSHAPruner(n_trials=0)
    with pytest.raises(ValueError, match="Invalid study: its pruner is MedianPruner"):
        optimize_in_cohorts(optuna.create_study(pruner=optuna.pruners.MedianPruner()), make_objective(), 1)
    with pytest.raises(ValueError, match="Invalid n_jobs: 0"):
        optimize_in_cohorts(_study(cohort_size=3), make_objective(), 3, n_jobs=0)
    with pytest.raises(ValueError, match=r"Invalid workers: 0 \(expected an int >= 1 of worker processes\)"):
        SynchronousSHAPruner(workers=0)


def test_a_study_with_several_objectives_is_refused_before_any_trial_or_by_optunas_own_report(tmp_path):
    # Optuna never asks a pruner in a multi-objective study: trial.report raises first (Optuna's own
    # NotImplementedError). optimize_in_cohorts refuses such a study in one line, before any trial.
    refusal = r"^Invalid study: 2 objectives \(SynchronousSHAPruner ranks one score: expected optuna.create_study\(" \
              r"direction=\.\.\.\)"
    url = f"sqlite:///{tmp_path / 'two.db'}"
    optuna.create_study(study_name="two", storage=url, directions=["maximize", "minimize"])
    loaded = optuna.load_study(study_name="two", storage=url, pruner=SynchronousSHAPruner(cohort_size=3))
    with pytest.raises(ValueError, match=refusal) as error:
        optimize_in_cohorts(loaded, make_objective(), 3)
    assert "\n" not in str(error.value) and loaded.trials == []
    two = optuna.create_study(directions=["maximize", "minimize"], pruner=SynchronousSHAPruner(cohort_size=3))
    with pytest.raises(ValueError, match=refusal):
        optimize_in_cohorts(two, make_objective(), 3)
    assert two.trials == []
    with pytest.raises(NotImplementedError, match="Trial.report is not supported for multi-objective"):
        two.optimize(make_objective(), n_trials=1)


def test_steps_that_never_reach_the_first_rung_warn_once():
    study = _study(rungs=DEFAULT_RUNGS, cohort_size=3)  # cost units, while the objective counts epochs
    with pytest.warns(RungScheduleWarning, match=r"completed at step 9 without reaching the first rung \(100\)"):
        within(WATCHDOG, lambda: optimize_in_cohorts(study, make_objective(), n_trials=3))
    assert [t.state for t in study.trials] == [TrialState.COMPLETE] * 3  # never pruned: hence the warning


def test_a_report_past_several_rungs_warns_once():
    def objective(trial):
        x = trial.suggest_float("x", 0.0, 1.0)
        for step in (100, 200, 300):  # every 100 iterations, while the rungs start at 1
            trial.report(x, step)
            if trial.should_prune():
                raise optuna.TrialPruned()
        return x

    study = _study(cohort_size=3)
    with pytest.warns(RungScheduleWarning, match=r"passing rungs 1, 3, 9, 27, 81 at once.*min_resource=100"):
        within(WATCHDOG, lambda: optimize_in_cohorts(study, objective, n_trials=3))
    check_decisions(study)
