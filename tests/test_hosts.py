"""The one reading of the host ranges that pyproject.toml declares (eve_search._hosts)."""

from packaging.version import Version

from eve_search import _hosts


def test_each_host_range_is_read_from_the_installed_metadata():
    assert Version("4.3.0") in _hosts.declared("optuna") and Version("5.1.0") not in _hosts.declared("optuna")
    assert Version("2.60.0") in _hosts.declared("ray") and Version("2.61.0") not in _hosts.declared("ray")
    assert (_hosts.oldest("optuna"), _hosts.oldest("ray")) == ("4.3", "2.60")


def test_a_package_eve_search_does_not_declare_falls_back():
    assert str(_hosts.declared("no-such-host", ">=1")) == ">=1"
    assert _hosts.oldest("no-such-host") is None


def test_the_command_prints_the_lower_bound_or_one_line_and_exit_2(capsys):
    assert _hosts.main(["oldest", "optuna"]) == 0
    assert capsys.readouterr().out == "4.3\n"
    assert _hosts.main(["oldest", "no-such-host"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'no-such-host'" in err
    assert _hosts.main(["newest", "optuna"]) == 2
    assert capsys.readouterr().err.startswith("usage:")
