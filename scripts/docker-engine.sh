#!/usr/bin/env bash
# Registers gVisor (runsc, built by scripts/gvisor.sh) with the Docker Engine
# and starts dockerd when it is not running. No bridge and no iptables:
# sandboxes get network none. When dockerd runs already and only the
# runtime changed, its configuration is reloaded (SIGHUP), never restarted:
# running containers are left alone.
set -euo pipefail
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

conf=/etc/docker/daemon.json
runsc=/usr/local/lib/sandgym/runsc
if [ ! -x "$runsc" ]; then
  echo "docker-engine: no $runsc; run scripts/gvisor.sh first (it builds gVisor)" >&2
  exit 1
fi

# runsc needs --network=none here: it cannot run with the host's network
# namespace. The platform is systrap (gVisor's default; named so a change
# of default cannot slip in): not kvm, these VMs have no hardware
# virtualisation, nor ptrace, whose host threads grow as processes x sentry
# threads (docs/runtimes.md).
want='{"path": "'"$runsc"'", "runtimeArgs": ["--network=none", "--platform=systrap"]}'
changed=$(as_root python3 - "$conf" "$want" <<'PY'
import json, os, sys
path, want = sys.argv[1], json.loads(sys.argv[2])
conf = json.load(open(path)) if os.path.exists(path) and os.path.getsize(path) else {}
if conf.get("runtimes", {}).get("runsc") == want:
    print("no")
    sys.exit()
conf.setdefault("runtimes", {})["runsc"] = want
os.makedirs(os.path.dirname(path), exist_ok=True)
with open(path + ".tmp", "w") as f:
    json.dump(conf, f, indent=2)
    f.write("\n")
os.replace(path + ".tmp", path)
print("yes")
PY
)
[ "$changed" = yes ] && echo "docker-engine: registered runsc $runsc in $conf"

runsc_path() { docker info --format '{{with index .Runtimes "runsc"}}{{.Path}}{{end}}' 2>/dev/null || true; }

if docker info >/dev/null 2>&1; then
  if [ "$(runsc_path)" = "$runsc" ]; then
    echo "docker-engine: dockerd is up with runsc $runsc"
    exit 0
  fi
  # Runtimes are reloadable: SIGHUP makes dockerd reread daemon.json.
  pid=$(cat /var/run/docker.pid 2>/dev/null || pgrep -o -x dockerd)
  echo "docker-engine: reloading dockerd's configuration (SIGHUP to pid $pid)"
  as_root kill -HUP "$pid"
  for _ in $(seq 50); do
    if [ "$(runsc_path)" = "$runsc" ]; then
      echo "docker-engine: runsc is $runsc"
      exit 0
    fi
    sleep 0.2
  done
  echo "docker-engine: dockerd kept runsc at '$(runsc_path)' after SIGHUP; see /var/log/sandgym-dockerd.log" >&2
  tail -5 /var/log/sandgym-dockerd.log >&2 || true
  exit 1
fi

if pgrep -x dockerd >/dev/null; then
  # Starting, or stuck: either way not ours to restart.
  echo "docker-engine: dockerd runs but does not answer; waiting for it"
  for _ in $(seq 150); do
    if docker info >/dev/null 2>&1; then exec bash "$0"; fi
    sleep 0.2
  done
  echo "docker-engine: dockerd (pid $(pgrep -o -x dockerd)) does not answer; see /var/log/sandgym-dockerd.log" >&2
  exit 1
fi
echo "docker-engine: starting dockerd (log: /var/log/sandgym-dockerd.log)"
as_root sh -c 'nohup dockerd --bridge=none --iptables=false >>/var/log/sandgym-dockerd.log 2>&1 &'
for _ in $(seq 150); do
  if docker info >/dev/null 2>&1; then exit 0; fi
  sleep 0.2
done
echo "docker-engine: dockerd did not come up; see /var/log/sandgym-dockerd.log" >&2
tail -20 /var/log/sandgym-dockerd.log >&2 || true
exit 1
