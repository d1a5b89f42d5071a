import json
import math
from pathlib import Path

import optuna
import pytest

from eve_search.tasks.spaces import (
    Categorical,
    Fixed,
    Float,
    Int,
    SearchSpace,
    get_space,
    hidden_layers,
    register_space,
    space_names,
)

FIXTURES = Path(__file__).parents[1] / "fixtures"


def test_both_paper_spaces_are_built_in():
    assert {"hp", "arch"} <= set(space_names())


@pytest.mark.parametrize("name", ["hp", "arch"])
def test_declared_spaces_draw_the_recorded_48_configurations_of_seed_0(name):
    recorded = json.loads((FIXTURES / "configs_seed0.json").read_text())[name]
    assert get_space(name).sample(48, seed=0) == recorded


def test_sampling_is_fixed_by_the_configuration_seed():
    for name in ("hp", "arch"):
        space = get_space(name)
        assert space.sample(48, seed=0) == space.sample(48, seed=0)
        assert space.sample(48, seed=0) != space.sample(48, seed=1)


def test_hp_space_ranges():
    configs = get_space("hp").sample(48, seed=0)
    assert all(1e-4 <= c["lr"] <= 1e-2 and 1e-6 <= c["weight_decay"] <= 1e-2 for c in configs)
    assert {(c["width"], c["depth"]) for c in configs} == {(256, 2)}
    below = sum(c["lr"] < math.sqrt(1e-4 * 1e-2) for c in configs)  # log-uniform: about half below the midpoint
    assert 14 <= below <= 34


def test_arch_space_ranges():
    configs = get_space("arch").sample(48, seed=0)
    assert {c["width"] for c in configs} == {64, 128, 256, 512}
    assert {c["depth"] for c in configs} == {1, 2}
    assert {c["weight_decay"] for c in configs} == {5e-4}


def test_the_fashion_mnist_spaces_span_bad_and_good_configurations():
    from eve_search.tasks import get_task

    assert get_task("fashion-mnist").spaces == ("fashion-hp", "fashion-arch")
    hp = get_space("fashion-hp").sample(256, seed=0)
    assert all(1e-5 <= c["lr"] <= 1.0 and 1e-6 <= c["weight_decay"] <= 0.1 and 0.0 <= c["dropout"] <= 0.8
               for c in hp)
    assert {(c["width"], c["depth"]) for c in hp} == {(256, 2)}
    assert min(c["lr"] for c in hp) < 3e-5 and max(c["lr"] for c in hp) > 0.3  # five decades, both ends drawn
    arch = get_space("fashion-arch").sample(256, seed=0)
    assert {(c["width"], c["depth"]) for c in arch} == {(w, d) for w in (32, 64, 128, 256, 512) for d in (1, 2, 3)}
    assert {c["weight_decay"] for c in arch} == {0.0}


def test_hidden_layers():
    assert hidden_layers({"width": 128, "depth": 2}) == [128, 128]


def test_a_space_gives_optuna_real_distributions_and_lets_a_sampler_propose():
    space = get_space("arch")
    distributions = space.distributions()
    assert distributions["lr"] == optuna.distributions.FloatDistribution(1e-4, 1e-2, log=True)
    assert distributions["width"] == optuna.distributions.CategoricalDistribution((64, 128, 256, 512))
    assert distributions["weight_decay"] == optuna.distributions.CategoricalDistribution((5e-4,))
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    configs = [space.suggest(study.ask()) for _ in range(20)]
    assert all(c["width"] in (64, 128, 256, 512) and 1e-4 <= c["lr"] <= 1e-2 and c["weight_decay"] == 5e-4
               for c in configs)
    assert len({c["lr"] for c in configs}) == 20


def test_user_code_can_declare_any_keys_its_task_needs():
    space = SearchSpace("any-keys-test", (Int("layers", 1, 4), Float("dropout", 0.0, 0.5),
                                          Categorical("activation", ("relu", "gelu")), Fixed("lr", 1e-3)))
    register_space(space)
    try:
        configs = get_space("any-keys-test").sample(30, seed=3)
        assert {c["layers"] for c in configs} == {1, 2, 3, 4}
        assert all(0 <= c["dropout"] <= 0.5 and c["lr"] == 1e-3 for c in configs)
        assert {c["activation"] for c in configs} == {"relu", "gelu"}
        assert "layers int [1, 4]" in space.description
    finally:
        from eve_search.tasks import spaces

        del spaces._SPACES["any-keys-test"]


def test_log_int_parameter_stays_in_range():
    configs = SearchSpace("s", (Int("units", 8, 1024, log=True),)).sample(200, seed=0)
    values = [c["units"] for c in configs]
    assert min(values) >= 8 and max(values) <= 1024
    assert sum(v < 91 for v in values) > 60  # log scale: many small values (91 ~ the geometric midpoint)


@pytest.mark.parametrize(("build", "message"), [
    (lambda: Float("lr", 1e-2, 1e-4), r"Invalid range for 'lr': \[0.01, 0.0001\]"),
    (lambda: Float("lr", 0.0, 1.0, log=True), "Invalid low for log-scaled 'lr': 0.0"),
    (lambda: Int("n", 5, 2), r"Invalid range for 'n': \[5, 2\]"),
    (lambda: Categorical("c", ()), "Invalid choices for 'c'"),
    (lambda: SearchSpace("s", (Fixed("a", 1), Fixed("a", 2))), "names repeat"),
    (lambda: get_space("lr"), r"Unknown space: 'lr' \(expected one of .*arch.*hp"),
    (lambda: get_space("hp").sample(0), "Invalid count: 0"),
])
def test_errors_name_the_value(build, message):
    with pytest.raises(ValueError, match=message):
        build()
