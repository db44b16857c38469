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

# Runtime names the CLI and envs accept. Only `local` is built so far; the
# others are named so that an error can say what will come.
RUNTIME_NAMES = ("local",)
PLANNED_RUNTIMES = ("docker", "docker:runsc", "docker:kata", "kubernetes")


def get_runtime(name: str) -> Runtime:
    """A runtime by name; the error lists the choices."""
    if name == "local":
        from .local import LocalRuntime

        return LocalRuntime()
    if name in PLANNED_RUNTIMES:
        raise RuntimeUnavailable(
            f"runtime {name!r} is not part of this version of sandgym yet; available: {', '.join(RUNTIME_NAMES)}"
        )
    raise ValueError(f"unknown runtime {name!r}; choices: {', '.join(RUNTIME_NAMES)}")


__all__ = [
    "ExecResult", "Mount", "Runtime", "RuntimeUnavailable", "Sandbox", "SandboxError",
    "SandboxSpec", "get_runtime", "RUNTIME_NAMES",
]
