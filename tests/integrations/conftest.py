"""One intra-op PyTorch thread for the Optuna tests, which train tiny models in this process (often in
several trial threads at once): one thread is fastest for them, and the machine is shared.

The Ray tests of this folder train in Ray's worker processes and keep torch's default here.
"""

from __future__ import annotations

import pytest
import torch

ONE_THREAD_MODULES = frozenset({"test_optuna", "test_optuna_dropin", "test_under_load"})  # in tests/integrations/


@pytest.fixture(autouse=True)
def one_thread(request):
    if request.module.__name__.rpartition(".")[2] not in ONE_THREAD_MODULES:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
