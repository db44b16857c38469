"""The k8s warm pool on the real test cluster (scripts/k8s-cluster.sh): pods
made ahead and handed out once, oldest first; a pod that dies while it
waits is replaced and never handed out; the pool's labels, its metrics in
the Prometheus registry, and its settings' errors. The conformance,
attack and pool suites run on k8s with the pool on (its default); the
kill -9 + `sandgym gc` case is test_k8s.py's."""

from __future__ import annotations

import time

import pytest

from sandgym.runtimes import SandboxError, SandboxSpec

pytestmark = pytest.mark.k8s

SPEC = SandboxSpec(memory_mb=256, cpus=0.5, wall_timeout_s=300)


def wait_until(check, what: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


@pytest.fixture(params=["runc", "runsc"])
def pooled(k8s_cluster, request):
    from sandgym.runtimes.k8s.runtime import KubernetesRuntime

    rt = KubernetesRuntime(request.param, pool=2, pool_max=4)
    yield rt
    rt.close()


def waiting_pods(rt) -> list[str]:
    """The pool's waiting pods for SPEC, in the order it hands them out (the stock's queue)."""
    stock = rt._stock
    with stock._cond:
        return [s.sid for s in stock._ready.get(stock.key(SPEC, rt.image_of(SPEC.image)), ())]


def test_warm_pods_are_handed_out_once_oldest_first(pooled):
    rt = pooled
    rt.warm(SPEC, 2)
    wait_until(lambda: rt.pooled(SPEC) >= 2, "two warm pods")
    ready = waiting_pods(rt)
    assert len(ready) >= 2
    first = rt.create(SPEC.model_copy(update={"labels": {"task": "t/1"}}))
    try:
        # The oldest waiting pod, with the caller's labels in its SandboxInfo only.
        assert first.info.id == ready[0] and first.info.labels == {"task": "t/1"}
        assert first.exec(["sh", "-c", "echo hi > f; cat f"]).stdout == b"hi\n"
        pod = rt.core.read_namespaced_pod(first.info.id, rt.namespace)
        assert pod.metadata.labels["sandgym.pool"] == "1"
        # Its lifetime is the spec's plus the longest wait in the pool, and no more.
        from sandgym.runtimes.k8s.runtime import POOL_MAX_IDLE_S

        assert pod.spec.active_deadline_seconds == int(SPEC.wall_timeout_s + POOL_MAX_IDLE_S) + 60
    finally:
        first.close()
    # Closed: the pod is deleted, and no later claim gets it.
    wait_until(lambda: rt.watcher.gone(first.info.id), "the used pod's deletion")
    claims = [rt.create(SPEC) for _ in range(3)]
    try:
        ids = [sb.info.id for sb in claims]
        assert first.info.id not in ids and len(set(ids)) == 3
        assert all(sb.exec(["cat", "f"]).exit_code != 0 for sb in claims)  # fresh workspaces
    finally:
        for sb in claims:
            sb.close()
    m = rt.pool_metrics()
    assert m["hits"] >= 2 and m["started"] >= 2


def test_a_pod_that_dies_in_the_pool_is_replaced_never_handed_out(pooled):
    rt = pooled
    rt.warm(SPEC, 2)
    wait_until(lambda: rt.pooled(SPEC) >= 2, "two warm pods")
    dead = waiting_pods(rt)
    # Every waiting pod dies (deleted under the pool, as a node's eviction would).
    for name in dead:
        rt.core.delete_namespaced_pod(name, rt.namespace, grace_period_seconds=0)
    wait_until(lambda: all(rt.watcher.gone(n) for n in dead), "the watch to see them go")
    with rt.create(SPEC) as sb:
        assert sb.info.id not in dead
        assert sb.exec(["true"]).exit_code == 0
    # The pool made new ones in their place.
    wait_until(lambda: rt.pooled(SPEC) >= 2, "the pool to refill")
    assert not set(waiting_pods(rt)) & set(dead)
    assert rt.pool_metrics()["discarded"] >= 1 or rt.pool_metrics()["misses"] >= 1


def test_pool_metrics_in_the_registry(k8s_cluster):
    """The claim histogram by launch type, the creation histogram and the pool's
    gauges, as `--metrics-port` and `serve` expose them; `sandgym capacity`
    reads the creation figures back."""
    from sandgym.capacity import pool_figures
    from sandgym.observability.metrics import SandgymMetrics
    from sandgym.runtimes.k8s.runtime import KubernetesRuntime

    metrics = SandgymMetrics()
    rt = KubernetesRuntime(pool=1, pool_max=2)
    try:
        rt.create(SPEC).close()  # cold: the spec was never asked for
        rt.warm(SPEC, 1)
        wait_until(lambda: rt.pooled(SPEC) >= 1, "a warm pod")
        rt.create(SPEC).close()  # warm
        text = metrics.exposition()[0].decode()
    finally:
        rt.close()
        metrics.close()
    for launch in ("warm", "cold"):
        assert f'sandgym_sandbox_claim_seconds_count{{backend="k8s",launch_type="{launch}"}} 1.0' in text, text
    assert 'sandgym_sandbox_creation_seconds_count{backend="k8s"}' in text
    for gauge in ("ready", "starting", "in_use", "target"):
        assert f'sandgym_warm_pool_{gauge}_sandboxes{{backend="k8s"}}' in text
    assert 'sandgym_warm_pool_hit_ratio{backend="k8s"}' in text
    fig = pool_figures(text)["k8s"]
    assert fig["claims_warm"] == 1 and fig["claims_cold"] == 1 and fig["hit_ratio"] == 0.5
    assert fig["creation_p95_s"] > 0 and fig["claim_warm_p50_s"] <= fig["creation_p95_s"]


def test_pool_settings_errors(k8s_cluster, monkeypatch):
    from sandgym.runtimes.k8s.runtime import POOL_ENV, POOL_RATE_ENV, KubernetesRuntime

    off = KubernetesRuntime(pool=0)
    try:
        with pytest.raises(SandboxError, match="warm pool is off"):
            off.warm(SPEC, 1)
        with off.create(SPEC) as sb:  # still works, cold
            assert sb.exec(["true"]).exit_code == 0
        assert off.pooled() == 0
    finally:
        off.close()
    monkeypatch.setenv(POOL_ENV, "lots")
    with pytest.raises(ValueError, match=f"{POOL_ENV}='lots'"):
        KubernetesRuntime()
    monkeypatch.setenv(POOL_ENV, "1")
    monkeypatch.setenv(POOL_RATE_ENV, "0")
    with pytest.raises(ValueError, match=f"{POOL_RATE_ENV}='0'"):
        KubernetesRuntime()


def test_small_mounts_are_configmaps_made_once_per_content(k8s_cluster, tmp_path):
    """A small folder is one immutable, content-addressed ConfigMap the
    kubelet projects read-only into each pod: no init container, no copy
    per pod; the same content in another folder is the same ConfigMap."""
    from sandgym.runtimes import Mount
    from sandgym.runtimes.k8s.mounts import MOUNT_LABEL
    from sandgym.runtimes.k8s.runtime import KubernetesRuntime

    for name in ("a", "b"):
        (tmp_path / name / "pkg").mkdir(parents=True)
        (tmp_path / name / "pkg" / "mod.py").write_text("VALUE = 42\n")
        (tmp_path / name / "run.sh").write_text("#!/bin/sh\necho ran\n")
        (tmp_path / name / "run.sh").chmod(0o755)
    rt = KubernetesRuntime(pool=0)
    try:
        names = set()
        for name in ("a", "b"):
            spec = SandboxSpec(mounts=[Mount(source=str(tmp_path / name), target="/opt/data")])
            with rt.create(spec) as sb:
                pod = rt.core.read_namespaced_pod(sb.info.id, rt.namespace)
                assert not pod.spec.init_containers
                vol = next(v for v in pod.spec.volumes if v.name == "mount-0")
                assert vol.config_map is not None and vol.empty_dir is None
                names.add(vol.config_map.name)
                r = sb.exec(
                    ["sh", "-c", "cd /opt/data && python3 -c 'import pkg.mod; print(pkg.mod.VALUE)' && ./run.sh"]
                )
                assert r.stdout == b"42\nran\n", r
                for attempt in ("echo x > /opt/data/pkg/mod.py", "echo x > /opt/data/new.py", "mkdir /opt/data/d"):
                    assert sb.exec(["sh", "-c", attempt]).exit_code != 0, attempt
        assert len(names) == 1
        cm = rt.core.read_namespaced_config_map(names.pop(), rt.namespace)
        assert cm.immutable and cm.metadata.labels == {MOUNT_LABEL: "1"}
        # Changed content: another ConfigMap, and the pod sees the new content.
        (tmp_path / "a" / "pkg" / "mod.py").write_text("VALUE = 7\n")
        spec = SandboxSpec(mounts=[Mount(source=str(tmp_path / "a"), target="/opt/data")])
        with rt.create(spec) as sb:
            r = sb.exec(
                ["python3", "-c", "import sys; sys.path.insert(0, '/opt/data'); import pkg.mod; print(pkg.mod.VALUE)"]
            )
            assert r.stdout == b"7\n", r
    finally:
        rt.close()


def test_close_leaves_no_pool_pod(k8s_cluster):
    """close() deletes the pods waiting in the pool and those handed out; none is left running."""
    from sandgym.runtimes.k8s.runtime import KubernetesRuntime

    rt = KubernetesRuntime("runc", pool=3, pool_max=3)
    rt.warm(SPEC, 3)
    wait_until(lambda: rt.pooled(SPEC) >= 3, "three warm pods")
    held = rt.create(SPEC)
    made = rt.pool_pods() | {held.info.id}
    assert len(made) >= 3
    rt.close()

    def left() -> list[str]:
        out = []
        for name in made:
            try:
                pod = rt.core.read_namespaced_pod(name, rt.namespace)
            except Exception as e:
                assert getattr(e, "status", None) == 404, e
                continue
            if not pod.metadata.deletion_timestamp:
                out.append(name)
        return out

    assert left() == []
    wait_until(lambda: all(rt.watcher.gone(n) for n in made), "the pods to be gone")
