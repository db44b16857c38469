#!/usr/bin/env bash
# A real single-node Kubernetes cluster on this machine, for the k8s tests:
#   scripts/k8s-cluster.sh up | down | status | env
#
# Everything is built or installed from what the registries serve, and
# cached between runs:
# - kube-apiserver, kubelet, kube-scheduler and kube-controller-manager:
#   `go build` from the k8s.io/kubernetes module (pinned below). Its go.mod
#   replaces the k8s.io/* staging modules with local paths, so a go.mod of
#   our own requires it and replaces each staging module with its v0.Y.Z
#   release. The scheduler places pods (none names its node); the
#   controller manager runs only the controllers listed in `up`.
# - containerd v2 (with its runc shim and ctr): `go build` from its module;
#   a separate instance with its own socket and state, not Docker's.
# - the CNI plugins bridge, host-local and loopback: `go build` from their
#   module. Each pod gets an address on a bridge whose ports are isolated
#   from each other, with no address on the host side, no gateway and no
#   masquerade: no route to other pods, the node or out.
# - etcd from Debian (etcd-server), runc (Debian's).
# - gVisor: Debian's runsc has no containerd shim; containerd-shim-runsc-v1
#   is built from the same gVisor module as runsc (scripts/gvisor.sh) and
#   runs /usr/local/lib/sandgym/runsc, under the RuntimeClass `gvisor`.
# - The pod sandbox ("pause") image: a static Go program of ours
#   (scripts/k8s/pause.go), imported with `docker import` + `ctr import`.
#
# Everything listens on loopback: the API server on 127.0.0.1:16443, etcd on
# 127.0.0.1:12379, the kubelet on 10.255.255.1:10250 (the kubelet refuses a
# 127/8 node address, so that address is added to `lo`). `env` prints the
# KUBECONFIG to use. State lives in $SANDGYM_K8S_STATE; `down` stops the
# processes and removes the pods' state (the build cache is kept).
#
# Real nodes: SANDGYM_K8S_NODES=N (default 1) starts nodes 0..N-1, each its
# own kubelet and containerd instance with its own state, sockets, cgroup
# root, pod bridge and subnet, and address on `lo` (node I: sandgym-node-I
# at 10.255.255.I+1; node 0 keeps the single-node names). `stop-node I`
# kills node I's pods, kubelet and containerd (a node lost: the control
# plane sees its lease stop); `start-node I` starts it again (or adds it).
# The API server writes an audit log of pod deletions ($state/logs/audit.log:
# who deleted which pod, by user agent), the evidence when pods vanish.
set -euo pipefail

K8S_VERSION=v1.34.4   # v1.35+ refuses cgroup v1 hosts unless told otherwise
STAGING_VERSION=v0.34.4
# The containerd the gVisor shim is built against (Debian's 1.6 speaks an
# older shim start-up protocol and is below the kubelet's tested minimum).
CONTAINERD_VERSION=v2.1.5
# The CNI plugins: Debian's 1.1 bridge has no port isolation.
CNI_VERSION=v1.9.1
# Simulated nodes (SANDGYM_K8S_KWOK_NODES=M, default 0: none, nothing built).
KWOK_VERSION=v0.8.0
# NetworkPolicy: kube-router's network-policy controller alone (iptables +
# ipset). kube-network-policies needs nftables' queue statement, which this
# kernel lacks (CONFIG_NFT_QUEUE). SANDGYM_K8S_NETPOL=0: not started.
KUBE_ROUTER_VERSION=v2.1.0
netpol=${SANDGYM_K8S_NETPOL:-1}
kwok_nodes=${SANDGYM_K8S_KWOK_NODES:-0}
GVISOR_VERSION=$(sed -n 's/^GVISOR_VERSION=\([^ ]*\).*/\1/p' "$(dirname "$0")/gvisor.sh")
cache=${SANDGYM_K8S_CACHE:-/var/cache/sandgym/k8s}
state=${SANDGYM_K8S_STATE:-/var/lib/sandgym-k8s}
run=/run/sandgym-k8s
nodes=${SANDGYM_K8S_NODES:-1}
api=https://127.0.0.1:16443
here=$(cd "$(dirname "$0")" && pwd)
bin=$cache/bin
export PATH=$bin:$PATH # containerd finds containerd-shim-runsc-v1 on PATH

log() { echo "k8s-cluster: $*"; }

