"""The `local` backend: Linux namespaces through bubblewrap, no daemon.

Each sandbox is one bubblewrap process tree: new user, pid, net, ipc, uts
and mount namespaces; the root filesystem of the spec's image
(runtimes/rootfs.py: the files a Docker sandbox of the same image sees),
read-only, and nothing of the host's own system; tmpfs for the workspace and /tmp;
only `lo` for a network; rlimits from the spec; the in-sandbox agent as
the one long-lived process. Run as root, the sandbox runs as an
unprivileged host user (nobody by default), so even a namespace escape
lands without privileges.
"""

from __future__ import annotations

import json
import os
import queue
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..agent_client import AGENT_DIR, AGENT_FILES, SANDBOX_PATH, AgentChannel, AgentSandbox, agent_config
from ..base import (
    WORKDIR,
    Runtime,
    RuntimeUnavailable,
    SandboxError,
    SandboxInfo,
    SandboxSpec,
    refuse_egress,
)
from ..host_processes import environs, kill_tree
from ..rootfs import rootfs
from ..staging import BOUNDARY_DIR, stage_dir, stage_files, staging_root
from ..stock import STOCK_MAX_IDLE_S, Stock, prestart_setting, waiting
from .bwrap import SANDBOX_ETC, image_root_args

SANDBOX_PYTHON = "/usr/bin/python3"
READY_TIMEOUT_S = 30.0
# Where the zygote sees the host's staging folder; forked sandboxes bind
# from it and then hide it.
STAGE_IN_ZYGOTE = "/run/sandgym-stage"
# Sandboxes made ahead per repeating spec (runtimes/stock.py), when the
# argument is not given.
PRESTART_ENV = "SANDGYM_LOCAL_PRESTART"
# Modules every forked sandbox finds already imported (random: about 1 ms
# to import, and the code verifier's judge and much candidate code use it;
# nest.enter reseeds it in every sandbox). _ast: CPython 3.11 builds its
# AST node types (about a hundred classes) on a process's first compile(),
# which every Python job does: 0.8 ms of CPU per sandbox when not shared.
# typing: about 3 ms to import in a sandbox, and type-annotated code (an
# eighth of HumanEval's prompts) imports it.
ZYGOTE_PRELOAD = ["_ast", "ctypes", "io", "random", "socket", "tarfile", "threading", "traceback", "typing", "nest"]


# How long close() waits for a zygote sandbox's processes to be gone.
CLOSE_WAIT_S = 5.0
OWNER_ENV = "SANDGYM_OWNER"  # in every bubblewrap process's environment: the pid that started it
# The agent in a bubblewrap command line (`sandgym gc` looks for it).
AGENT_ARG = f"{AGENT_DIR}/agent.py"


def marked(mark: str) -> list[int]:
    """The processes whose environment carries SANDGYM_OWNER=`mark`."""
    needle = f"{OWNER_ENV}={mark}".encode()
    return [pid for pid, env in environs() if needle in env]


class _Spawner:
    """Starts every sandbox from one long-lived thread.

    bubblewrap's --die-with-parent follows the *thread* that forked it;
    spawning from a worker thread that later exits would kill a live
    sandbox. This thread lives as long as the process.
    """

    def __init__(self) -> None:
        self._jobs: queue.Queue = queue.Queue()
        threading.Thread(target=self._run, name="sandgym-spawner", daemon=True).start()

    def _run(self) -> None:
        while True:
            args, kwargs, box = self._jobs.get()
            try:
                box.append(subprocess.Popen(*args, **kwargs))
            except BaseException as e:  # handed back to the caller
                box.append(e)
            box_event = box[0]
            box_event.set()

    def popen(self, *args, **kwargs) -> subprocess.Popen:
        done = threading.Event()
        box: list = [done]
        self._jobs.put((args, kwargs, box))
        done.wait()
        if isinstance(box[1], BaseException):
            raise box[1]
        return box[1]


_spawner: _Spawner | None = None
_spawner_lock = threading.Lock()


def _forget_spawner_after_fork() -> None:
    # A fork keeps no threads: a child starts its own spawner when it needs one.
    global _spawner, _spawner_lock
    _spawner, _spawner_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_spawner_after_fork)


