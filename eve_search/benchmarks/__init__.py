"""Measurements of this implementation: throughput, memory, sweep overhead, matrix libraries."""
