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
import io
import json
import os
import socket
import tarfile
import threading
import time
import uuid
import weakref
from pathlib import Path

from .agent_client import AgentChannel, AgentSandbox, agent_config
from .base import Runtime, RuntimeUnavailable, SandboxError, SandboxInfo, SandboxSpec
from .docker import RUNSC_MAX_PIDS
from .images import default_image, image_for

READY_TIMEOUT_S = 120.0
NAMESPACE_ENV = "SANDGYM_K8S_NAMESPACE"
NODE_ENV = "SANDGYM_K8S_NODE"  # pods name this node (clusters without a scheduler)
REGISTRY_ENV = "SANDGYM_K8S_REGISTRY"  # where the nodes pull sandgym's images from
DEFAULT_NAMESPACE = "sandgym"
# Label keys and values must be DNS-label-like, so the owner is host-pid.
OWNER_LABEL = "sandgym.owner"
RUN_LABEL = "sandgym.run"
EXPIRES_LABEL = "sandgym.expires"
RUN_ID = uuid.uuid4().hex[:12]
# isolation -> RuntimeClass name looked up on the cluster (None: the node's default, runc).
RUNTIME_CLASSES = {"runc": None, "runsc": "gvisor", "kata": "kata"}
NETWORK_POLICY = "sandgym-default-deny"
SANDBOX_UID = 1000
REQUESTS = {"cpu": "10m", "memory": "32Mi"}
AGENT_SOURCE = Path(__file__).parent / "agent" / "agent.py"

# Runs as the sandbox container's command: reads the agent's source from
# stdin (4-byte length, then the bytes) and runs it with the config that
# follows on the command line. Nothing of the agent lies on a disk the
# sandbox could write.
LOADER = """\
import os, sys
def read(n):
    b = b""
    while len(b) < n:
        c = os.read(0, n - len(b))
        if not c:
            raise SystemExit("sandgym loader: stdin closed before the agent arrived")
        b += c
    return b
src = read(int.from_bytes(read(4), "big"))
sys.argv = ["agent.py"] + sys.argv[1:]
exec(compile(src, "agent.py", "exec"), {"__name__": "__main__", "__file__": "agent.py"})
"""

# Runs as the init container's command: reads a tar (8-byte length, then
# the bytes) of the spec's mounts and unpacks it under /stage (folders,
# regular files and symlinks, such as a venv's bin/python; the host made
# it), then exits so the sandbox starts.
STAGER = """\
import io, os, sys, tarfile
def read(n):
    b = bytearray()
    while len(b) < n:
        c = os.read(0, min(n - len(b), 1 << 20))
        if not c:
            raise SystemExit("sandgym stager: stdin closed early")
        b += c
    return bytes(b)
data = read(int.from_bytes(read(8), "big"))
with tarfile.open(fileobj=io.BytesIO(data)) as tar:
    for m in tar:
        if "/" not in m.name:  # top level: the volumes themselves
            continue
        if m.issym():
            tar.extract(m, "/stage", set_attrs=False)
        elif m.isdir() or m.isfile():
            tar.extract(m, "/stage", set_attrs=False)
            os.chmod(os.path.join("/stage", m.name), 0o755 if m.isdir() else (m.mode & 0o755) | 0o444)
os.write(1, b"staged\\n")
"""


def owner_label() -> str:
    host = "".join(c if c.isalnum() or c in "-_." else "-" for c in socket.gethostname())[:40].strip("-_.")
    return f"{host or 'host'}-{os.getpid()}"


def pod_labels(lifetime_s: float) -> dict[str, str]:
    """The labels `reap` (`sandgym gc`) reads: owner (host-pid), run and expiry."""
    return {
        OWNER_LABEL: owner_label(),
        RUN_LABEL: RUN_ID,
        EXPIRES_LABEL: str(int(time.time() + lifetime_s + 60)),
    }


def _kubernetes():
    try:
        import kubernetes  # noqa: F401
    except ImportError:
        raise RuntimeUnavailable("runtime 'k8s' needs the kubernetes client: pip install 'sandgym[k8s]'") from None
    from kubernetes import client, config

    return client, config


