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
# The test Kubernetes cluster's binaries (cached; a cold build took 8 min
# on a quiet 2-core machine, over 25 on a busy one) are built in the
# background, at low priority, while the tests that need no cluster run:
# the k8s tests run last (tests/conftest.py), and the first one's
# `k8s-cluster.sh up` waits for this build (a lock).
# The k8s tests start and stop the cluster themselves.
build_log=$(mktemp -t sandgym-k8s-build.XXXXXX.log)
setsid nice -n 10 bash scripts/k8s-cluster.sh build > "$build_log" 2>&1 &
build=$!
# A run that ends first (a -k without k8s tests, a failure, Ctrl-C) stops
# the build: what it compiled stays in Go's cache for the next one.
trap 'kill -- -$build 2> /dev/null || true' EXIT
status=0
# The 30 slowest tests are named at the end: where CI time goes.
.venv/bin/python -m pytest -q --durations=30 "$@" || status=$?
if kill -0 "$build" 2> /dev/null; then
  kill -- -"$build" 2> /dev/null || true
  echo "test.sh: no k8s test waited for the cluster build; stopped it (log: $build_log)" >&2
elif wait "$build"; then
  rm -f "$build_log"
else
  echo "test.sh: the background cluster build failed; the end of its log ($build_log):" >&2
  tail -n 30 "$build_log" >&2
fi
trap - EXIT # the build is over: its process group's number may be reused
exit "$status"
