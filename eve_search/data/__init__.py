"""Datasets bundled with eve-search: UCI Adult, verified and preprocessed."""

from eve_search.data._adult import (
    ADULT_SHA256,
    AdultDataError,
    AdultSplits,
    bundled_adult_dir,
    load_adult,
)

__all__ = ["ADULT_SHA256", "AdultDataError", "AdultSplits", "bundled_adult_dir", "load_adult"]
