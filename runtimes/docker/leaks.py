"""What `sandgym gc` collects of the docker backend: sandbox containers
whose owner process is gone or whose expiry passed."""

from __future__ import annotations

import os
import socket
import time

from ..images import docker_client
from .runtime import EXPIRES_LABEL, OWNER_LABEL


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
