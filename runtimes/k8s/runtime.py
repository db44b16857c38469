"""The `k8s` backends: sandboxes as Kubernetes pods (runc, gVisor or Kata
through a RuntimeClass).

Every sandbox is one pod, hardened as the restricted Pod Security profile
asks (non-root, read-only root filesystem, every capability dropped, no
privilege escalation, seccomp RuntimeDefault, no service-account token, no
host namespaces or hostPath), with CPU, memory and ephemeral-storage limits,
`activeDeadlineSeconds`, and the owner/run/expiry labels `sandgym gc`
reads. The namespace gets a default-deny NetworkPolicy (ingress and
egress); whether it is enforced depends on the cluster's CNI (docs/runtimes.md).

The in-sandbox agent is the same as on every backend, reached over one
attach stream per pod (a websocket through the API server), so a warm exec
is one message, not a `kubectl exec`. Pods cannot mount host folders, so:
- the agent's code is sent over the attach stream to a small loader that
  runs it (nothing of it is on disk for sandboxed code to change);
- a spec's small mounts (the verifier's code, the agent's tools) are
  content-addressed ConfigMaps, made once for the cluster and projected
  read-only into each pod by the kubelet (mounts.py); larger ones (a test
  venv) are copied, before the sandbox starts, by an init container
  (attached the same way) into volumes the sandbox's container mounts
  read-only.

Warm pool (on by default: `pool`, SANDGYM_K8S_POOL; 0 turns it off): pods
are started ahead for each spec that repeats, mounts copied and agent
ready, by the shared stock (runtimes/stock.py), so a claim is a pop from
a queue. Each pod is handed out once, oldest first, and deleted after use
(SandboxPool's verified reset on top reuses it, as on any backend). The
refill is bounded: POOL_STARTERS creates in flight, a token bucket of
POOL_RATE starts per second, at most POOL_MAX pods waiting in all; each
spec's share grows with the claims it sees (Little's law). Pool pods carry
the `sandgym.pool` label besides the owner/expiry ones `sandgym gc` reads;
a pool pod that dies (the watch sees it end or go) is dropped and
replaced, never handed out. Readiness comes from one watch per namespace
in the process (watch.py), not from polling.
"""

from __future__ import annotations

import atexit
import json
import os
import threading
import time
import uuid
import weakref
from dataclasses import dataclass
from typing import Any

from ..agent_client import AgentChannel, AgentSandbox, agent_config
from ..base import Runtime, RuntimeUnavailable, SandboxError, SandboxInfo, SandboxSpec
from ..gvisor import RUNSC_MAX_PIDS
from ..images import default_image, image_for
from ..remover import BackgroundRemover
from ..staging import BOUNDARY_DIR
from ..stock import Stock, emit, prestart_setting, waiting
from .api import (
    api_message,
    container_running,
    exec_status,
    init_done,
    kubernetes_client,
    load_client,
    pod_problem,
    pod_statuses,
    pod_stream,
)
from .attach import AttachBridge
from .limits import (
    MAX_PODS_ENV,
    PodSlots,
    RateLimiter,
    inflight_setting,
    limit_client,
    limit_settings,
    quota_refusal,
)
from .mounts import MountMaps
from .netpol import EGRESS_LABEL, egress_key, egress_policy, policy_name
from .pods import (
    POOL_LABEL,
    RUN_ID,
    RUN_LABEL,
    mounts_tar,
    network_policy,
    owner_label,
    pod_labels,
    pod_manifest,
)
from .watch import PodWatcher, shared_watcher

READY_TIMEOUT_S = 120.0
NAMESPACE_ENV = "SANDGYM_K8S_NAMESPACE"
NODE_ENV = "SANDGYM_K8S_NODE"  # pods name this node (clusters without a scheduler)
REGISTRY_ENV = "SANDGYM_K8S_REGISTRY"  # where the nodes pull sandgym's images from
DEFAULT_NAMESPACE = "sandgym"
# isolation -> RuntimeClass name looked up on the cluster (None: the node's default, runc).
RUNTIME_CLASSES = {"runc": None, "runsc": "gvisor", "kata": "kata"}
AGENT_SOURCE = BOUNDARY_DIR / "agent.py"
# The warm pool: pods per repeating spec (SANDGYM_K8S_POOL), at most
# POOL_MAX waiting in all, POOL_STARTERS created at once, POOL_RATE starts a
# second; a pod waits at most POOL_MAX_IDLE_S before it is replaced.
POOL_ENV, POOL_MAX_ENV = "SANDGYM_K8S_POOL", "SANDGYM_K8S_POOL_MAX"
POOL_STARTERS_ENV, POOL_RATE_ENV = "SANDGYM_K8S_POOL_STARTERS", "SANDGYM_K8S_POOL_RATE"
POOL_DEFAULT, POOL_MAX, POOL_STARTERS, POOL_RATE = 2, 32, 4, 8.0
POOL_MAX_IDLE_S = 600.0


