#!/usr/bin/env bash
# Sets up, then runs the whole test suite against real sandboxes.
# Slow soak tests are marked `slow`; set SANDGYM_SLOW=1 to run them all.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -q "$@"
