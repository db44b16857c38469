"""Sandbox backends behind one protocol (see base.py)."""

from __future__ import annotations

from .base import (
    ExecResult,
    Mount,
    Runtime,
    RuntimeUnavailable,
    Sandbox,
    SandboxError,
    SandboxSpec,
)

# Runtime names the CLI and envs accept.
RUNTIME_NAMES = ("local", "docker", "docker:runsc", "docker:kata", "k8s", "k8s:gvisor", "k8s:kata")
# k8s:NAME -> the isolation its RuntimeClass gives.
K8S_ISOLATION = {"runc": "runc", "gvisor": "runsc", "kata": "kata"}


def get_runtime(name: str) -> Runtime:
    """A runtime by name; the error lists the choices."""
    if name == "local":
        from .local.runtime import LocalRuntime

        return LocalRuntime()
    if name == "docker" or name.startswith("docker:"):
        from .docker.runtime import DockerRuntime

        oci = name.split(":", 1)[1] if ":" in name else "runc"
        if oci not in ("runc", "runsc", "kata"):
            raise ValueError(f"unknown runtime {name!r}; choices: {', '.join(RUNTIME_NAMES)}")
        return DockerRuntime(oci)
    if name == "jail":
        # Sandboxes made of what Docker's default profile allows: the backend
        # of the OpenEnv server image (run with a plain `docker run`), not of
        # a host (see jail/runtime.py).
        from .jail.runtime import JailRuntime

        return JailRuntime()
    if name == "k8s" or name.startswith("k8s:"):
        from .k8s.runtime import KubernetesRuntime

        kind = name.split(":", 1)[1] if ":" in name else "runc"
        if kind not in K8S_ISOLATION:
            raise ValueError(f"unknown runtime {name!r}; choices: {', '.join(RUNTIME_NAMES)}")
        return KubernetesRuntime(K8S_ISOLATION[kind])
    raise ValueError(f"unknown runtime {name!r}; choices: {', '.join(RUNTIME_NAMES)}")


__all__ = [
    "ExecResult",
    "Mount",
    "Runtime",
    "RuntimeUnavailable",
    "Sandbox",
    "SandboxError",
    "SandboxSpec",
    "get_runtime",
    "RUNTIME_NAMES",
]
