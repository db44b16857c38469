"""The bubblewrap arguments every namespace sandbox starts with.

Both the local runtime's sandboxes and its browser sandbox begin the same
way: new user, pid, ipc, uts, cgroup and net namespaces, running as uid
1000, dying with their parent, and seeing of the host only `/usr`, the
top-level library and binary links, and the few `/etc` files the caller
names (ETC_ALLOWED in base.py, plus the browser's fonts), read-only. One
place, so a hardening change reaches both.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path


def host_root_args(bwrap: str, drop_to: tuple[int, int] | None, etc_names: Iterable[str], etc_dir: Path) -> list[str]:
    """`setpriv` (when dropping root) and bwrap with the namespaces and the
    read-only host view; `etc_names` are bound from the host's /etc where
    they exist, and every file of `etc_dir` (the sandbox's own passwd,
    group, hosts) over /etc."""
    a: list[str] = []
    if drop_to:
        uid, gid = drop_to
        a += ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--"]
    a += [
        bwrap,
        "--unshare-user",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--unshare-net",
        "--uid",
        "1000",
        "--gid",
        "1000",
        "--hostname",
        "sandbox",
        "--die-with-parent",
        "--new-session",
        "--ro-bind",
        "/usr",
        "/usr",
    ]
    for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = Path("/") / top
        if host.is_symlink():
            a += ["--symlink", os.readlink(host), f"/{top}"]
        elif host.is_dir():
            a += ["--ro-bind", str(host), f"/{top}"]
    for name in etc_names:
        if os.path.exists(f"/etc/{name}"):
            a += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    for name in sorted(os.listdir(etc_dir)):
        a += ["--ro-bind", str(etc_dir / name), f"/etc/{name}"]
    return a


def default_drop_to() -> tuple[int, int] | None:
    """As root, the unprivileged host user and group sandboxes run as
    (SANDGYM_SANDBOX_UID/GID, nobody by default); None otherwise."""
    if os.geteuid() != 0:
        return None
    uid = int(os.environ.get("SANDGYM_SANDBOX_UID", 65534))
    return uid, int(os.environ.get("SANDGYM_SANDBOX_GID", uid))
