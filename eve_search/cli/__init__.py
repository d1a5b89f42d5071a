"""The ``eve-search`` command line: :func:`main` runs a command in-process, :func:`console` is the
console script (``eve-search = "eve_search.cli:console"``)."""

from eve_search._deprecation import moved_names
from eve_search.cli._main import UsageError, console, main

__all__ = ["UsageError", "console", "main"]

_ARGS = "eve_search.cli.args"
_COMMON = "eve_search.cli._common"
_MAIN = "eve_search.cli._main"

# The private names of the former module eve_search/cli.py, now in the modules of this package: each
# still reads from here, with a DeprecationWarning naming its new home (removed in eve-search 0.4).
__getattr__ = moved_names(__name__, {
    "_argtypes": _ARGS,
    "COST_MODE_HELP": f"{_ARGS}:COST_MODE_HELP",
    "_Parser": f"{_ARGS}:_Parser",
    "_fraction": f"{_ARGS}:fraction",
    "non_negative_int": f"{_ARGS}:non_negative_int",
    "_optimizer_list": f"{_ARGS}:optimizer_list",
    "_positive_float": f"{_ARGS}:positive_float",
    "_positive_int": f"{_ARGS}:positive_int",
    "_rung_list": f"{_ARGS}:rung_list",
    "_seed": f"{_ARGS}:seed",
    "seed_list": f"{_ARGS}:seed_list",
    "_space_list": f"{_ARGS}:space_list",
    "_reported_plugin_errors": "eve_search.cli._plugins:reported",
    **{name: f"{_COMMON}:{name}" for name in ("_command_label", "_default_storage", "_OUTPUT_OPTIONS",
                                               "_INPUT_OPTIONS", "check_outputs", "_storage_url",
                                               "check_output_path", "_import_plugins", "write_json")},
    **{name: f"{_MAIN}:{name}" for name in ("_processes", "_add_sweep_arguments", "_add_run_arguments",
                                             "_build_parser", "_bench_throughput", "_resolve_task_and_space",
                                             "_check_processes", "_sweep", "_rank", "_start_workers_early",
                                             "COMMANDS", "_runner")},
})
del _ARGS, _COMMON, _MAIN
