"""What `sandgym gc` collects of the k8s backend: sandbox pods whose owner
process (on this host) is gone or whose expiry passed."""

from __future__ import annotations

import os
import time
from pathlib import Path

from ..base import RuntimeUnavailable
from ..leaks import Leaks
from .api import api_message, kubernetes_client, load_client
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
    return [Leaks("sandbox pod", reap(include_live_owners=include_live))]


def reap(include_live_owners: bool = False, namespace: str | None = None, kubeconfig: str | None = None) -> list[str]:
    """Delete sandgym pods whose owner process (on this host) is gone or whose
    expiry passed (or every one, with include_live_owners). Returns their names."""
    client, _ = kubernetes_client()
    core = client.CoreV1Api(load_client(kubeconfig))
    ns = namespace or os.environ.get(NAMESPACE_ENV) or DEFAULT_NAMESPACE
    mine = owner_label().rsplit("-", 1)[0]
    try:
        pods = core.list_namespaced_pod(ns, label_selector=OWNER_LABEL, _request_timeout=10).items
    except Exception as e:
        raise RuntimeUnavailable(f"the cluster does not answer: {api_message(e)}") from None
    removed = []
    for pod in pods:
        labels = pod.metadata.labels or {}
        owner = labels.get(OWNER_LABEL, "")
        expired = float(labels.get(EXPIRES_LABEL, "0") or 0) < time.time()
        host, _, pid = owner.rpartition("-")
        alive = host == mine and pid.isdigit() and os.path.exists(f"/proc/{pid}")
        if include_live_owners or expired or not alive:
            try:
                core.delete_namespaced_pod(pod.metadata.name, ns, grace_period_seconds=0)
                removed.append(pod.metadata.name)
            except Exception:
                pass
    return removed
