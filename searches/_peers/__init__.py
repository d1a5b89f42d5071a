"""The pieces of ``searches/peers.py``: the search problem and its space in every tool's format
(:mod:`problem`), one search run of one tool (:mod:`runner`, executed in a fresh process, possibly
in a tool's own virtual environment), those environments (:mod:`envs`), the results store
(:mod:`store`) and the referee (:mod:`referee`).

Nothing here is imported by the ``eve_search`` package; the dashboard view of the stored runs lives
in :mod:`eve_search.dashboard._peers`.
"""
