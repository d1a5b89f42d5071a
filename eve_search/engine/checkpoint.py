"""The one checkpoint format: a dict of tensors and plain values, written atomically, read safely.

A checkpoint is one file: a 16-byte signature (:data:`SIGNATURE`), the length of a JSON header, the
header, then every tensor's raw bytes, each starting on a 64-byte boundary. The header holds the
state's structure with its plain values (``None``, booleans, integers, floats including NaN and the
infinities, strings, lists, tuples, dicts with any of those as keys), per tensor its dtype, shape
and offset, and the byte order of the machine that wrote it (a file from a machine of the other
order is refused, in one line). Writing is one copy of each tensor (:func:`state_bytes`), reading
one copy back (:func:`load_state`): no pickling, no compression, no checksums, so it costs a
fraction of ``torch.save``/``torch.load`` (searches/README.md has the figures). Nothing in the format
can name code, so reading one never executes any. The header is checked before any tensor is made:
every dtype is a known one, every shape is whole and non-negative, every tensor lies inside the file
and the file ends where the header says it does. A changed byte inside a tensor's data is not
detected (``torch.load`` does not check its zip checksums either); the write is atomic, so a crash
leaves the old file or the new one.

Checkpoints of eve-search 0.2.0 and earlier (``torch.save`` zip files) are still read, through
``torch.load(..., weights_only=True)``: PyTorch's restricted unpickler accepts tensors, numbers,
strings and containers and refuses anything that would import or call code.

Writing goes through :func:`save_atomically` (a killed process leaves the old file or the new one,
never half of one). A file that is corrupt, truncated, unsafe or not a checkpoint gives
:class:`CheckpointError`, one line that names the file.

Example:
    >>> import torch
    >>> content = state_bytes({"format": "eve-search-trial/1", "weights": torch.ones(2), "step": (3, None)})
    >>> content[:16] == SIGNATURE
    True
    >>> load_state(content)
    {'format': 'eve-search-trial/1', 'weights': tensor([1., 1.]), 'step': (3, None)}
    >>> load_state(b"not a checkpoint")
    Traceback (most recent call last):
    ...
    eve_search.engine.checkpoint.CheckpointError: checkpoint <bytes>: unreadable (not an eve-search checkpoint, or corrupt or truncated)
"""

from __future__ import annotations

import io
import json
import math
import os
import pickle
import stat
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from eve_search._checks import InputError

__all__ = ["FORMAT", "SIGNATURE", "CheckpointError", "load_state", "remove_checkpoint", "save_atomically",
           "state_bytes"]

FORMAT = "eve-search-trial/1"  # what a trial state holds (see Trial.state_dict); the file layout is below
SIGNATURE = b"eve-search/ckpt1"  # the first 16 bytes of every checkpoint file
_ALIGN = 64  # every tensor's bytes start on a multiple of this, counted from the file's start
_LENGTH = 8  # bytes of the header's length (little-endian), after the signature
_ZIP = b"PK\x03\x04"  # a checkpoint of eve-search 0.2.0 and earlier (torch.save)
_DTYPES = {str(dtype).removeprefix("torch."): dtype for dtype in (
    torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128,
    torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.bool)}


class CheckpointError(InputError):
    """A checkpoint that cannot be used: unreadable, unsafe, or belonging to another trial or sweep."""


