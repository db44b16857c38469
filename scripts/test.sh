#!/usr/bin/env bash
# Sets up, builds the test Kubernetes cluster, checks lint, format and
# types (scripts/lint.sh), then runs the whole test suite against real
# sandboxes. Slow soak tests are marked `slow`; set SANDGYM_SLOW=1 to run
# them all.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The test Kubernetes cluster's binaries (cached; a cold build takes 30-60
# min on 2 cores). The k8s tests start and stop the cluster themselves.
bash scripts/k8s-cluster.sh build
bash scripts/lint.sh
exec .venv/bin/python -m pytest -q "$@"
