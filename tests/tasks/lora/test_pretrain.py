"""The bundled base's recipe: pretraining records exclude the held-out families; training lowers the loss."""

from __future__ import annotations

import torch

from eve_search.tasks.lora import byte_tokenizer, encode_record, small_qwen2
from eve_search.tasks.lora._pretrain import (
    PRETRAINING_FAMILIES,
    pretrain_small_base,
    pretraining_records,
)


def _lm_loss(model, records) -> float:
    tokenizer = byte_tokenizer()
    total = 0.0
    with torch.no_grad():
        for record in records:
            ids = torch.tensor([encode_record(tokenizer, record, 512)[0]])
            logits = model(input_ids=ids).logits[0, :-1]
            total += float(torch.nn.functional.cross_entropy(logits, ids[0, 1:]))
    return total / len(records)


def test_pretraining_sees_only_five_families():
    instructions = {r["instruction"] for r in pretraining_records(300)}
    assert len(instructions) == len(PRETRAINING_FAMILIES) == 5
    assert "Reverse the word." in instructions and "Subtract the second number from the first." not in instructions


def test_short_pretraining_lowers_the_language_model_loss():
    held_out = pretraining_records(16, seed=99)
    trained = pretrain_small_base(25, records=128, batch_size=8)
    assert _lm_loss(trained, held_out) < _lm_loss(small_qwen2(pretrained=False), held_out) - 1.0


def test_bundled_base_is_better_than_its_random_initialization_on_held_out_records():
    held_out = pretraining_records(16, seed=99)
    assert _lm_loss(small_qwen2(), held_out) < 0.5 * _lm_loss(small_qwen2(pretrained=False), held_out)
