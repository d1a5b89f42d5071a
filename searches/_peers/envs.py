"""Virtual environments for the tools whose pins conflict with the project's (DEHB pins numpy below 2;
Syne Tune brings its own stack), created once under ``--workdir`` and reused.

Each is made with the project's Python (``python -m venv``) and pip, from the package registry by
name: PyTorch first at the project's pin (the CPU build where the machine's pip finds it), then the
tool at its pin together with eve-search's own dependencies (read from ``pyproject.toml``), resolved in
one step so that the tool's pins win. eve-search itself is not installed there: a ``.pth`` file puts
this working tree on the environment's path, so the runs import the same code as the parent. A marker
file written last (with ``pip freeze``) says the environment is complete; a half-made one is rebuilt.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ENVS", "EnvError", "EnvSpec", "ensure_env", "env_for"]

REPO = Path(__file__).resolve().parents[2]
TORCH = "torch==2.13.0"
MARKER = "peers-ready.json"


class EnvError(RuntimeError):
    """A tool's environment could not be made (one line; the pip log says more)."""


@dataclass(frozen=True)
class EnvSpec:
    name: str  # the folder under the environments' root
    packages: tuple[str, ...]  # pinned requirements of the tool
    imports: tuple[str, ...]  # modules that must import afterwards


ENVS = {
    # DEHB 0.1.2 pins numpy below 2 but accepts any pyarrow >= 16.1, and pyarrow 26 needs numpy 2 (DEHB
    # then cannot save its history): pyarrow 20.0.0 imports with numpy 1.26.
    "dehb": EnvSpec("dehb-0.1.2", ("dehb==0.1.2", "pyarrow==20.0.0"), ("dehb", "ConfigSpace", "pyarrow")),
    "syne-tune": EnvSpec("syne-tune-0.16.0", ("syne-tune==0.16.0",), ("syne_tune",)),
}


def env_for(tool: str) -> EnvSpec | None:
    """The environment a tool runs in (None: the project's own)."""
    if tool == "dehb":
        return ENVS["dehb"]
    if tool.startswith("synetune-"):
        return ENVS["syne-tune"]
    return None


def project_dependencies() -> list[str]:
    """eve-search's own requirements, as pyproject.toml declares them (torch left out: pinned first)."""
    with (REPO / "pyproject.toml").open("rb") as handle:
        declared = tomllib.load(handle)["project"]["dependencies"]
    return [d for d in declared if not d.replace(" ", "").lower().startswith("torch")]


def _python(folder: Path) -> Path:
    return folder / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")


def ready(spec: EnvSpec, root: Path) -> dict | None:
    """The marker of a complete environment (its packages' versions), or None."""
    marker = root / spec.name / MARKER
    try:
        return json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def ensure_env(spec: EnvSpec, root: Path, log: Path) -> Path:
    """The Python of ``spec``'s environment under ``root``, made first when it is missing or incomplete.
    pip's output goes to ``log``; a failure raises :class:`EnvError` naming the step and the log."""
    folder = root / spec.name
    if ready(spec, root) is not None and _python(folder).exists():
        return _python(folder)
    if folder.exists():
        shutil.rmtree(folder)
    log.parent.mkdir(parents=True, exist_ok=True)
    python = _python(folder)
    steps = [
        ("create the environment", [sys.executable, "-m", "venv", str(folder)]),
        (f"install {TORCH}", [str(python), "-m", "pip", "install", "--quiet", TORCH]),
        (f"install {' '.join(spec.packages)}", [str(python), "-m", "pip", "install", "--quiet", *spec.packages,
                                                 *project_dependencies()]),
    ]
    with log.open("a", encoding="utf-8") as out:
        for what, command in steps:
            out.write(f"$ {' '.join(command)}\n")
            out.flush()
            if subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, check=False).returncode != 0:
                raise EnvError(f"could not {what} in {folder} (see {log})")
        site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              capture_output=True, text=True, check=False).stdout.strip()
        if not site:
            raise EnvError(f"could not find the site-packages folder of {folder}")
        (Path(site) / "eve_search_working_tree.pth").write_text(str(REPO) + "\n", encoding="utf-8")
        check = subprocess.run([str(python), "-c", "; ".join(f"import {m}" for m in ("eve_search", *spec.imports))],
                               stdout=out, stderr=subprocess.STDOUT, check=False)
        if check.returncode != 0:
            raise EnvError(f"{', '.join(spec.imports)} or eve_search does not import in {folder} (see {log})")
        freeze = subprocess.run([str(python), "-m", "pip", "freeze"], capture_output=True, text=True, check=False)
    versions = dict(line.split("==", 1) for line in freeze.stdout.splitlines() if "==" in line)
    (folder / MARKER).write_text(json.dumps({"packages": list(spec.packages), "versions": versions}, indent=1),
                                 encoding="utf-8")
    return python
