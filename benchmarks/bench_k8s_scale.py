"""Benchmark: N sandbox pods through sandgym's k8s control path onto simulated (KWOK) nodes.

    SANDGYM_K8S_KWOK_NODES=200 scripts/k8s-cluster.sh up
    eval $(scripts/k8s-cluster.sh env)
    .venv/bin/python benchmarks/bench_k8s_scale.py --pods 1000 [--workers N] [--json FILE]

Each pod is the sandbox pod `KubernetesRuntime` makes for the default spec
(`sandbox_pod`), created with the runtime's own client (its QPS/burst
limit and backoff, `create_pod`), its readiness read from the runtime's
watch (`watcher.wait`), deleted with `delete_pod`. The runtime is given
the simulated nodes' selector and toleration, so the pods land only there
(the tests' pods never do: the nodes are tainted). KWOK runs no container,
so the agent channel is skipped: create, scheduled, ready, delete.

`--workers` threads each create a pod and wait for it to be ready: its
sandbox container running, what `KubernetesRuntime.create` waits for.
(Not the pod's Ready condition: when a simulated node's lease lags under
load, the node controller turns its pods' Ready False while their
containers run; `marked_not_ready` counts them.) Once all are ready,
the same threads delete them all, and the clock stops when the watch has
seen every one go. Written to `--json`: pods, errors,
create_per_s (pods created per second of the create phase),
ready_p50_s/p95_s/p99_s (from create call to ready, per pod),
delete_per_s, apiserver_rss_mb (the API server's peak resident set, read
from /proc during the run), with the load average at start and end.
Raise SANDGYM_K8S_QPS/SANDGYM_K8S_BURST to let the client go faster.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import threading
import time
from collections import Counter
from pathlib import Path

from sandgym.runtimes import SandboxError, SandboxSpec
from sandgym.runtimes.k8s.api import container_running, pod_problem
from sandgym.runtimes.k8s.runtime import KubernetesRuntime

KWOK_SELECTOR = {"type": "kwok"}
KWOK_TOLERATIONS = [
    {"key": "kwok.x-k8s.io/node", "operator": "Equal", "value": "fake", "effect": "NoSchedule"},
    # A simulated node's lease lags when the run loads the machine (2 cores):
    # the node controller then marks it NotReady, taints it NoExecute, and
    # after the default 300 s evicts its pods (seen in the audit log as
    # deletions by the node controller: the 10,000-pod runs' lost pods).
    # The run measures sandgym's control path, not the simulator's
    # heartbeats, so its pods stay through that.
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
]
APISERVER_PID = Path("/run/sandgym-k8s/kube-apiserver.pid")
AUDIT_LOG = Path(os.environ.get("SANDGYM_K8S_STATE", "/var/lib/sandgym-k8s")) / "logs" / "audit.log"


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class PeakRss(threading.Thread):
    """The API server's largest resident set seen, sampled every second."""

    def __init__(self):
        super().__init__(daemon=True)
        try:
            self.pid = int(APISERVER_PID.read_text())
        except (OSError, ValueError):
            self.pid = 0
        self.peak = rss_mb(self.pid) if self.pid else 0.0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(1.0):
            self.peak = max(self.peak, rss_mb(self.pid)) if self.pid else 0.0


def ready(pod) -> bool:
    return bool(pod.spec.node_name) and container_running(pod, "sandbox")


def ready_condition_false(pod) -> bool:
    return any(c.type == "Ready" and c.status == "False" for c in (pod.status.conditions or []))


def kind(error: str) -> str:
    """An error without its pod's name and details: "gone (deleted)", "gone (still in the API)", ..."""
    text = error.split(": ", 1)[-1]
    return text.split(":", 1)[0] + (")" if text.startswith("gone (still") else "")


def where(rt: KubernetesRuntime, sid: str) -> str:
    """What the API server says of a pod the watch reported gone: whether it
    is really deleted (a controller's doing) or still there (the watch's)."""
    try:
        pod = rt.core.read_namespaced_pod(sid, rt.namespace, _request_timeout=30)
    except Exception as e:
        return "deleted" if getattr(e, "status", None) == 404 else f"unknown: {e}"
    deleting = pod.metadata.deletion_timestamp
    return f"still in the API: node {pod.spec.node_name}, phase {pod.status.phase}, deleting {deleting}"


def late(rt: KubernetesRuntime, sid: str) -> str:
    """Why a pod was not ready in time: whether the API server has it ready
    (the watch missed or lagged its news) or not (the node, here KWOK, has
    not started it), with both copies' resourceVersion and phase."""

    def brief(pod) -> str:
        if pod is None:
            return "none"
        return f"rv {pod.metadata.resource_version}, node {pod.spec.node_name}, phase {pod.status.phase}"

    seen = rt.watcher.pod(sid)
    try:
        fresh = rt.core.read_namespaced_pod(sid, rt.namespace, _request_timeout=30)
    except Exception as e:
        return f"not ready in time, API read failed: {e}; watch {brief(seen)}"
    verdict = "ready" if ready(fresh) else "not ready"
    return f"not ready in time, {verdict} in the API: watch {brief(seen)}; API {brief(fresh)}"


