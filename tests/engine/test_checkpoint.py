"""The checkpoint file format (eve_search.engine.checkpoint): every value a trial state holds comes back
exactly, tensors as fresh copies; checkpoints of 0.2.0 (torch.save zip files) are still read; bytes that
are damaged, tampered with or crafted give one CheckpointError line, never another exception, never a
huge allocation, never a hang."""

from __future__ import annotations

import io
import json
import math
import os
import sys
import threading

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eve_search.engine.checkpoint import SIGNATURE, CheckpointError, load_state, save_atomically, state_bytes
from eve_search.engine.trial import Trial


def same(a, b):
    """Equal in value, type, dtype, shape and bits (NaN equals NaN, -0.0 differs from 0.0)."""
    if isinstance(a, torch.Tensor):
        return (isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape
                and torch.equal(a.contiguous().reshape(-1).view(torch.uint8) if a.numel() else a,
                                b.contiguous().reshape(-1).view(torch.uint8) if b.numel() else b))
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float):
        return math.copysign(1.0, a) == math.copysign(1.0, b) and (a == b or (a != a and b != b))
    return a == b


def every_kind():
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    return {
        "format": "eve-search-trial/1",
        "plain": [None, True, False, 0, -7, 2**80, 0.1, -0.0, float("nan"), float("inf"), -float("inf"), "é ✓ \"q\""],
        "tuple": (1, (2.5, "x"), []),
        "int keys": {0: {"step": torch.tensor(3.0)}, 1: {}},
        "odd keys": {None: 1, True: 2, 2.5: 3, (1, "a"): 4},
        "tensors": {str(dtype): torch.zeros(3, dtype=dtype) + 1 for dtype in (
            torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128,
            torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.bool)},
        "scalar": torch.tensor(-2.5, dtype=torch.float64),
        "empty": torch.zeros(0, 5),
        "view": base[1:3, ::2],  # not contiguous, of a bigger base
        "transposed": base.t(),
        "generator": torch.Generator().manual_seed(5).get_state(),
    }


def test_every_kind_of_value_comes_back_exactly():
    state = every_kind()
    loaded = load_state(state_bytes(state))
    assert same(loaded, state)
    assert same(loaded["view"], torch.tensor([[6.0, 8.0, 10.0], [12.0, 14.0, 16.0]]))


def test_a_state_whose_only_tensors_are_empty_comes_back():
    state = {"empty": torch.zeros(0, 5), "none": torch.zeros(3, 0, 2**40, dtype=torch.int64)}
    assert same(load_state(state_bytes(state)), state)


def test_a_view_saves_its_own_elements_only_and_loaded_tensors_are_fresh_writable_copies():
    big = torch.zeros(1_000_000)
    content = state_bytes({"head": big[:4]})
    assert len(content) < 1_000
    loaded = load_state(content)
    again = load_state(content)
    loaded["head"].add_(1)
    assert torch.equal(again["head"], torch.zeros(4)) and torch.equal(load_state(content)["head"], torch.zeros(4))


def test_the_layout_is_the_documented_one():
    content = state_bytes({"w": torch.ones(3)})
    assert content[:16] == SIGNATURE
    length = int.from_bytes(content[16:24], "little")
    header = json.loads(content[24:24 + length])
    assert header == {"state": {"D": {"w": {"T": 0}}}, "tensors": [["float32", [3], 0]], "size": 64,
                      "byteorder": sys.byteorder}
    data = 24 + length + (-(24 + length) % 64)
    assert content[data:data + 12] == torch.ones(3).numpy().tobytes() and len(content) == data + 64


@pytest.mark.parametrize("value, where", [
    (object(), "state['x'] is a object"),
    ({1, 2}, "state['x'] is a set"),
    ([b"raw"], "state['x'][0] is a bytes"),
    ({torch.ones(1): 1}, "state['x'] has a tensor as a key"),
    (torch.ones(2).to_sparse(), "state['x'] is a torch.sparse_coo tensor"),
])
def test_what_a_checkpoint_cannot_hold_is_refused_by_name(value, where):
    with pytest.raises(TypeError, match=f"cannot be saved in a checkpoint: {where.replace('[', '.').replace(']', '.')}"):
        state_bytes({"x": value})


def make(**options):
    return Trial("adult", {"lr": 3e-3, "width": 16, "depth": 1}, options.pop("optimizer", "eve"), seed=0, index=2,
                 backward_ratio=2.0, **options)


@pytest.mark.parametrize("optimizer", ["eve", "adam"])
def test_a_trial_saved_by_0_2_0_with_torch_save_resumes_exactly(tmp_path, optimizer):
    trial = make(optimizer=optimizer)
    trial.train_to(40)
    old = tmp_path / "old.pt"
    torch.save(trial.state_dict(), old)  # what eve-search 0.2.0 wrote
    assert old.read_bytes()[:4] == b"PK\x03\x04"
    resumed = make(optimizer=optimizer, data=trial.data)
    resumed.load(old)
    resumed.train_to(120)
    trial.train_to(120)
    assert resumed.evaluate() == trial.evaluate()
    assert same(resumed.state_dict()["model"], trial.state_dict()["model"])
    assert same(resumed.state_dict()["optimizer"], trial.state_dict()["optimizer"])


