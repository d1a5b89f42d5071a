"""How the small model's bundled base weights were made: a short full-model pretraining run.

LoRA fine-tunes a *pretrained* model. So that the small default setting fine-tunes one too, the
small Qwen2 network was trained once, all weights, as a plain next-token language model (every
token of prompt and response) on instruction records of five of the ten task families
(:data:`PRETRAINING_FAMILIES`, records from a different seed than the fine-tuning set). The
fine-tuning set mixes all ten families, so the adapters have to learn five tasks the base never
saw, on top of a base that already knows the byte-level format, the words and the digits. The
result is bundled as ``eve_search/data/instructions/small_qwen2_base.safetensors``; regenerate it
with ``python -c "from eve_search.tasks.lora._pretrain import main; main()"`` (400 steps of 16 examples: minutes on a CPU;
floating-point results can differ across machines in the last bits).
"""

from __future__ import annotations

import math
import os

import numpy as np
import torch

from eve_search._imports import require
from eve_search.data._instructions import TASK_FAMILIES, generate_instructions
from eve_search.tasks.lora._model import small_qwen2
from eve_search.tasks.lora._tokenizer import byte_tokenizer

__all__ = ["PRETRAINING_FAMILIES", "PRETRAINING_SEED", "pretrain_small_base", "pretraining_records"]

PRETRAINING_FAMILIES = ("_add", "_reverse", "_uppercase", "_length", "_sort_digits")
PRETRAINING_SEED = 7


def pretraining_records(count: int, seed: int = PRETRAINING_SEED) -> list[dict[str, str]]:
    """``count`` records of the pretraining families only (drawn with the fine-tuning generator).

    Example:
        >>> sorted({r["instruction"] for r in pretraining_records(200)})[:2]
        ['Add the two numbers.', 'How many letters does the word have?']
    """
    instructions = {family(np.random.default_rng(0))["instruction"] for family in TASK_FAMILIES
                    if family.__name__ in PRETRAINING_FAMILIES}
    kept: list[dict[str, str]] = []
    draw = 0
    while len(kept) < count:
        batch = generate_instructions(count=4 * count, seed=seed + draw)
        kept += [r for r in batch if r["instruction"] in instructions]
        draw += 1
    return kept[:count]


def pretrain_small_base(steps: int, *, seed: int = PRETRAINING_SEED, batch_size: int = 16, lr: float = 3e-3,
                        records: int = 4000) -> torch.nn.Module:
    """Train every weight of :func:`~eve_search.tasks.lora.small_qwen2` with AdamW (cosine decay) on the
    pretraining records; return the model.

    ``tests/tasks/lora/test_pretrain.py`` checks that a short run lowers the loss.
    """
    from eve_search.tasks.lora._task import _trim, encode_record

    tokenizer = byte_tokenizer()
    rows = [encode_record(tokenizer, r, 512) for r in pretraining_records(records, seed)]
    width = max(len(ids) for ids, _ in rows)
    x = torch.zeros((len(rows), width), dtype=torch.long)
    y = torch.full((len(rows), width), -100, dtype=torch.long)
    for k, (ids, _) in enumerate(rows):
        x[k, :len(ids)] = torch.tensor(ids)
        y[k, :len(ids)] = torch.tensor(ids)  # a language model: every token is a target
    model = small_qwen2(pretrained=False)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda t: 0.5 * (1 + math.cos(math.pi * t / steps)))
    generator = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        pick = torch.randint(len(rows), (batch_size,), generator=generator)
        inputs, targets = _trim(x[pick], y[pick])
        logits = model(input_ids=inputs).logits[:, :-1]
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets[:, 1:].reshape(-1),
                                                 ignore_index=-100)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
    model.eval()
    return model


def main(steps: int = 400, path: str | os.PathLike | None = None) -> None:
    """Pretrain and write the bundled base weights (safetensors: loading never runs code)."""
    from eve_search.tasks.lora._model import bundled_base_path

    safetensors_torch = require("safetensors.torch", "lora")
    model = pretrain_small_base(steps)
    state = {name: p.detach().contiguous() for name, p in model.named_parameters()}
    safetensors_torch.save_file(state, os.fspath(path or bundled_base_path()))
    print(path or bundled_base_path())
