"""The lora task: masking, splits, the response-token loss, and the registry entry."""

from __future__ import annotations

import torch

from eve_search.tasks.lora import (
    IGNORE_INDEX,
    LoraSettings,
    byte_tokenizer,
    encode_record,
    load_lora_splits,
    lora_task,
    response_loss,
)
from eve_search.tasks import get_task

RECORD = {"instruction": "Reverse the word.", "input": "stone", "output": "enots"}


def test_prompt_tokens_are_masked_and_the_response_ends_with_end_of_text():
    tokenizer = byte_tokenizer()
    ids, labels = encode_record(tokenizer, RECORD, 512)
    response = len("enots") + 1
    assert labels[:-response] == [IGNORE_INDEX] * (len(ids) - response)
    assert labels[-response:] == ids[-response:]
    assert ids[-1] == tokenizer.eos_token_id
    assert tokenizer.decode(ids[-response:-1]) == "enots"
    assert tokenizer.decode(ids[:-response]) == "Instruction: Reverse the word.\nInput: stone\nResponse: "


def test_cap_cuts_the_response_and_drops_records_without_one():
    tokenizer = byte_tokenizer()
    prompt = len(encode_record(tokenizer, RECORD, 512)[0]) - 6
    ids, labels = encode_record(tokenizer, RECORD, prompt + 2)
    assert len(ids) == prompt + 2 and labels[-2:] == ids[-2:]
    assert encode_record(tokenizer, RECORD, prompt) is None


def test_chat_template_is_used_when_the_tokenizer_has_one():
    tokenizer = byte_tokenizer()
    tokenizer.chat_template = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}"
                               "{% if add_generation_prompt %}<assistant>{% endif %}")
    ids, labels = encode_record(tokenizer, RECORD, 512)
    prompt = tokenizer.decode([i for i, label in zip(ids, labels) if label == IGNORE_INDEX])
    assert prompt == "<user>Reverse the word.\n\nstone<assistant>"


def test_splits_follow_the_paper_sizes_and_are_fixed():
    splits = load_lora_splits(LoraSettings())
    again = load_lora_splits(LoraSettings())
    assert (splits.x_train.shape[0], splits.x_val.shape[0], splits.x_test.shape[0]) == (1152, 16, 64)
    assert torch.equal(splits.x_test, again.x_test) and torch.equal(splits.y_train, again.y_train)
    assert ((splits.y_train != IGNORE_INDEX).sum(dim=1) >= 2).all()  # every row has response tokens + end


def test_loss_counts_response_tokens_only_and_ignores_padding():
    task = lora_task()
    data = task.data()
    model = task.build_model({}, data, torch.Generator().manual_seed(0))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:  # a non-trivial adapter, so predictions depend on it
                p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(1)) * 0.05)
        x, y = data.x_train[:2], data.y_train[:2]
        pair = response_loss(model, x, y)
        # The mean over response tokens of the untrimmed batch, computed directly.
        logits = model(input_ids=x).logits[:, :-1]
        ce = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y[:, 1:].reshape(-1),
                                               ignore_index=IGNORE_INDEX, reduction="sum")
        assert torch.allclose(pair, ce / (y[:, 1:] != IGNORE_INDEX).sum(), atol=1e-5)
        padded = torch.cat([x, torch.zeros(2, 7, dtype=x.dtype)], dim=1)
        labels = torch.cat([y, torch.full((2, 7), IGNORE_INDEX)], dim=1)
        assert torch.allclose(response_loss(model, padded, labels), pair, atol=1e-6)


def test_registered_task_ranks_by_validation_loss():
    task = get_task("lora")
    assert (task.metric, task.mode, task.batch_size) == ("loss", "min", 2)
    metrics = task.evaluate(task.build_model({}, task.data(), torch.Generator().manual_seed(0)), task.data(), "val")
    assert set(metrics) == {"loss", "token_accuracy"} and 0.0 <= metrics["token_accuracy"] <= 1.0


def test_settings_reject_bad_values():
    import pytest

    for kwargs, fragment in (({"rank": 0}, "rank"), ({"max_length": 1}, "max_length"), ({"val_size": 0}, "val_size")):
        with pytest.raises(ValueError, match=fragment):
            LoraSettings(**kwargs)
