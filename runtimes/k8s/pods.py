"""What sandgym's pods are made of: the hardened pod every sandbox and
browser sandbox runs in, its containers' security context, the init
container that copies a spec's mounts in, the labels `sandgym gc` reads,
and the namespace's default-deny NetworkPolicy."""

from __future__ import annotations

import io
import json
import os
import secrets
import socket
import tarfile
import time
import uuid

from ..base import SandboxError, SandboxSpec

# Label keys and values must be DNS-label-like, so the owner is host-pid.
OWNER_LABEL = "sandgym.owner"
RUN_LABEL = "sandgym.run"
EXPIRES_LABEL = "sandgym.expires"
POOL_LABEL = "sandgym.pool"  # "1": made ahead by a warm pool, before any caller asked for it
RUN_ID = uuid.uuid4().hex[:12]
NETWORK_POLICY = "sandgym-default-deny"
SANDBOX_UID = 1000  # browser pods' pod-level default (their containers name their own)
# Each sandbox pod runs as a uid of its own. RLIMIT_NPROC (the agent's
# `pids`) counts every task of a uid in the node's user namespace: pods
# sharing one uid would share one budget, and one pod's fork bomb would
# leave the others unable to fork. Drawn at random from 2^30 values (two of
# 1,000 pods alive at once share one with probability about 0.05%).
POD_UID_BASE = 1 << 30
POD_UID_SPAN = (1 << 30) - 1  # the largest is 2^31 - 2: runAsUser is at most 2^31 - 1
REQUESTS = {"cpu": "10m", "memory": "32Mi"}

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
    idle_s: float = 0.0,
    maps: list | None = None,
) -> dict:
    """The pod of one sandbox (a plain dict in the API's JSON shape); `idle_s`:
    how long it may wait in a warm pool before its lifetime starts; `maps`:
    per mount, the ConfigMap that holds it (mounts.ConfigMapMount), or None:
    the init container copies that one in."""
    # Workspace and /tmp are memory-backed, as on docker: a tmpfs's size is
    # a hard limit, where a disk emptyDir's sizeLimit is only checked by
    # eviction, after the fact.
    volumes: list[dict] = [
        {"name": "workspace", "emptyDir": {"medium": "Memory", "sizeLimit": _quantity_mi(spec.disk_mb)}},
        {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": _quantity_mi(spec.disk_mb)}},
    ]
    mounts: list[dict] = [{"name": "workspace", "mountPath": spec.workdir}, {"name": "tmp", "mountPath": "/tmp"}]
    stage_mounts = []
    maps = maps or [None] * len(spec.mounts)
    for i, m in enumerate(spec.mounts):
        name = f"mount-{i}"
        # Read-only: sandboxed code may neither change what was copied nor add to it.
        mounts.append({"name": name, "mountPath": m.target, "readOnly": True})
        if maps[i] is not None:
            volumes.append(maps[i].volume(name))
            continue
        volumes.append({"name": name, "emptyDir": {}})
        stage_mounts.append({"name": name, "mountPath": f"/stage/{i}"})
    uid = sandbox_uid()
    memory = _quantity_mi(spec.memory_mb + 64)
    limits = {
        "cpu": f"{int(spec.cpus * 1000)}m",
        "memory": memory,
        "ephemeral-storage": _quantity_mi(64 + len(stage_mounts) * 512),
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
            "securityContext": secure_context(uid),
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
        [stager_container(image, stage_mounts, uid)] if stage_mounts else [],
        runtime_class,
        node,
        int(spec.wall_timeout_s + idle_s) + 60,
        uid,
    )


def sandbox_uid() -> int:
    """A sandbox pod's uid (and gid): its own, so that its process budget is its own."""
    return POD_UID_BASE + secrets.randbelow(POD_UID_SPAN)


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


def stager_container(image: str, stage_mounts: list[dict], uid: int = SANDBOX_UID) -> dict:
    """The init container that unpacks the tar `stage_mounts_into` sends into `stage_mounts` (at /stage/<i>)."""
    return {
        "name": "stage",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python3", "-I", "-S", "-c", STAGER],
        "stdin": True,
        "stdinOnce": True,
        "tty": False,
        # The sandbox's own uid: what it copies is the sandbox's to read.
        "securityContext": secure_context(uid),
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
    uid: int = SANDBOX_UID,
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
                "runAsUser": uid,
                "runAsGroup": uid,
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


def mounts_tar(sources: list[str], indices: list[int] | None = None) -> bytes:
    """Each source folder under its index (its mount's, from `indices`), as the stager unpacks it."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for i, source in zip(indices if indices is not None else range(len(sources)), sources, strict=True):
            if not os.path.isdir(source):
                raise SandboxError(f"mount source is not a folder: {source} (the k8s backend copies folders)")
            tar.add(source, arcname=str(i), filter=lambda t: t if (t.isfile() or t.isdir() or t.issym()) else None)
    return buf.getvalue()
