"""The bundled instruction data set: small arithmetic and string tasks, generated from one seed.

Every example is an Alpaca-style record ``{"instruction", "input", "output"}`` (the same three
fields as the Alpaca data set the paper fine-tunes on, so a local copy of Alpaca loads the same
way). The bundled file ``eve_search/data/instructions/instructions.jsonl`` is exactly
``generate_instructions()`` written by :func:`write_instructions`; a test checks that, so the file
can always be regenerated from this code.

Example:
    >>> from eve_search.lora import generate_instructions
    >>> records = generate_instructions(count=3, seed=0)
    >>> sorted(records[0])
    ['input', 'instruction', 'output']
    >>> generate_instructions(count=3, seed=0) == records
    True
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from importlib import resources
from pathlib import Path

import numpy as np

__all__ = [
    "DEFAULT_COUNT",
    "DEFAULT_SEED",
    "InstructionDataError",
    "bundled_instructions_path",
    "generate_instructions",
    "load_instructions",
    "write_instructions",
]

DEFAULT_COUNT = 1280
DEFAULT_SEED = 2026

Record = dict[str, str]

# Short, common English words (lower case, letters only) for the string tasks.
WORDS = ["apple", "bread", "chair", "dance", "eagle", "flame", "grape", "house", "input", "juice", "knife", "lemon", "mango", "night", "ocean", "piano", "queen", "river", "stone", "table", "uncle", "voice", "water", "xenon", "yacht", "zebra", "amber", "blaze", "cloud", "drift", "ember", "frost", "glide", "honey", "ivory", "jolly", "karma", "lunar", "maple", "noble", "orbit", "pearl", "quill", "robin", "solar", "tiger", "ultra", "vivid", "whale", "young", "zesty", "acorn", "bloom", "candle", "desert", "forest", "garden", "harbor", "island", "jungle", "kettle", "ladder", "marble", "needle", "orange", "pepper", "rocket", "silver", "tunnel", "violet", "window", "yellow", "planet", "spring", "summer", "winter", "autumn", "bridge", "castle", "dragon", "engine", "flower", "guitar", "hammer", "jacket", "lizard", "mirror", "number", "pillow", "rabbit", "saddle", "ticket", "velvet", "wizard", "button", "carpet", "donkey"]


def _add(rng: np.random.Generator) -> Record:
    a, b = (int(v) for v in rng.integers(0, 100, size=2))
    return {"instruction": "Add the two numbers.", "input": f"{a} {b}", "output": str(a + b)}


def _subtract(rng: np.random.Generator) -> Record:
    a, b = sorted((int(v) for v in rng.integers(0, 100, size=2)), reverse=True)
    return {"instruction": "Subtract the second number from the first.", "input": f"{a} {b}",
            "output": str(a - b)}


def _word(rng: np.random.Generator) -> str:
    return WORDS[int(rng.integers(len(WORDS)))]


def _reverse(rng: np.random.Generator) -> Record:
    word = _word(rng)
    return {"instruction": "Reverse the word.", "input": word, "output": word[::-1]}


def _uppercase(rng: np.random.Generator) -> Record:
    word = _word(rng)
    return {"instruction": "Write the word in capital letters.", "input": word, "output": word.upper()}


def _length(rng: np.random.Generator) -> Record:
    word = _word(rng)
    return {"instruction": "How many letters does the word have?", "input": word, "output": str(len(word))}


def _first_letter(rng: np.random.Generator) -> Record:
    words = [_word(rng) for _ in range(3)]
    return {"instruction": "Write the first letter of each word.", "input": " ".join(words),
            "output": "".join(w[0] for w in words)}


def _sort_digits(rng: np.random.Generator) -> Record:
    digits = [int(v) for v in rng.integers(0, 10, size=int(rng.integers(3, 7)))]
    return {"instruction": "Sort the digits in increasing order.", "input": " ".join(map(str, digits)),
            "output": " ".join(map(str, sorted(digits)))}


def _next_letter(rng: np.random.Generator) -> Record:
    letter = chr(ord("a") + int(rng.integers(25)))
    return {"instruction": "Which letter comes next in the alphabet?", "input": letter,
            "output": chr(ord(letter) + 1)}


def _larger(rng: np.random.Generator) -> Record:
    a, b = (int(v) for v in rng.choice(1000, size=2, replace=False))
    return {"instruction": "Which number is larger?", "input": f"{a} {b}", "output": str(max(a, b))}


def _repeat(rng: np.random.Generator) -> Record:
    word, times = _word(rng), int(rng.integers(2, 4))
    return {"instruction": f"Repeat the word {times} times.", "input": word, "output": " ".join([word] * times)}


TASK_FAMILIES: tuple[Callable[[np.random.Generator], Record], ...] = (
    _add, _subtract, _reverse, _uppercase, _length, _first_letter, _sort_digits, _next_letter, _larger, _repeat)


def generate_instructions(count: int = DEFAULT_COUNT, seed: int = DEFAULT_SEED) -> list[Record]:
    """``count`` records, each from a task family drawn uniformly, all from one numpy generator."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"Invalid count: {count!r} (expected an int >= 1)")
    rng = np.random.default_rng(seed)
    return [TASK_FAMILIES[int(rng.integers(len(TASK_FAMILIES)))](rng) for _ in range(count)]


def write_instructions(path: str | os.PathLike, records: list[Record]) -> None:
    """Write records as JSON lines (keys sorted, UTF-8), the bundled file's format."""
    with open(path, "w", encoding="utf-8", newline="\n") as handle:
        handle.writelines(json.dumps(record, sort_keys=True, ensure_ascii=False) + "\n" for record in records)


def bundled_instructions_path() -> Path:
    """Where the bundled instruction file lives inside the installed package."""
    return Path(str(resources.files("eve_search.data") / "instructions" / "instructions.jsonl"))


class InstructionDataError(ValueError):
    """An instruction file is missing, unreadable or not made of instruction records."""


def load_instructions(path: str | os.PathLike | None = None) -> list[Record]:
    """Records from a JSON-lines file or a JSON list (Alpaca's own format); None: the bundled file.

    Every record needs a string ``instruction`` and ``output``; ``input`` is optional.
    """
    path = bundled_instructions_path() if path is None else Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise InstructionDataError(f"Invalid instruction data: {str(path)!r} cannot be read "
                                   f"({type(error).__name__}: {error})") from None
    try:
        stripped = text.lstrip()
        if stripped.startswith("["):
            records = json.loads(text)
        else:
            records = [json.loads(line) for line in text.splitlines() if line.strip()]
    except json.JSONDecodeError as error:
        raise InstructionDataError(f"Invalid instruction data: {str(path)!r} is not JSON lines or a JSON list "
                                   f"({error})") from None
    if not isinstance(records, list) or not records:
        raise InstructionDataError(f"Invalid instruction data: {str(path)!r} holds no records")
    for index, record in enumerate(records):
        if not (isinstance(record, dict) and isinstance(record.get("instruction"), str)
                and isinstance(record.get("output"), str) and isinstance(record.get("input", ""), str)):
            raise InstructionDataError(f"Invalid instruction data: record {index} of {str(path)!r} needs string "
                                       "'instruction' and 'output' fields (and optionally 'input')")
    return [{"instruction": r["instruction"], "input": r.get("input", ""), "output": r["output"]} for r in records]

