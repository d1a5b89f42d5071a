"""Hostile data files for the Adult and IDX loaders: gzip bombs, malformed and oversized IDX headers,
directories, devices, named pipes and unreadable files where a data file should be.

Each must end in one line naming the file and what was expected (exit 2 from the CLI, no traceback),
quickly and within bounded memory. The bombs are real gzip files (valid CRC and size trailer) of
4 GiB of content in about 4 MB, built here in milliseconds from one repeated deflate block.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import re
import shutil
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eve_search.cli import main
from tests.hostile import deadline, one_line, peak_memory
from eve_search.data import IDX_FILES, AdultDataError, IdxError, bundled_adult_dir, load_adult, read_idx
from eve_search.data._adult import ADULT_SIZES
from eve_search.data import load_idx_splits, read_idx_dataset
from eve_search.tasks import get_task

MiB = 1 << 20
BOMB_GIB = 4


# A gzip bomb ----------------------------------------------------------------------------------------


def _gf2_apply(matrix: list[int], vector: int) -> int:
    result, row = 0, 0
    while vector:
        if vector & 1:
            result ^= matrix[row]
        vector >>= 1
        row += 1
    return result


def _gf2_square(matrix: list[int]) -> list[int]:
    return [_gf2_apply(matrix, matrix[n]) for n in range(32)]


def crc32_after_zeros(crc: int, count: int) -> int:
    """The CRC-32 of some data followed by ``count`` zero bytes, from the CRC-32 of the data alone.

    Appending a zero bit is a linear map on the CRC register (a 32 x 32 matrix over GF(2)); its
    powers 2^k are found by squaring, and the ones in ``count * 8``'s binary expansion are applied.
    The register is stored inverted, hence the xors with the all-ones word on either side.
    """
    one_bit = [0xEDB88320] + [1 << n for n in range(31)]
    power, register, bits = one_bit, crc ^ 0xFFFFFFFF, count * 8
    while bits:
        if bits & 1:
            register = _gf2_apply(power, register)
        bits >>= 1
        if bits:
            power = _gf2_square(power)
    return register ^ 0xFFFFFFFF


def gzip_bomb(path: Path, prefix: bytes, mebibytes: int = BOMB_GIB * 1024) -> Path:
    """A valid gzip file holding ``prefix`` then ``mebibytes`` MiB of zeros: each MiB is the same
    deflate block (a full flush resets the compressor, so the block does not depend on what came
    before), written ``mebibytes`` times."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = compressor.compress(prefix) + compressor.flush(zlib.Z_FULL_FLUSH)
    block = compressor.compress(bytes(MiB)) + compressor.flush(zlib.Z_FULL_FLUSH)
    assert compressor.compress(bytes(MiB)) + compressor.flush(zlib.Z_FULL_FLUSH) == block
    tail = compressor.flush()
    size = len(prefix) + mebibytes * MiB
    crc = crc32_after_zeros(zlib.crc32(prefix), mebibytes * MiB)
    with open(path, "wb") as handle:
        handle.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff" + head)
        for _ in range(mebibytes):
            handle.write(block)
        handle.write(tail + crc.to_bytes(4, "little") + (size & 0xFFFFFFFF).to_bytes(4, "little"))
    return path


def test_the_bomb_builder_makes_valid_gzip(tmp_path):
    assert crc32_after_zeros(zlib.crc32(b"abc"), 5000) == zlib.crc32(b"abc" + bytes(5000))
    small = gzip_bomb(tmp_path / "small.gz", b"head", mebibytes=3)
    assert gzip.decompress(small.read_bytes()) == b"head" + bytes(3 * MiB)  # checks the CRC and size too
    big = gzip_bomb(tmp_path / "big.gz", b"head")
    assert big.stat().st_size < 5 * MiB  # 4 GiB of content


# Helpers ----------------------------------------------------------------------------------------------


