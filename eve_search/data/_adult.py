"""UCI Adult ("Census Income"): the bundled official files, verified, parsed and preprocessed (paper, Appendix "UCI Adult").

Preprocessing, in one place:

* drop ``fnlwgt``; target = income > 50K;
* validation = a fixed 10% of the training file (``torch.randperm`` with seed 42, first n // 10);
* one-hot every categorical column, "?" kept as its own category; the vocabulary is learned from
  the whole official training file (a vocabulary carries no label, and learning it from the 90%
  part alone could drop a category seen once and change the feature count); a test value outside
  it encodes as all zeros;
* standardize the numeric columns with the mean and (population) standard deviation of the 90%
  training part only, applied unchanged to validation and test.

This gives 5 numeric + 102 one-hot = 107 features.
"""

from __future__ import annotations

import functools
import hashlib
import io
import os
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from eve_search._checks import InputError
from eve_search.data._files import DataFile
from eve_search.data._splits import Splits

if TYPE_CHECKING:  # pandas is imported where CSV is parsed, so importing this module stays cheap
    import pandas as pd

__all__ = ["ADULT_SHA256", "AdultDataError", "AdultSplits", "bundled_adult_dir", "load_adult"]

COLUMNS = ("age", "workclass", "fnlwgt", "education", "education-num", "marital-status", "occupation",
           "relationship", "race", "sex", "capital-gain", "capital-loss", "hours-per-week", "native-country",
           "income")
NUMERIC = ("age", "education-num", "capital-gain", "capital-loss", "hours-per-week")
CATEGORICAL = ("workclass", "education", "marital-status", "occupation", "relationship", "race", "sex",
               "native-country")
SPLIT_SEED = 42

# sha256 of the decompressed official files (UCI release, see data/adult/README.md).
ADULT_SHA256: Mapping[str, str] = {
    "adult.data": "5b00264637dbfec36bdeaab5676b0b309ff9eb788d63554ca0a249491c86603d",
    "adult.test": "a2a9044bc167a35b2361efbabec64e89d69ce82d9790d2980119aac5fd7e9c05",
}
# Their sizes in bytes: the most a loader reads from either file (only the official bytes can match).
ADULT_SIZES: Mapping[str, int] = {"adult.data": 3_974_305, "adult.test": 2_003_153}


class AdultDataError(InputError):
    """A missing, unreadable or corrupt Adult file."""


@dataclass(frozen=True)
class AdultSplits(Splits):
    """Preprocessed Adult tensors and the names of the 107 features. Shared between trials: read-only.

    Attributes:
        x_train, y_train, x_val, y_val, x_test, y_test: the tensors of :class:`Splits` (float32
            features, int64 labels: 1 for income > 50K).
        feature_names: the column names, the 5 numeric ones first, then ``"column=value"`` per
            one-hot category.

    Example:
        >>> from eve_search.data import load_adult
        >>> adult = load_adult()
        >>> adult.n_features, adult.feature_names[0]
        (107, 'age')
    """

    feature_names: tuple[str, ...] = ()

    @property
    def n_features(self) -> int:
        return len(self.feature_names)


def bundled_adult_dir() -> Path:
    """The directory of the copy shipped inside the package.

    Returns:
        The folder holding the bundled ``adult.data.gz`` and ``adult.test.gz``.

    Example:
        >>> from eve_search.data import bundled_adult_dir
        >>> sorted(path.name for path in bundled_adult_dir().glob("*.gz"))
        ['adult.data.gz', 'adult.test.gz']
    """
    return Path(str(resources.files("eve_search.data") / "adult"))


def _read_verified(directory: Path, name: str) -> bytes:
    """The decompressed bytes of ``name`` (.gz preferred), after checking their size and sha256.

    The content is streamed and hashed as it arrives, and refused as soon as it passes the official
    file's size (``ADULT_SIZES``): a file that could not match the checksum is never inflated further.
    """
    compressed, plain = directory / f"{name}.gz", directory / name
    if os.path.lexists(compressed):
        path = compressed
    elif os.path.lexists(plain):
        path = plain
    else:
        raise AdultDataError(f"data_dir {str(directory)!r}: neither {name}.gz nor {name} found (expected the "
                             "official UCI Adult files)")
    size = ADULT_SIZES[name]
    with DataFile(path, AdultDataError, gzip_data=path is compressed, bad_gzip="is not a valid gzip file",
                  expected=f"the UCI Adult file {name}") as handle:
        content = handle.read_all(size, lambda: (
            f"{'decompresses to' if handle.compressed else 'holds'} more than {size:,} bytes, the size of the "
            f"official {name} (refused without reading further; the file is corrupt or not the UCI Adult release)"))
    digest = hashlib.sha256(content).hexdigest()
    if digest != ADULT_SHA256[name]:
        raise AdultDataError(f"{path}: sha256 {digest[:12]}... does not match the official file (expected "
                             f"{ADULT_SHA256[name][:12]}...); the file is corrupt or not the UCI Adult release")
    return content


