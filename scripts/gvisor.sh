#!/usr/bin/env bash
# Builds gVisor's runsc from a pinned version of gvisor.dev/gvisor (its `go`
# branch, which builds with plain `go build`; no Bazel) and installs it at
# /usr/local/lib/sandgym/runsc, which scripts/docker-engine.sh registers with
# the Docker Engine. Cached: nothing is built when the installed binary
# already reports the pinned version. Needs Go >= 1.26.3 and the Go module
# proxy (or a module cache holding the pin).
#
# To move the pin: `go list -m -json gvisor.dev/gvisor@go` gives the newest
# pseudo-version of the `go` branch; set GVISOR_VERSION to it, run this, then
# the runtime tests and benchmarks/bench_fork_bomb.py (docs/runtimes.md).
set -euo pipefail

GVISOR_VERSION=v0.0.0-20260527191743-a81fd9dd382e  # `go` branch, 2026-05-27, google/gvisor a81fd9dd382e
dest=${SANDGYM_RUNSC:-/usr/local/lib/sandgym/runsc}
build=${SANDGYM_GVISOR_BUILD:-/var/cache/sandgym/gvisor}

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

installed=$("$dest" --version 2>/dev/null | sed -n 's/^runsc version //p' || true)
if [ "$installed" = "$GVISOR_VERSION" ]; then
  echo "gvisor: $dest is $GVISOR_VERSION already"
  exit 0
fi

if ! command -v go >/dev/null; then
  echo "gvisor: Go >= 1.26.3 is needed to build runsc (https://go.dev/dl/); none on PATH" >&2
  exit 1
fi
echo "gvisor: building runsc $GVISOR_VERSION with $(go env GOVERSION) in $build${installed:+ (installed: $installed)}"
as_root mkdir -p "$build"
as_root chown "$(id -u):$(id -g)" "$build"
cd "$build"
# A module of our own whose only requirement is the pin; `go get` resolves
# gVisor's dependencies from its go.mod (minimal version selection) and
# records their checksums in go.sum, checked against sum.golang.org.
cat > go.mod <<EOF
module sandgym.local/gvisor-build

go 1.26.3

require gvisor.dev/gvisor $GVISOR_VERSION
EOF
rm -f go.sum
go get "gvisor.dev/gvisor/runsc@$GVISOR_VERSION"
start=$(date +%s)
# Static and pure Go (runsc needs no cgo); the version is stamped as the
# official builds do, so the cache check above can read it back.
CGO_ENABLED=0 go build -trimpath \
  -ldflags "-X gvisor.dev/gvisor/runsc/version.version=$GVISOR_VERSION" \
  -o runsc.new gvisor.dev/gvisor/runsc
built=$(./runsc.new --version | sed -n 's/^runsc version //p')
if [ "$built" != "$GVISOR_VERSION" ]; then
  echo "gvisor: the built runsc reports version '$built', not $GVISOR_VERSION" >&2
  exit 1
fi
echo "gvisor: built in $(($(date +%s) - start)) s, $(du -h runsc.new | cut -f1)"
# Installed by rename: sandboxes running the previous binary keep it.
as_root install -d -m 0755 "$(dirname "$dest")"
as_root install -m 0755 runsc.new "$dest.new"
as_root mv -f "$dest.new" "$dest"
rm -f runsc.new
echo "gvisor: installed $dest ($GVISOR_VERSION)"
