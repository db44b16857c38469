"""The test cluster's small API chores for scripts/k8s-cluster.sh, through
the official Python client (no kubectl is built here).

    kube.py KUBECONFIG node-ready NODE   exit 0 once NODE reports Ready
    kube.py KUBECONFIG setup NODE        the RuntimeClasses the backends name
    kube.py KUBECONFIG status            nodes, runtime classes, sandbox pods
    kube.py KUBECONFIG kwok-nodes M      M simulated nodes kwok-node-0.. (KWOK's)
"""

from __future__ import annotations

import sys

from kubernetes import client, config
from kubernetes.client.rest import ApiException

# RuntimeClass name -> containerd handler (scripts/k8s-cluster.sh's
# containerd.toml). No `kata` here: its absence is what the backend's
# error for `k8s:kata` is tested against.
RUNTIME_CLASSES = {"gvisor": "runsc"}


def node_ready(name: str) -> bool:
    try:
        node = client.CoreV1Api().read_node(name)
    except ApiException:
        return False
    return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])


def setup() -> None:
    api = client.NodeV1Api()
    for name, handler in RUNTIME_CLASSES.items():
        body = client.V1RuntimeClass(metadata=client.V1ObjectMeta(name=name), handler=handler)
        try:
            api.create_runtime_class(body)
        except ApiException as e:
            if e.status != 409:  # already there
                raise


# What marks a simulated node, and keeps other pods off it.
KWOK_ANNOTATION = {"kwok.x-k8s.io/node": "fake"}
KWOK_CAPACITY = {"cpu": "1k", "memory": "1Ti", "ephemeral-storage": "1Pi", "pods": "1M"}
KWOK_TAINT = {"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}


def kwok_nodes(count: int) -> None:
    core = client.CoreV1Api()
    for i in range(count):
        name = f"kwok-node-{i}"
        body = {
            "metadata": {
                "name": name,
                "annotations": KWOK_ANNOTATION,
                "labels": {"type": "kwok", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux"},
            },
            # A /24 of pod addresses each (KWOK hands them out per node).
            "spec": {"taints": [KWOK_TAINT], "podCIDR": f"10.{128 + i // 256}.{i % 256}.0/24"},
            # KWOK keeps a node's own capacity; sandbox pods ask for ephemeral storage too.
            "status": {"capacity": KWOK_CAPACITY, "allocatable": KWOK_CAPACITY},
        }
        try:
            core.create_node(body)
        except ApiException as e:
            if e.status != 409:
                raise


def status() -> None:
    nodes = client.CoreV1Api().list_node().items
    kwok = [n for n in nodes if (n.metadata.annotations or {}).get("kwok.x-k8s.io/node") == "fake"]
    if kwok:
        ready_kwok = sum(any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or []) for n in kwok)
        print(f"simulated (KWOK) nodes: {len(kwok)}, {ready_kwok} Ready")
    for node in nodes:
        if node in kwok:
            continue
        ready = [c.status for c in node.status.conditions or [] if c.type == "Ready"]
        print(f"node {node.metadata.name}: Ready={ready[0] if ready else '?'} {node.status.node_info.kubelet_version}")
    for rc in client.NodeV1Api().list_runtime_class().items:
        print(f"runtimeclass {rc.metadata.name}: handler {rc.handler}")
    pods = client.CoreV1Api().list_pod_for_all_namespaces(label_selector="sandgym.owner").items
    print(f"sandgym pods: {len(pods)}")


def main(argv: list[str]) -> int:
    kubeconfig, command, *args = argv
    config.load_kube_config(kubeconfig)
    if command == "node-ready":
        return 0 if node_ready(args[0]) else 1
    if command == "setup":
        setup()
        return 0
    if command == "kwok-nodes":
        kwok_nodes(int(args[0]))
        return 0
    if command == "status":
        status()
        return 0
    print(f"unknown command {command!r}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
