"""The bubblewrap arguments every namespace sandbox starts with.

Both the local runtime's sandboxes and its browser sandbox begin the same
way: new user, pid, ipc, uts, cgroup and net namespaces, running as uid
1000, dying with their parent, and seeing as their root the image's root
filesystem (runtimes/rootfs.py: the files a Docker sandbox of the same
recipe sees), read-only, with the sandbox's own passwd, group and hosts.
Nothing of the host's /usr, /lib or /etc. One place, so a hardening change
reaches both.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..rootfs import root_args

# The sandbox's own users and host names, bound over the image's /etc.
SANDBOX_ETC = {
    "passwd": "root:x:0:0::/:/usr/sbin/nologin\nsandbox:x:1000:1000::/workspace:/bin/sh\n",
    "group": "root:x:0:\nsandbox:x:1000:\n",
    "hosts": "127.0.0.1 localhost sandbox\n::1 localhost\n",
    "hostname": "sandbox\n",
    "nsswitch.conf": "passwd: files\ngroup: files\nhosts: files\n",
}


def image_root_args(bwrap: str, drop_to: tuple[int, int] | None, root: Path, etc_dir: Path) -> list[str]:
    """`setpriv` (when dropping root) and bwrap with the namespaces and the
    image's root filesystem `root` (runtimes/rootfs.py) read-only; every
    file of `etc_dir` (the sandbox's own passwd, group, hosts) over /etc."""
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
    ]
    a += root_args(root)
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
