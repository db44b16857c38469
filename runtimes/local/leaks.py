"""What `sandgym gc` collects of the local backend: bubblewrap sandboxes
and browser-sandbox cgroups whose owner process is gone."""

from __future__ import annotations

import os

from ..host_processes import environ_of, kill_tree, mark_owner, owner_gone
from ..leaks import Leaks
from .browser import reap_cgroups
from .runtime import AGENT_ARG, OWNER_ENV


def collect(include_live: bool = False, owner: int | None = None) -> list[Leaks]:
    """Local sandboxes and browser-sandbox cgroups whose owner is gone (or
    any other process's, with include_live; or only `owner`'s)."""
    killed = reap_sandboxes(include_live=include_live, owner=owner)
    groups = reap_cgroups(include_live=include_live, owner_pid=owner)
    return [
        Leaks("orphaned local sandbox", [str(p) for p in killed], "killed"),
        Leaks("browser cgroup", groups),
    ]


def reap_sandboxes(include_live: bool = False, owner: int | None = None) -> list[int]:
    """SIGKILL local sandboxes (their bubblewrap process and everything under
    it) whose owner is gone: those whose SANDGYM_OWNER names a dead process
    (or `owner`, or any, with include_live), and, with no `owner` given, any
    bubblewrap process running sandgym's agent that was left to init (a
    live owner is always its parent). Returns the pids killed."""
    killed = []
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        pid = int(entry)
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() not in ("bwrap", "setpriv"):
                    continue
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
        except (OSError, ValueError, IndexError):
            continue
        if AGENT_ARG.encode() not in cmdline:
            continue
        mark = mark_owner(environ_of(pid), OWNER_ENV)
        if mark is not None:
            doomed = owner_gone(mark, include_live, owner)
        else:
            doomed = owner is None and ppid == 1
        if doomed:
            kill_tree(pid)
            killed.append(pid)
    return killed
