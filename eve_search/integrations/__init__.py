"""Adapters that run eve-search inside other hyperparameter-search frameworks.

Each integration lives in its own module and imports its framework only when that module is
imported, so ``import eve_search.integrations`` needs nothing extra:

- :mod:`eve_search.integrations.optuna`: a synchronous successive-halving pruner for ordinary Optuna
  objectives, and a resumable multi-worker driver on Optuna RDB storage.
- :mod:`eve_search.integrations.ray`: a Ray Tune scheduler (extra ``ray``).
"""
