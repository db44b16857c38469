#!/usr/bin/env bash
# Sets up, then evaluates the oracle policy on the bundled code tasks in the
# local namespace sandbox and prints the outcome table.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
rm -rf runs/quickstart
exec .venv/bin/sandgym eval --env sandgym/CodeFunction-v0 --policy oracle --runtime local \
  --concurrency 2 --out runs/quickstart "$@"
