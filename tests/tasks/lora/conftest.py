"""One intra-op thread for the small LoRA model: its matrices are tiny, and on a busy shared CPU
several spinning threads per process make each step tens of times slower."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
