"""What `sandgym gc` collects of the k8s backend: sandbox pods (warm-pool
ones included) whose owner process (on this host) is gone or whose expiry
passed, egress NetworkPolicies (netpol.py) whose owner process is gone,
and, with `--all`, the mount ConfigMaps (mounts.py) no pod mounts."""

from __future__ import annotations

import os
import time
from pathlib import Path

from ..base import RuntimeUnavailable
from ..leaks import Leaks
from .api import api_message, kubernetes_client, load_client
from .mounts import MOUNT_LABEL, UNUSED_AFTER_S
from .netpol import EGRESS_LABEL
from .pods import EXPIRES_LABEL, OWNER_LABEL, owner_label
from .runtime import DEFAULT_NAMESPACE, NAMESPACE_ENV


def collect(include_live: bool = False, owner: int | None = None) -> list[Leaks]:
    """Sandbox pods whose owner is gone or whose expiry passed (or every one,
    with include_live), when a cluster is configured (a kubeconfig, or
    inside a pod). Pods carry their owner too, but are collected by
    liveness only: nothing, given `owner`."""
    configured = os.environ.get("KUBECONFIG") or os.environ.get("KUBERNETES_SERVICE_HOST")
    if owner is not None or not (configured or Path("~/.kube/config").expanduser().exists()):
        return []
    return [
        Leaks("sandbox pod", reap(include_live_owners=include_live)),
        Leaks("egress NetworkPolicy", reap_egress_policies(include_live_owners=include_live)),
        # Shared by every process and small (one per mounted content):
        # deleted only when asked to remove everything.
        Leaks("mount ConfigMap", reap_mount_maps() if include_live else []),
    ]


def reap_mount_maps(namespace: str | None = None, kubeconfig: str | None = None) -> list[str]:
    """Delete the mount ConfigMaps that no pod of the namespace mounts and
    that are older than UNUSED_AFTER_S (a runtime about to use one made it,
    or checked it, within RECHECK_S). Returns their names."""
    client, _ = kubernetes_client()
    core = client.CoreV1Api(load_client(kubeconfig))
    ns = namespace or os.environ.get(NAMESPACE_ENV) or DEFAULT_NAMESPACE
    try:
        maps = core.list_namespaced_config_map(ns, label_selector=MOUNT_LABEL, _request_timeout=10).items
        pods = core.list_namespaced_pod(ns, _request_timeout=10).items
    except Exception as e:
        raise RuntimeUnavailable(f"the cluster does not answer: {api_message(e)}") from None
    used = {v.config_map.name for p in pods for v in (p.spec.volumes or []) if v.config_map is not None}
    removed = []
    for cm in maps:
        name = cm.metadata.name
        age = time.time() - cm.metadata.creation_timestamp.timestamp()
        if name not in used and age > UNUSED_AFTER_S:
            try:
                core.delete_namespaced_config_map(name, ns)
                removed.append(name)
            except Exception:
                pass
    return removed


def reap(include_live_owners: bool = False, namespace: str | None = None, kubeconfig: str | None = None) -> list[str]:
    """Delete sandgym pods whose owner process (on this host) is gone or whose
    expiry passed (or every one, with include_live_owners). Returns their names."""
    client, _ = kubernetes_client()
    core = client.CoreV1Api(load_client(kubeconfig))
    ns = namespace or os.environ.get(NAMESPACE_ENV) or DEFAULT_NAMESPACE
    try:
        pods = core.list_namespaced_pod(ns, label_selector=OWNER_LABEL, _request_timeout=10).items
    except Exception as e:
        raise RuntimeUnavailable(f"the cluster does not answer: {api_message(e)}") from None
    removed = []
    for pod in pods:
        labels = pod.metadata.labels or {}
        expired = float(labels.get(EXPIRES_LABEL, "0") or 0) < time.time()
        if include_live_owners or expired or not owner_alive(labels.get(OWNER_LABEL, "")):
            try:
                core.delete_namespaced_pod(pod.metadata.name, ns, grace_period_seconds=0)
                removed.append(pod.metadata.name)
            except Exception:
                pass
    return removed


def owner_alive(owner: str) -> bool:
    """Whether the process an owner label names (host-pid) runs, on this host."""
    host, _, pid = owner.rpartition("-")
    return host == owner_label().rsplit("-", 1)[0] and pid.isdigit() and os.path.exists(f"/proc/{pid}")


def reap_egress_policies(
    include_live_owners: bool = False, namespace: str | None = None, kubeconfig: str | None = None
) -> list[str]:
    """Delete the egress NetworkPolicies whose owner process is gone (a run
    killed before its runtime's close), or every one with
    include_live_owners. Returns their names."""
    client, _ = kubernetes_client()
    networking = client.NetworkingV1Api(load_client(kubeconfig))
    ns = namespace or os.environ.get(NAMESPACE_ENV) or DEFAULT_NAMESPACE
    try:
        policies = networking.list_namespaced_network_policy(ns, label_selector=EGRESS_LABEL, _request_timeout=10).items
    except Exception as e:
        raise RuntimeUnavailable(f"the cluster does not answer: {api_message(e)}") from None
    removed = []
    for policy in policies:
        if include_live_owners or not owner_alive((policy.metadata.labels or {}).get(OWNER_LABEL, "")):
            try:
                networking.delete_namespaced_network_policy(policy.metadata.name, ns)
                removed.append(policy.metadata.name)
            except Exception:
                pass
    return removed
