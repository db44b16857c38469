"""Control groups for local sandboxes that rlimits cannot bound (Chromium).

RLIMIT_AS breaks V8 (it reserves far more address space than it uses) and
RLIMIT_NPROC counts every process of the uid, not of one sandbox; a cgroup
bounds the memory, tasks and CPU of one process tree. Needs root. Works
with the cgroup v2 unified hierarchy and with v1's per-controller folders
(this project's CI machine is v1).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

from .base import RuntimeUnavailable

ROOT = Path("/sys/fs/cgroup")
GROUP = "sandgym"
CONTROLLERS = ("memory", "pids", "cpu")
CPU_PERIOD_US = 100_000


def _v2() -> bool:
    return (ROOT / "cgroup.controllers").is_file()


def _write(path: Path, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


class Cgroup:
    """One cgroup (v2) or one group per controller (v1), named `name` under `sandgym/`."""

    def __init__(self, name: str, memory_mb: int, pids: int, cpus: float):
        if os.geteuid() != 0:
            raise RuntimeUnavailable(
                "limits on local browser sandboxes need a cgroup of their own, which needs root: "
                "run as root, or use a docker runtime (its containers carry the limits)"
            )
        self.name = name
        self.dirs: list[Path] = []
        try:
            self._make(memory_mb, pids, cpus)
        except OSError as e:
            self.remove()
            raise RuntimeUnavailable(f"could not make the cgroup {GROUP}/{name}: {e}") from None

    def _make(self, memory_mb: int, pids: int, cpus: float) -> None:
        mem = str(memory_mb * 1024 * 1024)
        quota = str(int(cpus * CPU_PERIOD_US))
        if _v2():
            parent = ROOT / GROUP
            parent.mkdir(exist_ok=True)
            # Controllers reach a group only when its parent hands them down.
            enable = " ".join(f"+{c}" for c in CONTROLLERS)
            _write(ROOT / "cgroup.subtree_control", enable)
            _write(parent / "cgroup.subtree_control", enable)
            d = parent / self.name
            d.mkdir()
            self.dirs = [d]
            _write(d / "memory.max", mem)
            _write(d / "memory.swap.max", "0")
            _write(d / "pids.max", str(pids))
            _write(d / "cpu.max", f"{quota} {CPU_PERIOD_US}")
            return
        for controller in CONTROLLERS:
            parent = ROOT / controller / GROUP
            parent.mkdir(exist_ok=True)
            d = parent / self.name
            d.mkdir()
            self.dirs.append(d)
        memory, pids_dir, cpu = self.dirs
        _write(memory / "memory.limit_in_bytes", mem)
        if (memory / "memory.memsw.limit_in_bytes").exists():
            _write(memory / "memory.memsw.limit_in_bytes", mem)
        _write(pids_dir / "pids.max", str(pids))
        _write(cpu / "cpu.cfs_period_us", str(CPU_PERIOD_US))
        _write(cpu / "cpu.cfs_quota_us", quota)

    @property
    def procs_files(self) -> list[str]:
        """Where a process writes its pid to join (every controller's group)."""
        return [str(d / "cgroup.procs") for d in self.dirs]

    def pids(self) -> list[int]:
        found: set[int] = set()
        for d in self.dirs:
            try:
                found.update(int(x) for x in (d / "cgroup.procs").read_text().split())
            except OSError:
                pass
        return sorted(found)

    def oom_kills(self) -> int:
        """Processes the kernel killed for the memory limit (so far)."""
        return _oom_kills(self.dirs[0]) if self.dirs else 0

    def kill(self) -> None:
        for pid in self.pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def remove(self, timeout_s: float = 5.0) -> None:
        """Kill what is left and remove the group (it can go once it is empty)."""
        deadline = time.monotonic() + timeout_s
        for d in reversed(self.dirs):
            while True:
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        break
                    self.kill()
                    time.sleep(0.01)
        self.dirs = [d for d in self.dirs if d.exists()]


def _oom_kills(memory_dir: Path) -> int:
    name = "memory.events" if _v2() else "memory.oom_control"
    try:
        for line in (memory_dir / name).read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


def oom_kills_of(pid: int) -> int:
    """OOM kills in the memory cgroup of process `pid` (e.g. a container's first process)."""
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return 0
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if _v2() and controllers == "":
            return _oom_kills(ROOT / path.lstrip("/"))
        if "memory" in controllers.split(","):
            return _oom_kills(ROOT / "memory" / path.lstrip("/"))
    return 0


def reap_groups(alive: Callable[[str], bool]) -> list[str]:
    """Remove the groups under sandgym/ whose name `alive` says is dead (after a crash)."""
    removed = []
    parents = [ROOT / GROUP] if _v2() else [ROOT / c / GROUP for c in CONTROLLERS]
    for parent in parents:
        if not parent.is_dir():
            continue
        for d in parent.iterdir():
            if d.is_dir() and not alive(d.name):
                group = Cgroup.__new__(Cgroup)
                group.name, group.dirs = d.name, [d]
                group.remove()
                removed.append(d.name)
    return removed
