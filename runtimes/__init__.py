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

# Runtime names the CLI and envs accept; `kubernetes` is named so that an
# error can say it will come.
RUNTIME_NAMES = ("local", "docker", "docker:runsc", "docker:kata")
PLANNED_RUNTIMES = ("kubernetes",)


def get_runtime(name: str) -> Runtime:
    """A runtime by name; the error lists the choices."""
    if name == "local":
        from .local import LocalRuntime

        return LocalRuntime()
    if name == "docker" or name.startswith("docker:"):
        from .docker import DockerRuntime

        oci = name.split(":", 1)[1] if ":" in name else "runc"
        if oci not in ("runc", "runsc", "kata"):
            raise ValueError(f"unknown runtime {name!r}; choices: {', '.join(RUNTIME_NAMES)}")
        return DockerRuntime(oci)
    if name == "jail":
        # Sandboxes made of what Docker's default profile allows: the backend
        # of the OpenEnv server image (run with a plain `docker run`), not of
        # a host (see jail.py).
        from .jail import JailRuntime

        return JailRuntime()
    if name in PLANNED_RUNTIMES:
        raise RuntimeUnavailable(
            f"runtime {name!r} is not part of this version of sandgym yet; available: {', '.join(RUNTIME_NAMES)}"
        )
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