def valid_checkpoint() -> bytes:
    trial = make()
    trial.train_to(20)
    return trial.to_bytes()


VALID = valid_checkpoint()


def loads_or_refuses(content: bytes) -> None:
    """The one thing any bytes may do: load as a dict, or raise CheckpointError with one line."""
    try:
        state = load_state(content)
    except CheckpointError as error:
        assert "\n" not in str(error) and str(error).startswith("checkpoint <bytes>: ")
    else:
        assert isinstance(state, dict)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_damaged_checkpoints_load_or_give_one_line(data):
    content = bytearray(VALID)
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(content) - 1))
        content[position] = data.draw(st.integers(0, 255))
    cut = data.draw(st.one_of(st.none(), st.integers(0, len(content))))
    loads_or_refuses(bytes(content[:cut] if cut is not None else content))


def crafted(header: object, data: bytes = b"", length: int | None = None) -> bytes:
    if isinstance(header, dict):
        header = {**header, "byteorder": header.get("byteorder", sys.byteorder)}
    raw = json.dumps(header).encode()
    head = SIGNATURE + (len(raw) if length is None else length).to_bytes(8, "little") + raw
    return head + bytes(-len(head) % 64) + data


@pytest.mark.parametrize("content", [
    crafted({"state": {"D": {"w": {"T": 0}}}, "tensors": [["float32", [10**12], 0]], "size": 64}, bytes(64)),
    crafted({"state": {"D": {"w": {"T": 0}}}, "tensors": [["float32", [0, 10**30], 0]], "size": 0}),
    crafted({"state": {"D": {"w": {"T": 0}}}, "tensors": [["float32", [0, 2**61, 2**61, 2**61], 0]], "size": 0}),
    crafted({"state": {"D": {"w": {"T": 0}}}, "tensors": [["float32", [2], -8]], "size": 64}, bytes(64)),
    crafted({"state": {"D": {"w": {"T": 0}}}, "tensors": [["float32", [-2], 0]], "size": 64}, bytes(64)),
    crafted({"state": {"D": {"w": {"T": 0}}}, "tensors": [["float32", [2.5], 0]], "size": 64}, bytes(64)),
    crafted({"state": {"D": {"w": {"T": 0}}}, "tensors": [["object", [2], 0]], "size": 64}, bytes(64)),
    crafted({"state": {"D": {"w": {"T": 1}}}, "tensors": [["float32", [2], 0]], "size": 64}, bytes(64)),
    crafted({"state": {"D": {"w": {"T": 0, "D": {}}}}, "tensors": [], "size": 0}),
    crafted({"state": {"Q": 1}, "tensors": [], "size": 0}),
    crafted({"state": {"K": [[[1], 2]]}, "tensors": [], "size": 0}),
    crafted({"state": {"D": {}}, "tensors": [], "size": 64}),  # the data it claims is not there
    crafted({"state": {"D": {}}, "tensors": [], "size": 0}, bytes(64)),  # more than it claims
    crafted({"state": {"D": {}}, "tensors": [], "size": 0}, length=2**63),
    SIGNATURE + (10**6).to_bytes(8, "little") + b"[" * 10**6,  # nested past any recursion limit
    crafted({"state": {"D": {}}, "tensors": [], "size": "0"}),
    crafted([1, 2]),
    SIGNATURE + (4).to_bytes(8, "little") + b"\xff\xfe\x00{",
    SIGNATURE[:10],
])
def test_crafted_headers_are_refused_before_anything_is_allocated(content):
    with pytest.raises(CheckpointError, match=r"^checkpoint <bytes>: unreadable \(not an eve-search checkpoint"):
        load_state(content)


def test_a_checkpoint_from_a_machine_of_the_other_byte_order_is_refused_in_one_line(tmp_path):
    other = "big" if sys.byteorder == "little" else "little"
    path = tmp_path / "trial-0000.pt"
    path.write_bytes(crafted({"state": {"D": {"w": {"T": 0}}}, "tensors": [["float32", [2], 0]], "size": 64,
                              "byteorder": other}, bytes(64)))
    with pytest.raises(CheckpointError, match=f"^checkpoint {path}: written on a machine of byte order '{other}', "
                                              f"not this one's '{sys.byteorder}'; delete it, then run again with "
                                              "--resume") as error:
        load_state(path)
    assert "\n" not in str(error.value)


def test_a_fifo_or_device_in_a_checkpoints_place_is_one_line_without_waiting(tmp_path):
    fifo = tmp_path / "trial-0000.pt"
    os.mkfifo(fifo)
    outcome = []
    reader = threading.Thread(target=lambda: outcome.append(_error(fifo)), daemon=True)
    reader.start()
    reader.join(10)
    assert outcome and "is not a regular file" in outcome[0] and str(fifo) in outcome[0], outcome
    assert "is not a regular file" in _error("/dev/zero")


def _error(path) -> str:
    try:
        load_state(path)
    except CheckpointError as error:
        return str(error)
    return "loaded"


def test_a_state_saved_atomically_reads_back_from_the_file(tmp_path):
    path = tmp_path / "a" / "trial.pt"
    save_atomically(every_kind(), path)
    assert same(load_state(path), every_kind())
    buffer = io.BytesIO(path.read_bytes())
    assert same(load_state(buffer.getvalue()), every_kind())
