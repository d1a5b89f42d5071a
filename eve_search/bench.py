"""Deprecated: moved to :mod:`eve_search.benchmarks.throughput` (this path is removed in eve-search 0.4)."""

from eve_search._deprecation import alias

alias(__name__, "eve_search.benchmarks.throughput")
