"""LoRA adapters (peft) on a frozen causal language model, and the small Qwen2 model built in code.

Only the adapters train. peft freezes every base weight and adds, beside each targeted linear layer
``W`` (out x in), two trainable matrices ``A`` (r x in) and ``B`` (out x r): the layer computes
``W x + (alpha / r) B A x``. ``B`` starts at zero, so a fresh adapter leaves the base model's output
unchanged, and EvE's population is anchored at that exact starting point (paper, Appendix
"LoRA/Alpaca", "Why EvE's population is initialized differently here").

EvE's box for the adapters is its default per-tensor Kaiming range +-sqrt(6 / fan_in) (paper,
Section "Proximity initialization"): for ``A`` fan_in is the layer's input width, and peft's own
initialization of ``A`` (uniform +-1/sqrt(in)) lies inside it; for ``B`` fan_in is the rank r, so its
box is +-sqrt(6 / r). That box is kept on purpose. ``B`` is a linear map from the r-dimensional
LoRA code to the layer's output, so +-sqrt(6/r) is the range a freshly initialized layer of that
shape would use: wide enough for the adapter to reach updates as large as a layer of its own, and
symmetric about zero, so the zero anchor sits in the middle of the unit cube (z = 0.5) with as much
room on either side. A box fitted to B's initial values instead would be empty (lower = upper = 0),
and a much narrower one would clamp every update. The proximity jitter (sigma = 0.1 of the box)
gives the three other members B entries of standard deviation about 0.2 * sqrt(6/r) / sqrt(3);
``tests/tasks/lora`` checks that EvE moves B away from zero and lowers the loss.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import torch
from torch import nn

from eve_search._checks import InputError, check_int
from eve_search._imports import require
from eve_search.tasks.lora._tokenizer import BYTE_VOCAB_SIZE

__all__ = [
    "LORA_TARGET_MODULES",
    "LoraModelError",
    "SmallModelShape",
    "adapter_parameters",
    "add_lora",
    "base_parameters",
    "bundled_base_path",
    "check_model_dir",
    "load_pretrained",
    "small_qwen2",
]

# The paper's targets (query, value and output projections plus the MLP) in Qwen2's module names.
LORA_TARGET_MODULES = ("q_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
BASE_SEED = 20260601  # the small model's frozen base weights: one fixed network for every trial


class LoraModelError(InputError):
    """A model path that cannot be loaded as a local causal language model."""


@dataclass(frozen=True)
class SmallModelShape:
    """The small Qwen2-architecture model used when no ``--model`` is given.

    Attributes:
        hidden_size: the width of the residual stream.
        intermediate_size: the width of each MLP's hidden layer.
        num_hidden_layers: the number of decoder layers.
        num_attention_heads: the number of query heads per layer.
        num_key_value_heads: the number of key/value heads (grouped-query attention).
        max_position_embeddings: the longest sequence the model accepts, in tokens.
        vocab_size: the number of token ids (the byte tokenizer's 258).

    Example:
        >>> shape = SmallModelShape(num_hidden_layers=1)
        >>> shape.hidden_size, shape.num_hidden_layers, shape.vocab_size
        (64, 1, 258)
    """

    hidden_size: int = 64
    intermediate_size: int = 192
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 512
    vocab_size: int = BYTE_VOCAB_SIZE


@contextmanager
def _global_rng_untouched() -> Iterator[None]:
    """Run library code that initializes weights from torch's global RNG without moving that RNG.

    transformers and peft draw their default initializations from the global generator; every
    weight they draw is overwritten from our own generators afterwards, and the global state is
    restored, so neither the result nor anybody else's random stream depends on it.
    """
    with torch.random.fork_rng(devices=[]):
        yield


def bundled_base_path() -> Path:
    """The small model's pretrained base weights inside the installed package (safetensors)."""
    return Path(str(resources.files("eve_search.data") / "instructions" / "small_qwen2_base.safetensors"))


def small_qwen2(shape: SmallModelShape = SmallModelShape(), *, pretrained: bool = True,
                seed: int = BASE_SEED) -> nn.Module:
    """A ``Qwen2ForCausalLM`` built from a ``Qwen2Config`` with the bundled pretrained weights
    (see :mod:`eve_search.tasks.lora._pretrain`), or, with ``pretrained=False``, weights drawn from
    ``seed`` by Qwen2's own scheme (normal(0, 0.02) for linear and embedding weights, zero biases,
    unit norm scales).

    Args:
        shape: the model's sizes; only the default shape has bundled pretrained weights.
        pretrained: load the bundled base weights (True) or keep the weights drawn from ``seed``.
        seed: the seed of the generator the weights are drawn from.

    Returns:
        The model, in eval mode, on the CPU.

    Raises:
        InputError: ``pretrained`` is True for a shape other than ``SmallModelShape()``.

    Example:
        >>> model = small_qwen2()
        >>> type(model).__name__, model.config.num_hidden_layers
        ('Qwen2ForCausalLM', 2)
    """
    transformers = require("transformers", "lora")
    config = transformers.Qwen2Config(
        vocab_size=shape.vocab_size, hidden_size=shape.hidden_size, intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_hidden_layers, num_attention_heads=shape.num_attention_heads,
        num_key_value_heads=shape.num_key_value_heads, max_position_embeddings=shape.max_position_embeddings,
        tie_word_embeddings=True, pad_token_id=0, bos_token_id=1, eos_token_id=1)
    with _global_rng_untouched():
        model = transformers.Qwen2ForCausalLM(config)
    generator = torch.Generator().manual_seed(seed)
    std = config.initializer_range
    with torch.no_grad():
        for name, p in model.named_parameters():  # tied embeddings appear once
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            elif name.endswith(".bias"):
                p.zero_()
            else:
                p.normal_(0.0, std, generator=generator)
        if pretrained:
            if shape != SmallModelShape():
                raise InputError(f"Invalid shape: {shape!r} (the bundled weights are for SmallModelShape(); pass "
                                 "pretrained=False for another shape)")
            safetensors_torch = require("safetensors.torch", "lora")
            saved = safetensors_torch.load_file(os.fspath(bundled_base_path()))
            params = dict(model.named_parameters())
            if set(saved) != set(params):
                raise InputError(f"Invalid base weights: {str(bundled_base_path())!r} does not match the small "
                                 "model's parameters")
            for name, value in saved.items():
                params[name].copy_(value)
    model.eval()  # no dropout anywhere; the protocol never switches the base to training behaviour
    return model


# The largest configuration or tokenizer file (JSON, text, template) a model directory may hold:
# 64 MiB, about twice the largest tokenizer.json of common models (Gemma's, 33 MB). transformers
# parses these whole, so a larger one is refused before it is read. Weight files are not capped.
MODEL_TEXT_MAX_BYTES = 64 << 20
_TEXT_SUFFIXES = (".json", ".txt", ".jinja", ".model", ".tiktoken")


def check_model_dir(path: str | os.PathLike) -> None:
    """Refuse a model directory that transformers could hang or exhaust memory on: an entry that is a
    named pipe, a device or a socket (``config.json -> /dev/zero``), or a configuration or tokenizer
    file larger than ``MODEL_TEXT_MAX_BYTES``. Raises :class:`LoraModelError`, one line."""
    from eve_search.data._files import file_kind, format_size

    path = os.fspath(path)
    if not os.path.isdir(path):
        raise LoraModelError(f"Invalid model: {path!r} is not a directory (expected a local model saved with "
                             "save_pretrained, e.g. Qwen2.5-1.5B-Instruct)")
    try:
        entries = sorted(os.scandir(path), key=lambda entry: entry.name)
    except OSError as error:
        raise LoraModelError(f"Invalid model: {path!r} cannot be listed ({error.strerror or error})") from None
    for entry in entries:
        try:
            info = entry.stat()  # follows links: what a reader would get
        except OSError:
            continue  # a broken link: transformers reports it if it needs the file
        kind = file_kind(info.st_mode)
        if kind == "a directory":
            continue
        where = f"Invalid model: {path!r}: {entry.name}"
        if kind is not None:
            raise LoraModelError(f"{where} is {kind} (expected a regular file)")
        if entry.name.endswith(_TEXT_SUFFIXES) and info.st_size > MODEL_TEXT_MAX_BYTES:
            raise LoraModelError(f"{where} is {format_size(info.st_size)} (expected at most "
                                 f"{format_size(MODEL_TEXT_MAX_BYTES)} for a configuration or tokenizer file)")


def load_pretrained(path: str | os.PathLike, *, device: str | torch.device | None = None) -> tuple[nn.Module, Any]:
    """(model, tokenizer) from a local directory, never the network (``local_files_only``).

    On a GPU the base is loaded in bfloat16 (the paper's precision); on the CPU in float32. The
    directory is checked first (:func:`check_model_dir`).

    Args:
        path: a local directory written by ``save_pretrained`` (model and tokenizer).
        device: where to put the model; None: ``"cuda"`` when available, else the CPU.

    Returns:
        ``(model, tokenizer)``: the model in eval mode on ``device``, and its tokenizer (given a pad
        token, its end-of-text token, when it has none).

    Raises:
        LoraModelError: the directory cannot be loaded as a causal language model with a tokenizer.

    Example:
        >>> import tempfile
        >>> from eve_search.tasks.lora import byte_tokenizer, load_pretrained, small_qwen2
        >>> folder = tempfile.mkdtemp()
        >>> small_qwen2().save_pretrained(folder)
        >>> _ = byte_tokenizer().save_pretrained(folder)
        >>> model, tokenizer = load_pretrained(folder, device="cpu")
        >>> type(model).__name__, tokenizer.pad_token_id
        ('Qwen2ForCausalLM', 0)
    """
    transformers = require("transformers", "lora")
    path = os.fspath(path)
    check_model_dir(path)
    device = torch.device(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)
        with _global_rng_untouched():
            model = transformers.AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=dtype)
    except RecursionError:
        raise LoraModelError(f"Invalid model: {path!r} has a configuration or tokenizer file nested too deeply to "
                             "parse (expected the files save_pretrained writes)") from None
    except (OSError, ValueError, KeyError, TypeError) as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise LoraModelError(f"Invalid model: {path!r} cannot be loaded as a causal language model with its "
                             f"tokenizer ({first_line})") from None
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.to(device)
    model.eval()
    return model, tokenizer