def _popen(*args, **kwargs) -> subprocess.Popen:
    global _spawner
    with _spawner_lock:
        if _spawner is None:
            _spawner = _Spawner()
    return _spawner.popen(*args, **kwargs)


class _BwrapProcess:
    """A bubblewrap process tree running the agent on a socket."""

    def __init__(self, argv: list[str], describe: str):
        host_sock, child_sock = socket.socketpair()
        self.stderr = tempfile.TemporaryFile()
        try:
            # A mark (the owner's pid, then a token) in bubblewrap's own
            # environment (the sandbox itself gets --clearenv): close() finds a
            # bubblewrap child orphaned during setup, `sandgym gc` the sandboxes
            # of a process that is gone.
            self.mark = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
            self.proc = _popen(
                argv,
                stdin=child_sock,
                stdout=child_sock,
                stderr=self.stderr,
                close_fds=True,
                env={**os.environ, OWNER_ENV: self.mark},
            )
        finally:
            child_sock.close()
        self.sock = host_sock
        self.channel = AgentChannel(host_sock, describe)
        self.ready = False  # its agent said ready: bubblewrap had finished setting up

    def stderr_text(self) -> str:
        try:
            self.stderr.seek(0)
            return self.stderr.read().decode("utf-8", "replace").strip()[-2000:]
        except (OSError, ValueError):
            return ""

    def wait_ready(self, describe: str) -> None:
        try:
            ready, _ = self.channel.read_reply(READY_TIMEOUT_S)
            if not ready.get("ready"):
                raise SandboxError(f"unexpected first message {ready!r}")
            self.ready = True
        except (SandboxError, ValueError, OSError) as e:
            # OSError: the agent was killed while starting (a reset connection).
            # The bubblewrap process is killed here: one whose child died before
            # it finished setting up waits forever, and outlives its owner.
            detail = self.stderr_text()
            self.close(False)
            raise SandboxError(f"could not start {describe}: {e}{': ' + detail if detail else ''}") from e
        except BaseException:
            self.close(False)
            raise

    def close(self, clean: bool) -> None:
        self.sock.close()
        killed = False
        try:
            self.proc.wait(timeout=2.0 if clean else 0.2)
        except subprocess.TimeoutExpired:
            kill_tree(self.proc.pid)
            self.proc.wait()
            killed = True
        if not clean and (killed or not self.ready):
            # bubblewrap killed while setting up leaves its child (not yet tied
            # to it by --die-with-parent) to init, waiting forever: find it by
            # mark (reading every process's environment). One whose agent said
            # ready had set up, and one that exited by itself took its
            # sandbox's PID namespace with it: nothing to look for.
            for pid in marked(self.mark):
                kill_tree(pid)
        self.stderr.close()


@dataclass
class _Spawned:
    """A sandbox cloned by the zygote (a stocked one's agent said ready), not yet handed to anyone."""

    sid: str
    channel: AgentChannel
    sock: socket.socket
    closer: Callable[[bool], None]
    diagnose: Callable[[], str]
    ready_at: float  # time.monotonic()
    key: str = ""  # the stock's key, for stocked ones

    def fresh(self) -> bool:
        return waiting(self.ready_at, bool(self.channel.broken), self.sock)

    def expire(self) -> None:
        """Its lifetime is over: end it, from any thread."""
        self.channel.abort()
        self.closer(False)

    def discard(self) -> None:
        self.closer(False)


