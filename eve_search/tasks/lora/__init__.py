"""LoRA fine-tuning with EvE and the baselines (paper, Section "Real-World Fine-Tuning: LoRA").

Importing this package is cheap: transformers and peft (the ``lora`` extra) load only when a model
or tokenizer is built. :func:`lora_task` makes the built-in ``"lora"`` task (the small Qwen2 model
built in code, the bundled instruction set), so every driver of :mod:`eve_search.tasks` can train it.
"""

from eve_search.data._instructions import (
    InstructionDataError,
    bundled_instructions_path,
    generate_instructions,
    load_instructions,
    write_instructions,
)
from eve_search.tasks.lora._model import (
    LORA_TARGET_MODULES,
    LoraModelError,
    SmallModelShape,
    adapter_parameters,
    add_lora,
    base_parameters,
    load_pretrained,
    small_qwen2,
)
from eve_search.tasks.lora._task import (
    IGNORE_INDEX,
    LoraSettings,
    encode_record,
    load_lora_splits,
    lora_task,
    response_loss,
    response_metrics,
)
from eve_search.tasks.lora._tokenizer import byte_tokenizer

__all__ = [
    "IGNORE_INDEX",
    "LORA_TARGET_MODULES",
    "InstructionDataError",
    "LoraModelError",
    "LoraSettings",
    "SmallModelShape",
    "adapter_parameters",
    "add_lora",
    "base_parameters",
    "bundled_instructions_path",
    "byte_tokenizer",
    "encode_record",
    "generate_instructions",
    "load_instructions",
    "load_lora_splits",
    "load_pretrained",
    "lora_task",
    "response_loss",
    "response_metrics",
    "small_qwen2",
    "write_instructions",
]
