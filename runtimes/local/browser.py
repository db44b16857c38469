"""The local runtime's browser sandbox: Chromium and the app in one
bubblewrap sandbox, in a cgroup with the limits.

Playwright's wrapper drops to an unprivileged host user (as root), joins
the cgroup, enters bubblewrap (new user, PID, network, IPC, UTS and mount
namespaces; the chromium image's root filesystem read-only, as the
docker runtime's browser sandbox sees it; tmpfs /tmp and HOME) and runs the launcher,
which binds the app's socket on 127.0.0.1 inside that network namespace,
forks the app, hides the state folder from the browser and execs Chromium.
"""

from __future__ import annotations

import json
import os
import select
import shlex
import shutil
import signal
import time

from ..base import Runtime, RuntimeUnavailable
from ..browser import (
    EXIT_GRACE_S,
    LAUNCHER_DIR,
    MARKER_ENV,
    STATE_IN_SANDBOX,
    AppSpec,
    BrowserLimits,
    BrowserSandbox,
)
from ..cgroups import Cgroup, reap_groups
from ..host_processes import children, command_name, environs, owner_gone, parent_of
from ..rootfs import rootfs
from ..staging import stage_bytes
from .bwrap import default_drop_to, image_root_args

CHROMIUM = "/usr/lib/chromium/chromium"
SANDBOX_PYTHON = "/usr/bin/python3"
HOME = "/home/sandbox"
# The image the browser sandbox runs on, as on the docker runtime.
IMAGE = "recipe:chromium"