class LocalRuntime(Runtime):
    """Sandboxes from Linux namespaces on this machine.

    By default new sandboxes are forked from a zygote (see boundary/nest.py):
    one bubblewrap sandbox whose pristine agent forks a fresh set of
    namespaces per sandbox. `zygote=False`, or a spec whose mounts the
    zygote cannot provide, starts a bubblewrap process per sandbox.
    """

    name = "local"
    isolation = "namespaces"

    def __init__(
        self,
        sandbox_uid: int | None = None,
        sandbox_gid: int | None = None,
        zygote: bool = True,
        prestart: int | None = None,
    ):
        bwrap = shutil.which("bwrap")
        if not bwrap:
            raise RuntimeUnavailable(
                "runtime 'local' needs bubblewrap, which is not installed: "
                "run `apt-get install bubblewrap` (Debian/Ubuntu), or choose another --runtime"
            )
        self.bwrap = bwrap
        # As root, sandboxes run as an unprivileged host user.
        self.drop_to: tuple[int, int] | None = None
        if os.geteuid() == 0:
            uid = sandbox_uid if sandbox_uid is not None else int(os.environ.get("SANDGYM_SANDBOX_UID", 65534))
            gid = sandbox_gid if sandbox_gid is not None else int(os.environ.get("SANDGYM_SANDBOX_GID", uid))
            if not shutil.which("setpriv"):
                raise RuntimeUnavailable("runtime 'local' as root needs setpriv: run `apt-get install util-linux`")
            self.drop_to = (uid, gid)
        self.agent_dir = stage_dir(BOUNDARY_DIR, AGENT_FILES)
        self.etc_dir = stage_files("etc", SANDBOX_ETC)
        self.use_zygote = zygote
        self.prestart = prestart_setting(prestart, PRESTART_ENV)
        self._stock: Stock[_Spawned] | None = None
        self._stock_pid = -1
        # One zygote per image root (runtimes/rootfs.py) sandboxes were asked on.
        self._zygotes: dict[Path, _BwrapProcess] = {}
        self._zygote_lock = threading.Lock()
        self._closed = False  # close() was called: warm_up() starts nothing
        self._pid = os.getpid()

    # -- bubblewrap ----------------------------------------------------------

    def _bwrap_argv(self, spec: SandboxSpec, agent_cfg: dict, zygote: bool, root: Path) -> list[str]:
        mb = 1024 * 1024
        a = image_root_args(self.bwrap, self.drop_to, root, self.etc_dir)
        a += ["--proc", "/proc", "--dev", "/dev"]
        if zygote:
            # Mount points only: each forked sandbox mounts its own tmpfs here.
            a += ["--ro-bind", str(staging_root()), STAGE_IN_ZYGOTE]
        else:
            a += [
                "--size",
                str(spec.disk_mb * mb),
                "--tmpfs",
                "/tmp",
                "--size",
                str(spec.disk_mb * mb),
                "--tmpfs",
                spec.workdir,
            ]
            for m in spec.mounts:
                if not os.path.exists(m.source):
                    raise SandboxError(f"mount source does not exist: {m.source}")
                a += ["--ro-bind" if m.read_only else "--bind", m.source, m.target]
        a += ["--ro-bind", str(self.agent_dir), AGENT_DIR]
        # Nothing else of the sandbox's root is writable.
        a += [
            "--remount-ro",
            "/",
            "--chdir",
            WORKDIR if zygote else spec.workdir,
            "--clearenv",
            "--setenv",
            "PATH",
            SANDBOX_PATH,
        ]
        a += ["--", SANDBOX_PYTHON, "-I", "-S", f"{AGENT_DIR}/agent.py", json.dumps(agent_cfg)]
        return a

    # -- zygote ----------------------------------------------------------------

    def _zygote_binds(self, spec: SandboxSpec) -> list[list[str]] | None:
        """Bind list for a zygote child, or None if the zygote cannot serve `spec`."""
        if spec.workdir != WORKDIR:
            return None
        root = staging_root().resolve()
        binds = [[f"{STAGE_IN_ZYGOTE}/{self.agent_dir.name}", AGENT_DIR]]
        for m in spec.mounts:
            src = Path(m.source).resolve()
            if not m.read_only or src.parent != root or not m.target.startswith("/opt/"):
                return None
            binds.append([f"{STAGE_IN_ZYGOTE}/{src.name}", m.target])
        return binds

    def _get_zygote(self, root: Path | None = None) -> _BwrapProcess:
        """The zygote of the image root `root` (default: the default image's)."""
        root = root or rootfs(SandboxSpec().image)
        if self._pid != os.getpid():
            # A forked child shares the parent's channel to its zygote; two
            # processes on one channel would garble it. The child starts its own.
            self._pid, self._zygotes, self._zygote_lock = os.getpid(), {}, threading.Lock()
        with self._zygote_lock:
            return self._live_zygote(root)

    def _live_zygote(self, root: Path) -> _BwrapProcess:
        """The zygote of `root`, started (again) if it is not running; `_zygote_lock` held."""
        z = self._zygotes.get(root)
        if z is not None and z.proc.poll() is None and not z.channel.broken:
            return z
        if z is not None:
            z.close(False)
        cfg = {"role": "zygote", "preload": ZYGOTE_PRELOAD}
        z = _BwrapProcess(self._bwrap_argv(SandboxSpec(), cfg, zygote=True, root=root), "the local zygote")
        z.wait_ready("the local runtime's zygote sandbox")
        self._zygotes[root] = z
        return z

    def warm_up(self) -> None:
        """Start the default image's zygote now (see Runtime.warm_up): about
        0.1 s of another process's start-up (bubblewrap, the agent's
        preloads) that the first sandbox would otherwise wait for."""
        if not self.use_zygote or self._pid != os.getpid():
            return
        try:
            root = rootfs(SandboxSpec().image)
        except RuntimeUnavailable:  # create() reports it, naming the command that unpacks it
            return
        with self._zygote_lock:
            if self._closed:
                return
            try:
                self._live_zygote(root)
            except (SandboxError, OSError):  # create() starts it again, and reports what fails
                pass

    def _spawn(self, spec: SandboxSpec, binds: list[list[str]], sid: str, stocked: bool = False) -> _Spawned:
        """A new sandbox cloned by the zygote. A stocked one is ready when
        returned, and lives STOCK_MAX_IDLE_S longer (the hand-out enforces
        the spec's lifetime); for any other, the first request goes out
        while it sets up and reads its `ready` first (a failed start fails
        that request)."""
        z = self._get_zygote(rootfs(spec.image))
        config = agent_config(spec)
        nest = {
            "workdir": spec.workdir,
            "disk_bytes": spec.disk_mb * 1024 * 1024,
            "binds": binds,
            "hide": [str(Path(STAGE_IN_ZYGOTE).parent)],
            # A sandbox whose agent's filter refuses every socket has no use
            # for a network namespace of its own: it stays in the zygote's.
            "own_network": config["sockets"],
        }
        # Modules the zygote imports once for every sandbox, from the folders
        # it binds (by target: each bind is one of the spec's mounts).
        wanted = {m.target: list(m.preload) for m in spec.mounts if m.preload}
        preload = [[source, wanted[target]] for source, target in binds if target in wanted]
        if stocked:
            config["lifetime_s"] = spec.wall_timeout_s + STOCK_MAX_IDLE_S
        try:
            reply, _, fds = z.channel.request_fds(
                {"op": "spawn", "nest": nest, "agent": config, "preload": preload}, timeout=READY_TIMEOUT_S
            )
        except SandboxError as e:
            raise SandboxError(f"could not start sandbox {sid}: {e}: {z.stderr_text()[-800:]}") from e
        if len(fds) != 2:
            for fd in fds:
                os.close(fd)
            raise SandboxError(f"could not start sandbox {sid}: the zygote passed no channel and pidfd")
        sock = socket.socket(fileno=fds[0])
        pidfd = fds[1]  # the sandbox's init: readable once it has exited
        channel = AgentChannel(sock, f"sandbox {sid}")
        pid = reply["pid"]
        closed = threading.Lock()

        def kill() -> None:
            try:
                z.channel.request({"op": "kill", "pid": pid}, timeout=5.0)
            except SandboxError:
                pass

        def closer(clean: bool) -> None:
            if not closed.acquire(blocking=False):
                return  # (the lifetime's timer and the owner may both close it)
            if not clean:
                kill()
            sock.close()
            # close() returns once nothing of the sandbox is left: its init
            # exits only after the kernel has killed the rest, and is reaped
            # by bubblewrap's init a moment later (signal 0 fails from then on).
            try:
                readable, _, _ = select.select([pidfd], [], [], CLOSE_WAIT_S)
                if not readable and clean:
                    # Asked to shut down and still there (stopped, or stuck
                    # before `ready`): the zygote ends it.
                    kill()
                    select.select([pidfd], [], [], CLOSE_WAIT_S)
                deadline = time.monotonic() + CLOSE_WAIT_S
                while time.monotonic() < deadline:
                    try:
                        signal.pidfd_send_signal(pidfd, 0)
                    except ProcessLookupError:
                        break
                    time.sleep(0.0002)
            finally:
                os.close(pidfd)

        if not stocked:
            channel.expect_ready(f"could not start sandbox {sid}", READY_TIMEOUT_S)
            return _Spawned(sid, channel, sock, closer, lambda: z.stderr_text()[-800:], time.monotonic())
        try:
            channel.read_reply(READY_TIMEOUT_S)
        except SandboxError as e:
            closer(False)
            raise SandboxError(f"could not start sandbox {sid}: {e}: {z.stderr_text()[-800:]}") from e
        return _Spawned(sid, channel, sock, closer, lambda: z.stderr_text()[-800:], time.monotonic())

    def _hand_out(self, box: _Spawned, spec: SandboxSpec, create_s: float, stocked: bool) -> AgentSandbox:
        """The sandbox object over a spawned sandbox (its one and only user)."""
        info = SandboxInfo(
            backend="local", isolation="namespaces", id=box.sid, create_s=create_s, labels=dict(spec.labels)
        )
        # The agent is PID 1 of the sandbox: its exit ends everything in it.
        if not stocked:
            return AgentSandbox(
                box.channel, spec, info, box.closer, box.diagnose, wait_on_close=False, end_with_last_job=True
            )
        # Its agent lives STOCK_MAX_IDLE_S longer than the spec says: the
        # host ends it at the spec's lifetime from now.
        stock, timer = self._stock, threading.Timer(spec.wall_timeout_s, box.expire)
        timer.daemon = True
        timer.start()

        def closer(clean: bool) -> None:
            timer.cancel()
            box.closer(clean)
            if stock is not None:
                stock.returned(box.key)

        return AgentSandbox(box.channel, spec, info, closer, box.diagnose, wait_on_close=False, end_with_last_job=True)

    # -- public ----------------------------------------------------------------

    def create(self, spec: SandboxSpec | None = None) -> AgentSandbox:
        spec = spec or SandboxSpec()
        refuse_egress(spec, "local")
        if spec.isolation not in (None, "namespaces"):
            raise SandboxError(
                f"runtime 'local' isolates with namespaces, not {spec.isolation!r}: "
                "use --runtime docker or docker:runsc for container isolation"
            )
        sid = f"sg-local-{uuid.uuid4().hex[:10]}"
        start = time.perf_counter()
        root = rootfs(spec.image)  # (raises, naming the command that unpacks it)
        binds = self._zygote_binds(spec) if self.use_zygote else None
        if binds is not None:
            stock = self._local_stock()
            ready = stock.take(spec) if stock is not None else None
            if ready is not None:
                return self._hand_out(ready, spec, time.perf_counter() - start, stocked=True)
            return self._hand_out(self._spawn(spec, binds, sid), spec, time.perf_counter() - start, stocked=False)
        bw = _BwrapProcess(self._bwrap_argv(spec, agent_config(spec), zygote=False, root=root), f"sandbox {sid}")
        bw.wait_ready(f"sandbox {sid}")
        info = SandboxInfo(backend="local", isolation="namespaces", id=sid, create_s=0.0, labels=dict(spec.labels))
        box = AgentSandbox(bw.channel, spec, info, bw.close, bw.stderr_text)
        box.info.create_s = time.perf_counter() - start
        return box

    def stocked(self) -> int:
        """Sandboxes made ahead and not handed out yet."""
        return self._stock.count() if self._stock is not None else 0

    def stock_hits(self) -> int:
        """Sandboxes handed out from the stock so far."""
        return self._stock.hits if self._stock is not None else 0

    def _local_stock(self) -> Stock[_Spawned] | None:
        if not self.prestart:
            return None
        if self._stock_pid == os.getpid():
            return self._stock
        self._get_zygote()  # (in a forked child, this also gives it locks of its own)
        with self._zygote_lock:
            if self._stock_pid != os.getpid():
                # A forked child must not hand out its parent's sandboxes (their
                # channels are the parent's too): it makes a stock of its own.
                self._stock_pid = os.getpid()
                self._stock = Stock(self._spawn_ahead, _Spawned.discard, self.prestart, "local", count_in_use=False)
            return self._stock

    def _spawn_ahead(self, spec: SandboxSpec, variant: str) -> _Spawned:
        binds = self._zygote_binds(spec)
        assert binds is not None  # only such specs are stocked
        return self._spawn(spec, binds, f"sg-local-{uuid.uuid4().hex[:10]}", stocked=True)

    def close(self) -> None:
        if self._stock is not None and self._stock_pid == os.getpid():
            self._stock.close()
        with self._zygote_lock:
            self._closed = True
            for z in self._zygotes.values():
                z.close(False)
            self._zygotes = {}
