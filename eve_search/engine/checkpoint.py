"""The one checkpoint format: a dict of tensors and plain values, written atomically, read safely.

Writing goes through :func:`save_atomically` (a killed process leaves the old file or the new one,
never half of one). Reading goes through :func:`load_state`, which uses
``torch.load(..., weights_only=True)``: PyTorch's restricted unpickler accepts tensors, numbers,
strings and containers and refuses anything that would import or call code, so a crafted file in
a work directory cannot run code. A file that is corrupt, truncated, unsafe or not a checkpoint
gives :class:`CheckpointError`, one line that names the file.

Example:
    >>> import io, torch
    >>> buffer = io.BytesIO()
    >>> torch.save({"format": "eve-search-trial", "weights": torch.ones(2)}, buffer)
    >>> load_state(buffer.getvalue())["weights"]
    tensor([1., 1.])
    >>> load_state(b"not a checkpoint")
    Traceback (most recent call last):
    ...
    eve_search.engine.checkpoint.CheckpointError: checkpoint <bytes>: unreadable (not a PyTorch checkpoint, or corrupt or truncated)
"""

from __future__ import annotations

import io
import os
import pickle
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import torch

__all__ = ["FORMAT", "CheckpointError", "load_state", "remove_checkpoint", "save_atomically", "state_bytes"]

FORMAT = "eve-search-trial/1"


class CheckpointError(ValueError):
    """A checkpoint that cannot be used: unreadable, unsafe, or belonging to another trial or sweep."""


def state_bytes(state: dict[str, Any]) -> bytes:
    """``state`` serialized in the checkpoint format (``torch.save`` into memory).

    Args:
        state: tensors and plain values (what ``Trial.state_dict()`` returns).

    Returns:
        The bytes :func:`save_atomically` writes and :func:`load_state` reads.

    Example:
        >>> import torch
        >>> load_state(state_bytes({"step": 3, "weights": torch.zeros(2)}))["step"]
        3
    """
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


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
    path = Path(path)
    content = state if isinstance(state, bytes) else state_bytes(state)
    if path.is_dir():  # os.replace would fail only after the whole file is written
        raise CheckpointError(f"checkpoint {path}: is a directory, not a checkpoint file ({_MOVE_AWAY})")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    except OSError as error:
        raise _unwritable(path, error) from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(content)
        os.replace(tmp, path)
    except BaseException as error:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(error, OSError):
            raise _unwritable(path, error) from None
        raise


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
    """Read a checkpoint from a path or bytes without executing code (``weights_only=True``).

    Args:
        source: the checkpoint file, or its bytes.

    Returns:
        The saved dict, its tensors on the CPU. Raises CheckpointError (one line naming the file) when
        it is missing, unreadable, unsafe or not a dict.

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
    try:
        if isinstance(source, bytes):
            state = torch.load(io.BytesIO(source), map_location="cpu", weights_only=True)
        else:
            state = torch.load(source, map_location="cpu", weights_only=True)
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
        raise CheckpointError(f"checkpoint {name}: unreadable (not a PyTorch checkpoint, or corrupt or "
                              f"truncated){advice}") from None
    except (RuntimeError, EOFError, OSError, zipfile.BadZipFile, ValueError, KeyError, AttributeError, TypeError):
        raise CheckpointError(f"checkpoint {name}: unreadable (not a PyTorch checkpoint, or corrupt or "
                              f"truncated){advice}") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"checkpoint {name}: holds a {type(state).__name__}, not a trial state")
    return state
