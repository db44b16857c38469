"""A warm pool: sandboxes created ahead of need, reused only after a verified reset.

`acquire()` hands out an idle sandbox (a hit) or creates one on the spot (a
miss); a background thread keeps `size` idle ones ready, creating at most
`max_creating` at a time. `release(sb, reuse=True)` resets the sandbox
(every process but the agent killed, workspace, /tmp and /dev/shm emptied,
every SysV shared memory segment, message queue and semaphore set removed)
and puts it back only if a check afterwards finds it clean (those empty, no
IPC object left, and /dev holding exactly what a fresh sandbox's does);
anything else is destroyed and replaced. POSIX message queues cannot
outlive a lease: the agent refuses mq_open in every sandbox. The
environment is per command: nothing of one exec's variables reaches the
next. Works with every backend.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import deque
from collections.abc import Callable

from .base import Runtime, Sandbox, SandboxError, SandboxSpec

# Leaves only the agent (and its ancestors) alive, the writable places empty
# and the IPC namespace bare; prints what is left so the host can verify:
# "<entries left> <IPC objects left> <the /dev listing>".
RESET_SCRIPT = r"""
import ctypes, os, shutil, signal, sys, time
keep = {os.getpid()}
pid = os.getppid()
while pid > 0 and pid not in keep:
    keep.add(pid)
    try:
        pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
    except Exception:
        break
for _ in range(100):
    others = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) not in keep]
    alive = []
    for p in others:
        try:
            if open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":
                alive.append(p)
                os.kill(p, signal.SIGKILL)
        except Exception:
            pass
    if not alive:
        break
    time.sleep(0.01)