# Node I's names: its suffix on file and process names, node name, address.
sfx() { if [ "$1" = 0 ]; then echo ""; else echo "-$1"; fi; }
node_name() { echo "sandgym-node$(sfx "$1")"; }
node_ip() { echo "10.255.255.$(($1 + 1))"; }
# The nodes this state has (configured by up or start-node), 0 first.
known_nodes() {
  local f i
  for f in "$state"/kubelet.yaml "$state"/kubelet-*.yaml; do
    [ -f "$f" ] || continue
    i=${f##*/kubelet}
    i=${i%.yaml}
    i=${i#-}
    echo "${i:-0}"
  done | sort -n
}

# CAP_SYS_RESOURCE is capability 24.
has_cap_sys_resource() { (($(printf '%d' "0x$(sed -n 's/^CapEff:\t//p' /proc/self/status)") >> 24 & 1)); }

build() {
  mkdir -p "$bin" "$cache/kubernetes" "$cache/gvisor-shim" "$cache/pause"
  # The binaries to build: those missing, or all four when the version changed.
  local k8s_bins="kube-apiserver kubelet kube-scheduler kube-controller-manager" want="" b
  for b in $k8s_bins; do [ -x "$bin/$b" ] || want+="$b "; done
  [ "$(cat "$cache/kubernetes/version" 2>/dev/null)" = "$K8S_VERSION stamped" ] || want=$k8s_bins
  if [ -n "$want" ]; then
    local mod=/root/go/pkg/mod/k8s.io/kubernetes@$K8S_VERSION
    (
      cd "$cache/kubernetes"
      go mod download "k8s.io/kubernetes@$K8S_VERSION"
      mod=$(go list -m -f '{{.Dir}}' "k8s.io/kubernetes@$K8S_VERSION" 2>/dev/null || echo "$mod")
      {
        printf 'module sandgym.local/k8s-build\n\ngo 1.24.0\n\nrequire k8s.io/kubernetes %s\n\nreplace (\n' "$K8S_VERSION"
        sed -n 's|^\t\(k8s.io/[a-z0-9-]*\) => ./staging/.*|\t\1 => \1 '"$STAGING_VERSION"'|p' "$mod/go.mod"
        printf ')\n'
      } > go.mod
      {
        printf '//go:build tools\n\npackage tools\n\nimport (\n'
        for b in $k8s_bins; do printf '\t_ "k8s.io/kubernetes/cmd/%s/app"\n' "$b"; done
        printf ')\n'
      } > tools.go
      go mod tidy
      log "building ${want% } at $K8S_VERSION (cold: 4 to 70 min on 2 cores, seen here)"
      start=$(date +%s)
      local minor=${K8S_VERSION#v1.}
      minor=${minor%%.*}
      local v=k8s.io/component-base/version
      go build -ldflags "-X $v.gitVersion=$K8S_VERSION -X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean" \
        -o out/ $(printf 'k8s.io/kubernetes/cmd/%s ' $want)
      # Renamed into place: a running binary is not written over.
      for b in $want; do mv -f "out/$b" "$bin/$b"; done
      rmdir out
      echo "$K8S_VERSION stamped" > version
      log "built in $(($(date +%s) - start)) s"
    )
  fi
  if [ ! -x "$bin/containerd" ] || [ "$(cat "$cache/containerd/version" 2>/dev/null)" != "$CONTAINERD_VERSION" ]; then
    mkdir -p "$cache/containerd"
    (
      cd "$cache/containerd"
      printf 'module sandgym.local/containerd-build\n\ngo 1.24.0\n\nrequire github.com/containerd/containerd/v2 %s\n' "$CONTAINERD_VERSION" > go.mod
      printf '//go:build tools\n\npackage tools\n\nimport (\n\t_ "github.com/containerd/containerd/v2/cmd/containerd"\n\t_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"\n\t_ "github.com/containerd/containerd/v2/cmd/ctr"\n)\n' > tools.go
      go mod tidy
      log "building containerd $CONTAINERD_VERSION"
      local c=github.com/containerd/containerd/v2/cmd
      CGO_ENABLED=0 go build -tags "no_btrfs no_devmapper no_zfs" \
        -ldflags "-X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" \
        -o "$bin/" $c/containerd $c/containerd-shim-runc-v2 $c/ctr
      echo "$CONTAINERD_VERSION" > version
    )
  fi
  if [ ! -x "$cache/cni/bin/bridge" ] || [ "$(cat "$cache/cni/version" 2>/dev/null)" != "$CNI_VERSION" ]; then
    mkdir -p "$cache/cni/bin"
    (
      cd "$cache/cni"
      printf 'module sandgym.local/cni-build\n\ngo 1.24.0\n\nrequire github.com/containernetworking/plugins %s\n' "$CNI_VERSION" > go.mod
      rm -f go.sum
      local p=github.com/containernetworking/plugins/plugins
      go get "$p/main/bridge@$CNI_VERSION" "$p/main/loopback@$CNI_VERSION" "$p/ipam/host-local@$CNI_VERSION"
      log "building the CNI plugins $CNI_VERSION"
      CGO_ENABLED=0 go build -trimpath -o bin/ $p/main/bridge $p/main/loopback $p/ipam/host-local
      echo "$CNI_VERSION" > version
    )
  fi
  local shim_version=$GVISOR_VERSION
  has_cap_sys_resource || shim_version="$GVISOR_VERSION oom0"
  if [ ! -x "$bin/containerd-shim-runsc-v1" ] || [ "$(cat "$cache/gvisor-shim/version" 2>/dev/null)" != "$shim_version" ]; then
    (
      cd "$cache/gvisor-shim"
      printf 'module sandgym.local/gvisor-shim-build\n\ngo 1.26.3\n\nrequire gvisor.dev/gvisor %s\n' "$GVISOR_VERSION" > go.mod
      rm -f go.sum
      go get "gvisor.dev/gvisor/shim@$GVISOR_VERSION"
      # The shim makes itself unkillable by the OOM killer (oom_score_adj
      # -999), which needs CAP_SYS_RESOURCE; where root lacks it (this kind
      # of VM), the shim fails to start. There it is built from a copy of
      # the module whose one constant is 0 instead (the shim stays as
      # killable as containerd).
      if ! has_cap_sys_resource; then
        rm -rf gvisor-src
        cp -r "$(go list -m -f '{{.Dir}}' gvisor.dev/gvisor)" gvisor-src
        chmod -R u+w gvisor-src
        sed -i 's/^\toomScoreMax = -999$/\toomScoreMax = 0/' gvisor-src/pkg/shim/v1/manager.go
        grep -q '^.oomScoreMax = 0$' gvisor-src/pkg/shim/v1/manager.go || { log "no oomScoreMax in the shim's source"; exit 1; }
        go mod edit -replace gvisor.dev/gvisor=./gvisor-src
        log "root has no CAP_SYS_RESOURCE here: the shim keeps oom_score_adj 0"
      fi
      log "building containerd-shim-runsc-v1 ($GVISOR_VERSION)"
      CGO_ENABLED=0 go build -trimpath -o "$bin/containerd-shim-runsc-v1" gvisor.dev/gvisor/shim
      echo "$shim_version" > version
    )
  fi
  if [ "$kwok_nodes" != 0 ]; then build_kwok; fi
  if [ "$netpol" != 0 ]; then build_kube_router; fi
  if [ ! -x "$bin/pause" ] || [ "$here/k8s/pause.go" -nt "$bin/pause" ]; then
    (
      cd "$cache/pause"
      cp "$here/k8s/pause.go" main.go
      printf 'module sandgym.local/pause\n\ngo 1.24.0\n' > go.mod
      CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$bin/pause" .
    )
  fi
}

# KWOK's controller, and its stages (from the same module): simulated nodes
# become Ready and keep a lease; pods on them turn Ready at once, and go
# when deleted.
build_kwok() {
  [ -x "$bin/kwok" ] && [ "$(cat "$cache/kwok/version" 2> /dev/null)" = "$KWOK_VERSION" ] && return 0
  mkdir -p "$cache/kwok" "$bin"
  (
    cd "$cache/kwok"
    printf 'module sandgym.local/kwok-build\n\ngo 1.26.0\n\nrequire sigs.k8s.io/kwok %s\n' "$KWOK_VERSION" > go.mod
    rm -f go.sum
    go get "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
    log "building kwok $KWOK_VERSION"
    local start
    start=$(date +%s)
    CGO_ENABLED=0 go build -trimpath -o "$bin/kwok" sigs.k8s.io/kwok/cmd/kwok
    local src s
    src=$(go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)/kustomize/stage
    for s in node/fast/node-initialize node/heartbeat-with-lease/node-heartbeat-with-lease \
      pod/fast/pod-ready pod/fast/pod-complete pod/fast/pod-delete; do
      cat "$src/$s.yaml"
      echo ---
    done > stages.yaml
    echo "$KWOK_VERSION" > version
    log "built kwok in $(($(date +%s) - start)) s"
  )
}

# kube-router, for its network-policy controller only (its BGP router and
# service proxy are never started). Its module pulls in gobgp and the AWS
# SDK, so a cold build is long: one package at a time, at low priority.
# Built from a copy of its module with one change of ours: it firewalls
# the pods of every node whose address is in $SANDGYM_NETPOL_NODES_CIDR
# (all real nodes share this machine's filter table), not only its own
# node's; one kube-router then serves nodes 0..N-1.
build_kube_router() {
  local version="$KUBE_ROUTER_VERSION+nodes"
  [ -x "$bin/kube-router" ] && [ "$(cat "$cache/kube-router/version" 2> /dev/null)" = "$version" ] && return 0
  mkdir -p "$cache/kube-router" "$bin"
  (
    cd "$cache/kube-router"
    printf 'module sandgym.local/kube-router-build\n\ngo 1.24.0\n\nrequire github.com/cloudnativelabs/kube-router/v2 %s\n' "$KUBE_ROUTER_VERSION" > go.mod
    rm -f go.sum
    go get "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router@$KUBE_ROUTER_VERSION"
    rm -rf src
    cp -r "$(go list -m -f '{{.Dir}}' github.com/cloudnativelabs/kube-router/v2)" src
    chmod -R u+w src
    local pods=src/pkg/controllers/netpol/pod.go
    sed -i 's/if strings.Compare(pod.Status.HostIP, nodeIP) != 0 || /if !sandgymServed(pod.Status.HostIP, nodeIP) || /' "$pods"
    grep -q 'sandgymServed(pod.Status.HostIP' "$pods" || { log "kube-router's local-pod check not found in $pods"; exit 1; }
    cat > src/pkg/controllers/netpol/sandgym_nodes.go << 'GO'
package netpol

import (
	"net"
	"os"
)

// sandgymServed: a pod is this controller's if it runs on its node or on
// any node whose address is in SANDGYM_NETPOL_NODES_CIDR (sandgym's test
// cluster: every real node on one machine, one filter table).
func sandgymServed(hostIP, nodeIP string) bool {
	if hostIP == nodeIP {
		return true
	}
	_, nodes, err := net.ParseCIDR(os.Getenv("SANDGYM_NETPOL_NODES_CIDR"))
	ip := net.ParseIP(hostIP)
	return err == nil && ip != nil && nodes.Contains(ip)
}
GO
    go mod edit -replace github.com/cloudnativelabs/kube-router/v2=./src
    log "building kube-router $KUBE_ROUTER_VERSION"
    local start
    start=$(date +%s)
    CGO_ENABLED=0 nice -n 19 go build -trimpath -o out/kube-router github.com/cloudnativelabs/kube-router/v2/cmd/kube-router
    mv -f out/kube-router "$bin/kube-router"
    rmdir out
    echo "$version" > version
    log "built kube-router in $(($(date +%s) - start)) s"
  )
}

# M simulated nodes: KWOK's controller manages the nodes annotated
# kwok.x-k8s.io/node=fake; their taint keeps off every pod that does not
# tolerate it (the tests' pods), so only the scale benchmark's land there.
kwok_up() {
  build_kwok
  # KWOK plays 4 pod stages at once by default: under load, with each patch
  # taking the API server a second, pods turned Ready at 2-5 a second. A
  # configuration given leaves every option it omits at 0, not the
  # default, so the others are KWOK v0.8.0's defaults spelled out.
  cat > "$state/kwok.yaml" << 'EOF'
apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  podPlayStageParallelism: 32
  nodePlayStageParallelism: 4
  nodeLeaseParallelism: 4
  podsOnNodeSyncParallelism: 1
  kubeControllerManagerNodeMonitorPeriodMilliseconds: 5000
  kubeControllerManagerNodeMonitorGracePeriodMilliseconds: 40000
  nodeStatusUpdateFrequencyMilliseconds: 10000
  nodeLeaseDurationSeconds: 40
EOF
  start kwok "$bin/kwok" --kubeconfig="$state/admin.kubeconfig" --config="$cache/kwok/stages.yaml" --config="$state/kwok.yaml" \
    --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake --node-lease-duration-seconds=40
  kubectl_ kwok-nodes "$kwok_nodes"
  log "$kwok_nodes simulated (KWOK) nodes"
}

# NetworkPolicy on every real node: kube-router's firewall alone (no
# router, no service proxy, no health or metrics listener) as node 0, and
# a fail-closed rule of ours after it: traffic from or to a pod bridge that
# kube-router did not accept (a pod it has not processed yet) is dropped.
# One kube-router per machine: each rewrites the whole filter table's
# KUBE-* chains, so a second one would undo the first's; ours (patched,
# build_kube_router) takes the pods of every node in 10.255.255.0/24 as
# its own, so it serves nodes 1.. too (KWOK nodes are elsewhere).
netpol_up() {
  build_kube_router
  echo 1 > /proc/sys/net/bridge/bridge-nf-call-iptables
  iptables -N SANDGYM-K8S-PODS 2> /dev/null || iptables -F SANDGYM-K8S-PODS
  iptables -A SANDGYM-K8S-PODS -i 'sandgym-k8s+' -j DROP
  iptables -A SANDGYM-K8S-PODS -o 'sandgym-k8s+' -j DROP
  iptables -C FORWARD -j SANDGYM-K8S-PODS 2> /dev/null || iptables -A FORWARD -j SANDGYM-K8S-PODS
  start kube-router env SANDGYM_NETPOL_NODES_CIDR=10.255.255.0/24 "$bin/kube-router" --kubeconfig="$state/admin.kubeconfig" \
    --hostname-override="$(node_name 0)" --run-firewall=true --run-router=false --run-service-proxy=false \
    --health-port=0 --metrics-port=0 --service-cluster-ip-range=10.96.0.0/24 --iptables-sync-period=1m
  wait_for kube-router 120 iptables -S KUBE-ROUTER-FORWARD
  log "NetworkPolicy enforced on every real node by kube-router $KUBE_ROUTER_VERSION (patched: all nodes)"
}

# kube-router's chains and ipsets removed (its own clean-up), then ours.
netpol_down() {
  stop kube-router
  [ -x "$bin/kube-router" ] && command -v iptables > /dev/null || return 0
  "$bin/kube-router" --cleanup-config > /dev/null 2>&1 || true
  # What its clean-up leaves (seen here): its filter chains and ipsets.
  local rule chain set
  iptables-save -t filter | grep -E '^-A (INPUT|FORWARD|OUTPUT) .*-j KUBE-(ROUTER|NWPLCY|POD-FW)' | cut -c4- |
    while read -r rule; do eval "iptables -D $rule" 2> /dev/null || true; done
  for chain in $(iptables-save -t filter | sed -n 's/^:\(KUBE-\(ROUTER\|NWPLCY\|POD-FW\)[^ ]*\) .*/\1/p'); do iptables -F "$chain" 2> /dev/null || true; done
  for chain in $(iptables-save -t filter | sed -n 's/^:\(KUBE-\(ROUTER\|NWPLCY\|POD-FW\)[^ ]*\) .*/\1/p'); do iptables -X "$chain" 2> /dev/null || true; done
  for set in $(ipset list -n 2> /dev/null | grep -E '^KUBE-(SRC|DST)-'); do ipset destroy "$set" 2> /dev/null || true; done
  iptables -D FORWARD -j SANDGYM-K8S-PODS 2> /dev/null || true
  iptables -F SANDGYM-K8S-PODS 2> /dev/null || true
  iptables -X SANDGYM-K8S-PODS 2> /dev/null || true
}

packages() {
  local missing=()
  command -v etcd > /dev/null || missing+=(etcd-server)
  command -v runc > /dev/null || missing+=(runc)
  command -v openssl > /dev/null || missing+=(openssl)
  if [ "$netpol" != 0 ]; then
    command -v iptables-restore > /dev/null || missing+=(iptables)
    command -v ipset > /dev/null || missing+=(ipset)
  fi
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" > /dev/null
  fi
}

# -- certificates: one CA; serving certs for the API server and kubelet;
# client certs for the admin (system:masters), the kubelet (its node
# identity) and the API server's calls to the kubelet (exec/attach).
cert() { # name subject [san]
  local name=$1 subj=$2 san=${3:-}
  [ -f "$state/pki/$name.crt" ] && return 0
  openssl req -new -newkey rsa:2048 -nodes -keyout "$state/pki/$name.key" -subj "$subj" \
    -out "$state/pki/$name.csr" 2> /dev/null
  local ext=$state/pki/$name.ext
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    if [ -n "$san" ]; then
      echo "extendedKeyUsage=serverAuth"
      echo "subjectAltName=$san"
    else
      echo "extendedKeyUsage=clientAuth"
    fi
  } > "$ext"
  openssl x509 -req -in "$state/pki/$name.csr" -CA "$state/pki/ca.crt" -CAkey "$state/pki/ca.key" \
    -CAcreateserial -days 3650 -extfile "$ext" -out "$state/pki/$name.crt" 2> /dev/null
}

kubeconfig() { # file user
  cat > "$state/$1" << EOF
apiVersion: v1
kind: Config
clusters:
- name: sandgym
  cluster: {server: $api, certificate-authority: $state/pki/ca.crt}
users:
- name: $2
  user: {client-certificate: $state/pki/$2.crt, client-key: $state/pki/$2.key}
contexts:
- name: sandgym
  context: {cluster: sandgym, user: $2}
current-context: sandgym
EOF
}

pki() {
  mkdir -p "$state/pki"
  chmod 700 "$state/pki"
  if [ ! -f "$state/pki/ca.crt" ]; then
    openssl req -x509 -new -newkey rsa:2048 -nodes -days 3650 -subj "/CN=sandgym-test-ca" \
      -keyout "$state/pki/ca.key" -out "$state/pki/ca.crt" 2> /dev/null
  fi
  cert apiserver "/CN=kube-apiserver" "IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
  cert admin "/O=system:masters/CN=sandgym-admin"
  cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
  # The scheduler's bootstrap RBAC role. The controller manager's role
  # holds only what it does itself: each controller's rights go to a
  # service account of its own (--use-service-account-credentials), which
  # this test cluster does without (its controllers act as an admin).
  cert kube-scheduler "/CN=system:kube-scheduler"
  cert controller-manager "/O=system:masters/CN=system:kube-controller-manager"
  [ -f "$state/pki/sa.key" ] || openssl genrsa -out "$state/pki/sa.key" 2048 2> /dev/null
  [ -f "$state/pki/sa.pub" ] || openssl rsa -in "$state/pki/sa.key" -pubout -out "$state/pki/sa.pub" 2> /dev/null
  kubeconfig admin.kubeconfig admin
  kubeconfig kube-scheduler.kubeconfig kube-scheduler
  kubeconfig kube-controller-manager.kubeconfig controller-manager
}

# Node I's serving and client certificates (its identity for the Node authorizer).
node_pki() {
  local i=$1 name ip
  name=$(node_name "$i")
  ip=$(node_ip "$i")
  cert "kubelet-serving$(sfx "$i")" "/CN=$name" "IP:$ip,DNS:$name"
  cert "kubelet$(sfx "$i")" "/O=system:nodes/CN=system:node:$name"
  kubeconfig "kubelet$(sfx "$i").kubeconfig" "kubelet$(sfx "$i")"
}

configs() {
  mkdir -p "$run"
  cat > "$state/runsc.toml" << EOF
binary_name = "/usr/local/lib/sandgym/runsc"
[runsc_config]
  network = "none"
  platform = "systrap"
EOF
  # Pod deletions (and evictions) in the audit log: who, by user agent.
  cat > "$state/audit-policy.yaml" << EOF
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  verbs: [delete, deletecollection]
  resources: [{group: "", resources: [pods]}]
- level: Metadata
  verbs: [create]
  resources: [{group: "", resources: [pods/eviction]}]
- level: None
EOF
  # The scheduler's client may bind a few hundred pods a second (the
  # default, 50/s, would pace a 10,000-pod burst on simulated nodes).
  cat > "$state/kube-scheduler.yaml" << EOF
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection: {kubeconfig: $state/kube-scheduler.kubeconfig, qps: 300, burst: 600}
leaderElection: {leaderElect: false}
EOF
}

# Node I's containerd, CNI and kubelet configuration. Two kubelets on one
# machine must not see each other's pods: each has its own cgroup root
# (the kubelet removes pod cgroups it does not know), pod log folder (it
# removes log folders of pods it does not know), root dir, containerd, CNI
# network (host-local keeps its leases per network name) and bridge.
node_configs() {
  local i=$1 x ip cg=/ logs="" healthz=10248 d
  x=$(sfx "$i")
  ip=$(node_ip "$i")
  if [ "$i" != 0 ]; then
    cg=/sandgym-node$x
    logs="podLogsDir: $state/pod-logs$x"
    healthz=$((10300 + i))
    for d in /sys/fs/cgroup/*/; do
      [ -f "${d}cgroup.procs" ] || continue # a mounted hierarchy
      [ -d "$d${cg#/}" ] || mkdir "$d${cg#/}"
      # A new cpuset cgroup starts with no CPUs and no memory nodes.
      if [ -f "${d}cpuset.cpus" ]; then
        cat "${d}cpuset.cpus" > "$d${cg#/}/cpuset.cpus"
        cat "${d}cpuset.mems" > "$d${cg#/}/cpuset.mems"
      fi
    done
  fi
  mkdir -p "$state/cni$x" "$state/containerd$x" "$state/kubelet$x"
  # One isolated bridge port per pod (portIsolation: ports cannot reach
  # each other), no address for the host on it, no gateway, no masquerade.
  # Where kube-router enforces NetworkPolicy (every real node, unless
  # SANDGYM_K8S_NETPOL=0), pods on a bridge can reach each other, as in
  # a real cluster, and the policies decide (netpol_up).
  local isolated=true
  if [ "$netpol" != 0 ]; then isolated=false; fi
  rm -f "$state/cni$x/"*.conflist
  cat > "$state/cni$x/10-sandgym.conflist" << EOF
{
  "cniVersion": "1.0.0",
  "name": "sandgym-pods$x",
  "plugins": [{
    "type": "bridge", "bridge": "sandgym-k8s$i",
    "isGateway": false, "ipMasq": false, "hairpinMode": false, "portIsolation": $isolated,
    "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.254.$i.0/24"}]]}
  }]
}
EOF
  cat > "$state/containerd$x.toml" << EOF
version = 3
root = "$state/containerd$x"
state = "$run/containerd$x"
[grpc]
  address = "$run/containerd$x.sock"
[plugins.'io.containerd.nri.v1.nri']
  # One NRI socket per machine: no node here uses NRI.
  disable = true
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "docker.io/sandgym/pause:1"
[plugins.'io.containerd.cri.v1.runtime']
  # containerd runs without CAP_SYS_RESOURCE here: containers may only
  # raise oom_score_adj, as under a non-root runtime.
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "/usr/sbin/runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runsc]
      runtime_type = "io.containerd.runsc.v1"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runsc.options]
        TypeUrl = "io.containerd.runsc.v1.options"
        ConfigPath = "$state/runsc.toml"
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["$cache/cni/bin"]
    conf_dir = "$state/cni$x"
EOF
  cat > "$state/kubelet$x.yaml" << EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $ip
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $healthz
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $state/pki/ca.crt}
authorization: {mode: AlwaysAllow}
tlsCertFile: $state/pki/kubelet-serving$x.crt
tlsPrivateKeyFile: $state/pki/kubelet-serving$x.key
cgroupDriver: cgroupfs
cgroupRoot: $cg
$logs
failSwapOn: false
containerRuntimeEndpoint: unix://$run/containerd$x.sock
resolvConf: ""
# Images cannot be pulled again here: never collect them. Evict only
# when the machine is really short.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "200Mi", nodefs.available: "2%", imagefs.available: "2%", nodefs.inodesFree: "2%"}
serializeImagePulls: false
# The pids cgroup of each pod: room for a gVisor sandbox's host tasks at its
# 64-task cap (about 4n + 1024, runtimes/gvisor.py); runc pods are bounded
# by the agent's RLIMIT_NPROC first.
podPidsLimit: 4096
EOF
}

# Start node I (configured first if new): its containerd with the images,
# then its kubelet; wait until it is Ready.
node_up() {
  local i=$1 x ip name
  x=$(sfx "$i")
  ip=$(node_ip "$i")
  name=$(node_name "$i")
  node_pki "$i"
  node_configs "$i"
  case "$(ip -o addr show dev lo)" in *" $ip/"*) ;; *) ip addr add "$ip/32" dev lo ;; esac
  start "containerd$x" "$bin/containerd" --config "$state/containerd$x.toml"
  wait_for "containerd$x" 30 "$bin/ctr" --address "$run/containerd$x.sock" version
  images "$i"
  start "kubelet$x" "$bin/kubelet" --config="$state/kubelet$x.yaml" --kubeconfig="$state/kubelet$x.kubeconfig" \
    --hostname-override="$name" --node-ip="$ip" --root-dir="$state/kubelet$x" --v=1
  wait_for "node $name Ready" 120 kubectl_ node-ready "$name"
}

# Node I lost: its pods' processes killed, then its kubelet and containerd
# stopped (their state stays, as on a machine that went down).
node_stop() {
  local x
  x=$(sfx "$1")
  stop "kubelet$x"
  kill_tasks "$1"
  stop "containerd$x"
}

# Kill and remove every container of node I's containerd.
kill_tasks() {
  local x
  x=$(sfx "$1")
  running "containerd$x" || return 0
  local ctr=("$bin/ctr" --address "$run/containerd$x.sock" -n k8s.io) task c
  for task in $("${ctr[@]}" tasks ls -q 2> /dev/null); do "${ctr[@]}" tasks kill -s KILL "$task" 2> /dev/null || true; done
  sleep 1
  for task in $("${ctr[@]}" tasks ls -q 2> /dev/null); do "${ctr[@]}" tasks delete -f "$task" 2> /dev/null || true; done
  for c in $("${ctr[@]}" containers ls -q 2> /dev/null); do "${ctr[@]}" containers delete "$c" 2> /dev/null || true; done
}

running() { [ -f "$run/$1.pid" ] && kill -0 "$(cat "$run/$1.pid")" 2> /dev/null; }

start() { # name command...
  local name=$1
  shift
  running "$name" && return 0
  mkdir -p "$state/logs"
  setsid "$@" >> "$state/logs/$name.log" 2>&1 < /dev/null &
  echo $! > "$run/$name.pid"
}

wait_for() { # what seconds command...
  local what=$1 seconds=$2
  shift 2
  for _ in $(seq "$((seconds * 2))"); do
    "$@" > /dev/null 2>&1 && return 0
    sleep 0.5
  done
  log "$what did not come up in $seconds s; see $state/logs/"
  exit 1
}

kubectl_() { "$here/../.venv/bin/python" "$here/k8s/kube.py" "$state/admin.kubeconfig" "$@"; }

# The packages and the binaries, one caller at a time: scripts/test.sh
# builds in the background while the tests that need no cluster run, and
# the first k8s test's `up` waits here until that build is done.
prepare() {
  mkdir -p "$cache"
  exec 9> "$cache/build.lock"
  flock 9
  packages
  build
  exec 9>&-
}

up() {
  prepare
  pki
  configs
  start etcd etcd --name sandgym --data-dir "$state/etcd" \
    --listen-client-urls http://127.0.0.1:12379 --advertise-client-urls http://127.0.0.1:12379 \
    --listen-peer-urls http://127.0.0.1:12380 --initial-advertise-peer-urls http://127.0.0.1:12380 \
    --initial-cluster sandgym=http://127.0.0.1:12380 --listen-metrics-urls http://127.0.0.1:12381
  wait_for etcd 30 curl -fsS http://127.0.0.1:12381/health
  start kube-apiserver "$bin/kube-apiserver" --etcd-servers=http://127.0.0.1:12379 \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port=16443 \
    --tls-cert-file="$state/pki/apiserver.crt" --tls-private-key-file="$state/pki/apiserver.key" \
    --client-ca-file="$state/pki/ca.crt" --authorization-mode=Node,RBAC \
    --service-account-issuer=https://kubernetes.default.svc \
    --service-account-key-file="$state/pki/sa.pub" --service-account-signing-key-file="$state/pki/sa.key" \
    --service-cluster-ip-range=10.96.0.0/24 \
    --kubelet-client-certificate="$state/pki/apiserver-kubelet-client.crt" \
    --kubelet-client-key="$state/pki/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority="$state/pki/ca.crt" --kubelet-preferred-address-types=InternalIP \
    --enable-admission-plugins=NodeRestriction --profiling=false \
    --audit-policy-file="$state/audit-policy.yaml" --audit-log-path="$state/logs/audit.log" \
    --audit-log-maxsize=200 --audit-log-maxbackup=2
  wait_for kube-apiserver 120 curl -fsS --cacert "$state/pki/ca.crt" "$api/readyz"
  # Pods are placed by the scheduler (none names its node); of the
  # controllers, those a sandbox namespace relies on: ResourceQuota usage
  # (quota admission refuses pods until it is computed), the default
  # service account, namespace deletion, and node loss (NotReady taints,
  # eviction, pods of deleted nodes).
  start kube-scheduler "$bin/kube-scheduler" --config="$state/kube-scheduler.yaml" \
    --bind-address=127.0.0.1 --secure-port=10259 --authentication-skip-lookup=true \
    --authentication-kubeconfig="$state/kube-scheduler.kubeconfig" \
    --authorization-kubeconfig="$state/kube-scheduler.kubeconfig"
  start kube-controller-manager "$bin/kube-controller-manager" \
    --kubeconfig="$state/kube-controller-manager.kubeconfig" --leader-elect=false \
    --bind-address=127.0.0.1 --secure-port=10257 --authentication-skip-lookup=true \
    --authentication-kubeconfig="$state/kube-controller-manager.kubeconfig" \
    --authorization-kubeconfig="$state/kube-controller-manager.kubeconfig" \
    --controllers=resourcequota-controller,serviceaccount-controller,namespace-controller,node-lifecycle-controller,taint-eviction-controller,pod-garbage-collector-controller \
    --service-account-private-key-file="$state/pki/sa.key" --root-ca-file="$state/pki/ca.crt" \
    --kube-api-qps=100 --kube-api-burst=200
  local i
  for i in $(seq 0 $((nodes - 1))); do node_up "$i"; done
  wait_for kube-scheduler 60 curl -fsSk https://127.0.0.1:10259/healthz
  wait_for kube-controller-manager 60 curl -fsSk https://127.0.0.1:10257/healthz
  if [ "$netpol" != 0 ]; then netpol_up; fi
  if [ "$kwok_nodes" != 0 ]; then kwok_up; fi
  kubectl_ setup
  log "up: KUBECONFIG=$state/admin.kubeconfig"
}

# The pause image and every sandgym image Docker holds go into containerd's
# k8s.io namespace (there is no registry to pull from); with
# SANDGYM_K8S_IMAGES=REGEX only the tags it matches (a second node needs
# not every image: the polyglot ones take minutes each to copy here).
images() { # node
  local ctr=("$bin/ctr" --address "$run/containerd$(sfx "$1").sock" -n k8s.io) have tag
  have=$("${ctr[@]}" images ls -q)
  if ! grep -qx docker.io/sandgym/pause:1 <<< "$have"; then
    tar -C "$bin" -c pause | docker import -c 'ENTRYPOINT ["/pause"]' - sandgym/pause:1 > /dev/null
    docker save sandgym/pause:1 | "${ctr[@]}" images import - > /dev/null
  fi
  for tag in $(docker images --format '{{.Repository}}:{{.Tag}}' 'sandgym/base' | grep -E -- "${SANDGYM_K8S_IMAGES:-.}"); do
    if ! grep -qx "docker.io/$tag" <<< "$have"; then
      log "loading $tag into node $1's containerd"
      docker save "$tag" | "${ctr[@]}" images import - > /dev/null
    fi
  done
}

down() {
  local i x known
  known=$(known_nodes)
  netpol_down
  for name in kwok kube-controller-manager kube-scheduler kube-apiserver etcd; do stop "$name"; done
  # Pods' containers outlive the kubelet: stop them through containerd.
  for i in $known; do node_stop "$i"; done
  # The kubelets' pod volumes are mounts under their root dirs.
  grep -o " $state/kubelet[^ ]*" /proc/mounts | sort -r | xargs -r -n1 umount -l 2> /dev/null || true
  grep -o " $run[^ ]*" /proc/mounts | sort -r | xargs -r -n1 umount -l 2> /dev/null || true
  for i in $known; do
    x=$(sfx "$i")
    rm -rf "$state/kubelet$x" "$state/pod-logs$x"
    [ "$i" = 0 ] || rm -f "$state/kubelet$x.yaml"
    ip link del "sandgym-k8s$i" 2> /dev/null || true
    ip addr del "$(node_ip "$i")/32" dev lo 2> /dev/null || true
    # Node I's cgroup root, deepest first (empty once its pods are killed).
    [ "$i" = 0 ] || find /sys/fs/cgroup/*/sandgym-node$x -depth -type d -exec rmdir {} + 2> /dev/null || true
  done
  rm -rf "$state/etcd" "$run"
  log "down"
}

stop() {
  running "$1" || return 0
  local pid
  pid=$(cat "$run/$1.pid")
  kill "$pid" 2> /dev/null || true
  for _ in $(seq 40); do kill -0 "$pid" 2> /dev/null || break; sleep 0.25; done
  kill -9 "$pid" 2> /dev/null || true
  rm -f "$run/$1.pid"
}

status() {
  local names="etcd kube-apiserver kube-scheduler kube-controller-manager" i
  for i in $(known_nodes); do names+=" containerd$(sfx "$i") kubelet$(sfx "$i")"; done
  for name in $names kwok kube-router; do
    if running "$name"; then echo "$name: running (pid $(cat "$run/$name.pid"))"; else echo "$name: stopped"; fi
  done
  running kube-apiserver && kubectl_ status || true
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) status ;;
  build) prepare ;;
  env) echo "export KUBECONFIG=$state/admin.kubeconfig" ;;
  stop-node | start-node)
    case "${2:-}" in
      '' | *[!0-9]*) echo "usage: $0 $1 I (a node number: 0 is the first node)" >&2; exit 2 ;;
    esac
    running kube-apiserver || { log "the cluster is not up: run $0 up first"; exit 1; }
    if [ "$1" = stop-node ]; then node_stop "$2" && log "node $2 stopped"; else node_up "$2" && log "node $2 up"; fi
    ;;
  *) echo "usage: $0 up|down|status|build|env|stop-node I|start-node I" >&2; exit 2 ;;
esac
