"""The in-process engine: a loop over the rung ledger, trials kept in memory within a budget, exact resume."""

import contextlib
import gc
import weakref

import pytest
import torch

from eve_search.engine.checkpoint import save_atomically
from eve_search import InputError
from eve_search.engine.sha import HalvingOptions, OnWorkers, SynchronousSuccessiveHalving, trial_bytes
from eve_search.engine.trial import Trial

CONFIGS = [{"lr": lr, "weight_decay": 1e-4, "width": 16, "depth": 1}
           for lr in (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 2e-4, 5e-3, 2e-2)]
RUNGS = (30, 90, 180)


class FolderStore:
    """A RungStore in memory with checkpoint files in a folder, like the real one."""

    def __init__(self, folder):
        self.folder = folder
        self.details, self.eliminated, self.completed = {}, [], {}

    def rung_details(self):
        return {index: dict(rungs) for index, rungs in self.details.items()}

    def checkpoint_path(self, index):
        return self.folder / f"trial-{index:04d}.pt"

    def record(self, index, budget, details, checkpoint):
        save_atomically(checkpoint, self.checkpoint_path(index))
        self.details.setdefault(index, {})[budget] = details

    def eliminate(self, indices):
        self.eliminated.extend(indices)
        for index in indices:
            self.checkpoint_path(index).unlink(missing_ok=True)

    def complete(self, index, score):
        self.completed[index] = score


def factory(optimizer, made=None, alive=None):
    def make_trial(index):
        trial = Trial("tiny", CONFIGS[index], optimizer, seed=0, index=index, backward_ratio=2.0)
        if made is not None:
            made.append(index)
        if alive is not None:
            alive.add(trial)
        return trial
    return make_trial


def engine(store, optimizer="eve", **kwargs):
    made = kwargs.pop("made", None)
    alive = kwargs.pop("alive", None)
    return SynchronousSuccessiveHalving(9, factory(optimizer, made, alive), store, rungs=RUNGS, **kwargs)


@pytest.mark.parametrize("optimizer", ["eve", "adam"])
def test_engine_trains_rungs_9_3_1_and_resumes_promoted_trials(tmp_path, optimizer):
    store = FolderStore(tmp_path)
    reports = engine(store, optimizer).run()
    assert [len(r.trials) for r in reports] == [9, 3, 1]
    assert reports[1].trials == reports[0].promoted and reports[2].trials == reports[1].promoted
    winner = reports[-1].trials[0]
    details = store.details[winner]
    assert sorted(details) == [30, 90, 180]
    # The winner's charged cost kept growing across rungs: resumed from its checkpoint, never restarted.
    charged = [details[b]["charged_units"] for b in (30, 90, 180)]
    assert 30 <= charged[0] < 90 <= charged[1] < 180 <= charged[2] < 180 + 20
    assert details[180]["backward_passes"] > details[30]["backward_passes"]
    assert sorted(store.eliminated) == sorted(set(range(9)) - {winner})
    assert list(store.completed) == [winner]
    assert set(details[30]["val"]) == {"accuracy", "loss"} and details[30]["score"] == details[30]["val"]["accuracy"]


