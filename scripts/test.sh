#!/usr/bin/env bash
# Runs the tests against real sandboxes, after lint, format and type checks.
#
#   scripts/test.sh [PYTEST-ARGS]          everything: sets up the virtualenv,
#       checks lint, format and types (scripts/lint.sh: fails fast, before
#       the slow builds), then sets up the rest (system packages, gVisor,
#       the Docker Engine, images), builds the test Kubernetes cluster and
#       runs the whole suite. Slow soak tests are marked `slow`; set
#       SANDGYM_SLOW=1 to run them all.
#   scripts/test.sh --quick [PYTEST-ARGS]  the tests that need no sandbox (no
#       bubblewrap, Docker, Chromium or Kubernetes; tests/conftest.py), with
#       only the virtualenv set up: a few minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = --quick ]; then
  shift
  bash scripts/setup.sh --python-only
  exec .venv/bin/python -m pytest -q --quick "$@"
fi
bash scripts/setup.sh --python-only
bash scripts/lint.sh
bash scripts/setup.sh
# The test Kubernetes cluster's binaries (cached; a cold build takes 30-60
# min on 2 cores). The k8s tests start and stop the cluster themselves.
bash scripts/k8s-cluster.sh build
exec .venv/bin/python -m pytest -q "$@"
