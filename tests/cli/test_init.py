import importlib
import warnings

import pytest

import eve_search.cli as cli
from eve_search.cli import _common, _main, _plugins, args

# Every private name the former module eve_search/cli.py had (and the few _main added before the
# move was finished), with its new home.
MOVED = {
    "_argtypes": ("eve_search.cli.args", args),
    "COST_MODE_HELP": ("eve_search.cli.args.COST_MODE_HELP", args.COST_MODE_HELP),
    "_Parser": ("eve_search.cli.args._Parser", args._Parser),
    "_fraction": ("eve_search.cli.args.fraction", args.fraction),
    "non_negative_int": ("eve_search.cli.args.non_negative_int", args.non_negative_int),
    "_optimizer_list": ("eve_search.cli.args.optimizer_list", args.optimizer_list),
    "_positive_float": ("eve_search.cli.args.positive_float", args.positive_float),
    "_positive_int": ("eve_search.cli.args.positive_int", args.positive_int),
    "_rung_list": ("eve_search.cli.args.rung_list", args.rung_list),
    "_seed": ("eve_search.cli.args.seed", args.seed),
    "seed_list": ("eve_search.cli.args.seed_list", args.seed_list),
    "_space_list": ("eve_search.cli.args.space_list", args.space_list),
    "_reported_plugin_errors": ("eve_search.cli._plugins.reported", _plugins.reported),
    **{name: (f"eve_search.cli._common.{name}", getattr(_common, name))
       for name in ("_command_label", "_default_storage", "_OUTPUT_OPTIONS", "_INPUT_OPTIONS", "check_outputs",
                    "_storage_url", "check_output_path", "_import_plugins", "write_json")},
    **{name: (f"eve_search.cli._main.{name}", getattr(_main, name))
       for name in ("_processes", "_add_sweep_arguments", "_add_run_arguments", "_build_parser",
                    "_bench_throughput", "_resolve_task_and_space", "_check_processes", "_sweep", "_rank",
                    "_start_workers_early", "COMMANDS", "_runner")},
}


@pytest.fixture(autouse=True)
def _unread():
    """Each test reads the old names afresh (a name read once is kept, and warns no more)."""
    for name in MOVED:
        cli.__dict__.pop(name, None)
    yield
    for name in MOVED:
        cli.__dict__.pop(name, None)


@pytest.mark.parametrize("name", sorted(MOVED))
def test_an_old_name_warns_naming_its_new_home_and_is_the_same_object(name):
    new, value = MOVED[name]
    with pytest.warns(DeprecationWarning) as record:
        assert getattr(cli, name) is value
    assert len(record) == 1
    assert str(record[0].message) == (f"eve_search.cli.{name} is deprecated and will be removed in eve-search 0.4; "
                                      f"import {new} instead")
    assert record[0].filename == __file__  # the line that read the name, not eve_search's own code


def test_from_import_of_an_old_name_warns_once():
    with pytest.warns(DeprecationWarning, match=r"import eve_search\.cli\.args\.rung_list instead") as record:
        from eve_search.cli import _rung_list
    assert len(record) == 1 and _rung_list("100,300") == (100, 300)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cli._rung_list is args.rung_list  # already warned


def test_the_public_names_and_the_submodules_read_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        importlib.reload(cli)
        assert cli.main is _main.main and cli.console is _main.console and cli.UsageError is args.UsageError
        assert cli._main is _main and cli.args is args
    assert cli.__all__ == ["UsageError", "console", "main"]


@pytest.mark.parametrize("name", ["sys", "argparse", "no_such_name", "positive_int", "_configure_adult"])
def test_a_name_that_was_never_there_is_an_attribute_error(name):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(AttributeError, match=f"module 'eve_search.cli' has no attribute '{name}'"):
            getattr(cli, name)
