"""The k8s backend's limits on the real test cluster (scripts/k8s-cluster.sh):
pods placed by the scheduler or on a named node; the client's QPS/burst
bucket; backoff on the API server's 429 (a real one: an eviction while a
PodDisruptionBudget is still unprocessed); the per-run pod cap; and the
namespace's ResourceQuota (a create waits for room, then fails with one
line, and leaves no pod behind)."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest

from sandgym.runtimes import SandboxError, SandboxSpec
from tests.helpers import wait_until

pytestmark = pytest.mark.k8s

SPEC = SandboxSpec(memory_mb=128, cpus=0.25, wall_timeout_s=300)
NODE = "sandgym-node"


@pytest.fixture
def namespace(k8s_cluster):
    """A namespace of its own, deleted after the test (the controller manager empties it)."""
    from kubernetes import client

    from sandgym.runtimes.k8s.api import load_client

    name = f"sandgym-limits-{uuid.uuid4().hex[:6]}"
    core = client.CoreV1Api(load_client())
    yield name
    core.delete_namespace(name)


def pods_of(rt) -> list[str]:
    return [
        p.metadata.name for p in rt.core.list_namespaced_pod(rt.namespace).items if not p.metadata.deletion_timestamp
    ]


def test_the_scheduler_places_pods_and_a_named_node_still_works(k8s_cluster, namespace):
    from sandgym.runtimes.k8s.runtime import KubernetesRuntime

    scheduled = KubernetesRuntime(pool=0, namespace=namespace)
    named = KubernetesRuntime(pool=0, namespace=namespace, node=NODE)
    try:
        for rt in (scheduled, named):
            sid, manifest, _ = rt.sandbox_pod(SPEC, rt.image)
            assert ("nodeName" in manifest["spec"]) == (rt is named)
            with rt.create(SPEC) as sb:
                assert sb.exec(["echo", "hi"]).stdout == b"hi\n"
                assert rt.core.read_namespaced_pod(sb.info.id, namespace).spec.node_name == NODE
    finally:
        scheduled.close()
        named.close()


def test_the_client_keeps_to_its_qps_and_burst(k8s_cluster, namespace):
    from sandgym.runtimes.k8s.runtime import KubernetesRuntime

    rt = KubernetesRuntime(pool=0, namespace=namespace, qps=5, burst=2)
    try:
        calls, waited = rt.limiter.calls, rt.limiter.waited
        for _ in range(6):
            rt.core.list_namespaced_pod(namespace)
        # Every call went through the bucket; past the burst, each one waited.
        assert rt.limiter.calls - calls == 6
        assert rt.limiter.waited - waited >= 4
    finally:
        rt.close()


def test_a_429_is_retried_with_backoff_then_reported(k8s_cluster, namespace, monkeypatch):
    """The eviction API answers 429 while a PodDisruptionBudget covering the
    pod is unprocessed (no disruption controller runs here): the client
    retries SANDGYM_K8S_RETRIES times, then raises the 429. Without the
    budget (positive control) the same eviction goes through at once."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    from sandgym.runtimes.k8s.runtime import KubernetesRuntime

    monkeypatch.setenv("SANDGYM_K8S_RETRIES", "2")
    rt = KubernetesRuntime(pool=0, namespace=namespace)
    policy = client.PolicyV1Api(rt.api_client)
    try:
        # Running (a pending pod is evicted whatever the budget says).
        sandbox = rt.create(SPEC)
        sid = sandbox.info.id
        budget: Any = {
            "metadata": {"name": "keep"},
            "spec": {
                "minAvailable": 1,
                "selector": {"matchExpressions": [{"key": "sandgym.run", "operator": "Exists"}]},
            },
        }
        policy.create_namespaced_pod_disruption_budget(namespace, budget)
        eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": sid, "namespace": namespace}}
        before = rt.limiter.retries
        with pytest.raises(ApiException) as refused:
            rt.core.create_namespaced_pod_eviction(sid, namespace, eviction)
        assert refused.value.status == 429
        assert rt.limiter.retries - before == 2
        assert sid in pods_of(rt)
        policy.delete_namespaced_pod_disruption_budget("keep", namespace)
        before = rt.limiter.retries
        rt.core.create_namespaced_pod_eviction(sid, namespace, eviction)
        assert rt.limiter.retries == before
        wait_until(lambda: sid not in pods_of(rt), "the evicted pod to go")
        sandbox.close()
    finally:
        rt.close()


def test_the_per_run_cap_queues_creates_then_says_so(k8s_cluster, namespace, monkeypatch):
    from sandgym.runtimes.k8s.runtime import KubernetesRuntime

    rt = KubernetesRuntime(pool=0, namespace=namespace, max_pods=1)
    try:
        first = rt.create(SPEC)
        second: list = []
        waiter = threading.Thread(target=lambda: second.append(rt.create(SPEC)))
        waiter.start()
        wait_until(lambda: rt.slots.waits >= 1, "the second create to wait for a slot")
        assert len(pods_of(rt)) == 1
        first.close()
        waiter.join(180)
        assert second and second[0].exec(["echo", "ok"]).stdout == b"ok\n"
        # At the cap for longer than the wait: one line naming the setting.
        rt.quota_wait_s = 0.5
        with pytest.raises(SandboxError, match="already holds 1 pods \\(SANDGYM_K8S_MAX_PODS\\)"):
            rt.create(SPEC)
        second[0].close()
    finally:
        rt.close()
    wait_until(lambda: not pods_of(rt), "no pod left")


def test_a_resource_quota_queues_creates_then_fails_without_a_leak(k8s_cluster, namespace):
    from sandgym.runtimes.k8s.runtime import KubernetesRuntime

    rt = KubernetesRuntime(pool=0, namespace=namespace)
    try:
        rt.core.create_namespaced_resource_quota(
            namespace, {"metadata": {"name": "two"}, "spec": {"hard": {"pods": "2"}}}
        )
        # Quota admission refuses pods until the controller has counted the namespace.
        wait_until(
            lambda: (rt.core.read_namespaced_resource_quota("two", namespace).status.hard or {}).get("pods") == "2",
            "the quota's status",
        )
        held = [rt.create(SPEC), rt.create(SPEC)]
        third: list = []
        waiter = threading.Thread(target=lambda: third.append(rt.create(SPEC)))
        waiter.start()
        wait_until(lambda: rt.quota_waits >= 1, "the third create to meet the quota")
        held.pop(0).close()  # room for one: the waiting create goes through
        waiter.join(180)
        assert third and third[0].exec(["echo", "ok"]).stdout == b"ok\n"
        held += third
        # Still full after the wait: one clear line, and no pod left of the attempt.
        rt.quota_wait_s = 1.0
        with pytest.raises(SandboxError) as full:
            rt.create(SPEC)
        message = str(full.value)
        assert "\n" not in message and "ResourceQuota" in message and "exceeded quota: two" in message
        assert sorted(pods_of(rt)) == sorted(sb.info.id for sb in held)
        assert rt.slots.held == 0 or rt.slots.cap == 0
        for sb in held:
            sb.close()
    finally:
        rt.close()
    wait_until(lambda: not pods_of(rt), "no pod left")
