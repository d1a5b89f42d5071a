"""MNIST-format (IDX) files: a checked reader and the MNIST / Fashion-MNIST splits built from them.

An IDX file is two zero bytes, a type byte, a dimension count ``d``, ``d`` big-endian uint32 sizes
and the data in C order, big-endian (LeCun's format, used by MNIST and Fashion-MNIST). The reader
checks every part of that header, that the data has exactly the announced size and, for the four
files of a dataset, that images and labels agree; a bad file raises :class:`IdxError`, one line
naming the file and what is wrong.

Which dataset a folder holds is decided by content checksums (sha256 of the decompressed files),
never by the folder's name: Fashion-MNIST uses MNIST's file names, so only the bytes tell them apart.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from eve_search._checks import InputError
from eve_search.data._files import DataFile, format_size
from eve_search.data._splits import Splits

__all__ = [
    "FASHION_MNIST_DIR",
    "IDX_FILES",
    "IDX_MAX_BYTES",
    "KNOWN_IDX_DATASETS",
    "IdxData",
    "IdxError",
    "identify_idx_dataset",
    "load_idx_splits",
    "read_idx",
    "read_idx_dataset",
]

# type byte -> (numpy dtype, big-endian); the format's six element types
_IDX_TYPES: Mapping[int, str] = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}

# The four files of an MNIST-format dataset, by role (each may also be gzipped: name + ".gz").
IDX_FILES: Mapping[str, str] = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}

# Where the Debian package ``dataset-fashion-mnist`` installs Fashion-MNIST.
FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")

# How a folder's dataset is recognised, per file role, by either of two fingerprints:
# * ``sha256``: of the decompressed file (any compression, or none). Fashion-MNIST's were computed
#   from the copy in Debian's dataset-fashion-mnist package (its test and training image sets).
# * ``gzip_md5``: of the .gz file exactly as the release distributes it (the checksums the releases
#   publish, also used by torchvision). MNIST is recognised this way, or by --dataset-name.
KNOWN_IDX_DATASETS: Mapping[str, Mapping[str, Mapping[str, str]]] = {
    "Fashion-MNIST": {
        "sha256": {
            "train_images": "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
            "train_labels": "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
            "test_images": "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
            "test_labels": "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34",
        },
        "gzip_md5": {
            "train_images": "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
            "train_labels": "25c81989df183df01b3e8a0aad5dffbe",
            "test_images": "bef4ecab320f06d8554ea6380940ec79",
            "test_labels": "bb300cfdad3c16e7a12a480ee83cd310",
        },
    },
    "MNIST": {
        "gzip_md5": {
            "train_images": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
            "train_labels": "d53e105ee54ea40749a09fcbcd1e9432",
            "test_images": "9fb629c4189551a2d022fa330f9573f3",
            "test_labels": "ec29112dd5afa0611ce80d1b7f02629c",
        },
    },
}


class IdxError(InputError):
    """A missing, unreadable, truncated or malformed IDX file (one line: the file and the problem)."""


# The most data one IDX header may announce: 1 GiB, about 23 times MNIST's largest file (47 MB of
# training images) and twice EMNIST's. A header announcing more is corrupt or hostile; it is refused
# before a byte of data is read, so a small file cannot make the reader reserve gigabytes.
IDX_MAX_BYTES = 1 << 30
IDX_MAX_DIMENSIONS = 32
"""The most dimensions an IDX header may announce (numpy arrays hold 64; MNIST-format files have 1 to 3)."""


def _read(path: Path, *, checksums: bool = False) -> tuple[np.ndarray, str | None, str | None]:
    """(array in the file's byte order, read-only; sha256 of the content; md5 of the .gz file), reading
    exactly what the header announces, streamed: never more than the header's size plus one byte is
    decompressed, and a plain file's size is checked against the header before its data is read."""
    content_digest = hashlib.sha256() if checksums else None
    raw_digest = hashlib.md5(usedforsecurity=False) if checksums else None
    with DataFile(path, IdxError, raw_digest=raw_digest, expected="an IDX file") as handle:
        magic = handle.read(4)
        if len(magic) < 4:
            raise handle.fail(f"truncated: {len(magic)} bytes, shorter than the 4-byte IDX magic number")
        zero, type_byte, ndim = magic[:2], magic[2], magic[3]
        if zero != b"\x00\x00" or type_byte not in _IDX_TYPES or ndim == 0:
            raise handle.fail(f"bad magic number 0x{magic.hex()} (expected 0x0000TTDD: two zero bytes, a type byte "
                              f"in {{{', '.join(f'0x{t:02x}' for t in _IDX_TYPES)}}}, a dimension count >= 1)")
        if ndim > IDX_MAX_DIMENSIONS:
            raise handle.fail(f"header announces {ndim} dimensions (expected at most {IDX_MAX_DIMENSIONS}: "
                              "MNIST-format files have 1 to 3; the header is corrupt)")
        header = 4 + 4 * ndim
        sizes = handle.read(4 * ndim)
        if len(sizes) < 4 * ndim:
            raise handle.fail(f"truncated header: {4 + len(sizes)} bytes, {header} needed for {ndim} dimension sizes")
        shape = tuple(int.from_bytes(sizes[4 * k: 4 * k + 4], "big") for k in range(ndim))
        if 0 in shape:
            raise handle.fail(f"header announces shape {shape} (expected every dimension size >= 1)")
        dtype = np.dtype(_IDX_TYPES[type_byte])
        count = math.prod(shape)
        data_bytes = count * dtype.itemsize
        if data_bytes > IDX_MAX_BYTES:
            amount = f"{data_bytes:,}" if data_bytes < 10**12 else f"about 10^{int(math.log10(data_bytes))}"
            raise handle.fail(f"header announces shape {shape}, {amount} bytes of data (expected at most "
                              f"{format_size(IDX_MAX_BYTES)}, the IDX reader's limit; the header is corrupt)")
        expected = header + data_bytes
        if not handle.compressed and handle.size != expected:
            if handle.size < expected:
                raise handle.fail(f"truncated: {handle.size} bytes, but its header announces shape {shape} "
                                  f"({expected} bytes)")
            raise handle.fail(f"{handle.size - expected} bytes after the data its header announces (shape {shape})")
        if content_digest is not None:
            content_digest.update(magic + sizes)
        array = np.empty(count, dtype=dtype)  # pages are only committed as data arrives
        got = handle.readinto(memoryview(array).cast("B"),
                              None if content_digest is None else content_digest.update)
        if got < data_bytes:
            raise handle.fail(f"truncated: {header + got} bytes{' decompressed' if handle.compressed else ''}, but "
                              f"its header announces shape {shape} ({expected} bytes)")
        if not handle.at_end():
            raise handle.fail(f"data after the {expected} bytes its header announces (shape {shape}; expected the "
                              "file to end there)")
        if raw_digest is not None and handle.compressed:
            handle.drain_raw()
    array = array.reshape(shape)
    array.flags.writeable = False
    return (array, None if content_digest is None else content_digest.hexdigest(),
            raw_digest.hexdigest() if raw_digest is not None and handle.compressed else None)


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """The array stored in one IDX file (gzipped or not), in native byte order, read-only.

    The data is streamed: the header is checked first (magic number, element type, every dimension
    size >= 1, at most ``IDX_MAX_BYTES`` of data), then exactly the announced bytes are read, and the
    file must end there. Any problem raises :class:`IdxError`, one line naming the file.

    Args:
        path: the IDX file, plain or gzipped.

    Returns:
        The array, shaped as its header announces, in the header's element type.

    Example:
        >>> import tempfile, pathlib
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "labels-idx1-ubyte"
        >>> _ = path.write_bytes(bytes([0, 0, 8, 1, 0, 0, 0, 3, 7, 2, 9]))
        >>> read_idx(path).tolist()
        [7, 2, 9]
    """
    path = Path(path)
    array = _read(path)[0]
    native = array.astype(array.dtype.newbyteorder("="), copy=False)
    native.flags.writeable = False
    return native


def _find(directory: Path, role: str) -> Path:
    name = IDX_FILES[role]
    candidates = (directory / name, directory / f"{name}.gz")
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    for candidate in candidates:
        if os.path.lexists(candidate):
            return candidate  # a directory, device, pipe or broken link: the reader names what it is
    raise IdxError(f"{directory / name}: not found (nor {name}.gz); an MNIST-format folder holds "
                   f"{', '.join(IDX_FILES.values())} (each optionally .gz)")


@dataclass(frozen=True)
class IdxData:
    """The four arrays of an MNIST-format dataset, their folder, and which dataset the checksums name
    (``None``: not a release this package knows).

    Attributes:
        directory: the folder read.
        train_images, test_images: (count, rows, cols) unsigned bytes, read-only, big-endian as stored.
        train_labels, test_labels: (count,) unsigned bytes.
        sha256: the sha256 of each decompressed file, by role (the keys of ``IDX_FILES``).
        gzip_md5: the md5 of each file read gzipped, by role (roles read plain are absent).
        identified_as: the release these fingerprints name (see :func:`identify_idx_dataset`), or None.

    Example:
        >>> import pathlib, tempfile
        >>> from eve_search.data import IDX_FILES, read_idx_dataset
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> for role, shape in [("train_images", (10, 2, 2)), ("train_labels", (10,)),
        ...                     ("test_images", (3, 2, 2)), ("test_labels", (3,))]:
        ...     header = bytes([0, 0, 8, len(shape)]) + b"".join(n.to_bytes(4, "big") for n in shape)
        ...     size = shape[0] * (4 if len(shape) == 3 else 1)
        ...     _ = (folder / IDX_FILES[role]).write_bytes(header + bytes(size))
        >>> data = read_idx_dataset(folder)
        >>> data.train_images.shape, data.test_labels.shape, data.identified_as
        ((10, 2, 2), (3,), None)
    """

    directory: Path
    train_images: np.ndarray
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray
    sha256: Mapping[str, str]
    gzip_md5: Mapping[str, str]
    identified_as: str | None


def identify_idx_dataset(sha256: Mapping[str, str], gzip_md5: Mapping[str, str] | None = None) -> str | None:
    """The known release whose four files have these fingerprints (see ``KNOWN_IDX_DATASETS``), or None.

    Args:
        sha256: the sha256 of each decompressed file, by role (the keys of ``IDX_FILES``).
        gzip_md5: the md5 of each gzipped file as read, by role; None: no file was gzipped.

    Returns:
        The release's name (``"MNIST"``, ``"Fashion-MNIST"``) when either fingerprint kind matches all
        four of its files, else None.

    Example:
        >>> identify_idx_dataset(KNOWN_IDX_DATASETS["Fashion-MNIST"]["sha256"])
        'Fashion-MNIST'
        >>> identify_idx_dataset({"train_images": "0" * 64}) is None
        True
    """
    found = {"sha256": sha256, "gzip_md5": gzip_md5 or {}}
    for name, fingerprints in KNOWN_IDX_DATASETS.items():
        for kind, known in fingerprints.items():
            if all(found[kind].get(role) == digest for role, digest in known.items()):
                return name
    return None


def read_idx_dataset(directory: str | os.PathLike) -> IdxData:
    """Read and cross-check the four IDX files of an MNIST-format folder.

    Images must be (count, rows, cols) unsigned bytes, labels (count,) unsigned bytes, the counts of
    a split's images and labels equal, and train and test images the same size.

    Args:
        directory: the folder holding the four files of ``IDX_FILES`` (each plain or ``.gz``).

    Returns:
        The arrays, their fingerprints and the release they identify, as :class:`IdxData`.

    Raises:
        IdxError: the folder or a file is missing or malformed, or the files disagree.

    Example:
        >>> import pathlib, tempfile
        >>> from eve_search.data import IDX_FILES, read_idx_dataset
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> for role, shape in [("train_images", (10, 2, 2)), ("train_labels", (10,)),
        ...                     ("test_images", (3, 2, 2)), ("test_labels", (3,))]:
        ...     header = bytes([0, 0, 8, len(shape)]) + b"".join(n.to_bytes(4, "big") for n in shape)
        ...     size = shape[0] * (4 if len(shape) == 3 else 1)
        ...     _ = (folder / IDX_FILES[role]).write_bytes(header + bytes(size))
        >>> data = read_idx_dataset(folder)
        >>> data.train_images.shape, data.train_labels.shape, sorted(data.sha256) == sorted(IDX_FILES)
        ((10, 2, 2), (10,), True)
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise IdxError(f"{directory}: not a folder (expected one holding {', '.join(IDX_FILES.values())})")
    arrays, digests, md5s = {}, {}, {}
    for role in IDX_FILES:
        path = _find(directory, role)
        array, digests[role], md5 = _read(path, checksums=True)
        if md5 is not None:
            md5s[role] = md5
        want_ndim = 3 if role.endswith("images") else 1
        if array.ndim != want_ndim or array.dtype != np.dtype(">u1"):
            raise IdxError(f"{path}: {array.ndim}-dimensional {array.dtype.str} data (expected "
                           f"{want_ndim}-dimensional unsigned bytes for {role.replace('_', ' ')})")
        if array.shape[0] == 0:
            raise IdxError(f"{path}: holds no {role.split('_')[1]}")
        arrays[role] = array
    for split in ("train", "test"):
        images, labels = arrays[f"{split}_images"], arrays[f"{split}_labels"]
        if images.shape[0] != labels.shape[0]:
            raise IdxError(f"{_find(directory, split + '_labels')}: {labels.shape[0]} labels for "
                           f"{images.shape[0]} images in {_find(directory, split + '_images').name}")
    if arrays["train_images"].shape[1:] != arrays["test_images"].shape[1:]:
        raise IdxError(f"{_find(directory, 'test_images')}: images of {arrays['test_images'].shape[1:]} pixels, "
                       f"but the training images are {arrays['train_images'].shape[1:]}")
    return IdxData(directory=directory, **arrays, sha256=digests, gzip_md5=md5s,
                   identified_as=identify_idx_dataset(digests, md5s))


VALIDATION_FRACTION = 0.1
SPLIT_SEED = 42


def load_idx_splits(directory: str | os.PathLike, *, validation_fraction: float = VALIDATION_FRACTION,
                    split_seed: int = SPLIT_SEED) -> tuple[Splits, IdxData]:
    """Train/validation/test tensors of an MNIST-format folder, and what was read.

    Pixels become float32 in [0, 1] (value / 255), images are flattened, labels int64. The validation
    set is a fixed ``validation_fraction`` of the training file, drawn by a numpy generator seeded
    with ``split_seed`` (42 and 10%, the paper's MNIST protocol), identical for every method and seed.

    Args:
        directory: the MNIST-format folder (see :func:`read_idx_dataset`).
        validation_fraction: the share of the training file held out for validation, in (0, 1).
        split_seed: the seed of the generator that draws the validation rows.

    Returns:
        ``(splits, data)``: the :class:`Splits` tensors and the :class:`IdxData` they were built from.

    Raises:
        InputError: ``validation_fraction`` is outside (0, 1).
        IdxError: the folder is malformed, or too small to hold out a validation set.

    Example:
        >>> import pathlib, tempfile
        >>> from eve_search.data import IDX_FILES, load_idx_splits
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> for role, shape in [("train_images", (10, 2, 2)), ("train_labels", (10,)),
        ...                     ("test_images", (3, 2, 2)), ("test_labels", (3,))]:
        ...     header = bytes([0, 0, 8, len(shape)]) + b"".join(n.to_bytes(4, "big") for n in shape)
        ...     size = shape[0] * (4 if len(shape) == 3 else 1)
        ...     _ = (folder / IDX_FILES[role]).write_bytes(header + bytes(size))
        >>> splits, data = load_idx_splits(folder)
        >>> tuple(splits.x_train.shape), tuple(splits.x_val.shape), tuple(splits.x_test.shape)
        ((9, 4), (1, 4), (3, 4))
        >>> splits.x_train.dtype, splits.y_train.dtype
        (torch.float32, torch.int64)
    """
    if not 0.0 < validation_fraction < 1.0:
        raise InputError(f"Invalid validation_fraction: {validation_fraction!r} (expected a number in (0, 1))")
    data = read_idx_dataset(directory)
    count = data.train_images.shape[0]
    order = np.random.default_rng(split_seed).permutation(count)
    n_val = round(count * validation_fraction)
    if not 0 < n_val < count:
        raise IdxError(f"{data.directory}: {count} training images are too few to hold out "
                       f"{validation_fraction:.0%} for validation")
    val_rows, train_rows = np.sort(order[:n_val]), np.sort(order[n_val:])
    labels = data.train_labels.astype(np.int64)

    def pixels(images: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(images.reshape(images.shape[0], -1).astype(np.float32) / np.float32(255.0))

    splits = Splits(
        x_train=pixels(data.train_images[train_rows]), y_train=torch.from_numpy(labels[train_rows]),
        x_val=pixels(data.train_images[val_rows]), y_val=torch.from_numpy(labels[val_rows]),
        x_test=pixels(data.test_images), y_test=torch.from_numpy(data.test_labels.astype(np.int64)))
    return splits, data