def state_bytes(state: dict[str, Any]) -> bytes:
    """``state`` serialized in the checkpoint format (see the module docstring).

    Args:
        state: tensors and plain values (what ``Trial.state_dict()`` returns): ``None``, booleans,
            integers, floats, strings, and lists, tuples and dicts of them; tensors are saved dense
            and on the CPU, each with its own elements only (a view does not bring its base along).

    Returns:
        The bytes :func:`save_atomically` writes and :func:`load_state` reads. A value of another
        type raises TypeError naming where it is.

    Example:
        >>> import torch
        >>> load_state(state_bytes({"step": 3, "weights": torch.zeros(2)}))["step"]
        3
        >>> state_bytes({"when": object()})  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        TypeError: cannot be saved in a checkpoint: state['when'] is a object ...
    """
    tensors: list[torch.Tensor] = []
    tree = _encode(state, tensors, "state")
    table, pieces, offset = [], [], 0
    for tensor in tensors:
        flat = tensor.detach().to("cpu").resolve_conj().resolve_neg().contiguous().reshape(-1)
        raw = flat.view(torch.uint8).numpy() if flat.numel() else np.empty(0, np.uint8)
        table.append([str(tensor.dtype).removeprefix("torch."), list(tensor.shape), offset])
        pieces.append(memoryview(raw))
        padding = -raw.nbytes % _ALIGN
        if padding:
            pieces.append(bytes(padding))
        offset += raw.nbytes + padding
    header = json.dumps({"state": tree, "tensors": table, "size": offset, "byteorder": sys.byteorder},
                        separators=(",", ":"), ensure_ascii=True).encode("ascii")
    head = SIGNATURE + len(header).to_bytes(_LENGTH, "little") + header
    return b"".join([head, bytes(-len(head) % _ALIGN), *pieces])


def _encode(value: Any, tensors: list[torch.Tensor], where: str) -> Any:
    """The header's image of ``value``: every JSON object is tagged (T: a tensor's number, D: a dict
    of string keys, K: a dict of other keys as [key, value] pairs, U: a tuple), lists and plain
    values are themselves."""
    if isinstance(value, torch.Tensor):
        if value.layout != torch.strided or value.dtype not in _DTYPES.values():
            raise TypeError(f"cannot be saved in a checkpoint: {where} is a {value.layout} tensor of {value.dtype} "
                            f"(expected a dense tensor of one of {', '.join(_DTYPES)})")
        tensors.append(value)
        return {"T": len(tensors) - 1}
    if value is None or isinstance(value, (bool, str)):
        return value
    if type(value) in (int, float):
        return value
    if isinstance(value, dict):
        if any(isinstance(key, torch.Tensor) for key in value):
            raise TypeError(f"cannot be saved in a checkpoint: {where} has a tensor as a key (expected None, a bool, "
                            "int, float, str or tuple as keys)")
        if all(type(key) is str for key in value):
            return {"D": {key: _encode(item, tensors, f"{where}[{key!r}]") for key, item in value.items()}}
        return {"K": [[_encode(key, tensors, f"a key of {where}"), _encode(item, tensors, f"{where}[{key!r}]")]
                      for key, item in value.items()]}
    if type(value) is tuple:
        return {"U": [_encode(item, tensors, f"{where}[{k}]") for k, item in enumerate(value)]}
    if type(value) is list:
        return [_encode(item, tensors, f"{where}[{k}]") for k, item in enumerate(value)]
    raise TypeError(f"cannot be saved in a checkpoint: {where} is a {type(value).__name__} (expected a tensor, "
                    "None, a bool, int, float or str, or a list, tuple or dict of them)")


class _Unreadable(Exception):
    """The bytes are not a well-formed checkpoint of this format."""


class _ForeignByteOrder(Exception):
    """The tensors' bytes were written on a machine of another byte order."""


class _NotAFile(Exception):
    """The path names a FIFO, a device or a socket, not a regular file."""


def _decode_state(content: bytes | memoryview) -> Any:
    """The state in ``content`` (a checkpoint of this format), every tensor a fresh copy of its bytes;
    _Unreadable when anything about it does not hold."""
    view = memoryview(content)
    start = len(SIGNATURE) + _LENGTH
    if len(view) < start or view[:len(SIGNATURE)] != SIGNATURE:
        raise _Unreadable
    length = int.from_bytes(view[len(SIGNATURE):start], "little")
    if length > len(view) - start:
        raise _Unreadable
    header = json.loads(bytes(view[start:start + length]))
    data = start + length + (-(start + length) % _ALIGN)
    if not isinstance(header, dict) or not isinstance(header.get("tensors"), list):
        raise _Unreadable
    size = header.get("size")
    if type(size) is not int or len(view) != data + size:
        raise _Unreadable
    if header.get("byteorder") != sys.byteorder:
        raise _ForeignByteOrder(header.get("byteorder"))
    tensors = [_tensor(view, entry, data, size) for entry in header["tensors"]]
    return _decode(header.get("state"), tensors)