def idx_bytes(array: np.ndarray, type_byte: int = 0x08) -> bytes:
    header = bytes([0, 0, type_byte, array.ndim]) + b"".join(int(s).to_bytes(4, "big") for s in array.shape)
    return header + array.astype(array.dtype.newbyteorder(">")).tobytes()


def idx_header(shape: tuple[int, ...], type_byte: int = 0x08) -> bytes:
    return bytes([0, 0, type_byte, len(shape)]) + b"".join(int(s).to_bytes(4, "big") for s in shape)


def write_idx_folder(folder: Path, train: int = 300, test: int = 40) -> Path:
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True, exist_ok=True)
    for role, shape in (("train_images", (train, 28, 28)), ("train_labels", (train,)),
                        ("test_images", (test, 28, 28)), ("test_labels", (test,))):
        high = 256 if role.endswith("images") else 10
        (folder / IDX_FILES[role]).write_bytes(idx_bytes(rng.integers(0, high, shape, dtype=np.uint8)))
    return folder


def replace_train_images(folder: Path, make) -> Path:
    """Put ``make(path)``'s thing where the training images were (path without .gz)."""
    (folder / IDX_FILES["train_images"]).unlink()
    return make(folder / IDX_FILES["train_images"])


def adult_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "adult"
    folder.mkdir()
    for name in ("adult.data.gz", "adult.test.gz"):
        shutil.copy(bundled_adult_dir() / name, folder / name)
    return folder


def run_adult(folder: Path, tmp_path: Path) -> int:
    return main(["adult", "--space", "hp", "--data-dir", str(folder), "--configs", "2", "--rungs", "10,30",
                 "--backward-ratio", "2", "--quiet", "--workdir", str(tmp_path / "w")])


def run_mnist(folder: Path, tmp_path: Path) -> int:
    return main(["mnist", "--data-dir", str(folder), "--optimizer", "adam", "--lrs", "1e-3", "--seeds", "0",
                 "--budget", "2", "--eval-every", "1", "--width", "8", "--depth", "1", "--backward-ratio", "2",
                 "--quiet", "--workdir", str(tmp_path / "w")])


unreadable = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/mem is Linux's")


# Things that are not data files, for every loader -------------------------------------------------------


def _directory(path: Path) -> Path:
    path.mkdir()
    return path


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _link(target: str):
    def make(path: Path) -> Path:
        path.symlink_to(target)
        return path
    return make


NOT_FILES = [
    pytest.param(_directory, "is a directory", id="directory"),
    pytest.param(_fifo, "is a named pipe", id="fifo"),
    pytest.param(_link("/dev/zero"), "is a character device", id="dev-zero"),
    pytest.param(_link("/dev/urandom"), "is a character device", id="dev-urandom"),
    pytest.param(_link("/proc/self/mem"), r"cannot be read \(Input/output error\)", id="unreadable",
                 marks=unreadable),
]


# Adult ------------------------------------------------------------------------------------------------


def test_an_adult_gzip_bomb_stops_at_the_official_size(tmp_path):
    folder = adult_folder(tmp_path)
    (folder / "adult.data.gz").unlink()
    gzip_bomb(folder / "adult.data.gz", b"39, State-gov, 77516, Bachelors, 13, Never-married\n")
    with deadline(20), peak_memory(32 * MiB), pytest.raises(AdultDataError) as error:
        load_adult(folder)
    message = str(error.value)
    assert message.startswith(f"{folder / 'adult.data.gz'}: decompresses to more than 3,974,305 bytes")
    assert "official adult.data" in message and "\n" not in message


def test_a_plain_adult_file_larger_than_the_official_one_is_refused_before_reading(tmp_path):
    folder = adult_folder(tmp_path)
    (folder / "adult.data.gz").unlink()
    with open(folder / "adult.data", "wb") as handle:
        handle.truncate(8 << 30)  # sparse: 8 GiB on paper, nothing on disk
    with deadline(10), peak_memory(8 * MiB), pytest.raises(AdultDataError, match="holds more than 3,974,305 bytes"):
        load_adult(folder)