for root in sys.argv[1:]:
    for name in os.listdir(root):
        path = os.path.join(root, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.unlink(path)
            except OSError:
                pass
left = [n for root in sys.argv[1:] for n in os.listdir(root)]

# SysV IPC outlives every process in the sandbox's IPC namespace. Ids come
# from /proc/sysvipc; gVisor has none, but hands ids out upwards, so a new
# object's id bounds every live one: those below it are tried one by one
# (IPC_STAT; gVisor's *_INFO counts include removed segments).
libc = ctypes.CDLL(None, use_errno=True)
buf = ctypes.create_string_buffer(512)
IPC_PRIVATE, IPC_RMID, IPC_STAT, IPC_CREAT, MAX_PROBE = 0, 0, 2, 0o1000, 1 << 16
KINDS = {  # kind: (new(), stat(id), rmid(id))
    "shm": (
        lambda: libc.shmget(IPC_PRIVATE, 1, IPC_CREAT | 0o600),
        lambda i: libc.shmctl(i, IPC_STAT, buf),
        lambda i: libc.shmctl(i, IPC_RMID, None),
    ),
    "msg": (
        lambda: libc.msgget(IPC_PRIVATE, IPC_CREAT | 0o600),
        lambda i: libc.msgctl(i, IPC_STAT, buf),
        lambda i: libc.msgctl(i, IPC_RMID, None),
    ),
    "sem": (
        lambda: libc.semget(IPC_PRIVATE, 1, IPC_CREAT | 0o600),
        lambda i: libc.semctl(i, 0, IPC_STAT, buf),
        lambda i: libc.semctl(i, 0, IPC_RMID),
    ),
}

def live_ids(kind):  # the ids of the live objects of a kind; None: cannot be listed
    new, stat, rmid = KINDS[kind]
    try:
        return [int(line.split()[1]) for line in open(f"/proc/sysvipc/{kind}").read().splitlines()[1:]]
    except OSError:
        pass
    bound = new()
    if bound < 0:
        return None
    rmid(bound)
    if bound > MAX_PROBE:
        return None
    return [i for i in range(bound) if stat(i) == 0]

ipc_left = 0
for kind in KINDS:
    for i in live_ids(kind) or ():
        KINDS[kind][2](i)
    after = live_ids(kind)
    ipc_left += 1 if after is None else len(after)  # not listable: not verifiably clean

# POSIX message queues are refused in every sandbox (the agent's seccomp
# filter); where the mqueue filesystem is mounted, check that it is empty.
if os.path.isdir("/dev/mqueue"):
    for name in os.listdir("/dev/mqueue"):
        try:
            os.unlink(os.path.join("/dev/mqueue", name))
        except OSError:
            pass
    ipc_left += len(os.listdir("/dev/mqueue"))
print(len(left), ipc_left, *sorted(os.listdir("/dev")))
"""
# What a fresh sandbox's /dev holds (the sandbox may write there: /dev is
# a tmpfs of its own, /dev/shm too).
DEV_LISTING = "import os; print(*sorted(os.listdir('/dev')))"


# Observers of every pool in the process (plain callbacks: the core turns
# them into metrics). Each gets (event, value): "hit" (seconds to acquire),
# "miss" (seconds to create on the spot), "replenished" (seconds to create
# ahead), "reused", "destroyed", "create_failure" (value 1), "leaked" (how
# many). Called with the pool's lock held: a listener must be quick and must
# not call back into the pool.
_listeners: list[Callable[[str, float], None]] = []
_live: weakref.WeakSet[SandboxPool] = weakref.WeakSet()


def add_listener(fn: Callable[[str, float], None]) -> None:
    _listeners.append(fn)


def remove_listener(fn: Callable[[str, float], None]) -> None:
    if fn in _listeners:
        _listeners.remove(fn)


def live_pools() -> list[SandboxPool]:
    """The pools of this process that are not closed."""
    return [p for p in list(_live) if not p._closed]


def _emit(event: str, value: float = 1.0) -> None:
    for fn in list(_listeners):
        try:
            fn(event, value)
        except Exception:  # an observer must never break a pool
            pass


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]


class SandboxPool:
    def __init__(self, runtime: Runtime, spec: SandboxSpec | None = None, size: int = 4, max_creating: int = 2):
        if size < 0 or max_creating < 1:
            raise ValueError("size must be >= 0 and max_creating >= 1")
        self.runtime = runtime
        self.spec = spec or SandboxSpec()
        self.size = size
        self.max_creating = max_creating
        self._idle: deque[Sandbox] = deque()
        self._lock = threading.Condition()
        self._creating = 0
        self._closed = False
        self.in_use = 0
        self.hits = self.misses = self.reused = self.destroyed = self.create_failures = 0
        self.leaked = 0  # handed out and never returned when the pool closed
        self.create_s: list[float] = []
        self.acquire_s: list[float] = []
        self._fresh_dev: list[bytes] | None = None  # /dev of a fresh sandbox, read once
        # A sandbox ends at its spec's lifetime: one past half of it is not
        # handed out again (an episode must not lose it midway).
        self._born: dict[int, float] = {}
        self.max_age_s = self.spec.wall_timeout_s / 2
        self._threads = [
            threading.Thread(target=self._fill, name="sandgym-pool", daemon=True) for _ in range(max_creating)
        ]
        for t in self._threads:
            t.start()
        _live.add(self)

    # -- background replenishment ------------------------------------------------

    def _fill(self) -> None:
        while True:
            with self._lock:
                while not self._closed and len(self._idle) + self._creating >= self.size:
                    self._lock.wait(0.5)
                if self._closed:
                    return
                self._creating += 1
            try:
                sb = self.runtime.create(self.spec)
            except SandboxError:
                with self._lock:
                    self._creating -= 1
                    self.create_failures += 1
                    _emit("create_failure")
                time.sleep(0.5)  # back off; a broken backend must not spin
                continue
            with self._lock:
                self._creating -= 1
                self.create_s.append(sb.info.create_s)
                _emit("replenished", sb.info.create_s)
                self._born[id(sb)] = time.monotonic()
                if self._closed:
                    sb.close()
                    return
                self._idle.append(sb)
                self._lock.notify_all()

    # -- public -------------------------------------------------------------------

    def acquire(self) -> Sandbox:
        t0 = time.perf_counter()
        with self._lock:
            if self._closed:
                raise SandboxError("the pool is closed")
            while self._idle:
                sb = self._idle.popleft()
                young = time.monotonic() - self._born.get(id(sb), 0.0) < self.max_age_s
                if sb.alive and young:
                    self.hits += 1
                    _emit("hit", time.perf_counter() - t0)
                    self.in_use += 1
                    self._lock.notify_all()
                    self.acquire_s.append(time.perf_counter() - t0)
                    return sb
                self.destroyed += 1
                _emit("destroyed")
                self._born.pop(id(sb), None)
                sb.close()
            self.misses += 1
        sb = self.runtime.create(self.spec)
        with self._lock:
            self._born[id(sb)] = time.monotonic()
            self.create_s.append(sb.info.create_s)
            _emit("miss", sb.info.create_s)
            self.in_use += 1
            self.acquire_s.append(time.perf_counter() - t0)
        return sb

    def reset(self, sb: Sandbox) -> bool:
        """Kill every process but the agent, empty the workspace, /tmp and
        /dev/shm, remove every SysV IPC object, and check that it worked."""
        try:
            if self._fresh_dev is None:
                with self.runtime.create(self.spec) as fresh:
                    self._fresh_dev = fresh.exec(["python3", "-I", "-S", "-c", DEV_LISTING], timeout=30).stdout.split()
            r = sb.exec(["python3", "-I", "-S", "-c", RESET_SCRIPT, self.spec.workdir, "/tmp", "/dev/shm"], timeout=30)
        except SandboxError:
            return False
        left, ipc_left, *dev = r.stdout.split() or [b"?", b"?"]
        return r.exit_code == 0 and left == b"0" and ipc_left == b"0" and dev == self._fresh_dev

    def release(self, sb: Sandbox, reuse: bool = False) -> None:
        """Return a sandbox. With reuse, a verified reset puts it back in the
        pool; otherwise (or if the reset fails) it is destroyed."""
        ok = reuse and sb.alive and self.reset(sb)
        with self._lock:
            self.in_use -= 1
            if ok and not self._closed:
                # A clean sandbox back in the pool saves a create, even above size.
                self.reused += 1
                _emit("reused")
                self._idle.appendleft(sb)  # handed out next
                self._lock.notify_all()
                return
            self.destroyed += 1
            _emit("destroyed")
            self._born.pop(id(sb), None)
            self._lock.notify_all()
        sb.close()

    def metrics(self) -> dict:
        with self._lock:
            total = self.hits + self.misses
            ms = lambda v: None if v is None else round(1000 * v, 2)  # noqa: E731
            return {
                "idle": len(self._idle),
                "in_use": self.in_use,
                "creating": self._creating,
                "hits": self.hits,
                "misses": self.misses,
                "hit_rate": self.hits / total if total else None,
                "reused": self.reused,
                "destroyed": self.destroyed,
                "create_failures": self.create_failures,
                "leaked": self.leaked,
                **{f"create_ms_p{q}": ms(_percentile(self.create_s, q)) for q in (50, 95, 99)},
                **{f"acquire_ms_p{q}": ms(_percentile(self.acquire_s, q)) for q in (50, 95, 99)},
            }

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self.leaked = self.in_use
            if self.in_use:
                _emit("leaked", self.in_use)
            idle, self._idle = list(self._idle), deque()
            self._lock.notify_all()
        for t in self._threads:
            t.join(timeout=30)
        for sb in idle:
            sb.close()

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