_live: weakref.WeakSet[KubernetesRuntime] = weakref.WeakSet()


def live_runtimes() -> list[KubernetesRuntime]:
    """The k8s runtimes of this process (for listing what they hold)."""
    return list(_live)


def pool_settings(pool: int | None, pool_max: int | None) -> tuple[int, int, int, float]:
    """(per spec, most waiting in all, starters, starts per second) from the arguments and environment."""
    per_spec = prestart_setting(pool, POOL_ENV, POOL_DEFAULT)
    most = prestart_setting(pool_max, POOL_MAX_ENV, POOL_MAX)
    starters = prestart_setting(None, POOL_STARTERS_ENV, POOL_STARTERS)
    raw = os.environ.get(POOL_RATE_ENV, "").strip() or str(POOL_RATE)
    try:
        rate = float(raw)
    except ValueError:
        rate = -1.0
    if rate <= 0 or most < 1 or starters < 1:
        raise ValueError(
            f"{POOL_RATE_ENV}={raw!r} must be a positive number of starts per second, and "
            f"{POOL_MAX_ENV}={most} and {POOL_STARTERS_ENV}={starters} at least 1"
        )
    return per_spec, max(most, per_spec), starters, rate


class KubernetesRuntime(Runtime):
    """Sandboxes as pods. `isolation`: runc (the node's default), runsc
    (RuntimeClass `gvisor`) or kata (RuntimeClass `kata`); `runtime_class`
    names another RuntimeClass for it. `registry` (or SANDGYM_K8S_REGISTRY)
    prefixes sandgym's own image names with where the nodes pull them from."""

    name = "k8s"

    def __init__(
        self,
        isolation: str = "runc",
        namespace: str | None = None,
        kubeconfig: str | None = None,
        image: str | None = None,
        runtime_class: str | None = None,
        node: str | None = None,
        registry: str | None = None,
        pool: int | None = None,
        pool_max: int | None = None,
        qps: float | None = None,
        burst: int | None = None,
        max_pods: int | None = None,
        node_selector: dict[str, str] | None = None,
        tolerations: list[dict] | None = None,
    ):
        if isolation not in RUNTIME_CLASSES:
            raise ValueError(f"unknown isolation {isolation!r}; choices: {', '.join(RUNTIME_CLASSES)}")
        self.pool, most, starters, rate = pool_settings(pool, pool_max)
        qps, burst, retries, max_pods, self.quota_wait_s = limit_settings(qps, burst, max_pods)
        self.limiter = RateLimiter(qps, burst)
        self.slots = PodSlots(max_pods)
        self._slotted: set[str] = set()  # pods holding a slot until their delete call returns
        self.quota_waits = 0  # creates the namespace's ResourceQuota refused, then retried
        # Where pods may go, beyond the node's default (e.g. simulated nodes).
        self.node_selector, self.tolerations = node_selector, tolerations
        self.isolation = isolation
        self.nested_namespaces = isolation != "runc"  # RuntimeDefault seccomp refuses them under runc
        self.namespace = namespace or os.environ.get(NAMESPACE_ENV) or DEFAULT_NAMESPACE
        self.node = node or os.environ.get(NODE_ENV) or None
        # sandgym's own images (the recipes') are named as `sandgym images
        # build` tags them; a registry prefix says where nodes pull them from.
        self.registry = (registry or os.environ.get(REGISTRY_ENV) or "").rstrip("/")
        self.image = image or self._pulled(default_image())
        self.kubeconfig = kubeconfig
        self.api_client = load_client(kubeconfig)
        limit_client(self.api_client, self.limiter, retries, inflight_setting())
        client, _ = kubernetes_client()
        self.core = client.CoreV1Api(self.api_client)
        # The client's stream() swaps its ApiClient's request method for a
        # websocket one while it connects: calls from other threads on that
        # client would go out as websockets. Attaches get a client of their
        # own, one connect at a time.
        self._attach_core = client.CoreV1Api(load_client(kubeconfig))
        self._attach_lock = threading.Lock()
        self.runtime_class = runtime_class or RUNTIME_CLASSES[isolation]
        self._check_cluster(client)
        self._open: weakref.WeakSet[AgentSandbox] = weakref.WeakSet()
        self._agent_source = AGENT_SOURCE.read_bytes()
        self.watcher = shared_watcher(kubeconfig, self.namespace, f"{RUN_LABEL}={RUN_ID}")
        self._deleter = BackgroundRemover(
            lambda sid: self.delete_pod(sid, request_timeout=30),
            "sandgym-k8s-deleter",
            drain_timeout_s=120,
        )
        self.mount_maps = MountMaps(self.core, self.namespace)
        # This runtime's egress policies (allowlist key -> name), deleted at close.
        self._egress_made: dict[str, str] = {}
        self._egress_tag = uuid.uuid4().hex[:8]
        self.label = "k8s" if isolation == "runc" else f"k8s:{'gvisor' if isolation == 'runsc' else isolation}"
        self.pool_max, self.pool_starters, self.pool_rate = most, starters, rate
        self.pool_lock = threading.Lock()
        self._ahead: set[str] = set()  # pool pods never handed out (waiting, starting or discarded)
        self.browser_pods: Any = None  # browser.BrowserPods, made at the first browser sandbox
        self._stock: Stock[_Started] | None = None
        if self.pool:
            self._stock = Stock(
                self._start_ahead,
                self._discard,
                self.pool,
                self.label,
                count_in_use=False,
                max_total=most,
                starters=starters,
                max_idle_s=POOL_MAX_IDLE_S,
                demand=True,
                rate_per_s=rate,
            )
        _live.add(self)
        atexit.register(self.close)

    def _check_cluster(self, client) -> None:
        from kubernetes.client.rest import ApiException

        try:
            self.core.read_namespace(self.namespace)
        except ApiException as e:
            if e.status != 404:
                raise RuntimeUnavailable(
                    f"runtime 'k8s': cannot read namespace {self.namespace!r}: {e.reason}"
                ) from None
            # Pod Security admission then refuses any pod in it that breaks
            # the restricted profile, ours included.
            labels = {f"pod-security.kubernetes.io/{mode}": "restricted" for mode in ("enforce", "warn")}
            self.core.create_namespace({"metadata": {"name": self.namespace, "labels": labels}})
        except Exception as e:
            raise RuntimeUnavailable(f"runtime 'k8s': the cluster does not answer: {e}") from None
        if self.runtime_class:
            try:
                client.NodeV1Api(self.api_client).read_runtime_class(self.runtime_class)
            except ApiException as e:
                if e.status == 404:
                    raise RuntimeUnavailable(
                        f"runtime 'k8s:{self.isolation}': the cluster has no RuntimeClass {self.runtime_class!r}; "
                        f"install {self.isolation} on the nodes and create a RuntimeClass named "
                        f"{self.runtime_class!r} for it (or pass runtime_class=NAME)"
                    ) from None
                raise
        # Pods get no token: the namespace's default service account must
        # exist (a cluster without a controller manager has none) and mount
        # none (the one a controller manager makes would mount its token).
        account = {"metadata": {"name": "default"}, "automountServiceAccountToken": False}
        self._create_if_missing(lambda: self.core.create_namespaced_service_account(self.namespace, account))
        try:
            if (
                self.core.read_namespaced_service_account("default", self.namespace).automount_service_account_token
                is not False
            ):
                self.core.patch_namespaced_service_account("default", self.namespace, account)
        except Exception as e:
            raise RuntimeUnavailable(
                f"runtime 'k8s': cannot set up namespace {self.namespace!r}'s default service account: {api_message(e)}"
            ) from None
        networking = client.NetworkingV1Api(self.api_client)
        self._create_if_missing(lambda: networking.create_namespaced_network_policy(self.namespace, network_policy()))

    def _create_if_missing(self, create) -> None:
        from kubernetes.client.rest import ApiException

        try:
            create()
        except ApiException as e:
            if e.status != 409:  # 409: it exists
                raise RuntimeUnavailable(
                    f"runtime 'k8s': cannot set up namespace {self.namespace!r}: {e.reason}"
                ) from None

    def _pulled(self, tag: str) -> str:
        return f"{self.registry}/{tag}" if self.registry else tag

    def image_of(self, image: str) -> str:
        """The image a pod names for a spec's `image` (a recipe's tag, with the registry's prefix)."""
        return (
            self._pulled(image_for(image, self.image)) if image.startswith("recipe:") else image_for(image, self.image)
        )

    def close(self) -> None:
        """Delete every pod this runtime holds (pooled, open, being deleted) and wait for the calls."""
        if self._stock is not None:
            self._stock.close()
        if self.browser_pods is not None:
            self.browser_pods.close()
        for sb in list(self._open):
            sb.close()
        self._deleter.drain()
        self._drop_egress_policies()

    def _drop_egress_policies(self) -> None:
        """Delete this runtime's egress policies (its pods are gone); one left
        (a call that failed, a crash) is `sandgym gc`'s once this process is."""
        if not self._egress_made:
            return
        client, _ = kubernetes_client()
        networking = client.NetworkingV1Api(self.api_client)
        for key, name in list(self._egress_made.items()):
            try:
                networking.delete_namespaced_network_policy(name, self.namespace, _request_timeout=30)
            except Exception as e:
                if getattr(e, "status", None) != 404:
                    continue
            self._egress_made.pop(key, None)

    def warm(self, spec: SandboxSpec | None = None, n: int = 1) -> None:
        """Keep at least `n` pods of `spec` waiting from now on (the pool's size for it, by config)."""
        if self._stock is None:
            raise SandboxError(f"the warm pool is off ({POOL_ENV}=0 or pool=0): nothing to keep warm")
        spec = spec or SandboxSpec()
        self._check_spec(spec)
        self._stock.wanted(spec, self.image_of(spec.image), n)

    def pooled(self, spec: SandboxSpec | None = None) -> int:
        """Pods waiting in the pool (for `spec`, or in all)."""
        if self._stock is None:
            return 0
        if spec is None:
            return self._stock.count()
        return self._stock.ready_count(spec, self.image_of(spec.image))

    def made_ahead(self, name: str, ahead: bool) -> None:
        """Note a pod as made ahead for the pool (True) or as handed to a caller (False)."""
        with self.pool_lock:
            if ahead:
                self._ahead.add(name)
            else:
                self._ahead.discard(name)

    def pool_pods(self) -> set[str]:
        """Names of the pods made ahead that no caller got (waiting, starting, or being deleted)."""
        with self.pool_lock:
            self._ahead = {sid for sid in self._ahead if not self.watcher.gone(sid)}
            return set(self._ahead)

    def browser_pool(self) -> Any:
        """The pool of browser pods (browser.BrowserPods), made at first use; None when the pool is off."""
        if not self.pool:
            return None
        from .browser import BrowserPods

        with self.pool_lock:
            if self.browser_pods is None:
                self.browser_pods = BrowserPods(self)
            return self.browser_pods

    def pool_metrics(self) -> dict:
        return self._stock.metrics() if self._stock is not None else {}

    def _check_spec(self, spec: SandboxSpec) -> None:
        if spec.isolation not in (None, self.isolation):
            raise SandboxError(f"this runtime isolates with {self.isolation}, not {spec.isolation!r}")
        for m in spec.mounts:
            if not os.path.exists(m.source):
                raise SandboxError(f"mount source does not exist: {m.source}")
            if not m.read_only:
                raise SandboxError(
                    f"mount {m.target}: the k8s backend copies mounts into the pod, so a writable one "
                    "would not reach the host; mount it read-only, or use put_files/get_files"
                )

    def create(self, spec: SandboxSpec | None = None) -> AgentSandbox:
        spec = spec or SandboxSpec()
        self._check_spec(spec)
        image = self.image_of(spec.image)
        t0 = time.perf_counter()
        if self._stock is not None:
            ready = self._stock.take(spec, image)
            if ready is not None:
                claim_s = time.perf_counter() - t0
                self._stock.claimed(True, claim_s)
                return self._hand_out(ready, spec, claim_s)
        started = self._start(spec, image, stocked=False)
        claim_s = time.perf_counter() - t0
        emit(self.label, "created", started.start_s)
        emit(self.label, "claim_cold", claim_s)
        return self._hand_out(started, spec, claim_s)

    def _start_ahead(self, spec: SandboxSpec, image: str) -> _Started:
        return self._start(spec, image, stocked=True)

    def _discard(self, started: _Started) -> None:
        started.bridge.close()
        self._deleter.submit(started.sid)

    def _hand_out(self, started: _Started, spec: SandboxSpec, claim_s: float) -> AgentSandbox:
        """The sandbox object over a started pod (its one and only user)."""
        sid, bridge, channel = started.sid, started.bridge, started.channel
        self.made_ahead(sid, False)
        info = SandboxInfo(backend="k8s", isolation=self.isolation, id=sid, create_s=claim_s, labels=dict(spec.labels))
        timer = None
        if started.stocked:
            # Its agent's lifetime runs POOL_MAX_IDLE_S longer than the
            # spec's: the host ends it at the spec's lifetime from now.
            timer = threading.Timer(spec.wall_timeout_s, self._expire, (channel, started))
            timer.daemon = True
            timer.start()
        stock = self._stock if started.stocked else None

        def closer(clean: bool) -> None:
            if timer is not None:
                timer.cancel()
            bridge.close()
            self._deleter.submit(sid)
            if stock is not None:
                stock.returned(started.key)

        sandbox = AgentSandbox(
            channel, spec, info, closer, lambda: bridge.stderr_tail.decode("utf-8", "replace")[-800:]
        )
        self._open.add(sandbox)
        return sandbox

    def _expire(self, channel: AgentChannel, started: _Started) -> None:
        channel.abort()
        started.bridge.close()
        self._deleter.submit(started.sid)

    def sandbox_pod(self, spec: SandboxSpec, image: str, stocked: bool = False) -> tuple[str, dict, list[int]]:
        """(name, manifest, indices of the mounts its init container copies in) of a sandbox pod for `spec`."""
        sid = f"sg-k8s-{uuid.uuid4().hex[:10]}"
        extra_s = POOL_MAX_IDLE_S if stocked else 0.0
        labels = pod_labels(spec.wall_timeout_s + extra_s)
        if stocked:
            # Made before anyone asked: the caller's labels are in its SandboxInfo only.
            labels[POOL_LABEL] = "1"
            annotations = {"sandgym.labels": "{}"}
        else:
            # The caller's labels may hold any text (task ids have slashes), which
            # label values may not: they go in one annotation, as JSON.
            annotations = {"sandgym.labels": json.dumps(dict(spec.labels), sort_keys=True)}
        config = agent_config(spec)
        config["lifetime_s"] = spec.wall_timeout_s + extra_s
        if self.isolation == "runsc" and spec.process_limits:
            # Each task costs a gVisor sandbox about 5 MB of its memory limit;
            # past it the sentry dies, agent included (runtimes/gvisor.py).
            config["limits"]["pids"] = min(spec.pids, RUNSC_MAX_PIDS)
        maps = [self.mount_maps.get(m.source) for m in spec.mounts]
        copied = [i for i, found in enumerate(maps) if found is None]
        if spec.egress:
            labels[EGRESS_LABEL] = self.allow_egress(spec)
        manifest = pod_manifest(spec, sid, image, config, self.runtime_class, self.node, labels, extra_s, maps)
        manifest["metadata"]["annotations"] = annotations
        return sid, manifest, copied

    def allow_egress(self, spec: SandboxSpec) -> str:
        """Make (once) the NetworkPolicy of the spec's egress allowlist; its key, the pods' label."""
        key = egress_key(spec.egress)
        if key not in self._egress_made:
            client, _ = kubernetes_client()
            networking = client.NetworkingV1Api(self.api_client)
            policy = egress_policy(spec.egress, self._egress_tag, owner_label())
            self._create_if_missing(lambda: networking.create_namespaced_network_policy(self.namespace, policy))
            self._egress_made[key] = policy_name(spec.egress, self._egress_tag)
        return key

    def _start(self, spec: SandboxSpec, image: str, stocked: bool) -> _Started:
        """Create a pod for `spec`, copy its mounts in, start its agent and wait for it to answer."""
        start = time.perf_counter()
        sid, manifest, copied = self.sandbox_pod(spec, image, stocked)
        if stocked:
            self.made_ahead(sid, True)
        self.create_pod(manifest, "sandbox")
        bridge = None
        try:
            if copied:
                self.wait_pod(sid, lambda p: container_running(p, "stage", init=True), "its init container to start")
                self.stage_mounts_into(sid, mounts_tar([spec.mounts[i].source for i in copied], copied))
            self.wait_pod(sid, lambda p: container_running(p, "sandbox"), "its sandbox container to start")
            bridge = AttachBridge(self.open_stream(sid, "sandbox"), sid)
            bridge.host_end.sendall(len(self._agent_source).to_bytes(4, "big") + self._agent_source)
            channel = AgentChannel(bridge.host_end, f"sandbox {sid}")
            ready, _ = channel.read_reply(READY_TIMEOUT_S)
            if not ready.get("ready"):
                raise SandboxError(f"unexpected first message {ready!r}")
        except Exception as e:
            detail = bridge.stderr_tail.decode("utf-8", "replace")[-400:] if bridge else ""
            if bridge is not None:
                bridge.close()
            self.delete_pod(sid)
            raise SandboxError(f"could not start sandbox {sid}: {e} {detail}".strip()) from e
        took = time.perf_counter() - start
        mounts = source_ids([m.source for m in spec.mounts])
        return _Started(sid, bridge, channel, stocked, took, time.monotonic(), mounts, self.watcher)

    def open_stream(self, sid: str, container: str, command: list[str] | None = None):
        """A websocket (binary, channel-framed) to `container`'s first process
        (attach) or, with `command`, to a new process in it (exec)."""
        with self._attach_lock:
            return pod_stream(self._attach_core, sid, self.namespace, container, command)

    def exec_call(
        self, sid: str, container: str, command: list[str], stdin: bytes = b"", timeout: float = 60.0
    ) -> tuple[int, bytes, bytes]:
        """Run `command` in `container` (as its user), send it `stdin` and wait for
        it to end: (exit code, stdout, stderr). The stream cannot close stdin, so
        a command that reads it must know how much comes (a length prefix)."""
        ws = self.open_stream(sid, container, command)
        out, err, status = bytearray(), bytearray(), b""
        try:
            ws.settimeout(timeout)
            for i in range(0, len(stdin), 1 << 20):
                ws.send_binary(b"\x00" + stdin[i : i + (1 << 20)])
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                opcode, frame = ws.recv_data_frame(True)
                if opcode == 8:  # close
                    break
                data = frame.data
                if not data:
                    continue
                if data[0] == 1:
                    out += data[1:]
                elif data[0] == 2:
                    err += data[1:]
                elif data[0] == 3:
                    status += data[1:]
            else:
                raise SandboxError(f"exec in pod {sid} ({container}) timed out after {timeout:.0f} s")
        except SandboxError:
            raise
        except Exception as e:
            raise SandboxError(f"exec in pod {sid} ({container}) failed: {e}") from e
        finally:
            ws.close()
        return exec_status(status), bytes(out), bytes(err)

    def stage_mounts_into(self, sid: str, data: bytes) -> None:
        ws = self.open_stream(sid, "stage")
        try:
            payload = len(data).to_bytes(8, "big") + data
            for i in range(0, len(payload), 1 << 20):
                ws.send_binary(b"\x00" + payload[i : i + (1 << 20)])
            self.wait_pod(sid, lambda p: init_done(p, "stage"), "its mounts to be copied in")
        finally:
            ws.close()

    def wait_pod(self, sid: str, done, what: str, timeout: float = READY_TIMEOUT_S) -> None:
        """Wait (on the watch) until done(pod) is True; a terminal failure raises."""
        got = self.watcher.wait(sid, lambda p: done(p) or pod_problem(p) or False, timeout)
        if got is None:
            pod = self.watcher.pod(sid)
            hint = "" if pod is not None and pod.spec.node_name else f" (not scheduled: no scheduler? set {NODE_ENV})"
            raise SandboxError(f"pod {sid}: timed out waiting for {what}{hint}")
        if got == "gone":
            raise SandboxError(f"pod {sid} was deleted while waiting for {what}")
        if isinstance(got, str):
            raise SandboxError(f"pod {sid} failed waiting for {what}: {got}{self.container_logs(sid)}")

    def container_logs(self, sid: str) -> str:
        """The last lines of each container that ended, for an error message."""
        try:
            pod = self.core.read_namespaced_pod(sid, self.namespace, _request_timeout=10)
        except Exception:
            return ""
        out = []
        for s in pod_statuses(pod, True) + pod_statuses(pod):
            if s.state and s.state.terminated:
                try:
                    text = self.core.read_namespaced_pod_log(sid, self.namespace, container=s.name, tail_lines=5)
                except Exception:
                    continue
                if text:
                    out.append(f"; {s.name}'s output: {text.strip()[-400:]}")
        return "".join(out)

    def place(self, manifest: dict) -> dict:
        """The pod with this runtime's node selector and tolerations added."""
        spec = manifest["spec"]
        if self.node_selector:
            spec["nodeSelector"] = {**spec.get("nodeSelector", {}), **self.node_selector}
        if self.tolerations:
            spec["tolerations"] = list(spec.get("tolerations", [])) + list(self.tolerations)
        return manifest

    def create_pod(self, manifest: dict, what: str) -> None:
        """Create the pod (its name in `manifest`) once a slot of the per-run
        cap (SANDGYM_K8S_MAX_PODS) is free, waiting while the namespace's
        ResourceQuota is used up (SANDGYM_K8S_QUOTA_WAIT_S at most)."""
        sid = manifest["metadata"]["name"]
        self.place(manifest)
        self.slots.take(
            self.quota_wait_s,
            lambda: SandboxError(
                f"could not create {what} {sid}: this run already holds {self.slots.cap} pods "
                f"({MAX_PODS_ENV}); close some sandboxes or raise the cap"
            ),
        )
        with self.pool_lock:
            self._slotted.add(sid)
        deadline = time.monotonic() + self.quota_wait_s
        delay = 0.25
        while True:
            try:
                self.core.create_namespaced_pod(self.namespace, manifest)
                return
            except Exception as e:
                if quota_refusal(e) and time.monotonic() + delay < deadline:
                    self.quota_waits += 1
                    time.sleep(delay)  # a pod of the namespace may go meanwhile
                    delay = min(delay * 2, 4.0)
                    continue
                self._release(sid)
                message = api_message(e)
                if quota_refusal(e):
                    message = (
                        f"the namespace {self.namespace!r} stayed at its ResourceQuota for "
                        f"{self.quota_wait_s:.0f} s ({message}); raise the quota or run fewer sandboxes at once"
                    )
                raise SandboxError(f"could not create {what} {sid}: {message}") from e

    def _release(self, sid: str) -> None:
        with self.pool_lock:
            if sid not in self._slotted:
                return
            self._slotted.discard(sid)
        self.slots.give()

    def delete_pod(self, sid: str, request_timeout: float | None = None) -> None:
        try:
            self.core.delete_namespaced_pod(
                sid, self.namespace, grace_period_seconds=0, _request_timeout=request_timeout
            )
        except Exception:  # already gone; gc catches anything left
            pass
        self._release(sid)


def source_ids(paths: list[str]) -> tuple:
    """(path, device, inode) of each mount source: a pod holds a copy of the folder it found."""
    out = []
    for path in paths:
        try:
            st = os.stat(path)
            out.append((path, st.st_dev, st.st_ino))
        except OSError:
            out.append((path, -1, -1))
    return tuple(out)


@dataclass
class _Started:
    """A pod whose agent has answered, not yet handed to anyone."""

    sid: str
    bridge: AttachBridge
    channel: AgentChannel
    stocked: bool
    start_s: float
    ready_at: float  # time.monotonic()
    mounts: tuple  # source_ids of its mounts when they were copied in
    watcher: PodWatcher
    key: str = ""  # the stock's key, for pooled ones

    def fresh(self) -> bool:
        """Young enough, its agent silent, its pod not ending, its mounts' sources the same folders."""
        if self.watcher.gone(self.sid) or source_ids([m[0] for m in self.mounts]) != self.mounts:
            return False
        return waiting(self.ready_at, bool(self.channel.broken), self.bridge.host_end, POOL_MAX_IDLE_S)
