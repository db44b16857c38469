#!/usr/bin/env bash
# mypy over the installed layout: the top-level folders envs/, runtimes/ and
# verifiers/ are the packages sandgym.envs, sandgym.runtimes and
# sandgym.verifiers (pyproject.toml's package-dir), which mypy cannot map by
# itself. A folder of links under .venv gives it that layout.
set -euo pipefail
cd "$(dirname "$0")/.."
tree=.venv/sandgym-typecheck
rm -rf "$tree"
mkdir -p "$tree/sandgym"
for f in sandgym/* ; do ln -s "$PWD/$f" "$tree/sandgym/$(basename "$f")"; done
for top in envs runtimes verifiers task_specs; do ln -s "$PWD/$top" "$tree/sandgym/$top"; done
cd "$tree"
exec "$OLDPWD/.venv/bin/python" -m mypy --config-file "$OLDPWD/pyproject.toml" -p sandgym "$@"
