"""Deprecated: moved to :mod:`eve_search.experiments.synthetic` (this path is removed in eve-search 0.4)."""

from eve_search._deprecation import forward

__getattr__ = forward(__name__, "eve_search.experiments.synthetic")
