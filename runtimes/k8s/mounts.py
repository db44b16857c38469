"""A spec's small mounts as content-addressed ConfigMaps: made once per
content (for the whole cluster), projected read-only into every pod that
mounts it by the kubelet itself, with no init container and no copy over
the API server per pod.

A folder qualifies when it holds only folders and regular files, at most
CONFIGMAP_MAX_BYTES in all (a ConfigMap is one etcd object; its limit is
about 1 MiB). Others (a test venv, with its symlinks and megabytes) are
still copied in by the init container (pods.py). The ConfigMap is named
after the SHA-256 of its files' paths, modes and bytes, marked immutable
(nobody can change it, and the kubelet need not watch it), and labelled
MOUNT_LABEL; `sandgym gc` deletes those no pod uses. Its content is the
mounted code sandboxed code reads anyway: nothing secret goes in one.
"""

from __future__ import annotations

import base64
import hashlib
import os
import stat
import threading
import time
from dataclasses import dataclass

from .api import api_message

CONFIGMAP_MAX_BYTES = 768 << 10
MOUNT_LABEL = "sandgym.mount"
RECHECK_S = 60.0
# `sandgym gc` deletes a mount ConfigMap no pod mounts once it is this old.
UNUSED_AFTER_S = 600.0


@dataclass(frozen=True)
class ConfigMapMount:
    name: str
    items: tuple[tuple[str, str, int], ...]  # (key, path in the volume, mode)

    def volume(self, volume_name: str) -> dict:
        items = [{"key": k, "path": p, "mode": m} for k, p, m in self.items]
        return {"name": volume_name, "configMap": {"name": self.name, "items": items, "defaultMode": 0o444}}


def configmap_for(source: str) -> tuple[ConfigMapMount, dict] | None:
    """The ConfigMap of folder `source` and its manifest, or None when it does
    not qualify (a symlink, a device, or too big)."""
    files: list[tuple[str, bytes, int]] = []
    total = 0
    for root, dirs, names in os.walk(source):
        dirs.sort()
        for d in dirs:
            if os.path.islink(os.path.join(root, d)):
                return None
        for name in sorted(names):
            path = os.path.join(root, name)
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode):
                return None
            total += st.st_size
            if total > CONFIGMAP_MAX_BYTES:
                return None
            with open(path, "rb") as f:
                data = f.read()
            files.append((os.path.relpath(path, source), data, 0o555 if st.st_mode & 0o111 else 0o444))
    digest = hashlib.sha256()
    for rel, data, mode in files:
        digest.update(f"{rel}\0{mode}\0{len(data)}\0".encode() + data)
    name = f"sg-mount-{digest.hexdigest()[:32]}"
    items = tuple((f"f{i}", rel, mode) for i, (rel, _, mode) in enumerate(files))
    manifest = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {MOUNT_LABEL: "1"}},
        "immutable": True,
        "binaryData": {f"f{i}": base64.b64encode(data).decode() for i, (_, data, _) in enumerate(files)},
    }
    return ConfigMapMount(name, items), manifest


class MountMaps:
    """The ConfigMaps this runtime made or found. A small folder is read and
    hashed at every use (at most CONFIGMAP_MAX_BYTES: its content now is what
    the pod gets); a folder found too big is not read again while its
    top-level entry stays the same (a test venv is staged once, immutable)."""

    def __init__(self, core, namespace: str):
        self.core, self.namespace = core, namespace
        self._stored: dict[str, float] = {}  # name: when last made or found (monotonic)
        self._too_big: set[tuple] = set()
        self._lock = threading.Lock()

    def get(self, source: str) -> ConfigMapMount | None:
        """The ConfigMap holding `source` (made if missing), or None: copy it in instead."""
        st = os.stat(source)
        seen = (source, st.st_dev, st.st_ino, st.st_mtime_ns)
        with self._lock:
            if seen in self._too_big:
                return None
        made = configmap_for(source)
        if made is None:
            with self._lock:
                self._too_big.add(seen)
            return None
        found, manifest = made
        with self._lock:
            # Checked again now and then: `sandgym gc` deletes one no pod has used for a while.
            if time.monotonic() - self._stored.get(found.name, -RECHECK_S) < RECHECK_S:
                return found
        try:
            self.core.create_namespaced_config_map(self.namespace, manifest)
        except Exception as e:
            if getattr(e, "status", None) != 409:  # 409: the same content is there already
                from ..base import SandboxError

                raise SandboxError(f"could not store mount {source} as a ConfigMap: {api_message(e)}") from e
        with self._lock:
            self._stored[found.name] = time.monotonic()
        return found
