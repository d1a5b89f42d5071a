"""The test processes' ``linecache.checkcache`` survives a collection that drops cache entries mid-call."""

from __future__ import annotations

import gc
import linecache
import random
import weakref

from tests import linecache_guard


def _generated_function_in_a_cycle(name: str) -> None:
    """Register source for a generated function the way SQLAlchemy 2.1 does, with a finalizer that drops the
    entry, and leave the function as cyclic garbage, so that only a later collection runs the finalizer."""
    source = "def generated():\n    return None\n"
    namespace: dict = {}
    exec(compile(source, name, "exec"), namespace)
    namespace["itself"] = namespace
    linecache.cache[name] = (len(source), None, source.splitlines(True), name)
    weakref.finalize(namespace["generated"], linecache.cache.pop, name, None)


def test_the_suite_runs_with_the_guarded_checkcache():
    assert linecache.checkcache is linecache_guard._checkcache


def test_entries_dropped_by_a_collection_during_checkcache_raise_nothing():
    linecache.getlines(linecache_guard.__file__)  # a real file's entry: checkcache stats it, which allocates
    thresholds = gc.get_threshold()
    rng = random.Random(0)
    try:
        for n in range(3000):
            gc.disable()
            _generated_function_in_a_cycle(f"<eve-search test generated {n}>")
            gc.set_threshold(rng.randint(1, 40))  # a collection lands somewhere inside the next call
            gc.enable()
            linecache.checkcache()
    finally:
        gc.set_threshold(*thresholds)
        gc.enable()
        gc.collect()
    assert not [name for name in linecache.cache if name.startswith("<eve-search test generated")]
