"""Pod readiness from one watch, not from polling.

One thread per cluster and namespace in a process (`shared_watcher`: the
runtimes of a process share it) lists then watches the pods of this
process's run (the `sandgym.run` label) in that namespace and keeps the newest object of
each; waiters block on a condition that every event wakes. A pod that is
deleted, or whose watch event says so, is marked gone, so a pool never
hands it out. When the watch breaks (the API server's timeout, a 410
Gone after compaction) the thread lists again and resumes from the list's
resourceVersion: an event missed in the gap is replaced by the state the
list returns.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from .api import kubernetes_client

# How long one watch request lasts before the server ends it (and we list again).
WATCH_TIMEOUT_S = 300
# Between failed lists (the API server is down): a watch must not spin.
RETRY_S = 1.0
# Names of deleted pods remembered (a long run deletes many; the oldest are forgotten).
GONE_KEPT = 50000


_shared: dict[tuple[str, str, str], PodWatcher] = {}
READ_MAX_S = 60.0  # the longest pause between a waiter's own reads of its pod
_shared_lock = threading.Lock()


def shared_watcher(kubeconfig: str | None, namespace: str, selector: str) -> PodWatcher:
    """The process's watcher of `namespace` on the cluster `kubeconfig` names (made at first use)."""
    import os

    from .api import load_client
    from .limits import RateLimiter, inflight_setting, limit_client, limit_settings

    key = (kubeconfig or os.environ.get("KUBECONFIG") or "", namespace, selector)
    with _shared_lock:
        if key not in _shared:
            # Its reads (below) are calls like any other: limited, on reused connections.
            api_client = load_client(kubeconfig)
            qps, burst, retries, _, _ = limit_settings()
            limit_client(api_client, RateLimiter(qps, burst), retries, inflight_setting())
            _shared[key] = PodWatcher(api_client, namespace, selector)
        return _shared[key]


class PodWatcher:
    def __init__(self, api_client, namespace: str, selector: str):
        client, _ = kubernetes_client()
        # A CoreV1Api of its own: a watch holds its connection open for minutes.
        self.core = client.CoreV1Api(api_client)
        self.namespace = namespace
        self.selector = selector
        self._pods: dict[str, Any] = {}
        self._gone: dict[str, None] = {}  # insertion-ordered: the oldest forgotten first
        self._lock = threading.Lock()
        self._waiters: dict[str, list[threading.Event]] = {}
        self._synced = False
        self._thread = threading.Thread(target=self._run, name="sandgym-k8s-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from kubernetes import watch

        while True:
            try:
                listing = self.core.list_namespaced_pod(self.namespace, label_selector=self.selector)
                self.apply_listing(listing)
                w = watch.Watch()
                for event in w.stream(
                    self.core.list_namespaced_pod,
                    self.namespace,
                    label_selector=self.selector,
                    resource_version=listing.metadata.resource_version,
                    timeout_seconds=WATCH_TIMEOUT_S,
                ):
                    pod = event["object"]
                    name = pod.metadata.name
                    with self._lock:
                        if event["type"] == "DELETED":
                            self._mark_gone(name)
                        else:
                            self._pods[name] = pod
                        self._wake(name)
            except Exception:
                time.sleep(RETRY_S)

    def apply_listing(self, listing) -> None:
        """Take a list's pods as the newest state, and mark gone the pods the
        list's snapshot lacks that were seen before it. A pod read by a waiter
        after the snapshot was taken (its resourceVersion newer than the
        list's) is not in it yet, and is not gone: under load a list of
        thousands of pods takes seconds, while waiters keep reading."""
        with self._lock:
            names = {p.metadata.name for p in listing.items}
            for name in set(self._pods) - names:  # deleted while we were not watching
                if not _newer_than(self._pods[name], listing.metadata.resource_version):
                    self._mark_gone(name)
            for p in listing.items:
                seen = self._pods.get(p.metadata.name)
                if p.metadata.name not in self._gone and (seen is None or _newer(p, seen)):
                    self._pods[p.metadata.name] = p
            self._synced = True
            for name in self._waiters:
                self._wake(name)

    def _wake(self, name: str) -> None:  # (lock held)
        for event in self._waiters.get(name, ()):
            event.set()

    def _mark_gone(self, name: str) -> None:  # (lock held)
        self._pods.pop(name, None)
        self._gone[name] = None
        while len(self._gone) > GONE_KEPT:
            del self._gone[next(iter(self._gone))]

    def pod(self, name: str):
        """The newest object seen of this pod (None: not seen, or gone)."""
        with self._lock:
            return self._pods.get(name)

    def gone(self, name: str) -> bool:
        """Deleted, or ending: its deletion asked for, or its phase final."""
        with self._lock:
            if name in self._gone:
                return True
            pod = self._pods.get(name)
        if pod is None:
            return False
        return bool(pod.metadata.deletion_timestamp) or pod.status.phase in ("Failed", "Succeeded")

    def wait(self, name: str, check: Callable[[Any], bool | str], timeout: float) -> Any:
        """Block until check(pod) is True (returns the pod) or a string (a problem:
        returned as is), the pod is gone ("gone") or `timeout` passes (None).
        When the watch has said nothing of the pod for a while, one read
        checks that no event was lost (the watch reconnecting); the pause
        between such reads doubles (5 s to READ_MAX_S), or 1,000 waiters
        would each poll every 5 s (200 reads a second at 10,000 pods)."""
        deadline = time.monotonic() + timeout
        last_read = time.monotonic()
        pause = 5.0
        woken = threading.Event()
        with self._lock:
            self._waiters.setdefault(name, []).append(woken)
        try:
            while True:
                woken.clear()  # before reading: news after this read sets it again
                with self._lock:
                    pod = self._pods.get(name)
                    if name in self._gone:
                        return "gone"
                    synced = self._synced
                if pod is not None:
                    verdict = check(pod)
                    if verdict:
                        return pod
                now = time.monotonic()
                if now >= deadline:
                    return None
                next_read = last_read + (pause if synced else 1.0)
                if now >= next_read:
                    last_read = now
                    pause = min(pause * 2, READ_MAX_S)
                    self._read(name, seen=pod is not None)
                    continue
                woken.wait(min(deadline, next_read) - now)  # news, the next read or the deadline
        finally:
            with self._lock:
                waiters = self._waiters[name]
                waiters.remove(woken)
                if not waiters:
                    del self._waiters[name]

    def _read(self, name: str, seen: bool) -> None:
        """One read of the pod, in case the watch lost an event."""
        try:
            fresh = self.core.read_namespaced_pod(name, self.namespace, _request_timeout=10)
        except Exception as e:
            if getattr(e, "status", None) == 404 and seen:
                with self._lock:
                    self._mark_gone(name)
            return
        with self._lock:
            current = self._pods.get(name)
            if name not in self._gone and (current is None or _newer(fresh, current)):
                self._pods[name] = fresh


def _newer(a, b) -> bool:
    return _newer_than(a, b.metadata.resource_version)


def _newer_than(pod, resource_version) -> bool:
    """The pod's resourceVersion is past `resource_version` (etcd's revisions:
    opaque by the API's contract, integers on every API server over etcd)."""
    try:
        return int(pod.metadata.resource_version) > int(resource_version)
    except (TypeError, ValueError):
        return True