def _parse(content: bytes, skip_first_line: bool) -> pd.DataFrame:
    import pandas as pd

    frame = pd.read_csv(io.BytesIO(content), header=None, names=list(COLUMNS), skipinitialspace=True,
                        skiprows=1 if skip_first_line else 0, dtype=str, skip_blank_lines=True)
    return frame.dropna(how="all")  # the files end with a blank line


def _encode(frame: pd.DataFrame, vocabulary: dict[str, list[str]], mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    numeric = (frame[list(NUMERIC)].astype(np.float64).to_numpy() - mean) / std
    import pandas as pd

    blocks = [numeric]
    for column in CATEGORICAL:
        categories = vocabulary[column]
        codes = pd.Categorical(frame[column], categories=categories).codes  # -1 for an unseen value
        one_hot = np.zeros((len(frame), len(categories)))
        seen = codes >= 0
        one_hot[np.flatnonzero(seen), codes[seen]] = 1.0
        blocks.append(one_hot)
    return np.concatenate(blocks, axis=1).astype(np.float32)


def _labels(frame: pd.DataFrame) -> np.ndarray:
    return (frame["income"].str.rstrip(".") == ">50K").to_numpy().astype(np.int64)


# Bump when the preprocessing changes: cached arrays of another version are never read.
PREPROCESSING_VERSION = 1
ARRAYS = ("x_train", "y_train", "x_val", "y_val", "x_test", "y_test", "feature_names")


def _preprocess(train_content: bytes, test_content: bytes) -> dict[str, np.ndarray]:
    train = _parse(train_content, skip_first_line=False)
    test = _parse(test_content, skip_first_line=True)
    order = torch.randperm(len(train), generator=torch.Generator().manual_seed(SPLIT_SEED))
    val_rows = np.sort(order[: len(train) // 10].numpy())
    train_rows = np.sort(order[len(train) // 10:].numpy())
    fit = train.iloc[train_rows]
    mean = fit[list(NUMERIC)].astype(np.float64).to_numpy().mean(axis=0)
    std = fit[list(NUMERIC)].astype(np.float64).to_numpy().std(axis=0)
    vocabulary = {column: sorted(train[column].unique()) for column in CATEGORICAL}
    train_features = _encode(train, vocabulary, mean, std)
    labels = _labels(train)
    names = [*NUMERIC, *(f"{column}={value}" for column in CATEGORICAL for value in vocabulary[column])]
    return {"x_train": train_features[train_rows], "y_train": labels[train_rows],
            "x_val": train_features[val_rows], "y_val": labels[val_rows],
            "x_test": _encode(test, vocabulary, mean, std), "y_test": _labels(test),
            "feature_names": np.array(names, dtype=np.str_)}


@functools.lru_cache(maxsize=4)
def _load(directory: Path) -> AdultSplits:
    from eve_search.data._cache import cached_arrays

    train_content = _read_verified(directory, "adult.data")
    test_content = _read_verified(directory, "adult.test")
    # Both files were just verified against the official checksums, which therefore key the cache.
    key = f"v{PREPROCESSING_VERSION}-{ADULT_SHA256['adult.data'][:16]}-{ADULT_SHA256['adult.test'][:16]}"
    arrays = cached_arrays("adult", key, lambda: _preprocess(train_content, test_content), ARRAYS)
    tensors = {name: torch.from_numpy(np.ascontiguousarray(arrays[name])) for name in ARRAYS[:-1]}
    return AdultSplits(**tensors, feature_names=tuple(str(name) for name in arrays["feature_names"]))


def load_adult(data_dir: str | os.PathLike | None = None) -> AdultSplits:
    """Load, verify and preprocess UCI Adult from ``data_dir`` (None: the bundled copy).

    ``data_dir`` holds ``adult.data(.gz)`` and ``adult.test(.gz)``; their checksums are verified on
    every first load in a process (results are cached per directory).

    Args:
        data_dir: the folder holding the two official files; None reads the copy bundled with the
            package (:func:`bundled_adult_dir`).

    Returns:
        The preprocessed :class:`AdultSplits` (the same object for a directory already loaded).

    Raises:
        AdultDataError: the folder or a file is missing, unreadable, or not the official release.

    Example:
        >>> from eve_search.data import load_adult
        >>> adult = load_adult()
        >>> adult.x_train.shape, adult.x_val.shape, adult.x_test.shape
        (torch.Size([29305, 107]), torch.Size([3256, 107]), torch.Size([16281, 107]))
    """
    directory = bundled_adult_dir() if data_dir is None else Path(data_dir)
    if not directory.is_dir():
        raise AdultDataError(f"data_dir {str(directory)!r} is not a directory (expected one holding adult.data and "
                             "adult.test)")
    return _load(directory.resolve())
