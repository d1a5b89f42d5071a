"""Hostile instruction files (``lora --data``) and model directories (``lora --model``): deep nesting,
bytes that are not UTF-8, huge lines and files, wrong types, empty files, too many records, and
things that are not files at all. Each is one line naming the file (and the line of a JSON-lines
file) and what was expected; nothing hangs, nothing is a traceback."""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eve_search.cli import main
from tests.hostile import deadline, one_line, peak_memory
from eve_search.data._instructions import INSTRUCTIONS_MAX_BYTES, INSTRUCTIONS_MAX_RECORDS, RECORD_MAX_BYTES
from eve_search.tasks.lora import InstructionDataError, LoraModelError, load_instructions
from eve_search.tasks.lora._model import MODEL_TEXT_MAX_BYTES, check_model_dir

MiB = 1 << 20
GOOD = json.dumps({"instruction": "Say hi.", "output": "hi"})
EXPECTED = "expected JSON lines or a JSON list of records with string 'instruction' and 'output'"




def refused(path: Path, fragment: str, *, seconds: int = 10) -> str:
    """load_instructions(path)'s one-line error, which names the file and contains ``fragment``."""
    with deadline(seconds), pytest.raises(InstructionDataError) as error:
        load_instructions(path)
    message = str(error.value)
    assert message.startswith(f"Invalid instruction data: {str(path)!r} ") and "\n" not in message, message
    assert fragment in message, message
    return message


# The cases, each a file body and what the one line must say -----------------------------------------