@contextlib.contextmanager
def only_new_objects_collected():
    """gc.collect() walks only the objects made from here on: the test process's heap (torch, Ray, Optuna,
    Hypothesis) is frozen, so counting the live trials after each result costs milliseconds, not seconds."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def test_with_keep_bytes_0_only_one_trial_is_held_in_memory_at_a_time(tmp_path):
    alive = weakref.WeakSet()
    counts = []

    def on_result(rung, index, score, resumed):
        gc.collect()
        counts.append(len(alive))

    with only_new_objects_collected():
        engine(FolderStore(tmp_path), alive=alive, on_result=on_result, keep_bytes=0).run()
    assert max(counts) <= 1


def test_kept_trials_fit_the_memory_given_and_stopped_ones_are_dropped(tmp_path):
    one = trial_bytes(factory("eve")(0), factory("eve")(0).to_bytes())
    alive = weakref.WeakSet()
    counts = []

    def on_result(rung, index, score, resumed):
        gc.collect()
        counts.append((rung, len(alive)))

    with only_new_objects_collected():
        engine(FolderStore(tmp_path), alive=alive, on_result=on_result, keep_bytes=3 * one + one // 2).run()
    assert max(count for _, count in counts) == 3  # on_result comes after a trial was kept (or dropped)
    # After rung 1's decision only its 3 promoted trials can be alive, kept or training.
    assert max(count for rung, count in counts if rung > 0) <= 3


@pytest.mark.parametrize("optimizer", ["eve", "adam"])
def test_trials_kept_in_memory_continue_exactly_as_trials_read_back_from_checkpoints(tmp_path, optimizer):
    made_kept, made_read = [], []
    kept = engine(FolderStore(tmp_path / "kept"), optimizer, made=made_kept).run()
    read = engine(FolderStore(tmp_path / "read"), optimizer, made=made_read, keep_bytes=0).run()
    assert [r.scores for r in kept] == [r.scores for r in read]
    assert [r.promoted for r in kept] == [r.promoted for r in read]
    assert sorted(made_kept) == list(range(9))  # each trial built once, never rebuilt from its checkpoint
    assert len(made_read) == 9 + 3 + 1


def test_keep_bytes_must_be_a_whole_number_of_bytes(tmp_path):
    with pytest.raises(ValueError, match=r"Invalid keep_bytes: -1 \(expected an int >= 0\)"):
        engine(FolderStore(tmp_path), keep_bytes=-1)


def test_the_engine_takes_its_options_object_or_their_keywords_not_both(tmp_path):
    options = HalvingOptions(rungs=RUNGS, keep_bytes=0)
    by_object = SynchronousSuccessiveHalving(9, factory("adam"), FolderStore(tmp_path), options)
    assert by_object.options == options and by_object.keep_bytes == 0 and by_object.rungs == RUNGS
    with pytest.raises(InputError, match=r"^Invalid options: given with cohort_size= \(SynchronousSuccessiveHalving\(\) "
                                         r"takes a HalvingOptions or its fields as keywords, not both\)$"):
        SynchronousSuccessiveHalving(9, factory("adam"), FolderStore(tmp_path), options, cohort_size=3)


def test_kept_trials_know_which_checkpoints_are_not_written_yet():
    from eve_search.engine.trial import KeptTrials

    kept = KeptTrials(100)
    assert kept.keep(0, "a", 10, unsaved=True) and kept.keep(1, "b", 10) and kept.keep(2, "c", 10, unsaved=True)
    assert kept.unsaved() == [0, 2] and kept.is_unsaved(0) and not kept.is_unsaved(1)
    kept.mark_saved(0)
    assert kept.unsaved() == [2]
    assert kept.pop(2) == "c" and kept.unsaved() == []  # a trial no longer kept is not unsaved either
    assert not kept.keep(3, "d", 200, unsaved=True) and kept.unsaved() == []  # not kept: nothing to save
    assert kept.keep(1, "b2", 10, unsaved=True) and kept.unsaved() == [1]  # kept again, now unsaved


def test_a_killed_sweep_resumes_to_exactly_the_uninterrupted_result(tmp_path):
    uninterrupted = engine(FolderStore(tmp_path / "a")).run()
    store = FolderStore(tmp_path / "b")

    class Killed(Exception):
        pass

    seen = []

    def kill_mid_rung(rung, index, score, resumed):
        seen.append(rung)
        if seen.count(1) == 2:
            raise Killed

    with pytest.raises(Killed):
        engine(store, on_result=kill_mid_rung).run()
    made = []
    resumed = engine(store, made=made).run()
    assert [r.scores for r in resumed] == [r.scores for r in uninterrupted]
    assert [r.promoted for r in resumed] == [r.promoted for r in uninterrupted]
    assert len(made) == 1 + 1  # rung 2's last trial, then rung 3's; everything else came from the store


@pytest.mark.parametrize("damage", ["delete", "truncate", "foreign"])
def test_a_lost_or_damaged_checkpoint_is_replayed_into_the_same_state(tmp_path, damage):
    uninterrupted = engine(FolderStore(tmp_path / "a")).run()

    class Killed(Exception):
        pass

    def kill_after_rung_1(rung, index, score, resumed):
        if rung == 1:
            raise Killed

    store = FolderStore(tmp_path / "b")
    with pytest.raises(Killed):
        engine(store, on_result=kill_after_rung_1).run()
    for path in (tmp_path / "b").glob("trial-*.pt"):
        if damage == "delete":
            path.unlink()
        elif damage == "truncate":
            path.write_bytes(path.read_bytes()[:100])
        else:  # another sweep's checkpoint of the same configuration
            other = Trial("tiny", CONFIGS[0], "eve", seed=0, index=int(path.stem[-4:]), backward_ratio=2.0,
                          owner="another-sweep")
            other.train_to(30)
            other.save(path)
    resumed = engine(store).run()
    assert [r.scores for r in resumed] == [r.scores for r in uninterrupted]


class DeferringStore(FolderStore):
    """A FolderStore with ``save_checkpoint``: the engine then writes kept trials' checkpoints only
    once their rung promotes them."""

    def __init__(self, folder, drop_checkpoints=False):
        super().__init__(folder)
        self.saved, self.drop_checkpoints = [], drop_checkpoints

    def record(self, index, budget, details, checkpoint):
        if checkpoint is not None:
            self.save_checkpoint(index, checkpoint)
        self.details.setdefault(index, {})[budget] = details

    def save_checkpoint(self, index, checkpoint):
        self.saved.append(index)
        if not self.drop_checkpoints:  # dropped: as if the process was killed before writing them
            save_atomically(checkpoint, self.checkpoint_path(index))


@pytest.mark.parametrize("optimizer", ["eve", "adam"])
def test_only_promoted_trials_are_checkpointed_and_results_equal_checkpointing_every_trial(tmp_path, optimizer):
    every = engine(FolderStore(tmp_path / "every"), optimizer).run()
    store = DeferringStore(tmp_path / "promoted")
    promoted = engine(store, optimizer).run()
    assert [r.scores for r in promoted] == [r.scores for r in every]
    assert [r.promoted for r in promoted] == [r.promoted for r in every]
    # 3 promoted after rung 1 and 1 after rung 2; no trial the rung stopped, nothing at the last rung.
    assert store.saved == [*every[0].promoted, *every[1].promoted]
    assert sorted(p.name for p in (tmp_path / "promoted").glob("trial-*.pt")) == \
        [f"trial-{every[2].trials[0]:04d}.pt"]


def test_checkpoints_are_serialized_on_one_thread_and_the_threads_are_given_back(tmp_path, monkeypatch):
    threads = []
    to_bytes = Trial.to_bytes
    monkeypatch.setattr(Trial, "to_bytes", lambda self: threads.append(torch.get_num_threads()) or to_bytes(self))
    original = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        reports = engine(DeferringStore(tmp_path / "deferred")).run()
        assert threads and set(threads) == {1} and torch.get_num_threads() == 2
        threads.clear()
        engine(FolderStore(tmp_path / "every"), keep_bytes=0).run()
        assert len(threads) == sum(len(r.trials) for r in reports) and set(threads) == {1}
        assert torch.get_num_threads() == 2
        monkeypatch.setattr(Trial, "to_bytes", lambda self: 1 / 0)
        with pytest.raises(ZeroDivisionError):
            engine(FolderStore(tmp_path / "failing"), keep_bytes=0).run()
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(original)


def test_trials_that_do_not_fit_in_memory_are_checkpointed_with_their_result(tmp_path):
    store = DeferringStore(tmp_path)
    reports = engine(store, keep_bytes=0).run()
    assert sorted(store.saved) == sorted([*reports[0].trials, *reports[1].trials, *reports[2].trials])


def test_an_interrupted_run_first_writes_the_checkpoints_of_its_recorded_trials(tmp_path):
    uninterrupted = engine(FolderStore(tmp_path / "a")).run()

    class Interrupted(Exception):
        pass

    done = []

    def interrupt_mid_rung_0(rung, index, score, resumed):
        done.append(index)
        if len(done) == 5:
            raise Interrupted

    store = DeferringStore(tmp_path / "b")
    with pytest.raises(Interrupted):
        engine(store, on_result=interrupt_mid_rung_0).run()
    assert store.saved == done  # every trial with a result, none after
    made = []
    resumed = engine(store, made=made).run()
    assert [r.scores for r in resumed] == [r.scores for r in uninterrupted]
    assert len(made) == len(set(made))  # each trial built (or rebuilt from its checkpoint) once


@pytest.mark.parametrize("optimizer", ["eve", "adam"])
def test_results_recorded_without_their_checkpoints_are_replayed_exactly(tmp_path, optimizer):
    """SIGKILL after a rung's results were stored but before its promoted checkpoints were written: the
    resumed engine replays those trials through every rung budget into the same state."""
    uninterrupted = engine(FolderStore(tmp_path / "a"), optimizer).run()

    class Killed(Exception):
        pass

    def kill_at_rung_2(rung, index, score, resumed):
        if rung == 2:
            raise Killed

    killed = DeferringStore(tmp_path / "b", drop_checkpoints=True)
    with pytest.raises(Killed):
        engine(killed, optimizer, on_result=kill_at_rung_2).run()
    assert not list((tmp_path / "b").glob("trial-*.pt"))  # no checkpoint reached the disk
    resumed_store = DeferringStore(tmp_path / "b")
    resumed_store.details = killed.details
    resumed = engine(resumed_store, optimizer).run()
    assert [r.scores for r in resumed] == [r.scores for r in uninterrupted]
    assert [r.promoted for r in resumed] == [r.promoted for r in uninterrupted]


def test_the_winner_is_evaluated_at_its_last_rung_even_when_its_checkpoint_is_older(tmp_path):
    """evaluate_trial(index, split, budget) replays a trial whose checkpoint is of an earlier rung."""
    store = DeferringStore(tmp_path)
    sha = engine(store)
    reports = sha.run()
    winner = reports[-1].trials[0]
    in_memory = sha.evaluate_trial(winner, "test", RUNGS[-1])  # the trial kept after the last rung
    fresh = engine(store)  # another process: only the checkpoint written after rung 2 (budget 90)
    assert fresh.evaluate_trial(winner, "test", RUNGS[-1]) == in_memory
    assert fresh.evaluate_trial(winner, "test") != in_memory  # without a budget: as of its checkpoint


class InlineWorkers:
    """``--jobs`` workers run in this process: each worker is the real worker code with a memory of
    its own, so the engine's routing (a trial's next rung to the worker that keeps it) is seen whole."""

    def __init__(self, jobs, keep_bytes):
        from concurrent.futures import Future

        from eve_search.engine import _workers
        from eve_search.engine.trial import KeptTrials
        from eve_search.tasks import get_task

        self.jobs, self._workers, self._future = jobs, _workers, Future
        task = get_task("tiny")
        self.memories = [{"task": task, "data": task.data(None), "kept": KeptTrials(keep_bytes // jobs),
                          "pending": [], "beside": None} for _ in range(jobs)]
        self.log = []  # (what, worker, index, forget)
        self._keys = iter(range(10**9))

    def _run(self, worker, function, argument):
        self._workers._STATE.clear()
        self._workers._STATE.update(self.memories[worker])
        key = next(self._keys)
        [(answered, ok, value)] = function(key, argument)
        assert answered == key and ok, value
        future = self._future()
        future.set_result(value)
        return future

    def train_all(self, work):
        return [self.train(job, worker) for job, worker in work]

    def train(self, job, worker=0):
        self.log.append(("train", worker, job.index, job.forget))
        return self._run(worker, self._workers._train, job)

    def save(self, worker, index):
        self.log.append(("save", worker, index, ()))
        return self._run(worker, self._workers._save, index)


def worker_engine(store, workers, optimizer="adam"):
    from eve_search.engine._workers import TrialJob

    def make_job(index, rung):
        return TrialJob(index=index, config=CONFIGS[index], optimizer=optimizer, seed=0, cost_mode="calibrated",
                        backward_ratio=2.0, owner="", checkpoint=str(store.checkpoint_path(index)),
                        budgets=RUNGS[:rung + 1])

    return SynchronousSuccessiveHalving(9, factory(optimizer), store, rungs=RUNGS,
                                        on_workers=OnWorkers(workers, make_job))


def test_workers_keep_their_trials_and_continue_them_with_the_engines_exact_results(tmp_path, monkeypatch):
    loads = []
    load = Trial.load
    monkeypatch.setattr(Trial, "load", lambda self, path: (loads.append(self.index), load(self, path))[1])
    reference = engine(DeferringStore(tmp_path / "in-process"), "adam").run()
    store = DeferringStore(tmp_path / "workers")
    workers = InlineWorkers(2, keep_bytes=2**30)
    reports = worker_engine(store, workers).run()
    assert [r.scores for r in reports] == [r.scores for r in reference]
    assert [r.promoted for r in reports] == [r.promoted for r in reference]
    trained = [(worker, index) for what, worker, index, _ in workers.log if what == "train"]
    assert sorted(worker for worker, _ in trained[:9]) == [0] * 5 + [1] * 4  # rung 0 over both workers
    # A promoted trial's checkpoint is made by the worker that keeps it (for a resume) ...
    saves = [(worker, index) for what, worker, index, _ in workers.log if what == "save"]
    assert sorted(index for _, index in saves) == sorted(reports[0].promoted + reports[1].promoted)
    holder = dict((index, worker) for worker, index in trained[:9])
    assert all(holder[index] == worker for worker, index in saves[:3])
    # ... and its next rung goes there, where it continues in memory; a trial moved to balance the
    # workers (at most one job ahead) is read back from that checkpoint, and the other worker drops it.
    moved = [index for worker, index in trained[9:12] if holder[index] != worker]
    assert len(moved) <= 1 and sorted(loads) == sorted(moved)
    forgotten = [index for *_, forget in workers.log for index in forget]
    stopped = set(range(9)) - {reports[-1].trials[0]}
    assert forgotten and set(forgotten) <= stopped | set(moved)
    assert [p.name for p in store.folder.iterdir()] == [f"trial-{reports[-1].trials[0]:04d}.pt"]


def test_workers_without_room_send_every_checkpoint_back_with_the_same_results(tmp_path):
    kept = worker_engine(DeferringStore(tmp_path / "kept"), InlineWorkers(2, keep_bytes=2**30)).run()
    workers = InlineWorkers(2, keep_bytes=0)
    store = DeferringStore(tmp_path / "sent")
    sent = worker_engine(store, workers).run()
    assert [r.scores for r in sent] == [r.scores for r in kept]
    assert not any(what == "save" for what, *_ in workers.log)
    assert all(not memory["kept"] for memory in workers.memories)


def test_a_resumed_engine_with_workers_tests_the_winner_at_its_last_rung_not_from_an_older_checkpoint(tmp_path):
    reference = engine(DeferringStore(tmp_path / "in-process"), "adam")
    winner = reference.run()[-1].trials[0]
    store = DeferringStore(tmp_path / "workers")
    worker_engine(store, InlineWorkers(2, keep_bytes=2**30)).run()
    # The winner's file holds its state at rung 90 (its last promotion); its rung-180 state stayed with
    # a worker that is gone. A resumed engine trains nothing, and must not test the rung-90 model.
    workers = InlineWorkers(2, keep_bytes=2**30)
    resumed = worker_engine(store, workers)
    resumed.run()
    assert not any(what == "train" for what, *_ in workers.log)
    expected = reference.evaluate_trial(winner, "test", 180)
    assert resumed.evaluate_trial(winner, "test", 180) == expected
    assert [what for what, *_ in workers.log] == ["train", "save"]  # replayed by a worker, then asked for


def cohort_engine(store, workers=None, **kwargs):
    """Nine configurations in three cohorts of three."""
    if workers is None:
        return engine(store, "adam", cohort_size=3, **kwargs)
    run = worker_engine(store, workers)
    return SynchronousSuccessiveHalving(9, factory("adam"), store, rungs=RUNGS,
                                        on_workers=OnWorkers(workers, run.make_job), cohort_size=3, **kwargs)


def decided(reports):
    return sorted((r.cohort, r.budget, tuple(r.promoted), tuple(sorted(r.scores.items()))) for r in reports)


def test_a_stream_of_cohorts_decides_each_cohort_alone_and_alike_on_any_number_of_workers(tmp_path):
    alone = []
    for cohort in range(3):  # each cohort as its own synchronous sweep
        members = list(range(3 * cohort, 3 * cohort + 3))
        sweep = SynchronousSuccessiveHalving(3, lambda i, m=members: factory("adam")(m[i]),
                                             FolderStore(tmp_path / f"alone-{cohort}"), rungs=RUNGS)
        (tmp_path / f"alone-{cohort}").mkdir()
        for r in sweep.run():
            alone.append((cohort, r.budget, tuple(members[i] for i in r.promoted),
                          tuple(sorted((members[i], s) for i, s in r.scores.items()))))
    (tmp_path / "one").mkdir()
    one = cohort_engine(FolderStore(tmp_path / "one"))
    assert decided(one.run()) == sorted(alone)
    for jobs in (1, 2, 3):
        (tmp_path / f"jobs-{jobs}").mkdir()
        many = cohort_engine(DeferringStore(tmp_path / f"jobs-{jobs}"), InlineWorkers(jobs, keep_bytes=2**30))
        assert decided(many.run()) == sorted(alone)
        assert many.winner() == one.winner()


def test_a_stream_of_cohorts_interrupted_anywhere_resumes_to_the_same_decisions(tmp_path):
    (tmp_path / "whole").mkdir()
    whole = decided(cohort_engine(FolderStore(tmp_path / "whole")).run())
    for stop in (1, 7, 12):
        folder = tmp_path / f"stop-{stop}"
        folder.mkdir()
        store = FolderStore(folder)
        seen = []

        def on_result(rung, index, score, resumed, seen=seen, stop=stop):
            seen.append(index)
            if len(seen) == stop:
                raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            cohort_engine(store, on_result=on_result).run()
        assert decided(cohort_engine(store).run()) == whole


class GatedWorkers(InlineWorkers):
    """Workers whose jobs end one at a time when the engine waits, in the order they were handed out. A
    checkpoint asked of a busy worker comes after its current job, as a real worker's does.
    A worker is busy from the job it is handed until the engine has seen that job end."""

    def __init__(self, jobs, keep_bytes):
        super().__init__(jobs, keep_bytes)
        self.busy, self.jobs_of, self.after = set(), {}, {}

    def train(self, job, worker=0):
        assert worker not in self.busy, f"a job was queued behind worker {worker}'s current one"
        self.busy.add(worker)
        future = self._future()
        self.jobs_of[future] = (worker, super().train(job, worker).result())
        return future

    def save(self, worker, index):
        answered = super().save(worker, index)
        if worker not in self.busy:
            return answered
        future = self._future()
        self.after.setdefault(worker, []).append((future, answered.result()))
        return future

    def wait(self, futures, return_when):
        done = {f for f in futures if f.done()}
        if not done:
            first = next(f for f in self.jobs_of if f in futures)
            worker, value = self.jobs_of[first]
            first.set_result(value)
            for saved, checkpoint in self.after.pop(worker, []):
                saved.set_result(checkpoint)
            done = {first}
        for future in done:
            self.busy.discard(self.jobs_of.pop(future, (None,))[0])
        return done, set(futures) - done


def test_an_idle_worker_takes_other_work_while_a_busy_one_keeps_the_promoted_trial(tmp_path, monkeypatch):
    from eve_search.engine import sha

    (tmp_path / "one").mkdir()
    one = cohort_engine(FolderStore(tmp_path / "one"))
    expected = decided(one.run())
    workers = GatedWorkers(3, keep_bytes=2**30)
    monkeypatch.setattr(sha, "wait", workers.wait)
    (tmp_path / "gated").mkdir()
    gated = cohort_engine(DeferringStore(tmp_path / "gated"), workers)
    assert decided(gated.run()) == expected
    assert gated.winner() == one.winner()
    assert {worker for what, worker, *_ in workers.log if what == "train"} == {0, 1, 2}
