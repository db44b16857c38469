"""The `jail` backend: sandboxes made only of what Docker's default profile
allows, for the OpenEnv server image run with a plain `docker run`.

Docker's default seccomp profile refuses every new namespace (so neither
bubblewrap nor gVisor can start inside a container), but container root
keeps CAP_SETUID/SETGID, CAP_SYS_CHROOT, CAP_MKNOD and CAP_KILL. Each
sandbox here is:

- a uid and gid of its own (never reused while anything of it lives), so
  sandboxes cannot signal, trace or read each other, nor the server;
- a chroot: a fresh root of hard links to the container's /usr, a few /etc
  files, five /dev nodes, the agent, the spec's mounts (copies), and
  private /workspace and /tmp; no /proc, no /sys;
- no_new_privs and a seccomp filter of its own (runtimes/boundary/jail_launch.py): no
  `socket()` at all (so no network and no Unix sockets), no ptrace or
  process_vm_*, no io_uring, bpf, keyrings, unshare, mount or chroot, and
  no signal to the agent (it shares the commands' uid);
- the agent's rlimits (memory, processes of the uid, file size, open files,
  CPU) and its wall-clock lifetime;
- a root reaper outside (a child subreaper) that sweeps the uid for the
  agent (a timed-out command) and kills and reaps whatever the uid left
  when the agent exits.

What it costs against `local` (bubblewrap) and `docker:runsc` (gVisor):
the sandbox shares the container's kernel surface minus the filter, its
network namespace (unreachable without sockets), its PID namespace (other
processes are invisible without /proc, but pids are global), and its
filesystem's space (no disk quota: only RLIMIT_FSIZE per file). A kernel
bug reachable through the allowed syscalls is a way out, as with runc.
Candidates in the code verifier run in `process` isolation (no nested
namespaces). See docs/serving.md.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import signal
import socket
import stat
import subprocess
import threading
import time
import uuid
from pathlib import Path

from ..agent_client import AGENT_DIR, AGENT_FILES, AgentChannel, AgentSandbox, agent_config
from ..base import ETC_ALLOWED, Runtime, RuntimeUnavailable, SandboxError, SandboxInfo, SandboxSpec, refuse_egress
from ..boundary.jail_launch import kill_uid, uid_processes
from ..staging import BOUNDARY_DIR

DEFAULT_ROOT = "/var/lib/sandgym/jails"
UID_BASE = 200_000  # far above any account of the image
UID_COUNT = 100_000
READY_TIMEOUT_S = 30.0
DEVICES = {"null": (1, 3), "zero": (1, 5), "full": (1, 7), "random": (1, 8), "urandom": (1, 9)}
SHARE_KEPT = ("zoneinfo", "python3", "git-core", "misc")
LAUNCHER = BOUNDARY_DIR.resolve() / "jail_launch.py"


class JailRuntime(Runtime):
    name = "jail"
    isolation = "uid-chroot-seccomp"
    nested_namespaces = False

    def __init__(self, root: str | Path | None = None, system: tuple[str, ...] = ("usr",)):
        if os.geteuid() != 0:
            raise RuntimeUnavailable(
                "the jail runtime needs root (a container's root: it switches each sandbox to a uid of its own); "
                "run the server image as its default user, or use --runtime local"
            )
        if platform.machine() != "x86_64":
            raise RuntimeUnavailable(f"the jail runtime's seccomp filter is for x86_64, not {platform.machine()}")
        self.root = Path(root or DEFAULT_ROOT)
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o711)
        self.system = system
        self._lock = threading.Lock()
        self._live: dict[int, subprocess.Popen] = {}

    # -- uids ------------------------------------------------------------------

    def _allocate(self) -> tuple[int, Path]:
        """A uid whose jail folder this call made (mkdir is the lock, across
        processes too) and that no process holds."""
        start = int.from_bytes(os.urandom(4), "big") % UID_COUNT
        for i in range(UID_COUNT):
            uid = UID_BASE + (start + i) % UID_COUNT
            jail = self.root / str(uid)
            try:
                jail.mkdir(mode=0o755)
            except FileExistsError:
                continue
            if uid_processes(uid, set()):  # left by a server that was killed
                continue
            return uid, jail
        raise SandboxError(f"no free sandbox uid left under {self.root}")

    # -- building the root -------------------------------------------------------

    def _copy(self, source: str, target: Path, link: bool) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        args = ["cp", "-a", *(["--link"] if link else []), "--", source, str(target)]
        r = subprocess.run(args, capture_output=True, text=True)
        if r.returncode != 0 and link:  # another filesystem: a plain copy
            shutil.rmtree(target, ignore_errors=True)
            r = subprocess.run(["cp", "-a", "--", source, str(target)], capture_output=True, text=True)
        if r.returncode != 0:
            raise SandboxError(f"building a jail: copying {source} failed: {r.stderr.strip()[-500:]}")

    def _build(self, jail: Path, spec: SandboxSpec, uid: int) -> None:
        for top in self.system:
            (jail / top).mkdir()
            for entry in sorted(os.listdir(f"/{top}")):
                if entry != "share":
                    self._copy(f"/{top}/{entry}", jail / top / entry, link=True)
            for shared in SHARE_KEPT:  # docs, locales and the like stay out: fewer links per sandbox
                if os.path.exists(f"/{top}/share/{shared}"):
                    self._copy(f"/{top}/share/{shared}", jail / top / "share" / shared, link=True)
        for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            host = Path("/") / top
            if host.is_symlink():
                (jail / top).symlink_to(os.readlink(host))
            elif host.is_dir() and top not in self.system:
                self._copy(str(host), jail / top, link=True)
        etc = jail / "etc"
        etc.mkdir()
        for name in ETC_ALLOWED:
            if os.path.exists(f"/etc/{name}"):
                self._copy(f"/etc/{name}", etc / name, link=False)
        (etc / "passwd").write_text(f"root:x:0:0::/:/bin/false\nsandbox:x:{uid}:{uid}::{spec.workdir}:/bin/sh\n")
        (etc / "group").write_text(f"root:x:0:\nsandbox:x:{uid}:\n")
        (etc / "hosts").write_text("127.0.0.1 localhost\n")
        dev = jail / "dev"
        dev.mkdir()
        for name, (major, minor) in DEVICES.items():
            try:
                os.mknod(dev / name, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
            except PermissionError:
                raise RuntimeUnavailable("the jail runtime needs CAP_MKNOD (Docker grants it by default)") from None
            os.chmod(dev / name, 0o666)
        for name in AGENT_FILES:
            self._copy(str(BOUNDARY_DIR / name), jail / AGENT_DIR.lstrip("/") / name, link=False)
        self._copy(str(LAUNCHER), jail / "opt/sandgym/jail_launch.py", link=False)
        for m in spec.mounts:
            target = jail / m.target.lstrip("/")
            self._copy(m.source, target, link=m.read_only)
            if not m.read_only:
                subprocess.run(["chown", "-R", f"{uid}:{uid}", "--", str(target)], check=True)
        for private in (spec.workdir, "/tmp"):
            path = jail / private.lstrip("/")
            path.mkdir(parents=True, exist_ok=True)
            os.chown(path, uid, uid)
            os.chmod(path, 0o700)

    # -- sandboxes -----------------------------------------------------------------

    def create(self, spec: SandboxSpec | None = None) -> AgentSandbox:
        spec = spec or SandboxSpec()
        refuse_egress(spec, "jail")
        if spec.network not in ("none", "no-sockets"):
            raise RuntimeUnavailable(
                f"the jail runtime has no network of any kind; this sandbox asks for network={spec.network!r} "
                "(use the local or docker runtime)"
            )
        if spec.image != "host" and not spec.image.startswith("recipe:"):
            raise RuntimeUnavailable(f"the jail runtime runs the server image's own system, not image {spec.image!r}")
        t0 = time.perf_counter()
        uid, jail = self._allocate()
        sid = f"jail-{uid}-{uuid.uuid4().hex[:6]}"
        proc: subprocess.Popen | None = None
        err_path = self.root / f"{uid}.stderr"
        try:
            self._build(jail, spec, uid)
            host_end, child_end = socket.socketpair()
            cfg = {"jail": str(jail), "uid": uid, "gid": uid, "workdir": spec.workdir, "agent": agent_config(spec)}
            with child_end, open(err_path, "wb") as err:
                proc = subprocess.Popen(
                    ["/usr/bin/python3", "-I", "-S", str(LAUNCHER), "outer", json.dumps(cfg)],
                    stdin=child_end.fileno(),
                    stdout=child_end.fileno(),
                    stderr=err,
                    start_new_session=True,
                    env={"PATH": "/usr/bin:/bin"},
                )
            channel = AgentChannel(host_end, f"sandbox {sid}")
            try:
                ready, _ = channel.read_reply(READY_TIMEOUT_S)
            except SandboxError as e:
                raise SandboxError(f"{e}: {self._stderr(err_path)}") from None
            if not ready.get("ready"):
                raise SandboxError(f"sandbox {sid} did not start: {ready}")
        except BaseException:
            self._destroy(uid, jail, proc, err_path)
            raise
        with self._lock:
            self._live[uid] = proc

        def closer(clean: bool) -> None:
            host_end.close()
            self._destroy(uid, jail, proc, err_path, clean)

        info = SandboxInfo("jail", self.isolation, sid, time.perf_counter() - t0, dict(spec.labels))
        return AgentSandbox(channel, spec, info, closer, lambda: self._stderr(err_path))

    @staticmethod
    def _stderr(path: Path) -> str:
        try:
            return path.read_text(errors="replace")[-1500:].strip()
        except OSError:
            return ""

    def _destroy(
        self, uid: int, jail: Path, proc: subprocess.Popen | None, err_path: Path, clean: bool = False
    ) -> None:
        """End the sandbox's processes (its reaper first, then any of the uid
        still alive), then remove its root; the uid is free again after."""
        if proc is not None:
            if not clean and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)  # the reaper kills the agent, then the uid
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGTERM)  # the reaper kills the agent, then the uid
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        kill_uid(uid)
        with self._lock:
            self._live.pop(uid, None)
        shutil.rmtree(jail, ignore_errors=True)
        try:
            err_path.unlink()
        except OSError:
            pass

    def close(self) -> None:
        with self._lock:
            live = dict(self._live)
        for proc in live.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
