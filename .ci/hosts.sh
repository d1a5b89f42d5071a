#!/usr/bin/env bash
# The integration tests against the OLDEST Optuna and Ray that pyproject.toml allows, each in its own
# virtual environment (`make test-hosts`; `make test` runs the NEWEST, which pip installs in .venv).
#
# Each environment under .hosts/ holds only its host package, at the lower bound of the declared range,
# and borrows every other package from the project's .venv (a .pth file adds .venv's site-packages
# after its own), so the host under test is the only difference. A host whose lower bound is the version
# .venv already has is said and skipped: its newest and oldest are one version.
set -euo pipefail
cd "$(dirname "$0")/.."
MAIN=${VENV:-.venv}
PY=$MAIN/bin/python

# package, then the test files that drive it
HOSTS=(
  "optuna tests/integrations/test_optuna_adapter.py tests/integrations/test_optuna_dropin.py"
  "ray tests/integrations/test_ray.py"
)

oldest() { $PY -m eve_search._hosts oldest "$1"; }  # the lower bound of the declared range of $1

site_of() { "$1" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])"; }

for entry in "${HOSTS[@]}"; do
  read -r package tests <<< "$entry"
  version=$(oldest "$package")
  installed=$($PY -c "from importlib import metadata; print(metadata.version('$package'))")
  if [ "$($PY -c "from packaging.version import Version as V; print(V('$version') == V('$installed'))")" = True ]; then
    echo "== $package $version: the oldest allowed is the version make test runs; nothing more to run"
    continue
  fi
  env=.hosts/$package-$version
  if ! "$env/bin/python" -c "from importlib import metadata; from packaging.version import Version as V
assert V(metadata.version('$package')) == V('$version')" 2>/dev/null; then
    rm -rf "$env"
    $PY -m venv --without-pip "$env"
    $MAIN/bin/pip --python "$env/bin/python" install --quiet --no-deps "$package==$version"
    echo "import site; site.addsitedir('$(realpath "$(site_of $PY)")')" > "$(site_of "$env/bin/python")/zz-project-venv.pth"
  fi
  got=$("$env/bin/python" -c "import $package; print($package.__version__)")
  echo "== $package $got (oldest allowed; make test runs $installed): $tests"
  # shellcheck disable=SC2086
  "$env/bin/python" -m pytest -q -n 2 --dist loadfile -p no:cacheprovider $tests
done
