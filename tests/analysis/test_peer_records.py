"""The peer comparison's record format: the writer's check and the reader agree, and no stored value,
however tampered with, makes the reader raise or return a run outside the format."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eve_search import InputError
from eve_search.analysis.peer_records import (REFEREE_FIELDS, RUN_FIELDS, check_run, read_referee_score,
                                              read_run)

RUN = {"kind": "peer-run", "status": "done", "task": "fashion-mnist", "space": "fashion-hp", "tool": "ray-asha",
       "seed": 3, "multiplier": 1.0, "charged_units": 1200.5, "wall_seconds": 41.0, "cpu_seconds": 80.0,
       "budget_units": 1200.0, "referee": {"test": 0.85, "val": 0.86}, "rank": 2, "rank_of": 64,
       "anytime": [{"fraction": 0.5, "wall": 20.0, "units": 600.0, "test": 0.8, "val": 0.81}],
       "problem": {"configs": 64, "max_units": 300}, "cpus": 2, "signature": "abc", "versions": {"ray": "2.60.0"},
       "pick_note": "", "events": [{"anything": "a writer may store more"}]}

VALUES = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=5),
                   st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.floats(), max_size=2))


def test_a_complete_run_reads_back_with_every_field():
    check_run(RUN)
    run = read_run(RUN)
    assert (run.task, run.space, run.tool, run.seed, run.test, run.val, run.rank, run.rank_of) == \
        ("fashion-mnist", "fashion-hp", "ray-asha", 3, 0.85, 0.86, 2, 64)
    assert (run.configs, run.max_units, run.cpus, run.versions) == (64, 300, 2, {"ray": "2.60.0"})
    assert [(p.fraction, p.units, p.test) for p in run.anytime] == [(0.5, 600.0, 0.8)]


def test_an_unjudged_run_is_in_the_format_and_an_unfinished_one_is_not_read():
    check_run({**RUN, "referee": None, "rank": None, "anytime": None})
    assert read_run({**RUN, "referee": None}).test is None
    check_run({**RUN, "status": "running"})  # a writer's record before it is done
    assert read_run({**RUN, "status": "running"}) is None


@pytest.mark.parametrize("field", [name for name, (_, required, _) in RUN_FIELDS.items() if required])
def test_each_required_field_is_named_when_missing(field):
    attrs = {k: v for k, v in RUN.items() if k != field}
    with pytest.raises(InputError, match=f"^peer run field '{field}' is missing; expected "):
        check_run(attrs)
    assert read_run(attrs) is None


@settings(max_examples=300, deadline=None)
@given(field=st.sampled_from(sorted(RUN_FIELDS)), value=VALUES)
def test_a_tampered_field_is_refused_by_the_writer_exactly_when_the_reader_leaves_it_out(field, value):
    attrs = {**RUN, field: value}
    try:
        check_run(attrs)
        accepted = True
    except InputError as error:
        assert str(error).startswith("peer run field ") and "\n" not in str(error)
        accepted = False
    run = read_run(attrs)
    assert (run is not None) == (accepted and attrs["status"] == "done")
    if run is not None:
        assert all(math.isfinite(x) for x in (run.multiplier, run.charged_units, run.wall_seconds))


@settings(max_examples=200, deadline=None)
@given(field=st.sampled_from(sorted(REFEREE_FIELDS)), value=VALUES)
def test_a_tampered_referee_score_is_left_out(field, value):
    attrs = {"config_key": "k", "referee_seed": 1, "val": 0.8, "test": 0.79, field: value}
    score = read_referee_score(attrs)
    if score is not None:
        assert isinstance(score.config_key, str) and score.config_key
        assert isinstance(score.referee_seed, int) and not isinstance(score.referee_seed, bool)
        assert math.isfinite(score.val) and math.isfinite(score.test)
