"""The test cluster's small API chores for scripts/k8s-cluster.sh, through
the official Python client (no kubectl is built here).

    kube.py KUBECONFIG node-ready NODE   exit 0 once NODE reports Ready
    kube.py KUBECONFIG setup NODE        the RuntimeClasses the backends name
    kube.py KUBECONFIG status            nodes, runtime classes, sandbox pods
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


def status() -> None:
    for node in client.CoreV1Api().list_node().items:
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
    if command == "status":
        status()
        return 0
    print(f"unknown command {command!r}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
