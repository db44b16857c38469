"""The Kubernetes API as the k8s backend uses it: a client from a
kubeconfig or in-cluster configuration, the API server's own error
messages, attach and exec streams and their exit status, and what a pod's
status says of its containers."""

from __future__ import annotations

import json
import os

from ..base import RuntimeUnavailable


def kubernetes_client():
    try:
        import kubernetes  # noqa: F401
    except ImportError:
        raise RuntimeUnavailable("runtime 'k8s' needs the kubernetes client: pip install 'sandgym[k8s]'") from None
    from kubernetes import client, config

    return client, config


def load_client(kubeconfig: str | None = None):
    """An API client from in-cluster config (inside a pod) or a kubeconfig
    (argument, $KUBECONFIG read now, ~/.kube/config), as kubectl finds it."""
    client, config = kubernetes_client()
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