def _tensor(view: memoryview, entry: Any, data: int, size: int) -> torch.Tensor:
    if not (isinstance(entry, list) and len(entry) == 3):
        raise _Unreadable
    name, shape, offset = entry
    dtype = _DTYPES.get(name) if isinstance(name, str) else None
    if (dtype is None or not isinstance(shape, list) or len(shape) > 64
            or not all(type(d) is int and 0 <= d < 2**62 for d in shape) or type(offset) is not int or offset < 0):
        raise _Unreadable
    count = math.prod(shape)
    nbytes = count * dtype.itemsize
    if offset + nbytes > size:  # nothing is allocated that the file does not hold
        raise _Unreadable
    if count == 0:
        return torch.empty(shape, dtype=dtype)  # (RuntimeError where its strides would overflow)
    out = torch.empty(count, dtype=dtype)
    out.view(torch.uint8).numpy()[:] = np.frombuffer(view, np.uint8, nbytes, data + offset)
    return out.reshape(shape)


def _decode(node: Any, tensors: list[torch.Tensor]) -> Any:
    if isinstance(node, list):
        return [_decode(item, tensors) for item in node]
    if not isinstance(node, dict):
        return node
    if len(node) != 1:
        raise _Unreadable
    (tag, body), = node.items()
    if tag == "T" and type(body) is int and 0 <= body < len(tensors):
        return tensors[body]
    if tag == "D" and isinstance(body, dict):
        return {key: _decode(item, tensors) for key, item in body.items()}
    if tag == "K" and isinstance(body, list) and all(isinstance(p, list) and len(p) == 2 for p in body):
        out = {}
        for key, item in body:
            key = _decode(key, tensors)
            if isinstance(key, (list, dict, torch.Tensor)):  # not a key a saved dict can have had
                raise _Unreadable
            out[key] = _decode(item, tensors)
        return out
    if tag == "U" and isinstance(body, list):
        return tuple(_decode(item, tensors) for item in body)
    raise _Unreadable


def save_atomically(state: dict[str, Any] | bytes, path: str | os.PathLike) -> None:
    """Write ``state`` (or already serialized bytes) to ``path`` so that a killed process leaves either
    the old file or the new one.

    No fsync: a checkpoint lost to an operating-system crash is recomputed exactly on resume (training
    is deterministic and the engine replays every rung budget in order).

    Args:
        state: tensors and plain values, or the bytes of :func:`state_bytes`.
        path: the checkpoint file; missing parent folders are created.

    Raises CheckpointError (one line naming the file) when it cannot be written.

    Example:
        >>> import tempfile, torch
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     path = Path(folder) / "trial" / "0.pt"
        ...     save_atomically({"weights": torch.ones(2)}, path)
        ...     print(load_state(path)["weights"], [p.name for p in path.parent.iterdir()])
        tensor([1., 1.]) ['0.pt']
    """
    from eve_search._atomic import write_atomically

    path = Path(path)
    content = state if isinstance(state, bytes) else state_bytes(state)
    if path.is_dir():  # os.replace would fail only after the whole file is written
        raise CheckpointError(f"checkpoint {path}: is a directory, not a checkpoint file ({_MOVE_AWAY})")
    try:
        write_atomically(path, content)
    except OSError as error:
        raise _unwritable(path, error) from None


_MOVE_AWAY = "move it away, then run again with --resume: the trial is retrained exactly"


def _unwritable(path: Path, error: OSError) -> CheckpointError:
    if isinstance(error, IsADirectoryError) or path.is_dir():
        return CheckpointError(f"checkpoint {path}: is a directory, not a checkpoint file ({_MOVE_AWAY})")
    if isinstance(error, (FileExistsError, NotADirectoryError)):
        return CheckpointError(f"checkpoint {path}: cannot be written: {path.parent} or a folder above it is a "
                               "file, not a folder (move it away, then run again with --resume)")
    reason = error.strerror or type(error).__name__
    hint = ("make the folder writable, or choose another --workdir" if isinstance(error, PermissionError)
            else "free the space or fix the folder, then run again with --resume")
    return CheckpointError(f"checkpoint {path}: cannot be written ({reason}; {hint})")


