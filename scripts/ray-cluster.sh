#!/usr/bin/env bash
# A real Ray cluster on this machine, for the Ray tests and benchmarks:
#   scripts/ray-cluster.sh up --workers N [--cpus C] [--object-store-mb M]
#   scripts/ray-cluster.sh kill-worker I    (I = 1..N: its raylet and workers, killed as a lost machine)
#   scripts/ray-cluster.sh start-worker I   (a killed worker back, as a new node)
#   scripts/ray-cluster.sh down | status | address | env   (env: the exports a driver needs)
#   scripts/ray-cluster.sh runners | stop-runners   (the warm sandgym runners: list them, or end them)
#
# A head node with no CPUs (it schedules, it plays no episode) and N worker
# nodes with C CPUs each, every node its own raylet and object store, as
# Ray runs several nodes on one host. Every node's address is 127.0.0.2; the
# dashboard is off and so are usage stats; each node gets its own ports
# (from $SANDGYM_RAY_PORT, default 16380, up). The object stores are kept
# small (M MiB each, default 80). Each node is started as its own process
# group (setsid), so `kill-worker` kills one node whole and `down` kills
# what `up` started and nothing else. State: $SANDGYM_RAY_STATE (default
# /tmp/sgray-$UID; short, Ray's socket paths must fit in 107 bytes).
#
# Point the eval at it: `eval "$(scripts/ray-cluster.sh env)"; sandgym eval --executor ray`.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
PY=${PY:-$root/.venv/bin/python}
STATE=${SANDGYM_RAY_STATE:-/tmp/sgray-$(id -u)}
PORT=${SANDGYM_RAY_PORT:-16380}
# A loopback address Ray takes as it is: it replaces 127.0.0.1 and localhost
# by the host's outward address, and the nodes would talk over that.
IP=127.0.0.2
export RAY_USAGE_STATS_ENABLED=0
# Ray's servers listen on every interface (it has no bind-address setting):
# token authentication keeps anyone without the token (a random one per
# `up`, readable by this user only) from joining or running code. Drivers
# need the same two variables: `eval "$(scripts/ray-cluster.sh env)"`.
export RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH=$STATE/auth_token
# A lost node is declared dead after 3 missed health checks, 1 s apart (Ray's default is 5 x 3 s).
SYSTEM_CONFIG='{"health_check_period_ms":1000,"health_check_failure_threshold":3}'

