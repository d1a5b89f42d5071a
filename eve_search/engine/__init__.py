"""The engine: trials, the rung ledger, synchronous SHA, sweeps, worker processes, the results
store and checkpoints. Drivers (the CLI, Ray, Optuna) call it; it imports no driver."""

__all__ = ["MAX_JOBS"]

#: The most worker processes a sweep may use, even with ``--force-jobs``: each is a process holding
#: its own PyTorch. The engine's own limit; the command line reads it from here.
MAX_JOBS = 1024
