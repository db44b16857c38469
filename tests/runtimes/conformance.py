"""What the conformance suites (test_conformance*.py) share: the backends
they run on and how they list what sandboxes exist.

Real Docker Engine and gVisor, started by scripts/setup.sh; a real
single-node Kubernetes cluster, started by scripts/k8s-cluster.sh.
"""

from __future__ import annotations

import os
import time

import pytest

from sandgym.runtimes.docker.runtime import OWNER_LABEL
from sandgym.runtimes.k8s.pods import OWNER_LABEL as K8S_OWNER_LABEL

BACKENDS = [
    "local",
    pytest.param("docker", marks=pytest.mark.docker),
    pytest.param("docker:runsc", marks=pytest.mark.docker),
    pytest.param("k8s", marks=pytest.mark.k8s),
    pytest.param("k8s:gvisor", marks=pytest.mark.k8s),
]


def sandgym_containers() -> list:
    import docker

    return docker.from_env().containers.list(all=True, filters={"label": f"{OWNER_LABEL}"}, ignore_removed=True)


def sandgym_sandboxes() -> set[str]:
    """Every sandgym container and, when the test cluster is in use, pod,
    but the pods this process's warm pools made ahead and handed to no one
    (the pools refill in the background, whatever a test does)."""
    found = {c.id for c in sandgym_containers()}
    if os.environ.get("KUBECONFIG"):  # set by the k8s_cluster fixture while the test cluster is in use
        from kubernetes import client

        from sandgym.runtimes.k8s.api import load_client
        from sandgym.runtimes.k8s.runtime import DEFAULT_NAMESPACE, live_runtimes

        core = client.CoreV1Api(load_client())
        pods = core.list_namespaced_pod(DEFAULT_NAMESPACE, label_selector=K8S_OWNER_LABEL).items
        ahead = {name for rt in live_runtimes() for name in rt.pool_pods()}
        for p in pods:
            assert p.metadata is not None  # the API sends every pod's metadata
            if p.metadata.name not in ahead:
                found.add(f"pod/{p.metadata.name}")
    return found


def settled(check, timeout_s=10.0) -> bool:
    """Teardown is asynchronous: wait for it, without a fixed sleep."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
