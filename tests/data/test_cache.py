"""The on-disk cache of preprocessed arrays, and UCI Adult loaded through it."""

import os
import signal

import numpy as np
import pytest
import torch

from eve_search.data import _adult, _cache
from eve_search.data._cache import cache_folder, cached_arrays


def test_the_cache_folder_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("EVE_SEARCH_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_folder() == tmp_path / "eve-search"
    monkeypatch.setenv("EVE_SEARCH_CACHE", str(tmp_path / "mine"))
    assert cache_folder() == tmp_path / "mine"


def test_a_second_call_reads_the_entry_instead_of_computing(tmp_path):
    calls = []

    def compute():
        calls.append(1)
        return {"x": np.arange(4.0), "names": np.array(["a", "b"])}

    first = cached_arrays("k", "1", compute, ("x", "names"), folder=tmp_path)
    second = cached_arrays("k", "1", compute, ("x", "names"), folder=tmp_path)
    assert calls == [1]
    assert np.array_equal(first["x"], second["x"]) and list(second["names"]) == ["a", "b"]
    assert [p.name for p in tmp_path.iterdir()] == ["k-1.npz"]  # no temporary file left behind


@pytest.mark.parametrize("damage", ["truncate", "garbage", "other_arrays", "pickled_object", "fifo", "directory",
                                    "declared_too_large"])
def test_a_damaged_or_unsafe_entry_is_recomputed_and_rewritten(tmp_path, damage, monkeypatch):
    compute = lambda: {"x": np.arange(5.0)}  # noqa: E731
    cached_arrays("k", "1", compute, ("x",), folder=tmp_path)
    path = tmp_path / "k-1.npz"
    if damage == "truncate":
        path.write_bytes(path.read_bytes()[:40])
    elif damage == "garbage":
        path.write_bytes(b"not an npz file")
    elif damage == "other_arrays":
        np.savez(path, y=np.zeros(2))
    elif damage == "pickled_object":  # an object array needs pickle to load, which is never allowed
        np.savez(path, x=np.array([{"a": 1}], dtype=object))
    elif damage == "fifo":  # never waited on (a read would block forever)
        path.unlink()
        os.mkfifo(path)
    elif damage == "directory":
        path.unlink()
        path.mkdir()
    else:  # an entry whose zip directory declares more than the limit (lowered here to 40 bytes)
        monkeypatch.setattr(_cache, "CACHE_MAX_BYTES", 40)

    class Hung(Exception):  # noqa: N818 (not an OSError, which the cache takes for a damaged entry)
        pass

    def hung(signum, frame):
        raise Hung("the cache read waited on its entry")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(10)
    try:
        arrays = cached_arrays("k", "1", compute, ("x",), folder=tmp_path)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert np.array_equal(arrays["x"], np.arange(5.0))
    if damage == "directory":  # nothing replaces a directory; the arrays are still right
        assert path.is_dir()
        return
    with np.load(path, allow_pickle=False) as entry:  # rewritten
        assert np.array_equal(entry["x"], np.arange(5.0))


def test_an_unwritable_cache_folder_gives_the_arrays_uncached(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the folder should be")
    assert np.array_equal(cached_arrays("k", "1", lambda: {"x": np.ones(2)}, ("x",), folder=blocker / "sub")["x"],
                          np.ones(2))


def test_adult_from_the_cache_equals_adult_parsed_from_csv(tmp_path, monkeypatch):
    monkeypatch.setenv("EVE_SEARCH_CACHE", str(tmp_path))
    directory = _adult.bundled_adult_dir().resolve()
    _adult._load.cache_clear()
    parsed = _adult._load(directory)
    assert len(list(tmp_path.glob("adult-v1-*.npz"))) == 1
    _adult._load.cache_clear()
    monkeypatch.setattr(_adult, "_parse", lambda *a, **k: pytest.fail("the second load parsed CSV again"))
    cached = _adult._load(directory)
    _adult._load.cache_clear()
    for name in ("x_train", "y_train", "x_val", "y_val", "x_test", "y_test"):
        a, b = getattr(parsed, name), getattr(cached, name)
        assert a.dtype == b.dtype and torch.equal(a, b), name
    assert cached.feature_names == parsed.feature_names and cached.n_features == 107


def test_corrupt_adult_files_are_refused_even_with_a_cache_entry(tmp_path, monkeypatch):
    monkeypatch.setenv("EVE_SEARCH_CACHE", str(tmp_path / "cache"))
    _adult._load(_adult.bundled_adult_dir().resolve())  # an entry exists
    (tmp_path / "adult.data").write_text("39, State-gov, 77516\n")
    (tmp_path / "adult.test").write_text("|1x3 Cross validator\n")
    with pytest.raises(_adult.AdultDataError, match="does not match the official file"):
        _adult.load_adult(tmp_path)
