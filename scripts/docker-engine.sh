#!/usr/bin/env bash
# Registers gVisor (runsc) with the Docker Engine and starts dockerd when it
# is not running. No bridge and no iptables: sandboxes get network none.
set -euo pipefail
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

conf=/etc/docker/daemon.json
if ! grep -q '"runsc"' "$conf" 2>/dev/null; then
  # runsc needs --network=none here: it cannot run with the host's network namespace.
  as_root mkdir -p /etc/docker
  as_root python3 - "$conf" <<'PY'
import json, os, sys
path = sys.argv[1]
conf = json.load(open(path)) if os.path.exists(path) and os.path.getsize(path) else {}
conf.setdefault("runtimes", {})["runsc"] = {"path": "/usr/bin/runsc", "runtimeArgs": ["--network=none"]}
json.dump(conf, open(path, "w"), indent=2)
PY
  restart=1
fi

if docker info >/dev/null 2>&1 && [ -z "${restart:-}" ]; then
  exit 0
fi
if pgrep -x dockerd >/dev/null; then
  as_root pkill -x dockerd || true
  for _ in $(seq 50); do pgrep -x dockerd >/dev/null || break; sleep 0.2; done
fi
echo "docker-engine: starting dockerd (log: /var/log/sandgym-dockerd.log)"
as_root sh -c 'nohup dockerd --bridge=none --iptables=false >/var/log/sandgym-dockerd.log 2>&1 &'
for _ in $(seq 150); do
  if docker info >/dev/null 2>&1; then exit 0; fi
  sleep 0.2
done
echo "docker-engine: dockerd did not come up; see /var/log/sandgym-dockerd.log" >&2
tail -20 /var/log/sandgym-dockerd.log >&2 || true
exit 1
