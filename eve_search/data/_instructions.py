"""The bundled instruction data set: small arithmetic and string tasks, generated from one seed.

Every example is an Alpaca-style record ``{"instruction", "input", "output"}`` (the same three
fields as the Alpaca data set the paper fine-tunes on, so a local copy of Alpaca loads the same
way). The bundled file ``eve_search/data/instructions/instructions.jsonl`` is exactly
``generate_instructions()`` written by :func:`write_instructions`; a test checks that, so the file
can always be regenerated from this code.

Example:
    >>> from eve_search.tasks.lora import generate_instructions
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

from eve_search._checks import InputError, check_int
from eve_search.data._files import DataFile, format_size

__all__ = [
    "DEFAULT_COUNT",
    "DEFAULT_SEED",
    "INSTRUCTIONS_MAX_BYTES",
    "INSTRUCTIONS_MAX_RECORDS",
    "RECORD_MAX_BYTES",
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
    """``count`` records, each from a task family drawn uniformly, all from one numpy generator.

    Args:
        count: how many records, an int >= 1.
        seed: the seed of the numpy generator (the same seed gives the same records).

    Returns:
        The records, each a dict of string ``instruction``, ``input`` and ``output``.

    Example:
        >>> from eve_search.tasks.lora import generate_instructions
        >>> [record["instruction"] for record in generate_instructions(count=2, seed=1)]
        ['How many letters does the word have?', 'Which letter comes next in the alphabet?']
    """
    check_int("count", count, 1)
    rng = np.random.default_rng(seed)
    return [TASK_FAMILIES[int(rng.integers(len(TASK_FAMILIES)))](rng) for _ in range(count)]


def write_instructions(path: str | os.PathLike, records: list[Record]) -> None:
    """Write records as JSON lines (keys sorted, UTF-8), the bundled file's format.

    Args:
        path: the file to write (replaced if it exists).
        records: the records to write, one JSON object per line.

    Example:
        >>> import pathlib, tempfile
        >>> from eve_search.tasks.lora import load_instructions, write_instructions
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "records.jsonl"
        >>> write_instructions(path, [{"instruction": "Say hi.", "input": "", "output": "hi"}])
        >>> path.read_text().splitlines()
        ['{"input": "", "instruction": "Say hi.", "output": "hi"}']
        >>> load_instructions(path)
        [{'instruction': 'Say hi.', 'input': '', 'output': 'hi'}]
    """
    with open(path, "w", encoding="utf-8", newline="\n") as handle:
        handle.writelines(json.dumps(record, sort_keys=True, ensure_ascii=False) + "\n" for record in records)


def bundled_instructions_path() -> Path:
    """Where the bundled instruction file lives inside the installed package.

    Returns:
        The path of ``instructions.jsonl`` inside ``eve_search/data/instructions``.

    Example:
        >>> from eve_search.tasks.lora import bundled_instructions_path
        >>> bundled_instructions_path().name, bundled_instructions_path().is_file()
        ('instructions.jsonl', True)
    """
    return Path(str(resources.files("eve_search.data") / "instructions" / "instructions.jsonl"))


class InstructionDataError(InputError):
    """An instruction file is missing, unreadable or not made of instruction records."""


# Limits on an instruction file (a file past one is refused with one line, before it is parsed further):
# * INSTRUCTIONS_MAX_BYTES, the file: 128 MiB, about 6 times Alpaca's alpaca_data.json (22 MB);
# * INSTRUCTIONS_MAX_RECORDS: 100,000 records, about twice Alpaca's 52,002 (every record becomes a padded
#   row of up to --max-length tokens: 100,000 rows of 512 tokens are 0.8 GB of inputs and targets);
# * RECORD_MAX_BYTES, one record (a JSON line or an element of the list): 1 MiB, far more text than
#   the 512-token cap keeps, and it keeps the tokenizer away from pathological inputs.
INSTRUCTIONS_MAX_BYTES = 128 << 20
INSTRUCTIONS_MAX_RECORDS = 100_000
RECORD_MAX_BYTES = 1 << 20
_EXPECTED = "JSON lines or a JSON list of records with string 'instruction' and 'output' (and optionally 'input')"
_WHITESPACE = " \t\n\r"


def _kind(value: object) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def _problem(value: object) -> str | None:
    """What is wrong with one record (None: nothing)."""
    if not isinstance(value, dict):
        return f"is {_kind(value)} (expected an object with string 'instruction' and 'output' and optionally 'input')"
    for key in ("instruction", "output", "input"):
        if key not in value:
            if key == "input":
                continue
            return f"needs string 'instruction' and 'output' fields (and optionally 'input'); it has no {key!r}"
        if not isinstance(value[key], str):
            return (f"needs string 'instruction' and 'output' fields (and optionally 'input'); its {key!r} is "
                    f"{_kind(value[key])}")
        if not value[key].isascii():
            try:
                value[key].encode("utf-8")
            except UnicodeEncodeError:
                return f"has an unpaired surrogate escape (such as \\ud800) in its {key!r} (expected text)"
    return None


def _too_many(fail: Callable[[str], InstructionDataError]) -> InstructionDataError:
    return fail(f"holds more than {INSTRUCTIONS_MAX_RECORDS:,} records (expected at most that many, the instruction "
                "loader's limit; use a subset)")


def _accept(records: list[Record], value: object, where: Callable[[], str],
            fail: Callable[[str], InstructionDataError]) -> None:
    """Append one decoded record to ``records`` after the checks every record gets: the record count limit,
    then :func:`_problem`. ``where`` says which record it is (``"record 3 (line 7)"``); it is called only
    to build a message, so the line counting it may do costs nothing for a good file."""
    if len(records) == INSTRUCTIONS_MAX_RECORDS:
        raise _too_many(fail)
    problem = _problem(value)
    if problem is not None:
        raise fail(f"{where()} {problem}")
    records.append(value)  # type: ignore[arg-type]  # _problem checked it is a record


def _json_lines(content: bytes, fail: Callable[[str], InstructionDataError]) -> list[Record]:
    records: list[Record] = []
    for number, line in enumerate(content.split(b"\n"), start=1):
        if not line.strip():
            continue
        def where() -> str:
            return f"record {len(records)} (line {number})"

        if len(line) > RECORD_MAX_BYTES:
            raise fail(f"{where()} is {len(line):,} bytes (expected at most {format_size(RECORD_MAX_BYTES)} per "
                       "record)")
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as error:
            raise fail(f"line {number} is not UTF-8 text (byte 0x{line[error.start]:02x} at column "
                       f"{error.start + 1}; expected {_EXPECTED})") from None
        try:
            value = json.loads(text)
        except json.JSONDecodeError as error:
            raise fail(f"line {number} is not JSON lines or a JSON list ({error.msg} at column {error.colno}; "
                       f"expected {_EXPECTED})") from None
        except RecursionError:
            raise fail(f"line {number} nests JSON too deeply to parse (expected one flat record per line)") from None
        _accept(records, value, where, fail)
    return records


def _json_list(text: str, fail: Callable[[str], InstructionDataError]) -> list[Record]:
    """The elements of a JSON list, decoded one at a time (each checked, and counted against the limits,
    as soon as it is read)."""
    decoder = json.JSONDecoder()
    records: list[Record] = []

    def line(position: int) -> int:  # only counted for a message
        return text.count("\n", 0, position) + 1

    def where() -> str:  # the record starting at ``position``
        return f"record {len(records)} (line {line(position)})"

    position = text.index("[") + 1
    while True:
        while position < len(text) and text[position] in _WHITESPACE:
            position += 1
        if position < len(text) and text[position] == "]" and not records:
            position += 1
            break
        try:
            value, end = decoder.raw_decode(text, position)
        except json.JSONDecodeError as error:
            raise fail(f"line {error.lineno} is not JSON lines or a JSON list ({error.msg} at column {error.colno}; "
                       f"expected {_EXPECTED})") from None
        except RecursionError:
            raise fail(f"{where()} nests JSON too deeply to parse (expected a list of flat records)") from None
        # (a character is 1 to 4 bytes of UTF-8: only a long record is measured)
        if end - position > RECORD_MAX_BYTES // 4 and len(text[position:end].encode()) > RECORD_MAX_BYTES:
            raise fail(f"{where()} is longer than {format_size(RECORD_MAX_BYTES)} (expected at most that per record)")
        _accept(records, value, where, fail)
        position = end
        while position < len(text) and text[position] in _WHITESPACE:
            position += 1
        if position < len(text) and text[position] == ",":
            position += 1
            continue
        if position < len(text) and text[position] == "]":
            position += 1
            break
        raise fail(f"line {line(position)} is not JSON lines or a JSON list (expected ',' or ']' after record "
                   f"{len(records) - 1})")
    rest = text[position:].lstrip(_WHITESPACE)
    if rest:
        raise fail(f"line {line(len(text) - len(rest))} is not JSON lines or a JSON list (expected nothing after the "
                   "list's ']')")
    return records


def load_instructions(path: str | os.PathLike | None = None) -> list[Record]:
    """Records from a JSON-lines file or a JSON list (Alpaca's own format); None: the bundled file.

    Every record needs a string ``instruction`` and ``output``; ``input`` is optional. The file must be
    a regular UTF-8 file of at most ``INSTRUCTIONS_MAX_BYTES``, with at most ``INSTRUCTIONS_MAX_RECORDS``
    records of at most ``RECORD_MAX_BYTES`` each; anything else raises :class:`InstructionDataError`,
    one line naming the file (and the line).

    Args:
        path: the records file; None: the bundled file (:func:`bundled_instructions_path`).

    Returns:
        The records, each with ``instruction``, ``input`` (``""`` where absent) and ``output``.

    Raises:
        InstructionDataError: the file is missing, too large, or not made of records.

    Example:
        >>> import pathlib, tempfile
        >>> from eve_search.tasks.lora import load_instructions
        >>> len(load_instructions())
        1280
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "records.json"
        >>> _ = path.write_text('[{"instruction": "Add.", "input": "1 2", "output": "3"}]')
        >>> load_instructions(path)
        [{'instruction': 'Add.', 'input': '1 2', 'output': '3'}]
    """
    path = bundled_instructions_path() if path is None else Path(path)

    def fail(problem: str) -> InstructionDataError:
        return InstructionDataError(f"Invalid instruction data: {str(path)!r} {problem}")

    with DataFile(path, InstructionDataError, gzip_data=False, expected="a JSON or JSON-lines file",
                  message=lambda where, problem: f"Invalid instruction data: {str(where)!r} {problem}") as handle:
        content = handle.read_all(INSTRUCTIONS_MAX_BYTES, lambda: (
            f"is larger than {format_size(INSTRUCTIONS_MAX_BYTES)} (expected at most that, the instruction loader's "
            "limit; use a subset)"))
    if content.startswith(b"\xef\xbb\xbf"):
        content = content[3:]  # a UTF-8 byte order mark
    stripped = content.lstrip(_WHITESPACE.encode())
    if not stripped:
        raise fail(f"is empty (expected {_EXPECTED})")
    if stripped.startswith(b"["):
        try:
            text = content.decode("utf-8")
        except UnicodeDecodeError as error:
            number = content.count(b"\n", 0, error.start) + 1
            raise fail(f"line {number} is not UTF-8 text (byte 0x{content[error.start]:02x}; expected "
                       f"{_EXPECTED})") from None
        records = _json_list(text, fail)
    else:
        records = _json_lines(content, fail)
    if not records:
        raise fail("holds no records")
    return [{"instruction": r["instruction"], "input": r.get("input", ""), "output": r["output"]} for r in records]