def test_adult_sizes_are_those_of_the_bundled_files():
    for name, size in ADULT_SIZES.items():
        assert len(gzip.decompress((bundled_adult_dir() / f"{name}.gz").read_bytes())) == size


@pytest.mark.parametrize("make, problem", NOT_FILES)
def test_adult_data_that_is_not_a_file_is_one_line(tmp_path, make, problem):
    folder = adult_folder(tmp_path)
    (folder / "adult.data.gz").unlink()
    path = make(folder / "adult.data")
    with deadline(10), pytest.raises(AdultDataError, match=f"^{re.escape(str(path))}: {problem}") as error:
        load_adult(folder)
    assert "\n" not in str(error.value)


@pytest.fixture(scope="module")
def warm_cli(tmp_path_factory):
    """Run each command once on a folder without data, so that a measured run allocates only what
    reading its data costs (not the first import of the command's modules)."""
    empty = tmp_path_factory.mktemp("empty")
    assert run_adult(empty, empty) == 2
    assert run_mnist(empty, empty) == 2


@pytest.mark.parametrize("case", ["bomb", "fifo", "dev-zero", "directory", "columns", "garbage"])
def test_the_adult_cli_says_one_line_naming_the_file(tmp_path, capsys, warm_cli, case):
    folder = adult_folder(tmp_path)
    (folder / "adult.data.gz").unlink()
    target = folder / "adult.data.gz"
    if case == "bomb":
        gzip_bomb(target, b"")
    elif case == "fifo":
        target = _fifo(folder / "adult.data")
    elif case == "dev-zero":
        target = _link("/dev/zero")(folder / "adult.data")
    elif case == "directory":
        target = _directory(folder / "adult.data")
    elif case == "columns":  # a CSV of the wrong shape: its checksum cannot be the official one
        target.write_bytes(gzip.compress(b"1,2,3\n4,5,6\n"))
    else:
        target.write_bytes(b"\x1f\x8b" + bytes(range(256)) * 8)
    with deadline(60), (peak_memory(32 * MiB) if case == "bomb" else contextlib.nullcontext()):
        assert run_adult(folder, tmp_path) == 2
    err = one_line(capsys, str(target))
    assert err.startswith("eve-search adult: ")


# IDX: bombs and headers -----------------------------------------------------------------------------


def test_an_idx_gzip_bomb_reads_only_what_its_header_announces(tmp_path):
    path = gzip_bomb(tmp_path / "images.gz", idx_header((60000, 28, 28)))  # MNIST's shape, 4 GiB of zeros
    with deadline(20), peak_memory(64 * MiB), pytest.raises(IdxError) as error:
        read_idx(path)
    assert str(error.value) == (f"{path}: data after the 47040016 bytes its header announces (shape (60000, 28, 28); "
                                "expected the file to end there)")


def test_an_idx_bomb_announcing_gigabytes_is_refused_from_its_header(tmp_path):
    path = gzip_bomb(tmp_path / "images.gz", idx_header((4096, 1024, 1024)))
    with deadline(10), peak_memory(8 * MiB), pytest.raises(IdxError, match=r"shape \(4096, 1024, 1024\), 4,294,967,296 "
                                                           r"bytes of data \(expected at most 1 GiB"):
        read_idx(path)


def test_a_gzip_of_zeros_has_no_idx_magic(tmp_path):
    path = gzip_bomb(tmp_path / "zeros.gz", b"")
    with deadline(10), peak_memory(8 * MiB), pytest.raises(IdxError, match="bad magic number 0x00000000"):
        read_idx(path)


