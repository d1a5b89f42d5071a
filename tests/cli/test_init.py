"""The package eve_search.cli exports its three public names; since 0.3.0 the old paths are gone."""

import importlib
import warnings

import pytest

import eve_search.cli as cli
from eve_search.cli import _main, args


def test_the_public_names_and_the_submodules_read_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        importlib.reload(cli)
        assert cli.main is _main.main and cli.console is _main.console and cli.UsageError is args.UsageError
        assert cli._main is _main and cli.args is args
    assert cli.__all__ == ["UsageError", "console", "main"]


@pytest.mark.parametrize("name", ["sys", "no_such_name", "positive_int", "seed_list", "_rung_list", "_sweep"])
def test_a_name_the_package_does_not_export_is_an_attribute_error(name):
    with pytest.raises(AttributeError, match=f"module 'eve_search.cli' has no attribute '{name}'"):
        getattr(cli, name)


@pytest.mark.parametrize("old", ["eve_search.sha", "eve_search.sweep", "eve_search.report", "eve_search.audit",
                                 "eve_search._deprecation"])
def test_the_module_paths_removed_in_0_3_do_not_import(old):
    with pytest.raises(ModuleNotFoundError, match=f"No module named '{old}'"):
        importlib.import_module(old)
