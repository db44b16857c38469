#!/usr/bin/env bash
# Sets up, checks lint, format and types (scripts/lint.sh), then runs the
# whole test suite against real sandboxes. Slow soak tests are marked
# `slow`; set SANDGYM_SLOW=1 to run them all.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/lint.sh
exec .venv/bin/python -m pytest -q "$@"