@pytest.mark.parametrize("content, message", [
    pytest.param(b"\x08\x03\x00\x00" + bytes(100), r"bad magic number 0x08030000 \(expected 0x0000TTDD", id="magic"),
    pytest.param(idx_header((3, 2, 2), type_byte=0x07) + bytes(12), r"bad magic number 0x00000703 \(expected .* a "
                 r"type byte in \{0x08", id="type-byte"),
    pytest.param(bytes([0, 0, 8, 0]), "a dimension count >= 1", id="no-dimensions"),
    pytest.param(idx_header((0, 28, 28)), r"shape \(0, 28, 28\) \(expected every dimension size >= 1\)",
                 id="zero-dimension"),
    pytest.param(idx_header((2**32 - 1,) * 3) + bytes(100), r"\(4294967295, 4294967295, 4294967295\), about 10\^28 "
                 r"bytes of data \(expected at most 1 GiB, the IDX reader's limit", id="huge-dimensions"),
    pytest.param(idx_header((2**32 - 1,) * 255), r"header announces 255 dimensions \(expected at most 32", id="255-dimensions"),
    pytest.param(bytes([0, 0, 8, 3, 0, 0, 1]), "truncated header: 7 bytes, 16 needed for 3 dimension sizes",
                 id="truncated-header"),
    pytest.param(b"\x00\x00", "truncated: 2 bytes, shorter than the 4-byte IDX magic number", id="two-bytes"),
    pytest.param(b"", "truncated: 0 bytes", id="empty"),
    pytest.param(idx_header((5, 4)) + bytes(19), r"truncated: 31 bytes, but its header announces shape \(5, 4\) "
                 r"\(32 bytes\)", id="short-data"),
    pytest.param(idx_header((5, 4)) + bytes(23), r"3 bytes after the data its header announces", id="trailing"),
])
@pytest.mark.parametrize("packed", [False, True], ids=["plain", "gzip"])
def test_malformed_idx_files_name_the_file_and_what_was_expected(tmp_path, content, message, packed):
    path = tmp_path / ("bad.gz" if packed else "bad")
    path.write_bytes(gzip.compress(content) if packed else content)
    if packed and "bytes after the data" in message:
        message = "data after the 32 bytes its header announces"  # a stream's rest is never inflated to count it
    if packed and message.startswith("truncated: 31"):
        message = "truncated: 31 bytes decompressed, but its header announces shape"
    with deadline(10), pytest.raises(IdxError) as error:
        read_idx(path)
    text = str(error.value)
    assert text.startswith(f"{path}: ") and "\n" not in text
    assert re.search(message, text), text


_HEADERS = st.tuples(st.sampled_from([0, 8]), st.sampled_from([0, 8]), st.sampled_from([0x08, 0x0B, 0x0D, 0x07, 0]),
                     st.integers(0, 4)).map(bytes)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(head=_HEADERS, sizes=st.lists(st.integers(0, 2**32 - 1) | st.integers(0, 6), max_size=4).map(
    lambda sizes: b"".join(s.to_bytes(4, "big") for s in sizes)), data=st.binary(max_size=64), packed=st.booleans())
def test_any_idx_bytes_read_or_give_one_line(tmp_path, head, sizes, data, packed):
    content = head + sizes + data
    path = tmp_path / "any"
    path.write_bytes(gzip.compress(content) if packed else content)
    try:
        array = read_idx(path)
    except IdxError as error:
        assert str(error).startswith(f"{path}: ") and "\n" not in str(error)
    else:  # what was read is exactly the content: header, then the data in C order, big-endian
        assert array.dtype.isnative and not array.flags.writeable
        assert content == idx_bytes(array, content[2])


def test_a_plain_idx_file_of_the_wrong_size_is_refused_before_its_data_is_read(tmp_path):
    path = tmp_path / "images"
    with open(path, "wb") as handle:
        handle.write(idx_header((60000, 28, 28)))
        handle.truncate(16 << 30)  # sparse, 16 GiB
    with deadline(10), peak_memory(4 * MiB), pytest.raises(IdxError, match="bytes after the data its header"):
        read_idx(path)


