import dataclasses

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from eve_search._checks import check_int


@given(st.integers(-10**30, 10**30), st.integers(-100, 100))
def test_an_int_passes_exactly_when_it_is_at_least_the_minimum(value, minimum):
    if value >= minimum:
        assert check_int("count", value, minimum) == value
    else:
        with pytest.raises(ValueError) as error:
            check_int("count", value, minimum)
        assert str(error.value) == f"Invalid count: {value!r} (expected an int >= {minimum})"


@given(st.booleans(), st.integers(-1, 1))
def test_a_bool_is_never_an_int(value, minimum):
    with pytest.raises(ValueError, match=rf"^Invalid flag: {value} \(expected an int >= {minimum}\)$"):
        check_int("flag", value, minimum)
    with pytest.raises(ValueError):  # not even where the integer types include bool's own
        check_int("flag", value, minimum, types=(int, bool, np.integer))


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_a_float_is_refused_even_a_whole_one(value):
    with pytest.raises(ValueError) as error:
        check_int("seed", value, 0)
    assert str(error.value) == f"Invalid seed: {value!r} (expected an int >= 0)"


@pytest.mark.parametrize("value", ["3", b"3", None, 3 + 0j, [3], np.float64(3.0)])
def test_other_types_are_refused_with_the_value_shown(value):
    with pytest.raises(ValueError, match=r"^Invalid n: .* \(expected an int >= 1\)$") as error:
        check_int("n", value, 1)
    assert repr(value) in str(error.value)


@given(st.integers(0, 2**63 - 1))
def test_numpy_integers_pass_only_where_asked_and_come_back_as_int(value):
    with pytest.raises(ValueError):
        check_int("seed", np.int64(value), 0)
    checked = check_int("seed", np.int64(value), 0, types=(int, np.integer))
    assert type(checked) is int and checked == value


def test_the_detail_follows_the_bound_in_the_message():
    with pytest.raises(ValueError, match=r"^Invalid jobs: 0 \(expected an int >= 1 of worker processes\)$"):
        check_int("jobs", 0, 1, detail=" of worker processes")
    assert check_int("jobs", 2, 1, detail=" of worker processes") == 2


@dataclasses.dataclass(frozen=True)
class Knobs:
    size: int = 4
    name: str = "a"

    def __post_init__(self):
        check_int("size", self.size, 1)


def test_with_overrides_replaces_named_fields_and_checks_them_again():
    from eve_search._checks import with_overrides

    base = Knobs(size=2)
    assert with_overrides("run", Knobs, base, {}) is base
    assert with_overrides("run", Knobs, None, {}) == Knobs()
    assert with_overrides("run", Knobs, base, {"name": "b"}) == Knobs(size=2, name="b")
    with pytest.raises(ValueError, match=r"^Invalid size: 0 \(expected an int >= 1\)$"):
        with_overrides("run", Knobs, base, {"size": 0})
    with pytest.raises(TypeError, match=r"^run\(\) got an unexpected keyword argument 'colour'$"):
        with_overrides("run", Knobs, base, {"name": "b", "colour": 1})
    with pytest.raises(TypeError, match=r"^Invalid options: \{'size': 2\} \(expected a Knobs or None\)$"):
        with_overrides("run", Knobs, {"size": 2}, {})


def test_options_or_keywords_takes_one_or_the_other_never_both():
    from eve_search import InputError
    from eve_search._checks import options_or_keywords

    base = Knobs(size=2)
    assert options_or_keywords("run", Knobs, base, {}) is base
    assert options_or_keywords("run", Knobs, None, {}) == Knobs()
    assert options_or_keywords("run", Knobs, None, {"name": "b"}) == Knobs(name="b")
    with pytest.raises(InputError, match=r"^Invalid options: given with name=, size= \(run\(\) takes a Knobs or its "
                                         r"fields as keywords, not both\)$"):
        options_or_keywords("run", Knobs, base, {"name": "b", "size": 3})
    with pytest.raises(ValueError, match=r"^Invalid size: 0 \(expected an int >= 1\)$"):
        options_or_keywords("run", Knobs, None, {"size": 0})
    with pytest.raises(TypeError, match=r"^run\(\) got an unexpected keyword argument 'colour'$"):
        options_or_keywords("run", Knobs, None, {"colour": 1})
    with pytest.raises(TypeError, match=r"^Invalid options: \{'size': 2\} \(expected a Knobs or None\)$"):
        options_or_keywords("run", Knobs, {"size": 2}, {})
