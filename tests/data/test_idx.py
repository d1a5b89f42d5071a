"""The IDX reader on small generated files: good, wrong magic, truncated, inconsistent; dataset naming."""

from __future__ import annotations

import gzip
import hashlib

import numpy as np
import pytest

from eve_search.data import (
    FASHION_MNIST_DIR,
    IDX_FILES,
    KNOWN_IDX_DATASETS,
    IdxError,
    identify_idx_dataset,
    load_idx_splits,
    read_idx,
    read_idx_dataset,
)


def idx_bytes(array: np.ndarray, type_byte: int = 0x08) -> bytes:
    header = bytes([0, 0, type_byte, array.ndim]) + b"".join(int(s).to_bytes(4, "big") for s in array.shape)
    return header + array.astype(array.dtype.newbyteorder(">")).tobytes()


def write_dataset(folder, train=50, test=20, side=28, gz=False, seed=0):
    rng = np.random.default_rng(seed)
    arrays = {
        "train_images": rng.integers(0, 256, (train, side, side), dtype=np.uint8),
        "train_labels": rng.integers(0, 10, train, dtype=np.uint8),
        "test_images": rng.integers(0, 256, (test, side, side), dtype=np.uint8),
        "test_labels": rng.integers(0, 10, test, dtype=np.uint8),
    }
    folder.mkdir(parents=True, exist_ok=True)
    for role, array in arrays.items():
        content = idx_bytes(array)
        if gz:
            (folder / f"{IDX_FILES[role]}.gz").write_bytes(gzip.compress(content))
        else:
            (folder / IDX_FILES[role]).write_bytes(content)
    return arrays


def test_reads_every_element_type_in_native_order(tmp_path):
    for type_byte, dtype in ((0x08, np.uint8), (0x09, np.int8), (0x0B, np.int16), (0x0C, np.int32),
                             (0x0D, np.float32), (0x0E, np.float64)):
        array = (np.arange(24).reshape(2, 3, 4) - 5).astype(dtype)
        path = tmp_path / f"a{type_byte}"
        path.write_bytes(idx_bytes(array, type_byte))
        read = read_idx(path)
        assert read.dtype == np.dtype(dtype) and read.dtype.isnative
        np.testing.assert_array_equal(read, array)


def test_gzipped_and_plain_folders_give_the_same_splits(tmp_path):
    arrays = write_dataset(tmp_path / "plain")
    write_dataset(tmp_path / "gz", gz=True)
    plain, read = load_idx_splits(tmp_path / "plain", validation_fraction=0.2)
    packed, _ = load_idx_splits(tmp_path / "gz", validation_fraction=0.2)
    for name in ("x_train", "y_train", "x_val", "y_val", "x_test", "y_test"):
        assert np.array_equal(getattr(plain, name).numpy(), getattr(packed, name).numpy())
    assert plain.x_train.shape == (40, 784) and plain.x_val.shape == (10, 784) and plain.x_test.shape == (20, 784)
    assert float(plain.x_train.min()) >= 0.0 and float(plain.x_train.max()) <= 1.0
    # validation and training rows partition the training file; test is the test file, in order
    rows = sorted(map(tuple, np.concatenate([plain.x_train.numpy(), plain.x_val.numpy()]) * 255))
    assert rows == sorted(map(tuple, arrays["train_images"].reshape(50, -1).astype(np.float32)))
    assert np.array_equal(plain.y_test.numpy(), arrays["test_labels"])
    assert read.identified_as is None  # random files are no known release


def test_the_validation_split_is_fixed_by_its_seed(tmp_path):
    write_dataset(tmp_path)
    a, _ = load_idx_splits(tmp_path)
    b, _ = load_idx_splits(tmp_path)
    c, _ = load_idx_splits(tmp_path, split_seed=7)
    assert np.array_equal(a.y_val.numpy(), b.y_val.numpy())
    assert not np.array_equal(a.x_val.numpy(), c.x_val.numpy())


