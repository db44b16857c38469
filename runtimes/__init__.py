"""Sandbox backends behind one protocol (see base.py), listed in backends.py."""

from __future__ import annotations

from .backends import BACKENDS, backend_of, load
from .base import (
    Egress,
    ExecResult,
    Mount,
    Runtime,
    RuntimeUnavailable,
    Sandbox,
    SandboxError,
    SandboxSpec,
)

# Runtime names the CLI and envs accept: every backend's variants.
RUNTIME_NAMES = tuple(name for b in BACKENDS.values() for name in b.variants)


def get_runtime(name: str) -> Runtime:
    """A runtime by name; the error lists the choices."""
    backend = backend_of(name)
    if backend is None:
        raise ValueError(f"unknown runtime {name!r}; choices: {', '.join(RUNTIME_NAMES)}")
    cls = load(backend.runtime)
    isolation = backend.variants[name]
    return cls() if isolation is None else cls(isolation)


__all__ = [
    "Egress",
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
