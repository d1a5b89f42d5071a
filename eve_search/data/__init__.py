"""Datasets: UCI Adult (bundled, verified and preprocessed) and MNIST-format (IDX) files."""

from eve_search.data._adult import (
    ADULT_SHA256,
    AdultDataError,
    AdultSplits,
    bundled_adult_dir,
    load_adult,
)
from eve_search.data._idx import (
    FASHION_MNIST_DIR,
    IDX_FILES,
    IDX_MAX_BYTES,
    KNOWN_IDX_DATASETS,
    IdxData,
    IdxError,
    identify_idx_dataset,
    load_idx_splits,
    read_idx,
    read_idx_dataset,
)
from eve_search.data._splits import Splits, splits_checksum

__all__ = [
    "ADULT_SHA256",
    "FASHION_MNIST_DIR",
    "IDX_FILES",
    "IDX_MAX_BYTES",
    "KNOWN_IDX_DATASETS",
    "AdultDataError",
    "AdultSplits",
    "IdxData",
    "IdxError",
    "Splits",
    "bundled_adult_dir",
    "identify_idx_dataset",
    "load_adult",
    "load_idx_splits",
    "read_idx",
    "read_idx_dataset",
    "splits_checksum",
]