def load_client(kubeconfig: str | None = None):
    """An API client from in-cluster config (inside a pod) or a kubeconfig
    (argument, $KUBECONFIG read now, ~/.kube/config), as kubectl finds it."""
    client, config = _kubernetes()
    if kubeconfig is None and not os.environ.get("KUBECONFIG") and os.environ.get("KUBERNETES_SERVICE_HOST"):
        try:
            config.load_incluster_config()
        except Exception as e:
            raise RuntimeUnavailable(f"runtime 'k8s': in-cluster configuration failed: {e}") from None
        return client.ApiClient()
    # The client reads $KUBECONFIG once, when imported: pass it every time.
    path = kubeconfig or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    hint = (
        "set KUBECONFIG to your cluster's kubeconfig, or for the test cluster run "
        "`scripts/k8s-cluster.sh up` and `eval $(scripts/k8s-cluster.sh env)`"
    )
    if not all(os.path.exists(p) for p in path.split(os.pathsep)):
        raise RuntimeUnavailable(f"runtime 'k8s': no kubeconfig at {path} (KUBECONFIG); {hint}")
    try:
        return config.new_client_from_config(config_file=path)
    except Exception as e:
        raise RuntimeUnavailable(
            f"runtime 'k8s': the kubeconfig {path} (KUBECONFIG) is not usable: {e}; {hint}"
        ) from None


def api_message(e: Exception) -> str:
    """The API server's own message for a refused request, not the HTTP dump."""
    body = getattr(e, "body", None)
    if body:
        try:
            return f"{getattr(e, 'status', '')} {json.loads(body).get('message', body)}".strip()
        except (ValueError, AttributeError):
            pass
    return str(e)


def _quantity_mi(mb: float) -> str:
    return f"{int(mb)}Mi"


def pod_manifest(
    spec: SandboxSpec,
    sid: str,
    image: str,
    config: dict,
    runtime_class: str | None,
    node: str | None,
    labels: dict[str, str],
) -> dict:
    """The pod of one sandbox (a plain dict in the API's JSON shape)."""
    # Workspace and /tmp are memory-backed, as on docker: a tmpfs's size is
    # a hard limit, where a disk emptyDir's sizeLimit is only checked by
    # eviction, after the fact.
    volumes: list[dict] = [
        {"name": "workspace", "emptyDir": {"medium": "Memory", "sizeLimit": _quantity_mi(spec.disk_mb)}},
        {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": _quantity_mi(spec.disk_mb)}},
    ]
    mounts: list[dict] = [{"name": "workspace", "mountPath": spec.workdir}, {"name": "tmp", "mountPath": "/tmp"}]
    stage_mounts = []
    for i, m in enumerate(spec.mounts):
        name = f"mount-{i}"
        volumes.append({"name": name, "emptyDir": {}})
        # Read-only: sandboxed code may neither change what was copied nor add to it.
        mounts.append({"name": name, "mountPath": m.target, "readOnly": True})
        stage_mounts.append({"name": name, "mountPath": f"/stage/{i}"})
    memory = _quantity_mi(spec.memory_mb + 64)
    limits = {
        "cpu": f"{int(spec.cpus * 1000)}m",
        "memory": memory,
        "ephemeral-storage": _quantity_mi(64 + sum(1 for _ in spec.mounts) * 512),
    }
    containers = [
        {
            "name": "sandbox",
            "image": image,
            "imagePullPolicy": "IfNotPresent",
            "command": ["python3", "-I", "-S", "-c", LOADER, json.dumps(config)],
            "stdin": True,
            # The agent's stdin closes when the attach stream ends:
            # the sandbox dies with its host process.
            "stdinOnce": True,
            "tty": False,
            "workingDir": spec.workdir,
            "securityContext": secure_context(),
            # Small requests: a node holds as many idle sandboxes as
            # its memory allows; the limits bound each one.
            "resources": {"limits": limits, "requests": REQUESTS},
            "volumeMounts": mounts,
        }
    ]
    return hardened_pod(
        sid,
        labels,
        volumes,
        containers,
        [stager_container(image, stage_mounts)] if stage_mounts else [],
        runtime_class,
        node,
        int(spec.wall_timeout_s) + 60,
    )


def secure_context(uid: int = SANDBOX_UID) -> dict:
    """A container's securityContext as the restricted Pod Security profile asks."""
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": uid,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def stager_container(image: str, stage_mounts: list[dict]) -> dict:
    """The init container that unpacks the tar `stage_mounts_into` sends into `stage_mounts` (at /stage/<i>)."""
    return {
        "name": "stage",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python3", "-I", "-S", "-c", STAGER],
        "stdin": True,
        "stdinOnce": True,
        "tty": False,
        "securityContext": secure_context(),
        "resources": {"limits": {"cpu": "500m", "memory": "256Mi"}, "requests": REQUESTS},
        "volumeMounts": stage_mounts,
    }


def hardened_pod(
    name: str,
    labels: dict[str, str],
    volumes: list[dict],
    containers: list[dict],
    init_containers: list[dict],
    runtime_class: str | None,
    node: str | None,
    deadline_s: int,
) -> dict:
    """A pod of sandgym's: no restarts, no service-account token, no host
    namespaces, non-root with RuntimeDefault seccomp, killed at once, ended
    by its deadline; on `runtime_class` and `node` when given."""
    pod: dict = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "hostNetwork": False,
            "hostPID": False,
            "hostIPC": False,
            "terminationGracePeriodSeconds": 0,
            "activeDeadlineSeconds": deadline_s,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": SANDBOX_UID,
                "runAsGroup": SANDBOX_UID,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "volumes": volumes,
            "containers": containers,
        },
    }
    if init_containers:
        pod["spec"]["initContainers"] = init_containers
    if runtime_class:
        pod["spec"]["runtimeClassName"] = runtime_class
    if node:
        pod["spec"]["nodeName"] = node
    return pod


