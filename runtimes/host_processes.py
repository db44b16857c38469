"""Host processes: finding, marking and killing them, for every backend.

Backends start host processes (bubblewrap, `docker exec` clients, exec
relays) that carry a mark NAME=PID-TOKEN in their environment: PID is the
sandgym process that owns them, so `sandgym gc` can tell what a process
that is gone left behind from what a live one still uses.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def parent_of(pid: int) -> int:
    """The parent's pid; 0 once the process is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def command_name(pid: int) -> str:
    """The process's command name (/proc/PID/comm); "" once it is gone."""
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def environ_of(pid: int) -> list[bytes]:
    """The entries of a process's environment; [] if it cannot be read."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def environs() -> Iterator[tuple[int, list[bytes]]]:
    """(pid, environment entries) of every process whose environment can be read."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            env = environ_of(int(entry))
            if env:
                yield int(entry), env


def mark_owner(env: list[bytes], name: str) -> int | None:
    """The owner's pid in an environment's mark `name`=PID-TOKEN, or None
    (no such mark, or not a pid)."""
    prefix = name.encode() + b"="
    for item in env:
        if item.startswith(prefix):
            owner = item[len(prefix) :].split(b"-", 1)[0]
            return int(owner) if owner.isdigit() else None
    return None


def owner_gone(mark: int, include_live: bool, owner: int | None) -> bool:
    """Whether what carries `mark` (its owner's pid) is to be reaped: with
    `owner`, only that owner's; else another process's that is gone (or
    any other's, with include_live)."""
    if owner is not None:
        return mark == owner
    return mark != os.getpid() and (include_live or not pid_alive(mark))


def kill_marked(name: str, include_live: bool = False, owner: int | None = None) -> list[int]:
    """SIGKILL the processes whose mark `name` names an owner that is gone
    (or any other's with include_live, or only `owner`'s). Returns the pids killed."""
    killed = []
    for pid, env in environs():
        mark = mark_owner(env, name)
        if mark is not None and owner_gone(mark, include_live, owner):
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except (ProcessLookupError, PermissionError):
                pass
    return killed


def children(pid: int) -> list[int]:
    """The child processes of `pid` (of any of its threads); [] once it is gone."""
    out: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out.extend(int(c) for c in f.read().split())
    except OSError:
        pass
    return out


def descendants(pid: int) -> list[int]:
    """Every process below `pid`."""
    out, frontier = [], children(pid)
    while frontier:
        p = frontier.pop()
        out.append(p)
        frontier.extend(children(p))
    return out


def kill_tree(pid: int) -> None:
    """SIGKILL a process and all its descendants, top first.

    Killing the init of a PID namespace takes every process in it along.
    """
    for p in [pid, *descendants(pid)]:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
