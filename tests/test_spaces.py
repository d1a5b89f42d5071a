import math

import pytest

from eve_search.spaces import (
    SearchSpace,
    get_space,
    hidden_layers,
    register_space,
    space_names,
)


def test_both_paper_spaces_are_built_in():
    assert {"hp", "arch"} <= set(space_names())


def test_sampling_is_fixed_by_the_configuration_seed():
    for name in ("hp", "arch"):
        space = get_space(name)
        assert space.sample(48, seed=0) == space.sample(48, seed=0)
        assert space.sample(48, seed=0) != space.sample(48, seed=1)


def test_hp_space_ranges():
    configs = get_space("hp").sample(48, seed=0)
    assert len(configs) == 48
    assert all(1e-4 <= c["lr"] <= 1e-2 and 1e-6 <= c["weight_decay"] <= 1e-2 for c in configs)
    assert {(c["width"], c["depth"]) for c in configs} == {(256, 2)}
    # log-uniform: about half of the draws fall below the geometric midpoint
    below = sum(c["lr"] < math.sqrt(1e-4 * 1e-2) for c in configs)
    assert 14 <= below <= 34


def test_arch_space_ranges():
    configs = get_space("arch").sample(48, seed=0)
    assert {c["width"] for c in configs} == {64, 128, 256, 512}
    assert {c["depth"] for c in configs} == {1, 2}
    assert {c["weight_decay"] for c in configs} == {5e-4}
    assert all(1e-4 <= c["lr"] <= 1e-2 for c in configs)


def test_hidden_layers():
    assert hidden_layers({"width": 128, "depth": 2}) == [128, 128]
    assert hidden_layers({"width": 64, "depth": 1}) == [64]


def test_user_code_can_register_a_space():
    space = SearchSpace("tiny-test", "one fixed config",
                        lambda g: {"lr": 1e-3, "weight_decay": 0.0, "width": 8, "depth": 1})
    register_space(space)
    try:
        assert get_space("tiny-test").sample(3) == [{"lr": 1e-3, "weight_decay": 0.0, "width": 8, "depth": 1}] * 3
    finally:
        from eve_search import spaces

        del spaces._SPACES["tiny-test"]


def test_errors_name_the_value():
    with pytest.raises(ValueError, match="Unknown space: 'lr' \\(expected one of arch, hp"):
        get_space("lr")
    with pytest.raises(ValueError, match="Invalid count: 0"):
        get_space("hp").sample(0)
    broken = SearchSpace("broken", "", lambda g: {"lr": 1e-3})
    with pytest.raises(ValueError, match="without \\['depth', 'weight_decay', 'width'\\]"):
        broken.sample(1)