def network_policy() -> dict:
    """Default deny for every pod of the namespace, both ways."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": NETWORK_POLICY},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]},
    }


def _mounts_tar(spec: SandboxSpec) -> bytes:
    return mounts_tar([m.source for m in spec.mounts])


def mounts_tar(sources: list[str]) -> bytes:
    """Each source folder under its index, as the stager unpacks it."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for i, source in enumerate(sources):
            if not os.path.isdir(source):
                raise SandboxError(f"mount source is not a folder: {source} (the k8s backend copies folders)")
            tar.add(source, arcname=str(i), filter=lambda t: t if (t.isfile() or t.isdir() or t.issym()) else None)
    return buf.getvalue()


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
        client, _ = _kubernetes()
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
            # past it the sentry dies, agent included (runtimes/docker.py).
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
                self.stage_mounts_into(sid, _mounts_tar(spec))
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


def exec_status(status: bytes) -> int:
    """The exit code in an exec stream's status (its error channel): 0 on Success."""
    try:
        doc = json.loads(status or b"{}")
    except ValueError:
        return -1
    if doc.get("status") == "Success":
        return 0
    for cause in (doc.get("details") or {}).get("causes") or []:
        if cause.get("reason") == "ExitCode":
            try:
                return int(cause.get("message"))
            except (TypeError, ValueError):
                break
    return -1


def pod_stream(core, pod: str, namespace: str, container: str, command: list[str] | None = None):
    """A websocket (binary, channel-framed: 0 stdin, 1 stdout, 2 stderr, 3 the
    status) to `container`'s first process (attach) or, with `command`, to a
    new process in it (exec). `core` must be a CoreV1Api no other thread uses
    meanwhile: the client's stream() swaps its request method while it connects."""
    from kubernetes.stream import stream

    call = core.connect_get_namespaced_pod_attach
    extra: dict = {}
    if command is not None:
        call, extra = core.connect_get_namespaced_pod_exec, {"command": command}
    return stream(
        call,
        pod,
        namespace,
        container=container,
        stdin=True,
        stdout=True,
        stderr=True,
        tty=False,
        _preload_content=False,
        binary=True,
        **extra,
    ).sock


def pod_statuses(pod, init: bool = False) -> list:
    st = pod.status
    return (st.init_container_statuses if init else st.container_statuses) or []


def container_running(pod, name: str, init: bool = False) -> bool:
    return any(s.name == name and s.state and s.state.running for s in pod_statuses(pod, init))


def init_done(pod, name: str) -> bool:
    for s in pod_statuses(pod, init=True):
        if s.name == name and s.state and s.state.terminated and s.state.terminated.exit_code == 0:
            return True
    return False


def pod_problem(pod) -> str:
    if pod.status.phase in ("Failed", "Succeeded"):
        return f"phase {pod.status.phase}: {pod.status.reason or ''} {pod.status.message or ''}".strip()
    for s in pod_statuses(pod, True) + pod_statuses(pod):
        waiting = s.state.waiting if s.state else None
        if waiting and waiting.reason in (
            "ErrImagePull",
            "ImagePullBackOff",
            "CreateContainerError",
            "InvalidImageName",
        ):
            return f"{s.name}: {waiting.reason}: {waiting.message or ''}"
        term = s.state.terminated if s.state else None
        if term and term.exit_code != 0:
            return f"{s.name} exited {term.exit_code}: {term.reason or ''} {term.message or ''}".strip()
    return ""


def reap(include_live_owners: bool = False, namespace: str | None = None, kubeconfig: str | None = None) -> list[str]:
    """Delete sandgym pods whose owner process (on this host) is gone or whose
    expiry passed (or every one, with include_live_owners). Returns their names."""
    client, _ = _kubernetes()
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
