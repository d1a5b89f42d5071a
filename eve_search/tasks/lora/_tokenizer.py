"""A byte-level tokenizer built in code (nothing downloaded): one token per UTF-8 byte plus two specials.

It is a real ``transformers`` fast tokenizer (the ``tokenizers`` library's byte-level BPE with an
empty merge list), so it saves and loads with ``save_pretrained`` / ``AutoTokenizer`` like any
hub tokenizer and the ``--model PATH`` code path is the same for it and for a real model.
"""

from __future__ import annotations

from typing import Any

from eve_search._imports import require

__all__ = ["BYTE_VOCAB_SIZE", "EOS_TOKEN", "PAD_TOKEN", "byte_to_symbol", "byte_tokenizer"]

PAD_TOKEN = "<|pad|>"
EOS_TOKEN = "<|endoftext|>"
BYTE_VOCAB_SIZE = 258  # pad (id 0), end of text (id 1), then bytes 0..255 as ids 2..257


def byte_to_symbol() -> dict[int, str]:
    """The printable stand-in of every byte that byte-level BPE uses as its alphabet.

    Bytes that are visible characters stand for themselves; the others (controls, space, a few
    Latin-1 ones) are moved, in order, to the code points from 256 up. This is the convention of
    byte-level BPE tokenizers (GPT-2 introduced it); written out here so the vocabulary is explicit.

    Example:
        >>> table = byte_to_symbol()
        >>> table[ord("a")], table[ord(" ")], len(set(table.values()))
        ('a', 'Ġ', 256)
    """
    visible = set(range(ord("!"), ord("~") + 1)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
    table, moved = {}, 0
    for byte in range(256):
        if byte in visible:
            table[byte] = chr(byte)
        else:
            table[byte] = chr(256 + moved)
            moved += 1
    return table


def byte_tokenizer() -> Any:
    """A ``PreTrainedTokenizerFast`` with ids 0 = pad, 1 = end of text, 2 + b = byte b.

    Returns:
        The tokenizer (258 ids, ``BYTE_VOCAB_SIZE``), built in code without downloading anything.

    Example:
        >>> tokenizer = byte_tokenizer()
        >>> tokenizer("hi", add_special_tokens=False)["input_ids"]
        [106, 107]
    """
    tokenizers = require("tokenizers", "lora")
    transformers = require("transformers", "lora")
    vocab = {PAD_TOKEN: 0, EOS_TOKEN: 1}
    for byte, symbol in byte_to_symbol().items():
        vocab[symbol] = 2 + byte
    model = tokenizers.models.BPE(vocab=vocab, merges=[])
    backend = tokenizers.Tokenizer(model)
    backend.add_special_tokens([PAD_TOKEN, EOS_TOKEN])
    backend.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = tokenizers.decoders.ByteLevel()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=backend, pad_token=PAD_TOKEN, eos_token=EOS_TOKEN)