def deleted_by(names: set[str]) -> dict[str, int]:
    """Who deleted these pods, from the test cluster's audit log (user and
    user agent of each pod's delete or eviction call): {} without the log."""
    who: Counter[str] = Counter()
    try:
        lines = AUDIT_LOG.open()
    except OSError:
        return {}
    with lines:
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            ref = event.get("objectRef") or {}
            if ref.get("name") in names and event.get("stage") == "ResponseComplete":
                user = (event.get("user") or {}).get("username", "?")
                who[f"{event.get('verb')} by {user} ({(event.get('userAgent') or '?').split(' ')[0]})"] += 1
    return dict(who)


def run(pods: int, workers: int, namespace: str, timeout_s: float) -> dict:
    rt = KubernetesRuntime(pool=0, namespace=namespace, node_selector=KWOK_SELECTOR, tolerations=KWOK_TOLERATIONS)
    spec = SandboxSpec()
    image = rt.image_of(spec.image)
    todo: queue.Queue[int] = queue.Queue()
    for i in range(pods):
        todo.put(i)
    names: list[str] = []
    latencies: list[float] = []
    errors: list[str] = []
    lost: set[str] = set()  # pods the watch reported gone before they were ready
    lock = threading.Lock()
    created_at: list[float] = []

    def create_worker() -> None:
        while True:
            try:
                todo.get_nowait()
            except queue.Empty:
                return
            sid, manifest, _ = rt.sandbox_pod(spec, image)
            t0 = time.perf_counter()
            try:
                rt.create_pod(manifest, "sandbox")
            except SandboxError as e:
                with lock:
                    errors.append(str(e))
                continue
            with lock:
                names.append(sid)
                created_at.append(time.perf_counter())
            got = rt.watcher.wait(sid, lambda p: ready(p) or pod_problem(p) or False, timeout_s)
            problem = None
            if got == "gone":
                problem = f"gone ({where(rt, sid)})"
                with lock:
                    lost.add(sid)
            elif got is None:
                problem = late(rt, sid)
            elif isinstance(got, str):
                problem = got
            with lock:
                if problem:
                    errors.append(f"{sid}: {problem}")
                else:
                    latencies.append(time.perf_counter() - t0)

    rss = PeakRss()
    rss.start()
    start_load = os.getloadavg()
    t_start = time.perf_counter()
    threads = [threading.Thread(target=create_worker) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    create_s = (max(created_at) if created_at else time.perf_counter()) - t_start
    print(f"created {len(names)} in {create_s:.1f} s; ready {len(latencies)}; errors {len(errors)}", flush=True)
    marked = sum(1 for sid in names if (pod := rt.watcher.pod(sid)) is not None and ready_condition_false(pod))

    deleting: queue.Queue[str] = queue.Queue()
    for sid in names:
        deleting.put(sid)
    t_delete = time.perf_counter()

    def delete_worker() -> None:
        while True:
            try:
                sid = deleting.get_nowait()
            except queue.Empty:
                return
            rt.delete_pod(sid)

    threads = [threading.Thread(target=delete_worker) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    left = [sid for sid in names if rt.watcher.wait(sid, lambda p: False, timeout_s) != "gone"]
    delete_s = time.perf_counter() - t_delete
    rss.stop.set()
    errors += [f"{sid}: not gone after delete" for sid in left]
    result = {
        "pods": pods,
        "errors": len(errors),
        "create_per_s": round(len(names) / create_s, 1) if create_s > 0 else 0.0,
        "ready_p50_s": round(pct(latencies, 50), 3),
        "ready_p95_s": round(pct(latencies, 95), 3),
        "ready_p99_s": round(pct(latencies, 99), 3),
        "delete_per_s": round(len(names) / delete_s, 1) if delete_s > 0 else 0.0,
        "apiserver_rss_mb": round(max(rss.peak, rss_mb(rss.pid) if rss.pid else 0.0), 1),
        "workers": workers,
        "client_qps": rt.limiter.qps,
        "client_burst": rt.limiter.burst,
        "client_waits": rt.limiter.waited,
        "client_retries": rt.limiter.retries,
        "load_start": [round(x, 2) for x in start_load],
        "load_end": [round(x, 2) for x in os.getloadavg()],
        "marked_not_ready": marked,
        "error_kinds": dict(Counter(kind(e) for e in errors)),
        "first_errors": errors[:5],
        # Of the pods lost before ready: who deleted them (the audit log).
        "lost_deleted_by": deleted_by(lost) if lost else {},
    }
    rt.close()
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pods", type=int, default=1000)
    # KWOK's Ready takes 20 s and more here: a few workers each waiting for
    # its pod would measure that wait, not the control path (32 gave 1.5/s).
    ap.add_argument("--workers", type=int, help="creates (then deletes) in flight (default: pods / 10, 32 to 1,000)")
    ap.add_argument("--namespace", default="sandgym-scale")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds a pod may take to be ready or go")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    workers = args.workers or min(1000, max(32, args.pods // 10))
    result = run(args.pods, workers, args.namespace, args.timeout)
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