class LocalBrowserSandbox(BrowserSandbox):
    """Chromium and the app in one bubblewrap sandbox, in a cgroup with the limits.

    The app is out of the browser's reach but over HTTP: Chromium runs in
    user, mount and PID namespaces of its own nested in the sandbox's (it
    cannot see the app's process to signal it), the app makes itself
    non-dumpable (so Chromium's uid cannot ptrace it or read its memory or
    files through /proc), and the state folder is an empty tmpfs in
    Chromium's view."""

    def __init__(self, app: AppSpec, runtime: Runtime | None = None, limits: BrowserLimits | None = None):
        bwrap = shutil.which("bwrap")
        if not bwrap:
            raise RuntimeUnavailable("the browser sandbox needs bubblewrap: run `apt-get install bubblewrap`")
        self.root = rootfs(IMAGE)  # (raises, naming the command that unpacks it)
        if not os.access(self.root / CHROMIUM.lstrip("/"), os.X_OK):
            raise RuntimeUnavailable(
                f"the browser sandbox's image has no Chromium at {CHROMIUM}: "
                "run `sandgym images build chromium --force`"
            )
        if os.geteuid() == 0 and not shutil.which("setpriv"):
            raise RuntimeUnavailable("the browser sandbox as root needs setpriv: run `apt-get install util-linux`")
        self.bwrap = bwrap
        # As root, the sandbox runs as the runtime's unprivileged user.
        drop_to = getattr(runtime, "drop_to", None)
        self.drop_to = drop_to if drop_to is not None else default_drop_to()
        super().__init__(app, self.drop_to, limits)
        self.cgroup: Cgroup | None = None
        self._closing: dict[int, int] = {}  # pidfds of the processes close() waits for

    def _bwrap_argv(self) -> list[str]:
        etc = stage_bytes(
            "browser-etc",
            {
                "passwd": b"root:x:0:0::/:/usr/sbin/nologin\nsandbox:x:1000:1000::/home/sandbox:/bin/sh\n",
                "group": b"root:x:0:\nsandbox:x:1000:\n",
                "hosts": b"127.0.0.1 localhost sandbox\n::1 localhost\n",
                "nsswitch.conf": b"passwd: files\ngroup: files\nhosts: files\n",
            },
        )
        size = str(self.limits.disk_mb * 1024 * 1024)
        a = image_root_args(self.bwrap, self.drop_to, self.root, etc)
        a += ["--proc", "/proc", "--dev", "/dev"]
        for tmpfs in ("/dev/shm", "/tmp", HOME):
            a += ["--size", size, "--tmpfs", tmpfs]
        for src, dst, read_only in self._app_mounts():
            a += ["--ro-bind" if read_only else "--bind", src, dst]
        a += [
            "--remount-ro",
            "/",
            "--chdir",
            HOME,
            "--clearenv",
            "--setenv",
            "PATH",
            "/usr/bin:/bin",
            "--setenv",
            "HOME",
            HOME,
            "--setenv",
            "LANG",
            "C.UTF-8",
            "--setenv",
            "TMPDIR",
            "/tmp",
            "--setenv",
            MARKER_ENV,
            self.id,
        ]
        cfg = self._launcher_cfg("combined", hide=[STATE_IN_SANDBOX], isolate_browser=True)
        a += ["--", SANDBOX_PYTHON, "-I", "-S", f"{LAUNCHER_DIR}/launcher.py", json.dumps(cfg)]
        return a

    def _prepare(self) -> None:
        self.cgroup = Cgroup(f"browser-{self.id}", self.limits.memory_mb, self.limits.pids, self.limits.cpus)

    def _wrapper_script(self) -> str:
        assert self.cgroup is not None
        # The wrapper joins the cgroup before it becomes bubblewrap: all
        # of the sandbox is born inside. The marker in bubblewrap's own
        # environment too: `sandgym gc` finds it if it outlives its owner.
        join = "".join(f"echo $$ > {shlex.quote(f)}\n" for f in self.cgroup.procs_files)
        return (
            f"#!/bin/sh\nset -e\n{join}export {MARKER_ENV}={shlex.quote(self.id)}\nexec "
            + " ".join(shlex.quote(x) for x in self._bwrap_argv())
            + ' "$@"\n'
        )

    def exhausted(self) -> str | None:
        if self.cgroup is not None and self.cgroup.oom_kills():
            return f"the sandbox ran out of memory (limit {self.limits.memory_mb} MB)"
        return None

    def process_ids(self) -> list[int]:
        """Every process of this sandbox: those carrying its marker in their
        environment, their bubblewrap parents and all their descendants."""
        needle = f"{MARKER_ENV}={self.id}".encode()
        marked = [pid for pid, env in environs() if needle in env]
        found: set[int] = set()
        for pid in marked:
            parent = parent_of(pid)
            while parent and command_name(parent) == "bwrap":
                found.add(parent)
                parent = parent_of(parent)
        frontier = list(marked)
        while frontier:
            pid = frontier.pop()
            if pid in found and pid not in marked:
                continue
            found.add(pid)
            frontier.extend(children(pid))
        if self.cgroup is not None:
            found.update(self.cgroup.pids())
        return sorted(found)

    def memory_bytes(self) -> int:
        """Proportional set size (PSS) of the sandbox's processes: shared pages split fairly."""
        total = 0
        for pid in self.process_ids():
            try:
                with open(f"/proc/{pid}/smaps_rollup") as f:
                    for line in f:
                        if line.startswith("Pss:"):
                            total += int(line.split()[1]) * 1024
                            break
            except OSError:
                continue
        return total

    def kill(self) -> None:
        self._kill_host_processes()

    def _before_close(self) -> None:
        self._closing = pidfds_of(self.process_ids())

    def _teardown(self) -> None:
        pidfds, self._closing = self._closing, {}
        try:
            # Chromium has gone; the driver reaps the wrapper it started.
            wait_exited(pidfds, EXIT_GRACE_S)
            wait_reaped(list(pidfds), EXIT_GRACE_S)
            pidfds.update(pidfds_of(self.process_ids()))
            if not wait_exited(pidfds, EXIT_GRACE_S):
                # Whatever outlives the browser (it should not) is killed.
                for fd in pidfds.values():
                    try:
                        signal.pidfd_send_signal(fd, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                wait_exited(pidfds, EXIT_GRACE_S)
        finally:
            for fd in pidfds.values():
                os.close(fd)
            if self.cgroup is not None:
                self.cgroup.remove()


def reap_cgroups(include_live: bool = False, owner_pid: int | None = None) -> list[str]:
    """Remove the cgroups of local browser sandboxes (`browser-<owner pid>-<token>`)
    whose owner is gone (or every one with include_live, or only `owner_pid`'s);
    what is still in one is killed first."""
    if os.geteuid() != 0:
        return []

    def keep(name: str) -> bool:
        owner = name.removeprefix("browser-").split("-", 1)[0]
        return not (name.startswith("browser-") and owner.isdigit() and owner_gone(int(owner), include_live, owner_pid))

    return reap_groups(keep)


def pidfds_of(pids: list[int]) -> dict[int, int]:
    """pidfds (which name a process for good, unlike a pid that may be reused)."""
    fds = {}
    for pid in pids:
        try:
            fds[pid] = os.pidfd_open(pid)
        except ProcessLookupError:
            pass
    return fds


def wait_exited(pidfds: dict[int, int], timeout_s: float) -> bool:
    """Wait until every process has exited (a pidfd turns readable then)."""
    poller = select.poll()
    for fd in pidfds.values():
        poller.register(fd, select.POLLIN)
    left = set(pidfds.values())
    deadline = time.monotonic() + timeout_s
    while left:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        for fd, _ in poller.poll(remaining * 1000):
            left.discard(fd)
            poller.unregister(fd)
    return True


def wait_reaped(pids: list[int], timeout_s: float) -> None:
    """Processes that have exited linger as zombies until their parent reaps
    them, which the parent does on SIGCHLD: a brief, bounded wait."""
    deadline = time.monotonic() + timeout_s
    for pid in pids:
        while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
            time.sleep(0.002)