def test_an_idx_dataset_checksum_is_computed_while_streaming(tmp_path):
    folder = write_idx_folder(tmp_path / "plain")
    packed = tmp_path / "packed"
    packed.mkdir()
    for name in IDX_FILES.values():
        (packed / f"{name}.gz").write_bytes(gzip.compress((folder / name).read_bytes()))
    plain, gz = read_idx_dataset(folder), read_idx_dataset(packed)
    import hashlib

    for role, name in IDX_FILES.items():
        assert plain.sha256[role] == gz.sha256[role] == hashlib.sha256((folder / name).read_bytes()).hexdigest()
        assert gz.gzip_md5[role] == hashlib.md5((packed / f"{name}.gz").read_bytes()).hexdigest()
    assert plain.gzip_md5 == {}


@pytest.mark.parametrize("make, problem", NOT_FILES)
def test_idx_files_that_are_not_files_are_one_line(tmp_path, make, problem):
    folder = write_idx_folder(tmp_path / "data")
    path = replace_train_images(folder, make)
    with deadline(10), pytest.raises(IdxError, match=f"^{re.escape(str(path))}: {problem}") as error:
        read_idx_dataset(folder)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("case", ["bomb", "header", "fifo", "dev-urandom", "directory", "unreadable"])
def test_the_mnist_cli_says_one_line_naming_the_file(tmp_path, capsys, warm_cli, case):
    if case == "unreadable" and not sys.platform.startswith("linux"):
        pytest.skip("/proc/self/mem is Linux's")
    folder = write_idx_folder(tmp_path / "data")
    target = folder / IDX_FILES["train_images"]
    target.unlink()
    if case == "bomb":
        target = gzip_bomb(folder / f"{IDX_FILES['train_images']}.gz", idx_header((60000, 28, 28)))
    elif case == "header":
        target.write_bytes(idx_header((2**31, 28, 28)))
    elif case == "fifo":
        _fifo(target)
    elif case == "dev-urandom":
        _link("/dev/urandom")(target)
    elif case == "directory":
        _directory(target)
    else:
        _link("/proc/self/mem")(target)
    with deadline(60), (peak_memory(128 * MiB) if case == "bomb" else contextlib.nullcontext()):
        assert run_mnist(folder, tmp_path) == 2
    err = one_line(capsys, str(target))
    assert err.startswith("eve-search mnist: ")


# Too small for one minibatch ----------------------------------------------------------------------------


def test_a_data_set_smaller_than_one_batch_says_so(tmp_path, capsys):
    folder = write_idx_folder(tmp_path / "small", train=200)
    with deadline(60):
        assert run_mnist(folder, tmp_path) == 2
    err = one_line(capsys)
    assert err == (f"eve-search mnist: the data set at {folder} has only 180 training rows, so batch size 256 cannot "
                   "be used (every minibatch takes 256 rows): give a data set with at least 284 training images (10% "
                   "of the 200 here are held out for validation)\n")
    # 284 is right: it leaves exactly 256 training rows, one fewer image leaves 255
    assert load_idx_splits(write_idx_folder(tmp_path / "enough", train=284))[0].x_train.shape[0] == 256
    assert load_idx_splits(write_idx_folder(tmp_path / "short", train=283))[0].x_train.shape[0] == 255


def test_a_task_refuses_data_smaller_than_its_batch(tmp_path):
    folder = write_idx_folder(tmp_path / "small", train=200)
    with pytest.raises(ValueError) as error:
        get_task("mnist").data(folder)
    assert str(error.value) == (f"task 'mnist': the data set at {folder.resolve()} has only 180 training rows, so "
                                "batch size 256 cannot be used (every minibatch takes 256 rows): give a data set with "
                                "at least 256 training rows, or use a task with a smaller batch_size")


def test_the_sweep_cli_names_the_data_set_that_is_too_small(tmp_path, capsys):
    folder = write_idx_folder(tmp_path / "small", train=200)
    with deadline(60):
        code = main(["sweep", "--task", "mnist", "--space", "hp", "--data-dir", str(folder),
                     "--configs", "2", "--rungs", "10,30", "--backward-ratio", "2", "--quiet",
                     "--workdir", str(tmp_path / "w")])
    assert code == 2
    one_line(capsys, str(folder.resolve()), "only 180 training rows", "batch size 256")
