#!/usr/bin/env bash
# mypy over the installed layout, tests, benchmarks and examples included.
# The top-level folders envs/, runtimes/ and verifiers/ are the packages
# sandgym.envs, sandgym.runtimes and sandgym.verifiers (pyproject.toml's
# package-dir), which mypy cannot map by itself: a folder of links under
# .venv gives it that layout. Its cache lives beside it (.venv/mypy-cache),
# so a second run checks only what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
tree=.venv/sandgym-typecheck
rm -rf "$tree"
mkdir -p "$tree/sandgym"
for f in sandgym/*; do ln -s "$root/$f" "$tree/sandgym/$(basename "$f")"; done
for top in envs runtimes verifiers task_specs; do ln -s "$root/$top" "$tree/sandgym/$top"; done
# tests/ is a package (`from tests.helpers import ...`); benchmarks/ and
# examples/ are folders of scripts, checked file by file.
for top in tests benchmarks examples; do ln -s "$root/$top" "$tree/$top"; done
cd "$tree"
exec "$root/.venv/bin/python" -m mypy --config-file "$root/pyproject.toml" --cache-dir "$root/.venv/mypy-cache" \
  sandgym tests benchmarks examples "$@"
