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
- a spec's mounts are copied, before the sandbox starts, by an init
  container (attached the same way) into volumes the sandbox's container
  mounts read-only.
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import threading
import time
import uuid
import weakref

from ..agent_client import AgentChannel, AgentSandbox, agent_config
from ..base import Runtime, RuntimeUnavailable, SandboxError, SandboxInfo, SandboxSpec
from ..gvisor import RUNSC_MAX_PIDS
from ..images import default_image, image_for
from ..staging import BOUNDARY_DIR
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
from .pods import mounts_tar, network_policy, pod_labels, pod_manifest

READY_TIMEOUT_S = 120.0
NAMESPACE_ENV = "SANDGYM_K8S_NAMESPACE"
NODE_ENV = "SANDGYM_K8S_NODE"  # pods name this node (clusters without a scheduler)
REGISTRY_ENV = "SANDGYM_K8S_REGISTRY"  # where the nodes pull sandgym's images from
DEFAULT_NAMESPACE = "sandgym"
# isolation -> RuntimeClass name looked up on the cluster (None: the node's default, runc).
RUNTIME_CLASSES = {"runc": None, "runsc": "gvisor", "kata": "kata"}
AGENT_SOURCE = BOUNDARY_DIR / "agent.py"


class _AttachBridge:
    """The attach websocket seen as a stream socket: the agent channel
    reads and writes one end of a socketpair; two threads move bytes
    between the other end and the websocket's stdin/stdout channels."""

    STDIN, STDOUT, STDERR, ERROR = 0, 1, 2, 3

    def __init__(self, ws, describe: str):
        self.ws = ws
        self.host_end, self._far = socket.socketpair()
        self.stderr_tail = bytearray()
        self._describe = describe
        threading.Thread(target=self._down, name=f"sandgym-k8s-down-{describe}", daemon=True).start()
        threading.Thread(target=self._up, name=f"sandgym-k8s-up-{describe}", daemon=True).start()

    def _down(self) -> None:  # pod -> host
        from websocket import ABNF

        try:
            while True:
                opcode, frame = self.ws.recv_data_frame(True)
                if opcode == ABNF.OPCODE_CLOSE:
                    break
                data = frame.data
                if not data:
                    continue
                if data[0] == self.STDOUT:
                    self._far.sendall(data[1:])
                elif data[0] in (self.STDERR, self.ERROR):
                    self.stderr_tail = (self.stderr_tail + data[1:])[-(64 << 10) :]
        except Exception:
            pass
        finally:
            self._shut()

    def _up(self) -> None:  # host -> pod
        try:
            while True:
                data = self._far.recv(1 << 20)
                if not data:
                    break
                self.ws.send_binary(bytes([self.STDIN]) + data)
        except Exception:
            pass
        finally:
            self._shut()

    def _shut(self) -> None:
        for close in (lambda: self._far.shutdown(socket.SHUT_RDWR), self.ws.close):
            try:
                close()
            except Exception:
                pass

    def close(self) -> None:
        self._shut()
        self.host_end.close()


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
    ):
        if isolation not in RUNTIME_CLASSES:
            raise ValueError(f"unknown isolation {isolation!r}; choices: {', '.join(RUNTIME_CLASSES)}")
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
        # exist (no controller manager makes it on a bare cluster) and mount none.
        self._create_if_missing(
            lambda: self.core.create_namespaced_service_account(
                self.namespace, {"metadata": {"name": "default"}, "automountServiceAccountToken": False}
            )
        )
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
        for sb in list(self._open):
            sb.close()

    def create(self, spec: SandboxSpec | None = None) -> AgentSandbox:
        spec = spec or SandboxSpec()
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
        image = self.image_of(spec.image)
        sid = f"sg-k8s-{uuid.uuid4().hex[:10]}"
        labels = pod_labels(spec.wall_timeout_s)
        # The caller's labels may hold any text (task ids have slashes), which
        # label values may not: they go in one annotation, as JSON.
        annotations = {"sandgym.labels": json.dumps(dict(spec.labels), sort_keys=True)}
        config = agent_config(spec)
        if self.isolation == "runsc" and spec.process_limits:
            # Each task costs a gVisor sandbox about 5 MB of its memory limit;
            # past it the sentry dies, agent included (runtimes/gvisor.py).
            config["limits"]["pids"] = min(spec.pids, RUNSC_MAX_PIDS)
        start = time.perf_counter()
        manifest = pod_manifest(spec, sid, image, config, self.runtime_class, self.node, labels)
        manifest["metadata"]["annotations"] = annotations
        try:
            self.core.create_namespaced_pod(self.namespace, manifest)
        except Exception as e:
            raise SandboxError(f"could not create sandbox {sid}: {api_message(e)}") from e
        bridge = None
        try:
            if spec.mounts:
                self.wait_pod(sid, lambda p: container_running(p, "stage", init=True), "its init container to start")
                self.stage_mounts_into(sid, mounts_tar([m.source for m in spec.mounts]))
            self.wait_pod(sid, lambda p: container_running(p, "sandbox"), "its sandbox container to start")
            bridge = _AttachBridge(self.open_stream(sid, "sandbox"), sid)
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
        info = SandboxInfo(
            backend="k8s",
            isolation=self.isolation,
            id=sid,
            create_s=time.perf_counter() - start,
            labels=dict(spec.labels),
        )

        def closer(clean: bool) -> None:
            bridge.close()
            self.delete_pod(sid)

        sandbox = AgentSandbox(
            channel, spec, info, closer, lambda: bridge.stderr_tail.decode("utf-8", "replace")[-800:]
        )
        self._open.add(sandbox)
        return sandbox

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
        """Poll the pod until done(pod) is True; a terminal failure raises."""
        deadline = time.monotonic() + timeout
        delay = 0.01
        while True:
            pod = self.core.read_namespaced_pod(sid, self.namespace)
            if done(pod):
                return
            problem = pod_problem(pod)
            if problem:
                raise SandboxError(f"pod {sid} failed waiting for {what}: {problem}{self.container_logs(sid, pod)}")
            if time.monotonic() > deadline:
                hint = "" if pod.spec.node_name else f" (not scheduled: no scheduler? set {NODE_ENV})"
                raise SandboxError(f"pod {sid}: timed out waiting for {what}{hint}")
            time.sleep(delay)
            delay = min(delay * 2, 0.2)

    def container_logs(self, sid: str, pod) -> str:
        """The last lines of each container that ended, for an error message."""
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

    def delete_pod(self, sid: str) -> None:
        try:
            self.core.delete_namespaced_pod(sid, self.namespace, grace_period_seconds=0)
        except Exception:  # already gone; gc catches anything left
            pass
