"""The bundled instruction set: regenerable from its code, loadable, and bad files refused in one line."""

from __future__ import annotations

import json

import pytest

from eve_search.tasks.lora import (
    InstructionDataError,
    bundled_instructions_path,
    generate_instructions,
    load_instructions,
    write_instructions,
)
from eve_search.data._instructions import DEFAULT_COUNT


def test_bundled_file_is_exactly_the_generator_output(tmp_path):
    regenerated = tmp_path / "instructions.jsonl"
    write_instructions(regenerated, generate_instructions())
    assert regenerated.read_bytes() == bundled_instructions_path().read_bytes()


def test_bundled_records_are_correct_answers():
    records = load_instructions()
    assert len(records) == DEFAULT_COUNT
    for record in records:
        if record["instruction"] == "Add the two numbers.":
            a, b = map(int, record["input"].split())
            assert int(record["output"]) == a + b
        elif record["instruction"] == "Reverse the word.":
            assert record["output"] == record["input"][::-1]
        elif record["instruction"] == "Sort the digits in increasing order.":
            assert record["output"].split() == sorted(record["input"].split())
    assert len({r["instruction"] for r in records if not r["instruction"].startswith("Repeat")}) == 9


def test_alpaca_style_json_list_loads_with_optional_input(tmp_path):
    path = tmp_path / "alpaca.json"
    path.write_text(json.dumps([{"instruction": "Say hi.", "output": "hi"},
                                {"instruction": "Echo.", "input": "x", "output": "x"}]))
    assert load_instructions(path) == [{"instruction": "Say hi.", "input": "", "output": "hi"},
                                       {"instruction": "Echo.", "input": "x", "output": "x"}]


@pytest.mark.parametrize("text, fragment", [
    ("not json\n", "not JSON lines"),
    ('{"instruction": "x"}\n', "record 0"),
    ("[]", "no records"),
])
def test_bad_files_are_one_line_errors(tmp_path, text, fragment):
    path = tmp_path / "bad.jsonl"
    path.write_text(text)
    with pytest.raises(InstructionDataError, match=fragment) as caught:
        load_instructions(path)
    assert "\n" not in str(caught.value)


def test_missing_file_is_one_line_error(tmp_path):
    with pytest.raises(InstructionDataError, match="cannot be read"):
        load_instructions(tmp_path / "absent.jsonl")


def test_count_must_be_positive():
    with pytest.raises(ValueError, match="Invalid count"):
        generate_instructions(count=0)
