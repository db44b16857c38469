#!/usr/bin/env bash
# Lint, format and type checks (CI runs them before the tests). Every check
# runs, so one pass shows all findings; the exit status is 1 if any failed.
set -uo pipefail
cd "$(dirname "$0")/.."
status=0
.venv/bin/ruff check . || status=1
.venv/bin/ruff format --check . || status=1
bash scripts/typecheck.sh || status=1
exit "$status"