NESTED = "[" * 100_000 + "]" * 100_000
CASES = {
    "nested.json": (NESTED, "record 0 (line 1) nests JSON too deeply to parse (expected a list of flat records)"),
    "nested-object.json": ('[{"instruction": ' + NESTED + "}]", "record 0 (line 1) nests JSON too deeply"),
    "nested.jsonl": (GOOD + "\n" + '{"a": ' + NESTED + "}\n",
                     "line 2 nests JSON too deeply to parse (expected one flat record per line)"),
    "latin1.jsonl": ((GOOD + "\n") * 2 + '{"instruction": "caf\xe9", "output": "x"}\n',
                     f"line 3 is not UTF-8 text (byte 0xe9 at column 21; {EXPECTED}"),
    "latin1.json": ('[\n' + GOOD + ',\n{"instruction": "caf\xe9", "output": "x"}]',
                    f"line 3 is not UTF-8 text (byte 0xe9; {EXPECTED}"),
    "binary.jsonl": (bytes(range(255, -1, -1)) * 4, "line 1 is not UTF-8 text (byte 0xff at column 1"),
    "control-bytes.jsonl": (bytes(range(10)) + b"\n", "line 1 is not JSON lines or a JSON list (Expecting value at "
                            "column 1"),
    "long-line.jsonl": (GOOD + "\n" + json.dumps({"instruction": "x" * (2 * MiB), "output": "y"}) + "\n",
                        "record 1 (line 2) is 2,097,186 bytes (expected at most 1 MiB per record)"),
    "long-element.json": ("[" + GOOD + ", " + json.dumps({"instruction": "x" * (2 * MiB), "output": "y"}) + "]",
                          "record 1 (line 1) is longer than 1 MiB (expected at most that per record)"),
    "output-number.jsonl": (GOOD + "\n" + json.dumps({"instruction": "x", "output": 3}) + "\n",
                            "record 1 (line 2) needs string 'instruction' and 'output' fields (and optionally "
                            "'input'); its 'output' is a number"),
    "no-instruction.jsonl": (json.dumps({"output": "x"}), "record 0 (line 1) needs string 'instruction' and 'output' "
                             "fields (and optionally 'input'); it has no 'instruction'"),
    "input-list.json": (json.dumps([{"instruction": "x", "input": ["a"], "output": "y"}]),
                        "record 0 (line 1) needs string 'instruction' and 'output' fields (and optionally 'input'); "
                        "its 'input' is a list"),
    "string-record.jsonl": ('"just text"\n', "record 0 (line 1) is a string (expected an object"),
    "null-record.json": ("[" + GOOD + ",\n null]", "record 1 (line 2) is null (expected an object"),
    "surrogate.jsonl": ('{"instruction": "\\ud800", "output": "x"}',
                        "record 0 (line 1) has an unpaired surrogate escape"),
    "empty.jsonl": ("", f"is empty ({EXPECTED}"),
    "blank.jsonl": ("\n \n\t\n", f"is empty ({EXPECTED}"),
    "empty-list.json": ("[ ]", "holds no records"),
    "an-object.json": (GOOD[:-1], "line 1 is not JSON lines or a JSON list"),
    "trailing-comma.json": ("[" + GOOD + ",]", "line 1 is not JSON lines or a JSON list (Expecting value at column"),
    "unclosed.json": ("[" + GOOD, "line 1 is not JSON lines or a JSON list (expected ',' or ']' after record 0)"),
    "after-list.json": ("[" + GOOD + "]\n[]", "line 2 is not JSON lines or a JSON list (expected nothing after"),
    "too-many.json": ("[" + ",\n".join([GOOD] * (INSTRUCTIONS_MAX_RECORDS + 1)) + "]",
                      "holds more than 100,000 records (expected at most that many, the instruction loader's limit"),
    "too-many.jsonl": ("\n".join([GOOD] * (INSTRUCTIONS_MAX_RECORDS + 1)), "holds more than 100,000 records"),
    "empty-objects.json": ("[" + ",".join(["{}"] * 1_000_000) + "]", "record 0 (line 1) needs string"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_bad_instruction_file_is_one_line(tmp_path, name):
    body, fragment = CASES[name]
    path = tmp_path / name
    path.write_bytes(body if isinstance(body, bytes) else body.encode("latin-1" if "latin1" in name else "utf-8",
                                                                       "surrogatepass"))
    # (tracing every allocation makes 100,000 small records slow; they stop at the cap by construction)
    with peak_memory(256 * MiB) if not name.startswith("too-many") else contextlib.nullcontext():
        refused(path, fragment)


def test_the_limits_the_docs_state_are_the_enforced_ones():
    docs = (Path(__file__).parents[3] / "docs" / "tutorials" / "resuming-and-safety.md").read_text()
    assert f"`lora --data`: {INSTRUCTIONS_MAX_BYTES // MiB} MiB" in docs
    assert INSTRUCTIONS_MAX_RECORDS > 52_002  # Alpaca's alpaca_data.json fits
    assert RECORD_MAX_BYTES < INSTRUCTIONS_MAX_BYTES


def test_a_file_larger_than_the_limit_is_refused_before_reading(tmp_path):
    path = tmp_path / "huge.jsonl"
    with open(path, "wb") as handle:
        handle.write(GOOD.encode() + b"\n")
        handle.truncate(4 << 30)  # sparse: 4 GiB
    with peak_memory(4 * MiB):
        refused(path, "is larger than 128 MiB (expected at most that, the instruction loader's limit")


def test_records_at_the_limits_load(tmp_path):
    path = tmp_path / "edge.jsonl"
    record = {"instruction": "x" * (RECORD_MAX_BYTES - 40), "output": "y"}
    assert len(json.dumps(record).encode()) <= RECORD_MAX_BYTES
    path.write_text("\ufeff" + "\n".join([json.dumps(record)] + [GOOD] * (INSTRUCTIONS_MAX_RECORDS - 1)) + "\n")
    records = load_instructions(path)
    assert len(records) == INSTRUCTIONS_MAX_RECORDS and records[1] == {"instruction": "Say hi.", "input": "",
                                                                       "output": "hi"}


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.one_of(
    st.binary(max_size=300),
    st.text(alphabet='[]{}",:\\ \nabcinstructionoutput0\x00\xe9', max_size=200).map(str.encode),
    st.lists(st.dictionaries(st.sampled_from(["instruction", "input", "output", "x"]),
                             st.one_of(st.text(max_size=5), st.integers(), st.none()), max_size=4),
             max_size=4).map(lambda records: json.dumps(records).encode()),
))
def test_any_bytes_load_or_give_one_line(tmp_path, body):
    path = tmp_path / "any.jsonl"
    path.write_bytes(body)
    try:
        records = load_instructions(path)
    except InstructionDataError as error:
        message = str(error)
        assert message.startswith(f"Invalid instruction data: {str(path)!r} ") and "\n" not in message
    else:
        assert records and all(set(r) == {"instruction", "input", "output"} for r in records)
        assert all(isinstance(v, str) for r in records for v in r.values())


def _fifo(path: Path) -> None:
    os.mkfifo(path)


NOT_FILES = [
    pytest.param(lambda p: p.mkdir(), "is a directory (expected a JSON or JSON-lines file)", id="directory"),
    pytest.param(_fifo, "is a named pipe (FIFO) (expected a JSON or JSON-lines file)", id="fifo"),
    pytest.param(lambda p: p.symlink_to("/dev/zero"), "is a character device", id="dev-zero"),
    pytest.param(lambda p: p.symlink_to("/dev/urandom"), "is a character device", id="dev-urandom"),
    pytest.param(lambda p: p.symlink_to("/proc/self/mem"), "cannot be read (Input/output error)", id="unreadable",
                 marks=pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/mem is Linux's")),
    pytest.param(lambda p: None, "cannot be read (not found)", id="missing"),
]


@pytest.mark.parametrize("make, fragment", NOT_FILES)
def test_a_path_that_is_not_a_data_file_is_one_line(tmp_path, make, fragment):
    path = tmp_path / "data.jsonl"
    make(path)
    refused(path, fragment)


# Through the command line ------------------------------------------------------------------------------


def run_lora(tmp_path: Path, *options: str) -> int:
    return main(["lora", *options, "--optimizer", "adam", "--lrs", "1e-3", "--seeds", "0", "--budget", "2",
                 "--eval-every", "1", "--backward-ratio", "2", "--quiet", "--workdir", str(tmp_path / "w")])


@pytest.mark.parametrize("name", ["nested.json", "nested.jsonl", "latin1.jsonl", "output-number.jsonl", "empty.jsonl",
                                  "too-many.json", "long-line.jsonl"])
def test_the_lora_cli_says_one_line_naming_the_file(tmp_path, capsys, name):
    body, fragment = CASES[name]
    path = tmp_path / name
    path.write_bytes(body.encode("latin-1" if "latin1" in name else "utf-8"))
    with deadline(60):
        assert run_lora(tmp_path, "--data", str(path)) == 2
    err = one_line(capsys, str(path), fragment)
    assert err.startswith("eve-search lora: Invalid instruction data: ")


@pytest.mark.parametrize("make", [_fifo, lambda p: p.symlink_to("/dev/zero")], ids=["fifo", "dev-zero"])
def test_the_lora_cli_never_reads_a_pipe_or_device(tmp_path, capsys, make):
    path = tmp_path / "data.jsonl"
    make(path)
    with deadline(60):
        assert run_lora(tmp_path, "--data", str(path)) == 2
    one_line(capsys, str(path))


# Model directories ---------------------------------------------------------------------------------------


def model_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "qwen2", "hidden_size": 64}')
    return folder


@pytest.mark.parametrize("name, make, fragment", [
    ("config.json", lambda p: p.symlink_to("/dev/zero"), "config.json is a character device (expected a regular "
                                                           "file)"),
    ("config.json", _fifo, "config.json is a named pipe (FIFO) (expected a regular file)"),
    ("tokenizer_config.json", _fifo, "tokenizer_config.json is a named pipe (FIFO)"),
    ("tokenizer.json", lambda p: os.truncate(os.open(p, os.O_CREAT | os.O_WRONLY, 0o644), 200 * MiB),
     "tokenizer.json is 200 MiB (expected at most 64 MiB for a configuration or tokenizer file)"),
])
def test_a_model_directory_with_a_pipe_device_or_oversized_file_is_refused(tmp_path, name, make, fragment):
    folder = model_dir(tmp_path)
    (folder / name).unlink(missing_ok=True)
    make(folder / name)
    with deadline(10), pytest.raises(LoraModelError) as error:
        check_model_dir(folder)
    assert str(error.value).startswith(f"Invalid model: {str(folder)!r}: ") and fragment in str(error.value)
    assert MODEL_TEXT_MAX_BYTES == 64 * MiB


@pytest.mark.parametrize("case", ["config-fifo", "config-nested"])
def test_the_lora_cli_refuses_a_hostile_model_directory_in_one_line(tmp_path, capsys, case):
    folder = model_dir(tmp_path)
    (folder / "config.json").unlink()
    if case == "config-fifo":
        _fifo(folder / "config.json")
    else:
        (folder / "config.json").write_text(NESTED)
    with deadline(120):
        assert run_lora(tmp_path, "--model", str(folder)) == 2
    err = one_line(capsys, str(folder))
    assert re.match(r"eve-search lora: Invalid model: ", err), err