def add_lora(base: nn.Module, *, rank: int, alpha: float, generator: torch.Generator,
             target_modules: tuple[str, ...] = LORA_TARGET_MODULES) -> nn.Module:
    """Wrap ``base`` with peft LoRA adapters (dropout 0) whose ``A`` matrices come from ``generator``.

    ``A`` is drawn uniform in +-1/sqrt(in_features) (the distribution of peft's default Kaiming-
    uniform initialization, here from our own generator), ``B`` is zero. The base is frozen.

    Args:
        base: the causal language model to adapt (wrapped in place by peft).
        rank: the adapters' rank r, an int >= 1.
        alpha: the LoRA scale numerator (the update is scaled by ``alpha / rank``), > 0.
        generator: the generator the ``A`` matrices are drawn from.
        target_modules: the names of the linear layers that get adapters.

    Returns:
        The peft model, in eval mode, whose only trainable parameters are the adapters.

    Example:
        >>> model = add_lora(small_qwen2(), rank=4, alpha=8, generator=torch.Generator().manual_seed(0))
        >>> all(p.abs().sum() == 0 for n, p in model.named_parameters() if "lora_B" in n)
        True
    """
    check_int("rank", rank, 1)
    if not (isinstance(alpha, (int, float)) and not isinstance(alpha, bool) and alpha > 0):
        raise InputError(f"Invalid alpha: {alpha!r} (expected a number > 0)")
    peft = require("peft", "lora")
    config = peft.LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=0.0, bias="none",
                             target_modules=list(target_modules))
    with _global_rng_untouched(), warnings.catch_warnings():
        # peft 0.21 asks transformers 5 for a renamed attribute; the warning is theirs, not the user's.
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        model = peft.get_peft_model(base, config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_A" in name:
                bound = 1.0 / math.sqrt(p.shape[1])
                draw = torch.empty(p.shape, dtype=p.dtype).uniform_(-bound, bound, generator=generator)
                p.copy_(draw.to(p.device))
            elif "lora_B" in name:
                p.zero_()
    model.eval()
    return model


def adapter_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The trainable (adapter) parameters, in module order: the only tensors an optimizer gets.

    Args:
        model: a model wrapped by :func:`add_lora` (any module works: its ``requires_grad`` ones).

    Returns:
        The parameters with ``requires_grad`` set.

    Example:
        >>> import torch
        >>> model = add_lora(small_qwen2(), rank=2, alpha=4, generator=torch.Generator().manual_seed(0))
        >>> all("lora_" in n for n, p in model.named_parameters() if p.requires_grad)
        True
        >>> len(adapter_parameters(model)) == 2 * 6 * model.config.num_hidden_layers
        True
    """
    return [p for p in model.parameters() if p.requires_grad]


def base_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The frozen base parameters.

    Args:
        model: a model wrapped by :func:`add_lora`.

    Returns:
        The parameters without ``requires_grad``, in module order.

    Example:
        >>> import torch
        >>> model = add_lora(small_qwen2(), rank=2, alpha=4, generator=torch.Generator().manual_seed(0))
        >>> any(p.requires_grad for p in base_parameters(model)), len(base_parameters(model)) > 0
        (False, True)
    """
    return [p for p in model.parameters() if not p.requires_grad]