def remove_checkpoint(path: str | os.PathLike) -> None:
    """Delete a checkpoint that is no longer needed (missing: nothing to do); CheckpointError, one
    line, when it cannot be (a directory in its place, a read-only folder).

    Args:
        path: the checkpoint file.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     path = Path(folder) / "0.pt"
        ...     save_atomically(b"", path)
        ...     remove_checkpoint(path)
        ...     remove_checkpoint(path)  # already gone: nothing to do
        ...     path.exists()
        False
    """
    path = Path(path)
    try:
        path.unlink(missing_ok=True)
    except OSError as error:
        if isinstance(error, IsADirectoryError) or path.is_dir():
            raise CheckpointError(f"checkpoint {path}: is a directory, not a checkpoint file, so it cannot be "
                                  "deleted (move it away, then run again with --resume)") from None
        raise CheckpointError(f"checkpoint {path}: cannot be deleted ({error.strerror or type(error).__name__}; "
                              "make its folder writable, then run again with --resume)") from None


def load_state(source: str | os.PathLike | bytes) -> dict[str, Any]:
    """Read a checkpoint from a path or bytes without executing code (see the module docstring).

    Args:
        source: the checkpoint file, or its bytes.

    Returns:
        The saved dict, its tensors on the CPU, each one a fresh copy. Raises CheckpointError (one
        line naming the file) when it is missing, not a regular file, unreadable, unsafe or not a dict.

    Example:
        >>> load_state(state_bytes({"position": 5}))
        {'position': 5}
        >>> load_state(state_bytes([1, 2]))
        Traceback (most recent call last):
        ...
        eve_search.engine.checkpoint.CheckpointError: checkpoint <bytes>: holds a list, not a trial state
    """
    name = "<bytes>" if isinstance(source, bytes) else str(source)
    advice = "" if isinstance(source, bytes) else ("; delete it, then run again with --resume: the trial is "
                                                   "retrained exactly")
    unreadable = CheckpointError(f"checkpoint {name}: unreadable (not an eve-search checkpoint, or corrupt or "
                                 f"truncated){advice}")
    try:
        content = source if isinstance(source, bytes) else _read(source)
        if content[:len(SIGNATURE)] == SIGNATURE:
            state = _decode_state(content)
        elif content[:len(_ZIP)] == _ZIP:
            state = torch.load(io.BytesIO(content), map_location="cpu", weights_only=True)
        else:
            raise unreadable
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint {name}: no such file") from None
    except IsADirectoryError:
        raise CheckpointError(f"checkpoint {name}: is a directory, not a checkpoint file ({_MOVE_AWAY})") from None
    except PermissionError:
        raise CheckpointError(f"checkpoint {name}: cannot be read (permission denied; make it readable, or move "
                              "it away and run again with --resume: the trial is retrained exactly)") from None
    except pickle.UnpicklingError as error:
        if "GLOBAL" in str(error) or "global" in str(error):
            # The restricted unpickler refuses globals it does not allow: a file that could run code.
            raise CheckpointError(f"checkpoint {name}: refused: it holds objects other than tensors and plain "
                                  f"values, which are never loaded (they could run code){advice}") from None
        raise unreadable from None
    except _ForeignByteOrder as error:
        raise CheckpointError(f"checkpoint {name}: written on a machine of byte order {error.args[0]!r}, not this "
                              f"one's {sys.byteorder!r}{advice}") from None
    except _NotAFile:
        raise CheckpointError(f"checkpoint {name}: is not a regular file (a FIFO, device or socket; {_MOVE_AWAY})"
                              ) from None
    except CheckpointError:
        raise
    except (_Unreadable, RuntimeError, EOFError, OSError, zipfile.BadZipFile, ValueError, KeyError, AttributeError,
            TypeError, MemoryError):
        raise unreadable from None
    if not isinstance(state, dict):
        raise CheckpointError(f"checkpoint {name}: holds a {type(state).__name__}, not a trial state")
    return state


def _read(path: str | os.PathLike) -> bytes:
    """The whole of a checkpoint file; OSError for one that is not a regular file (a FIFO or a device
    would block or never end), opened without waiting for a FIFO's writer."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as handle:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(path)
        if not stat.S_ISREG(mode):
            raise _NotAFile
        return handle.read()