usage() { sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

address() { echo "$IP:$PORT"; }

# Ports of node I (0 = head): a block of 100 from PORT+100*(I+1).
ports() {
  local base=$((PORT + 100 * ($1 + 1)))
  echo "--node-manager-port=$base --object-manager-port=$((base + 1)) --metrics-export-port=$((base + 2))" \
    "--runtime-env-agent-port=$((base + 3)) --dashboard-agent-grpc-port=$((base + 4))" \
    "--dashboard-agent-listen-port=$((base + 5)) --min-worker-port=$((base + 10)) --max-worker-port=$((base + 99))"
}

# Each node is `ray start` through scripts/ray_node.py, which waits up to
# 240 s (not Ray's hard-coded 30) for the raylet to register: on a busy
# machine its dashboard agent alone takes longer to start. The head waits
# as long for its GCS's port.
# A raylet also gives its agents a bounded time to come up (it ended itself
# with a failed check after 16 s of agent start-up at load 26).
export RAY_gcs_server_port_wait_time_s=240 RAY_agent_register_timeout_ms=240000

start_node() {  # name, args...: a node in its own process group, its pid in STATE/name.pid
  local name=$1; shift
  setsid "$PY" "$root/scripts/ray_node.py" start --block --disable-usage-stats --node-ip-address="$IP" "$@" \
    >"$STATE/$name.log" 2>&1 < /dev/null &
  echo $! >"$STATE/$name.pid"
}

kill_node() {  # name: its whole process group, then wait for it
  local pidfile="$STATE/$1.pid" pid
  [[ -f $pidfile ]] || return 0
  pid=$(cat "$pidfile")
  kill -KILL -- "-$pid" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  rm -f "$pidfile"
}

wait_nodes() {  # count, pidfile: until that many nodes are alive (exit 3: the node's `ray start` died)
  "$PY" - "$(address)" "$1" "$2" <<'PY'
import os, sys, threading, time
import ray
want, pid, t0 = int(sys.argv[2]), int(open(sys.argv[3]).read()), time.monotonic()

def started() -> None:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        os._exit(3)  # also from the watch below, while ray.init waits on a node that died starting

def watch() -> None:
    while True:
        started()
        time.sleep(0.5)

threading.Thread(target=watch, daemon=True).start()
while not ray.is_initialized():
    try:
        ray.init(address=sys.argv[1], logging_level="error", log_to_driver=False)
    except (ConnectionError, RuntimeError):  # the head is not up yet
        started()
        time.sleep(1)
while True:
    alive = [n for n in ray.nodes() if n["Alive"]]
    if len(alive) >= want:
        print(f"ray-cluster: {len(alive)} nodes up at {sys.argv[1]}")
        break
    started()
    if time.monotonic() - t0 > 300:
        sys.exit(f"ray-cluster: only {len(alive)} of {want} nodes came up in 300 s")
    time.sleep(0.5)
PY
}

# name, count, args...: start a node and wait for it; again when its start failed.
start_and_wait() {
  local name=$1 count=$2 try rc; shift 2
  for try in 1 2 3; do
    start_node "$name" "$@"
    rc=0; wait_nodes "$count" "$STATE/$name.pid" || rc=$?
    [[ $rc -eq 0 ]] && return 0
    kill_node "$name"
    mv "$STATE/$name.log" "$STATE/$name.try$try.log"  # kept: why it failed
    [[ $rc -eq 3 ]] || return "$rc"
    echo "ray-cluster: $name did not start (try $try; see $STATE/$name.try$try.log)" >&2
  done
  return 1
}

up() {
  local workers=1 cpus=1 store_mb=80
  while [[ $# -gt 0 ]]; do
    case $1 in
      --workers) workers=$2; shift 2 ;;
      --cpus) cpus=$2; shift 2 ;;
      --object-store-mb) store_mb=$2; shift 2 ;;
      *) usage ;;
    esac
  done
  if [[ -f $STATE/head.pid ]] && kill -0 "$(cat "$STATE/head.pid")" 2>/dev/null; then
    echo "ray-cluster: already up (scripts/ray-cluster.sh down first)" >&2; exit 1
  fi
  rm -rf "$STATE"; mkdir -p -m 700 "$STATE" && mkdir -p "$STATE/tmp"
  (umask 077; od -An -N32 -tx1 /dev/urandom | tr -d ' \n' >"$RAY_AUTH_TOKEN_PATH")
  local store=$((store_mb * 1024 * 1024))
  # shellcheck disable=SC2046
  start_and_wait head 1 --head --port="$PORT" --num-cpus=0 --num-gpus=0 --object-store-memory="$store" \
    --include-dashboard=false --temp-dir="$STATE/tmp" \
    --system-config="$SYSTEM_CONFIG" $(ports 0)
  echo "$cpus $store" >"$STATE/node-size"
  # One node at a time: nodes starting together in one session folder pick the same socket names.
  for i in $(seq "$workers"); do start_worker "$i" $((i + 1)); done
  address
}

start_worker() {  # I, nodes expected alive once it is up
  local cpus store
  read -r cpus store <"$STATE/node-size"
  # shellcheck disable=SC2046
  start_and_wait "worker$1" "$2" --address="$(address)" --num-cpus="$cpus" --num-gpus=0 \
    --object-store-memory="$store" $(ports "$1")
}

down() {
  local f
  for f in "$STATE"/worker*.pid; do [[ -f $f ]] && kill_node "$(basename "$f" .pid)"; done
  kill_node head
  rm -rf "$STATE"
  echo "ray-cluster: down"
}

runners() {  # list | stop: the warm sandgym runners (detached actors, namespace sandgym)
  "$PY" - "$(address)" "$1" <<'PY'
import sys
import ray
ray.init(address=sys.argv[1], logging_level="error", log_to_driver=False)
names = sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
               if a["namespace"] == "sandgym" and a["name"].startswith("sandgym-runner-"))
for name in names:
    if sys.argv[2] == "stop":
        ray.kill(ray.get_actor(name, namespace="sandgym"), no_restart=True)
    print(("stopped " if sys.argv[2] == "stop" else "") + name)
print(f"ray-cluster: {len(names)} runner(s)")
PY
}

case ${1:-} in
  up) shift; up "$@" ;;
  down) down ;;
  kill-worker)
    [[ -n ${2:-} && -f $STATE/worker$2.pid ]] || { echo "ray-cluster: no running worker ${2:-}" >&2; exit 1; }
    kill_node "worker$2"; echo "ray-cluster: worker $2 killed" ;;
  start-worker)  # I: a worker killed by kill-worker, back (a new node id)
    [[ -n ${2:-} && -f $STATE/node-size && ! -f $STATE/worker$2.pid ]] || { echo "ray-cluster: worker ${2:-} is not down" >&2; exit 1; }
    start_worker "$2" $(($(ls "$STATE"/*.pid | wc -l) + 1)) ;;
  address) address ;;
  runners) runners list ;;
  stop-runners) runners stop ;;
  env) echo "export RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH=$RAY_AUTH_TOKEN_PATH RAY_ADDRESS=$(address)" ;;
  status) for f in "$STATE"/*.pid; do [[ -f $f ]] && echo "$(basename "$f" .pid) pid $(cat "$f")"; done ;;
  *) usage ;;
esac