def test_wrong_magic_is_one_line_naming_the_file(tmp_path):
    path = tmp_path / "bad"
    path.write_bytes(b"\x08\x03\x00\x00" + bytes(20))
    with pytest.raises(IdxError, match=r"bad: bad magic number 0x08030000") as error:
        read_idx(path)
    assert "\n" not in str(error.value)
    path.write_bytes(bytes([0, 0, 0x07, 1, 0, 0, 0, 1, 0]))  # unknown type byte
    with pytest.raises(IdxError, match="bad magic number 0x00000701"):
        read_idx(path)


@pytest.mark.parametrize("ndim", [33, 64, 65, 255])
def test_a_header_with_more_dimensions_than_any_idx_file_is_one_line_naming_the_file(tmp_path, ndim):
    path = tmp_path / "many"
    path.write_bytes(bytes([0, 0, 0x08, ndim]) + (1).to_bytes(4, "big") * ndim + b"\x00")
    with pytest.raises(IdxError, match=rf"many: header announces {ndim} dimensions \(expected at most 32") as error:
        read_idx(path)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("cut, message", [(2, "shorter than the 4-byte IDX magic"), (9, "truncated header"),
                                          (40, r"truncated: 40 bytes, but its header announces shape \(3, 28\)")])
def test_truncated_files_are_refused(tmp_path, cut, message):
    path = tmp_path / "images"
    path.write_bytes(idx_bytes(np.zeros((3, 28), np.uint8))[:cut])
    with pytest.raises(IdxError, match=message):
        read_idx(path)


def test_trailing_bytes_and_broken_gzip_are_refused(tmp_path):
    path = tmp_path / "labels"
    path.write_bytes(idx_bytes(np.zeros(3, np.uint8)) + b"xx")
    with pytest.raises(IdxError, match="2 bytes after the data"):
        read_idx(path)
    packed = gzip.compress(idx_bytes(np.zeros(300, np.uint8)))
    path.write_bytes(packed[: len(packed) // 2])
    with pytest.raises(IdxError, match="labels: corrupt or truncated gzip data"):
        read_idx(path)


def test_a_folder_must_be_consistent(tmp_path):
    write_dataset(tmp_path)
    (tmp_path / IDX_FILES["test_labels"]).write_bytes(idx_bytes(np.zeros(19, np.uint8)))
    with pytest.raises(IdxError, match="19 labels for 20 images"):
        read_idx_dataset(tmp_path)
    write_dataset(tmp_path)
    (tmp_path / IDX_FILES["train_labels"]).unlink()
    with pytest.raises(IdxError, match="train-labels-idx1-ubyte: not found"):
        read_idx_dataset(tmp_path)
    write_dataset(tmp_path)
    (tmp_path / IDX_FILES["test_images"]).write_bytes(idx_bytes(np.zeros((20, 14, 14), np.uint8)))
    with pytest.raises(IdxError, match=r"images of \(14, 14\) pixels"):
        read_idx_dataset(tmp_path)
    (tmp_path / IDX_FILES["test_images"]).write_bytes(idx_bytes(np.zeros((20, 28, 28), np.int16), 0x0B))
    with pytest.raises(IdxError, match="expected 3-dimensional unsigned bytes"):
        read_idx_dataset(tmp_path)


def test_datasets_are_named_by_checksum_never_by_file_names(tmp_path):
    write_dataset(tmp_path, gz=True)
    read = read_idx_dataset(tmp_path)
    assert read.identified_as is None
    assert read.sha256["train_labels"] == hashlib.sha256(gzip.decompress(
        (tmp_path / "train-labels-idx1-ubyte.gz").read_bytes())).hexdigest()
    assert identify_idx_dataset({}, KNOWN_IDX_DATASETS["MNIST"]["gzip_md5"]) == "MNIST"
    assert identify_idx_dataset(KNOWN_IDX_DATASETS["Fashion-MNIST"]["sha256"]) == "Fashion-MNIST"
    assert identify_idx_dataset({}, KNOWN_IDX_DATASETS["Fashion-MNIST"]["gzip_md5"]) == "Fashion-MNIST"


def test_the_debian_copy_is_recognised_as_fashion_mnist():
    splits, read = load_idx_splits(FASHION_MNIST_DIR)
    assert read.identified_as == "Fashion-MNIST"
    assert splits.x_train.shape == (54000, 784) and splits.x_val.shape == (6000, 784)
    assert splits.x_test.shape == (10000, 784) and int(splits.y_train.max()) == 9
