#!/usr/bin/env bash
# Sets up sandgym on Debian/Ubuntu: system packages, then a virtualenv in
# .venv with the locked Python dependencies and sandgym itself (editable),
# then gVisor, the Docker Engine and the images. Safe to run again: it skips
# what is already in place.
#
#   scripts/setup.sh                everything the tests need
#   scripts/setup.sh --python-only  the virtualenv only (Python and its venv
#                                   module from apt if missing): enough for
#                                   lint and `scripts/test.sh --quick`
set -euo pipefail
cd "$(dirname "$0")/.."
python_only=0
case "${1:-}" in
  "") ;;
  --python-only) python_only=1 ;;
  *) echo "usage: scripts/setup.sh [--python-only]" >&2; exit 2 ;;
esac

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# System packages: bubblewrap for the local sandbox, setpriv (util-linux)
# to drop root, Debian's python3 that runs inside sandboxes, venv, and
# Chromium (reports are checked in a real browser; Playwright drives it).
need=()
if [ "$python_only" = 0 ]; then
  [ -x /usr/lib/chromium/chromium ] || need+=(chromium)
  # The docker runtimes: the Docker Engine and debootstrap to build images
  # here with no registry (gVisor is built below, not Debian's runsc: that
  # one predates fixes sandgym relies on; docs/runtimes.md).
  command -v dockerd >/dev/null || need+=(docker.io)
  command -v debootstrap >/dev/null || need+=(debootstrap)
  command -v bwrap >/dev/null || need+=(bubblewrap)
  command -v setpriv >/dev/null || need+=(util-linux)
  # Prometheus: the observability tests scrape sandgym with a real server
  # (started by the tests on loopback; the Debian service stays disabled).
  command -v prometheus >/dev/null || need+=(prometheus)
fi
[ -x /usr/bin/python3 ] || need+=(python3)
/usr/bin/python3 -c 'import ensurepip, venv' 2>/dev/null || need+=(python3-venv)
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

# The host interpreter: python3 on PATH if it is 3.11 or newer, else Debian's.
py=python3
"$py" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || py=/usr/bin/python3
"$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "setup: sandgym needs Python >= 3.11" >&2; exit 1; }

lock_sum=$(sha256sum requirements.lock requirements-nodeps.lock requirements-uv.lock pyproject.toml | sha256sum | cut -c1-16)
if [ ! -x .venv/bin/python ] || [ "$(cat .venv/.sandgym-lock 2>/dev/null)" != "$lock_sum" ]; then
  echo "setup: creating .venv with $("$py" --version) and the locked dependencies"
  "$py" -m venv .venv
  # uv installs the lock (downloads in parallel, a shared cache in
  # ~/.cache/uv); pip itself stays in the venv. UV_NATIVE_TLS: the system's
  # certificates, as pip uses them (a registry proxy may need them).
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --require-hashes -r requirements-uv.lock
  uv=(env UV_NATIVE_TLS=1 .venv/bin/uv pip install --quiet --python .venv/bin/python)
  "${uv[@]}" --compile-bytecode --require-hashes -r requirements.lock
  "${uv[@]}" --compile-bytecode --no-deps --require-hashes -r requirements-nodeps.lock
  "${uv[@]}" --no-deps -e .
  echo "$lock_sum" > .venv/.sandgym-lock
fi
# Bytecode of sandgym's own modules, as a wheel install has it: an editable
# install has none until Python writes it, which it never does where
# PYTHONDONTWRITEBYTECODE is set (many containers); every `sandgym` command
# would then compile ~100 modules again, 0.1-0.15 s of its start-up. Only
# missing or stale files are compiled; an edited module is compiled in
# memory, as before, until this runs again.
.venv/bin/python -m compileall -q sandgym envs runtimes verifiers sandgym_launcher.py >/dev/null

[ "$python_only" = 1 ] && exit 0

# gVisor's runsc, built from a pinned version with Go (cached: instant when
# installed); the Docker Engine, with it registered, started when not
# running; then the images the docker runtimes use (cached too).
bash scripts/gvisor.sh
bash scripts/docker-engine.sh
.venv/bin/sandgym images build
# SandboxFusion's /run_code (sandgym/fusion/): the polyglot image, Debian's
# toolchains for its languages (a few minutes the first time, cached after),
# and SandboxFusion's own client in a venv of its own, which tests drive it with.
.venv/bin/sandgym images build polyglot
.venv/bin/python -c 'import sys; sys.path.insert(0, "tests"); from fusion.sandbox_fusion_client import client_python; client_python()'
# Prime Intellect's verifiers 0.4.0 in a venv of its own (its pins, openai<3
# and mcp==2.0.0, conflict with the lock): every version pinned, wheels only,
# for examples/verifiers_openenv.py and its test (cached: instant when made).
.venv/bin/python examples/verifiers_openenv.py --setup
