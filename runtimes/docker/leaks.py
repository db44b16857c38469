"""What `sandgym gc` collects of the docker backend: sandbox containers
whose owner process is gone or whose expiry passed."""

from __future__ import annotations

import importlib.util
import os
import socket
import time

from ..base import RuntimeUnavailable, SandboxError
from ..images import docker_client
from ..leaks import Leaks
from .runtime import EXPIRES_LABEL, OWNER_LABEL

ATTEMPTS = 3  # a container that went away while listed fails the listing: list again


def collect(include_live: bool = False, owner: int | None = None) -> list[Leaks]:
    """Sandbox containers whose owner is gone or whose expiry passed (or
    every one, with include_live). Containers carry their owner too, but
    are collected by liveness only: nothing, given `owner`."""
    if owner is not None:
        return []
    if importlib.util.find_spec("docker") is None:
        raise RuntimeUnavailable("the docker SDK is not installed")
    for attempt in range(ATTEMPTS):
        try:
            return [Leaks("sandbox container", reap(include_live_owners=include_live))]
        except RuntimeUnavailable:
            raise
        except Exception as e:  # the Engine's errors are of several kinds
            if attempt == ATTEMPTS - 1:
                raise SandboxError(
                    f"docker: could not list sandgym's containers ({' '.join(str(e).split())[:300]}); try again"
                ) from e
    return []


def reap(include_live_owners: bool = False) -> list[str]:
    """Remove sandgym containers whose owner process is gone or whose
    expiry has passed (or every one, with include_live_owners). Returns
    the names removed."""
    client = docker_client()
    host = socket.gethostname()
    removed = []
    for c in client.containers.list(all=True, filters={"label": OWNER_LABEL}, ignore_removed=True):
        owner = c.labels.get(OWNER_LABEL, "")
        expired = float(c.labels.get(EXPIRES_LABEL, "0") or 0) < time.time()
        owner_host, _, pid = owner.partition(":")
        owner_alive = owner_host == host and pid.isdigit() and os.path.exists(f"/proc/{pid}")
        if include_live_owners or expired or not owner_alive:
            try:
                c.remove(force=True)
                removed.append(c.name)
            except Exception:
                pass
    return removed
