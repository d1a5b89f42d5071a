"""The ``lora`` task: LoRA fine-tuning of a causal language model on instruction/response pairs.

Inputs are token ids, right-padded; targets are the same ids with every prompt and padding
position set to -100, so the loss is the next-token cross-entropy on response tokens only (the
paper's "standard SFT masking", Appendix "GSM8K", "Data and masking"). The splits follow the
paper's Alpaca protocol (Appendix "LoRA/Alpaca"): 5% / 5% of the records carved out for validation
and test with a fixed split seed shared by every method, a fixed 16-example validation probe and a
fixed 64-example test sample, sequences capped at 512 tokens, minibatch 2. The ranked metric is the
validation loss (mode ``"min"``).

Example:
    >>> from eve_search.tasks.lora import lora_task
    >>> task = lora_task()
    >>> data = task.data()
    >>> data.x_train.shape[0], data.x_val.shape[0], data.x_test.shape[0]
    (1152, 16, 64)
    >>> model = task.build_model({}, data, torch.Generator().manual_seed(0))
    >>> metrics = task.evaluate(model, data, "val")
    >>> 3.0 < metrics["loss"] < 4.5  # a fresh adapter: the bundled pretrained base's own loss
    True
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from eve_search._checks import InputError, check_int
from eve_search._imports import require
from eve_search.data._instructions import load_instructions
from eve_search.tasks.lora._model import (
    LoraModelError,
    add_lora,
    check_model_dir,
    load_pretrained,
    small_qwen2,
)
from eve_search.tasks.lora._tokenizer import byte_tokenizer
from eve_search.tasks._task import Config, Splits, Task

__all__ = [
    "IGNORE_INDEX",
    "LoraSettings",
    "encode_record",
    "load_lora_splits",
    "lora_task",
    "response_loss",
    "response_metrics",
]

IGNORE_INDEX = -100
SPLIT_SEED = 42


class LoraSettings:
    """What a ``lora`` task is made of (all fixed for a task; the search varies only ``lr`` and
    ``weight_decay``).

    Args:
        model_path: a local model directory (``from_pretrained(..., local_files_only=True)``), or
            None for the small Qwen2 model built in code with the byte tokenizer.
        data_path: instruction records (JSON lines or a JSON list with ``instruction``, ``input``,
            ``output``), or None for the bundled set.
        rank, alpha: LoRA rank and scale; None: the paper's 32 / 64 for a real model, 8 / 16 (the
            same alpha/rank = 2) for the small one, whose hidden width is only 64.
        max_length: token cap per example (the paper's 512).
        val_size, test_size: the validation probe and the test sample (the paper's 16 and 64).
        eval_batch: examples per forward when scoring a whole split.

    Example:
        >>> LoraSettings(rank=4)
        LoraSettings(model_path=None, data_path=None, rank=4, alpha=8, max_length=512, val_size=16, test_size=64)
        >>> LoraSettings("/models/qwen").rank  # a real model: the paper's rank
        32
    """

    def __init__(self, model_path: str | os.PathLike | None = None, data_path: str | os.PathLike | None = None,
                 *, rank: int | None = None, alpha: float | None = None, max_length: int = 512,
                 val_size: int = 16, test_size: int = 64, eval_batch: int = 16) -> None:
        for name, value in (("max_length", max_length), ("val_size", val_size), ("test_size", test_size),
                            ("eval_batch", eval_batch)):
            check_int(name, value, 1)
        if max_length < 2:
            raise InputError(f"Invalid max_length: {max_length} (expected >= 2: a prompt token and a response token)")
        self.model_path = None if model_path is None else os.fspath(model_path)
        self.data_path = None if data_path is None else os.fspath(data_path)
        default_rank = 8 if self.model_path is None else 32
        self.rank = default_rank if rank is None else rank
        self.alpha = float(2 * self.rank if alpha is None else alpha)
        check_int("rank", self.rank, 1)
        if not self.alpha > 0:
            raise InputError(f"Invalid alpha: {alpha!r} (expected a number > 0)")
        self.max_length, self.val_size, self.test_size, self.eval_batch = max_length, val_size, test_size, eval_batch

    def __repr__(self) -> str:
        return (f"LoraSettings(model_path={self.model_path!r}, data_path={self.data_path!r}, rank={self.rank}, "
                f"alpha={self.alpha:g}, max_length={self.max_length}, val_size={self.val_size}, "
                f"test_size={self.test_size})")


def _prompt_text(record: Mapping[str, str]) -> str:
    if record.get("input"):
        return f"{record['instruction']}\n\n{record['input']}"
    return record["instruction"]


def _prompt_ids(tokenizer: Any, record: Mapping[str, str]) -> list[int]:
    """The prompt's token ids: the tokenizer's chat template when it has one (an instruct model),
    else a plain ``Instruction / Input / Response`` layout."""
    if getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template([{"role": "user", "content": _prompt_text(record)}],
                                            add_generation_prompt=True, tokenize=True)
        if isinstance(ids, Mapping):
            ids = ids["input_ids"]
        return [int(i) for i in ids]
    text = f"Instruction: {record['instruction']}\n"
    if record.get("input"):
        text += f"Input: {record['input']}\n"
    return list(tokenizer(text + "Response: ", add_special_tokens=False)["input_ids"])


def encode_record(tokenizer: Any, record: Mapping[str, str], max_length: int) -> tuple[list[int], list[int]] | None:
    """(input ids, labels) of one record: prompt then response then end-of-text, prompt labels -100,
    cut at ``max_length``; None when not one response token fits.

    Args:
        tokenizer: the model's tokenizer (its chat template, when it has one, frames the prompt).
        record: an instruction record: ``instruction``, optional ``input``, ``output``.
        max_length: the most tokens kept, prompt included.

    Returns:
        ``(ids, labels)`` of equal length, the prompt positions of ``labels`` set to ``IGNORE_INDEX``;
        None when the prompt alone reaches ``max_length``.

    Example:
        >>> from eve_search.tasks.lora import byte_tokenizer
        >>> ids, labels = encode_record(byte_tokenizer(), {"instruction": "Hi", "output": "ok"}, 64)
        >>> labels[-3:] == ids[-3:], set(labels[:-3])
        (True, {-100})
    """
    prompt = _prompt_ids(tokenizer, record)
    response = list(tokenizer(record["output"], add_special_tokens=False)["input_ids"]) + [tokenizer.eos_token_id]
    ids = (prompt + response)[:max_length]
    if len(prompt) >= len(ids):
        return None
    return ids, [IGNORE_INDEX] * len(prompt) + ids[len(prompt):]


def _pad(rows: Sequence[tuple[list[int], list[int]]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(ids) for ids, _ in rows)
    x = torch.full((len(rows), width), pad_id, dtype=torch.long)
    y = torch.full((len(rows), width), IGNORE_INDEX, dtype=torch.long)
    for k, (ids, labels) in enumerate(rows):
        x[k, :len(ids)] = torch.tensor(ids)
        y[k, :len(labels)] = torch.tensor(labels)
    return x, y


def _tokenizer_of(settings: LoraSettings) -> Any:
    if settings.model_path is None:
        return byte_tokenizer()
    transformers = require("transformers", "lora")
    check_model_dir(settings.model_path)  # a directory without pipes, devices or oversized JSON
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(settings.model_path, local_files_only=True)
    except RecursionError:
        raise LoraModelError(f"Invalid model: {settings.model_path!r} has a configuration or tokenizer file nested too "
                             "deeply to parse (expected the files save_pretrained writes)") from None
    except (OSError, ValueError, KeyError, TypeError) as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise LoraModelError(f"Invalid model: {settings.model_path!r} has no loadable tokenizer ({first_line})") from None
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_lora_splits(settings: LoraSettings, data_dir: Path | None = None) -> Splits:
    """Tokenize the records and carve out the splits (fixed split seed 42, the same for every method).

    ``data_dir`` (the task's data directory argument) overrides ``settings.data_path``; it may be
    a file or a directory holding ``instructions.jsonl``.

    Args:
        settings: the task's settings (records, tokenizer, ``max_length``, split sizes).
        data_dir: a records file or a folder holding ``instructions.jsonl``; None: ``settings.data_path``.

    Returns:
        Right-padded token ids (``x_*``) and labels (``y_*``, prompts and padding ``IGNORE_INDEX``)
        of the training set, the validation probe and the test sample.

    Raises:
        InputError: too few usable records for the validation and test sizes and a training set.

    Example:
        >>> splits = load_lora_splits(LoraSettings(val_size=4, test_size=4, max_length=64))
        >>> splits.x_val.shape[0], splits.x_test.shape[0], splits.x_train.shape[1] <= 64
        (4, 4, True)
    """
    path: str | os.PathLike | None = settings.data_path
    if data_dir is not None:
        path = data_dir / "instructions.jsonl" if Path(data_dir).is_dir() else data_dir
    records = load_instructions(path)
    tokenizer = _tokenizer_of(settings)
    encoded = [row for row in (encode_record(tokenizer, r, settings.max_length) for r in records) if row is not None]
    carve = -(-len(encoded) * 5 // 100)  # 5% each for validation and test, rounded up
    if carve < max(settings.val_size, settings.test_size) or len(encoded) - 2 * carve < 2:
        raise InputError(f"Invalid instruction data: {len(encoded)} usable records are too few (expected enough "
                         f"for 5% >= {max(settings.val_size, settings.test_size)} examples and a training set)")
    order = np.random.default_rng(SPLIT_SEED).permutation(len(encoded))
    test = [encoded[i] for i in order[:carve]][:settings.test_size]
    val = [encoded[i] for i in order[carve:2 * carve]][:settings.val_size]
    train = [encoded[i] for i in order[2 * carve:]]
    pad_id = int(tokenizer.pad_token_id)
    (x_train, y_train), (x_val, y_val), (x_test, y_test) = _pad(train, pad_id), _pad(val, pad_id), _pad(test, pad_id)
    return Splits(x_train, y_train, x_val, y_val, x_test, y_test)


def _trim(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Drop the columns after the batch's last response token (right padding only)."""
    positions = torch.arange(1, y.shape[1] + 1, device=y.device)
    end = int(((y != IGNORE_INDEX) * positions).max())
    return x[:, :end], y[:, :end]


def _device_of(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


def _token_losses(model: nn.Module, x: torch.Tensor,
                  y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token cross-entropy of each next-token prediction (0 where masked), the mask of response
    tokens, the logits and the targets."""
    device = _device_of(model)
    x, y = _trim(x.to(device), y.to(device))
    logits = model(input_ids=x).logits[:, :-1].float()
    targets = y[:, 1:]
    losses = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                         ignore_index=IGNORE_INDEX, reduction="none").view_as(targets)
    return losses, targets != IGNORE_INDEX, logits, targets


def response_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy over the response tokens of a minibatch (prompts masked).

    Args:
        model: the causal language model (its ``logits`` are read).
        x: token ids, (batch, length), right-padded.
        y: labels of the same shape, ``IGNORE_INDEX`` where no loss is taken.

    Returns:
        The scalar loss (with a graph, for ``backward``).

    Example:
        >>> from eve_search.tasks.lora import byte_tokenizer, small_qwen2
        >>> ids, labels = encode_record(byte_tokenizer(), {"instruction": "Hi", "output": "ok"}, 64)
        >>> loss = response_loss(small_qwen2(), torch.tensor([ids]), torch.tensor([labels]))
        >>> loss.ndim, bool(loss > 0)
        (0, True)
    """
    losses, mask, _, _ = _token_losses(model, x, y)
    return losses.sum() / mask.sum()


def response_metrics(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, eval_batch: int = 16) -> dict[str, float]:
    """``loss`` (mean cross-entropy over every response token of the split) and ``token_accuracy``
    (greedy next-token accuracy on the same tokens), in chunks of ``eval_batch`` examples.

    Args:
        model: the causal language model.
        x: token ids of a whole split, (examples, length), right-padded.
        y: its labels, ``IGNORE_INDEX`` where no loss is taken.
        eval_batch: examples per forward pass.

    Returns:
        ``{"loss": ..., "token_accuracy": ...}``, floats.

    Example:
        >>> from eve_search.tasks.lora import byte_tokenizer, small_qwen2
        >>> ids, labels = encode_record(byte_tokenizer(), {"instruction": "Hi", "output": "ok"}, 64)
        >>> with torch.no_grad():
        ...     metrics = response_metrics(small_qwen2(), torch.tensor([ids] * 3), torch.tensor([labels] * 3),
        ...                                eval_batch=2)
        >>> sorted(metrics), 0.0 <= metrics["token_accuracy"] <= 1.0
        (['loss', 'token_accuracy'], True)
    """
    total, correct, count = 0.0, 0, 0
    for start in range(0, x.shape[0], eval_batch):
        losses, mask, logits, targets = _token_losses(model, x[start:start + eval_batch], y[start:start + eval_batch])
        total += float(losses.sum())
        correct += int(((logits.argmax(dim=-1) == targets) & mask).sum())
        count += int(mask.sum())
    return {"loss": total / count, "token_accuracy": correct / count}


class _Builder:
    """``build_model`` of a lora task (a class, not a closure, so that the task pickles)."""

    def __init__(self, settings: LoraSettings) -> None:
        self.settings = settings

    def __call__(self, config: Config, data: Splits, generator: torch.Generator) -> nn.Module:
        del config, data  # the search varies only lr and weight_decay; the model is the task's
        if self.settings.model_path is None:
            base = small_qwen2()
        else:
            base, _ = load_pretrained(self.settings.model_path)
        return add_lora(base, rank=self.settings.rank, alpha=self.settings.alpha, generator=generator)


class _Loader:
    def __init__(self, settings: LoraSettings) -> None:
        self.settings = settings

    def __call__(self, data_dir: Path | None) -> Splits:
        return load_lora_splits(self.settings, data_dir)


class _Metrics:
    def __init__(self, eval_batch: int) -> None:
        self.eval_batch = eval_batch

    def __call__(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
        return response_metrics(model, x, y, eval_batch=self.eval_batch)


def lora_task(settings: LoraSettings | None = None, *, name: str = "lora") -> Task:
    """A :class:`~eve_search.tasks.Task` that fine-tunes LoRA adapters (the registered ``"lora"``
    task is ``lora_task()``: the small model and the bundled instructions).

    Args:
        settings: the model, data and LoRA sizes; None: ``LoraSettings()``.
        name: the task's name.

    Returns:
        The task: batch 2, ranked by validation ``loss`` (mode ``"min"``).

    Example:
        >>> task = lora_task(LoraSettings(rank=4), name="lora-r4")
        >>> task.name, task.metric, task.mode, task.batch_size
        ('lora-r4', 'loss', 'min', 2)
    """
    settings = LoraSettings() if settings is None else settings
    model = "the small Qwen2 model built in code" if settings.model_path is None else repr(settings.model_path)
    return Task(
        name, f"LoRA (rank {settings.rank}) on {model}: response-token loss on instruction data, batch 2, "
        "ranked by validation loss",
        load_data=_Loader(settings), build_model=_Builder(settings), loss=response_loss,
        metrics=_Metrics(settings.eval_batch), metric="loss", mode="min", batch_size=2)
