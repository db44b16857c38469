"""sandgym's in-sandbox agent: runs commands and file operations for the host.

Standard library only; mounted read-only into every sandbox and started as
`python3 -I -S agent.py CONFIG_JSON`. It speaks framed messages on fd 0
(requests) and fd 1 (replies), one socket in the local runtime: each frame
is `>II` (header length, body length), a JSON header, then a raw body. One
request, one reply, strictly in turn. Roles: `sandbox` runs commands and
moves files; `zygote` (local runtime) only forks fresh sandboxes (nest.py).

The agent is not a trust boundary (the sandbox around it is): it applies
the sandbox's rlimits, keeps commands' output apart from the protocol
stream, kills whole process trees on timeout, and exits when the host's
end of the stream closes, so a sandbox dies with the process that made it.
Commands run as its uid, so it keeps out of their reach what it can: it is
non-dumpable (no /proc/PID/mem or /proc/PID/fd for them), wipes a job's
stdin and output once handled, and refuses POSIX message queues (state no
pooled sandbox's reset could find on every backend).
"""

import errno
import io
import json
import os
import resource
import select
import signal
import struct
import subprocess
import sys
import time

FRAME = struct.Struct(">II")
MAX_HEADER = 1 << 20


# ---- framing (the host imports these too) ---------------------------------


def encode_frame(header, body=b""):
    raw = json.dumps(header, separators=(",", ":")).encode()
    return FRAME.pack(len(raw), len(body)) + raw + body


TRANSIENT = (errno.EAGAIN, errno.EINTR, errno.ENOMEM)


def _hung_up(fd):
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return any(ev & (select.POLLHUP | select.POLLERR | select.POLLNVAL) for _, ev in poller.poll(0))


def _read_exact(fd, n):
    """n bytes in a new bytearray, or None at the end of the stream.

    Read in place (readv into the one buffer): a body may be a secret (a
    verifier's nonce, hidden tests), and a buffer the agent owns can be
    wiped after use, where chunks joined into bytes would leave copies in
    freed memory. An empty read counts as the end only when poll agrees (or
    keeps returning nothing): under gVisor a signal delivered to the agent
    can make a read of its stdin return 0 bytes while the stream is open.
    Transient errors (a fork bomb next door: EAGAIN, ENOMEM) are retried.
    """
    buf = bytearray(n)
    view = memoryview(buf)
    got = empty = errors = 0
    ended = False
    try:
        while got < n:
            try:
                k = os.readv(fd, [view[got:]])
            except OSError as e:
                if e.errno in TRANSIENT and errors < 500:
                    errors += 1
                    time.sleep(0.01)
                    continue
                raise
            if not k:
                if _hung_up(fd) or empty >= 50:
                    ended = True
                    break
                empty += 1
                time.sleep(0.01)
                continue
            got += k
    except BaseException:
        ended = True
        raise
    finally:
        view.release()
        if ended:
            wipe(buf)  # a partial secret is still a secret
    return None if ended else buf


_ZEROS = bytes(1 << 16)


def wipe(buf):
    """Overwrite a bytearray with zeros in place (no reallocation, no copy)."""
    view = memoryview(buf)
    try:
        for i in range(0, len(view), len(_ZEROS)):
            part = view[i : i + len(_ZEROS)]
            part[:] = _ZEROS[: len(part)]
    finally:
        view.release()


def read_header(fd):
    """(header, body length), or None at end of stream. The body stays unread."""
    head = _read_exact(fd, FRAME.size)
    if head is None:
        return None
    hlen, blen = FRAME.unpack(head)
    if hlen > MAX_HEADER:
        raise ValueError("frame header too large")
    header = _read_exact(fd, hlen)
    if header is None:
        return None
    return json.loads(header), blen


def read_frame_body(fd, n):
    body = _read_exact(fd, n) if n else bytearray()
    if body is None:
        raise EOFError("stream ended inside a frame body")
    return body


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def send_frame(fd, header, parts):
    """What encode_frame(header, b"".join(parts)) gives, written part by
    part: a body is never joined into a copy the agent cannot wipe."""
    raw = json.dumps(header, separators=(",", ":")).encode()
    _write_all(fd, FRAME.pack(len(raw), sum(len(p) for p in parts)) + raw)
    for part in parts:
        if part:
            _write_all(fd, part)


# ---- limits and process control --------------------------------------------

PR_SET_DUMPABLE = 4
_LIBC: list = []


def _libc():
    """libc through ctypes, loaded once (in the zygote, for every sandbox it makes)."""
    if not _LIBC:
        import ctypes

        _LIBC.append(ctypes.CDLL(None, use_errno=True))
    return _LIBC[0]


def make_undumpable():
    """No other process of the agent's uid (every command runs as it) may
    read the agent's memory (/proc/PID/mem, environ) or open its
    descriptors (/proc/PID/fd: the pipes to and from every command).

    run_python's forks inherit the flag. An exec'd command is dumpable
    again (execve resets the flag for any readable binary), so a secret
    meant for one is readable through that command's own /proc entries
    until it protects itself: send secrets to run_python jobs.
    """
    import ctypes

    if _libc().prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
AUDIT_ARCH_X86_64, AUDIT_ARCH_AARCH64 = 0xC000003E, 0xC00000B7
# Syscall numbers per architecture (seccomp's AUDIT_ARCH_*). x32 programs use
# x86-64's numbers with bit 30 set: the filter clears that bit first.
SYSCALL_NUMBERS = {
    AUDIT_ARCH_X86_64: {"mq_open": 240, "socket": 41, "socketpair": 53, "io_uring_setup": 425},
    AUDIT_ARCH_AARCH64: {"mq_open": 180, "socket": 198, "socketpair": 199, "io_uring_setup": 425},
}
X32_BIT = 0x40000000
# What every sandbox's filter refuses, and what a sandbox without sockets
# (network "no-sockets") refuses besides: io_uring, since its requests
# create sockets where no filter sees them.
REFUSED = {"mq_open": errno.ENOSYS}
REFUSED_WITHOUT_SOCKETS = {"socket": errno.EACCES, "socketpair": errno.EACCES, "io_uring_setup": errno.ENOSYS}


def _seccomp_filter(refused):
    """A seccomp program (a ctypes sock_fprog): each syscall named in
    `refused` fails with its errno on x86-64 (x32 included) and aarch64;
    every syscall of any other architecture (32-bit ones, through int 0x80
    on x86-64) fails with ENOSYS: a filter by number cannot hold them, as
    their numbers differ (i386's mq_open is 277, and it reaches sockets
    through socketcall too)."""
    import ctypes

    def op(code, k, jt=0, jf=0):
        return struct.pack("=HBBI", code, jt, jf, k)

    ld_abs, jeq, and_k, ret = 0x20, 0x15, 0x54, 0x06
    allow = 0x7FFF0000

    def fail(code):
        return op(ret, 0x00050000 | code)

    def checks(arch):
        out = []
        for name, code in refused.items():
            out += [op(jeq, SYSCALL_NUMBERS[arch][name], 0, 1), fail(code)]  # that one fails, else the next test
        return out + [op(ret, allow)]

    x86 = [op(ld_abs, 0), op(and_k, ~X32_BIT & 0xFFFFFFFF)] + checks(AUDIT_ARCH_X86_64)
    arm = [op(ld_abs, 0)] + checks(AUDIT_ARCH_AARCH64)
    other = [fail(errno.ENOSYS)]
    prog = b"".join(
        [
            op(ld_abs, 4),  # seccomp_data.arch
            op(jeq, AUDIT_ARCH_X86_64, 0, len(x86)),  # x86-64 -> next, else past its block
            *x86,
            op(jeq, AUDIT_ARCH_AARCH64, 0, len(arm)),
            *arm,
            *other,
        ]
    )

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]

    return SockFprog(len(prog) // 8, prog)


# The two filters, built once in the zygote: {sockets allowed: program}.
_FILTERS: dict = {}


def _filter(sockets):
    if sockets not in _FILTERS:
        _FILTERS[sockets] = _seccomp_filter(REFUSED if sockets else {**REFUSED, **REFUSED_WITHOUT_SOCKETS})
    return _FILTERS[sockets]


def prepare():
    """Build once, in the zygote, what every sandbox's agent needs at start."""
    _libc()
    _filter(True)
    _filter(False)


def install_seccomp(sockets):
    """The agent's syscall filter, for it and everything it starts.

    Always: mq_open fails with ENOSYS, and so does every 32-bit syscall
    (which nothing in a sandbox makes). A POSIX message queue outlives its
    maker in the sandbox's IPC namespace, so a pooled sandbox would carry
    it to the next lease; gVisor (this release) neither mounts the mqueue
    filesystem that lists them nor enforces RLIMIT_MSGQUEUE, and no local
    sandbox mounts it, so no reset could find or forbid them there.
    Refused on every backend alike. (SysV IPC is removed by the pool's
    reset.)

    Without `sockets` (the spec's network "no-sockets"): no socket can be
    made at all (socket and socketpair fail with EACCES, io_uring with
    ENOSYS). Such a sandbox has no use for a network namespace of its own,
    so the local runtime makes it none (for the kernel, the costliest part
    of a new sandbox).
    """
    import ctypes

    libc = _libc()
    fprog = _filter(sockets)
    # Required for an unprivileged filter (and set already where the backend does).
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "seccomp filter refused")


LIMITS = {
    "memory_bytes": resource.RLIMIT_AS,
    "pids": resource.RLIMIT_NPROC,
    "file_size_bytes": resource.RLIMIT_FSIZE,
    "open_files": resource.RLIMIT_NOFILE,
}


def apply_limits(limits):
    # Set on the agent itself so that every command inherits them; the
    # agent is small and never near any of them.
    for key, which in LIMITS.items():
        if limits.get(key):
            value = int(limits[key])
            resource.setrlimit(which, (value, value))


def _stat(pid):
    """(state, parent pid) of a process, from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return fields[0], int(fields[1])


def _ancestors():
    keep = {os.getpid()}
    pid = os.getppid()
    while pid > 0 and pid not in keep:
        keep.add(pid)
        try:
            pid = _stat(pid)[1]
        except (OSError, ValueError, IndexError):
            break
    return keep


def _live_others(keep):
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) not in keep:
            try:
                if _stat(name)[0] != "Z":
                    pids.append(int(name))
            except (OSError, ValueError, IndexError):
                pass  # gone meanwhile
    return pids


def kill_all_others():
    """SIGKILL every process in the sandbox but the agent and its ancestors.

    A timed-out command may have left its process group (setsid, double
    fork); inside the sandbox's own PID namespace everything else is
    fair game, so sweep until nothing else is alive. Zombies are left for
    whoever waits on them.
    """
    keep = _ancestors()
    for _ in range(500):
        others = _live_others(keep)
        if not others:
            return
        for pid in others:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.001)


def _reap_children():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


# ---- operations -------------------------------------------------------------


class HostGone(Exception):
    """The host closed its end: the sandbox must end."""


class Child:
    """A started command: its pid and the host ends of its pipes."""

    def __init__(self, pid, stdin_fd, stdout_fd, stderr_fd):
        self.pid = pid
        self.stdin_fd, self.stdout_fd, self.stderr_fd = stdin_fd, stdout_fd, stderr_fd
        self.status = None

    def poll(self):
        if self.status is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = os.waitstatus_to_exitcode(status)
        return self.status

    def wait(self):
        if self.status is None:
            self.status = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
        return self.status


def _spawn_process(argv, cwd, env, with_stdin):
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        close_fds=True,
        start_new_session=True,
        stdin=subprocess.PIPE if with_stdin else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    # Keep the raw descriptors; the Popen object is dropped unread.
    fds = [os.dup(f.fileno()) if f else None for f in (proc.stdin, proc.stdout, proc.stderr)]
    for f in (proc.stdin, proc.stdout, proc.stderr):
        if f:
            f.close()
    proc.returncode = 0  # we wait for it ourselves; keep Popen.__del__ quiet
    return Child(proc.pid, *fds)


def _fork(child_main):
    """Fork; the child runs child_main() and exits with what it returns
    (1 after printing an exception). The parent gets the child's pid."""
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        code = child_main()
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        os._exit(code & 0xFF if isinstance(code, int) else 1)


def _exec_script(argv, cwd, env):
    """Run the script argv[0] in this interpreter, as `python3 script` would
    (without runpy's import machinery); its exit code."""
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    sys.argv = list(argv)
    with open(argv[0], "rb") as f:
        source = f.read()
    script = {"__name__": "__main__", "__file__": argv[0], "__builtins__": __builtins__}
    try:
        exec(compile(source, argv[0], "exec"), script)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
    return 0


def _spawn_python(argv, cwd, env, with_stdin):
    """Run a Python script in a fork of this warm interpreter.

    Forked before the request's body is read, so the child holds nothing
    the host sends with it (a verifier's hidden tests arrive that way).
    """
    r_in, w_in = os.pipe() if with_stdin else (os.open(os.devnull, os.O_RDONLY), None)
    r_out, w_out = os.pipe()
    r_err, w_err = os.pipe()

    def run_script():
        os.setsid()
        os.dup2(r_in, 0)
        os.dup2(w_out, 1)
        os.dup2(w_err, 2)
        os.closerange(3, 1 << 16)
        signal.alarm(0)
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=True)
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), write_through=True)
        return _exec_script(argv, cwd, env)

    try:
        pid = _fork(run_script)
    except OSError:
        # EAGAIN under a fork bomb: report it for this command, leak nothing.
        for fd in (r_in, w_in, r_out, w_out, r_err, w_err):
            if fd is not None:
                os.close(fd)
        raise
    for fd in (r_in, w_out, w_err):
        os.close(fd)
    return Child(pid, w_in, r_out, r_err)


def _job_settings(req, cfg):
    """(output cap, environment, working folder) of an exec request."""
    env = dict(cfg.get("env", {}))
    env.update(req.get("env") or {})
    return int(req.get("max_output") or (1 << 20)), env, req.get("cwd") or cfg.get("workdir") or "/"


# Set once a job ran in the agent's own process: the sandbox is spent.
_spent = False


class _Sink(io.RawIOBase):
    """A job's stdout or stderr in place: the first `cap` bytes, in memory."""

    def __init__(self, cap):
        super().__init__()
        self.buf = bytearray()
        self.cap = cap
        self.truncated = False

    def writable(self):
        return True

    def write(self, data):
        room = self.cap - len(self.buf)
        if len(data) > room:
            self.truncated = True
        self.buf += bytes(data[: max(room, 0)])
        return len(data)


class _Body(io.RawIOBase):
    """An in-place job's stdin: the request's body, read when first asked for."""

    def __init__(self, read_body):
        super().__init__()
        self.read_body = read_body
        self.rest = None

    def readable(self):
        return True

    def readinto(self, buf):
        if self.rest is None:
            self.rest = memoryview(self.read_body())
        n = min(len(buf), len(self.rest))
        buf[:n] = self.rest[:n]
        self.rest = self.rest[n:]
        return n


def op_exec_in_place(req, read_body, cfg):
    """Run a Python script as the sandbox's last job, in this process: no fork.

    For single-use sandboxes (a verifier's): a fork of this interpreter,
    its start-up and its exit cost about as much as the job itself. The
    request's body becomes the script's stdin when the script first reads
    it (so processes it starts before that hold none of it, as with a
    fork); its sys.stdout and sys.stderr are kept in memory (what it or its
    children write to fds 1 and 2 directly is not captured: those stay the
    agent's, and no other process can reach memory). There is no timeout
    here: the host stops waiting after `timeout` and ends the sandbox.
    Afterwards the sandbox takes no other job.
    """
    global _spent
    _spent = True
    start = time.monotonic()
    cpu = cfg.get("limits", {}).get("cpu_seconds")
    if cpu:
        used = int(sum(os.times()[:2])) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (used + int(cpu), used + int(cpu) + 1))
    cap, env, cwd = _job_settings(req, cfg)
    out, err = _Sink(cap), _Sink(cap)
    body = _Body(read_body)
    saved = sys.stdin, sys.stdout, sys.stderr
    sys.stdin = io.TextIOWrapper(io.BufferedReader(body))
    sys.stdout = io.TextIOWrapper(out, write_through=True)
    sys.stderr = io.TextIOWrapper(err, write_through=True)
    try:
        code = _exec_script(req["argv"], cwd, env)
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved
        body.rest = None
    if _lifetime_end is not None:
        # (A job may have used SIGALRM's timer, and with it cancelled the lifetime's.)
        signal.signal(signal.SIGALRM, _lifetime_over)
        signal.alarm(max(1, int(_lifetime_end - time.monotonic()) + 1))
    _reap_children()
    header = {
        "ok": True,
        "exit_code": code & 0xFF if isinstance(code, int) else 1,
        "signal": 0,
        "duration_s": time.monotonic() - start,
        "timed_out": False,
        "truncated": out.truncated or err.truncated,
        "stdout_len": len(out.buf),
        "stderr_len": len(err.buf),
    }
    return header, [out.buf, err.buf]


def op_exec(req, read_body, cfg):
    if req.get("in_place"):
        return op_exec_in_place(req, read_body, cfg)
    argv = req["argv"]
    timeout = req.get("timeout")
    cap, env, cwd = _job_settings(req, cfg)
    start = time.monotonic()
    with_stdin = bool(req.get("stdin_len"))
    try:
        if req.get("python_fork"):
            child = _spawn_python(argv, cwd, env, with_stdin)
            body = read_body()
        else:
            body = read_body()
            child = _spawn_process(argv, cwd, env, with_stdin)
    except OSError as e:
        read_body()
        err = bytearray(f"cannot run {argv[0]!r}: {e.strerror or e}\n".encode())
        return {
            "ok": True,
            "exit_code": 127,
            "signal": 0,
            "duration_s": 0.0,
            "timed_out": False,
            "truncated": False,
            "stdout_len": 0,
            "stderr_len": len(err),
        }, err
    cpu = cfg.get("limits", {}).get("cpu_seconds")
    if cpu:
        try:
            resource.prlimit(child.pid, resource.RLIMIT_CPU, (int(cpu), int(cpu) + 1))
        except OSError:
            pass  # already gone

    outs = {child.stdout_fd: bytearray(), child.stderr_fd: bytearray()}
    scratch = bytearray(1 << 16)  # one read buffer, wiped at the end: no chunk copies left behind
    truncated = False
    poller = select.poll()
    for fd in outs:
        poller.register(fd, select.POLLIN)
    # Mask 0: only POLLHUP/POLLERR, i.e. the host went away.
    poller.register(0, 0)
    pending = memoryview(body) if body else None
    if pending is not None:
        os.set_blocking(child.stdin_fd, False)
        poller.register(child.stdin_fd, select.POLLOUT)
    # A pidfd turns readable when the command exits; without one (older
    # kernels, some sandboxes' syscall layers), poll for exit briefly.
    try:
        exit_fd = os.pidfd_open(child.pid)
        poller.register(exit_fd, select.POLLIN)
    except (AttributeError, OSError):
        exit_fd = None
    deadline = start + timeout if timeout else None
    timed_out = False
    open_fds = set(outs)
    exited_at = None
    while True:
        now = time.monotonic()
        if exited_at is None and child.poll() is not None:
            exited_at = now
        if exited_at is not None and (not open_fds or now - exited_at > 0.05):
            break  # done; or a background child still holds the pipes: stop waiting for it
        if deadline is not None and now >= deadline:
            timed_out = True
            break
        if exited_at is not None:
            wait = 0.01
        elif exit_fd is None and not open_fds:
            wait = 0.001
        else:
            wait = 0.5
        if deadline is not None:
            wait = min(wait, deadline - now)
        for fd, _ev in poller.poll(max(wait, 0) * 1000):
            if fd == 0:
                raise HostGone()
            if fd == exit_fd:
                poller.unregister(fd)
                continue
            if fd == child.stdin_fd and pending is not None:
                try:
                    pending = pending[os.write(fd, pending[: 1 << 16]) :]
                except BlockingIOError:
                    continue
                except OSError:  # the command closed its stdin
                    pending = pending[:0]
                if not pending:
                    poller.unregister(fd)
                    os.close(fd)
                    child.stdin_fd = None
                continue
            k = os.readv(fd, [scratch])
            if not k:
                poller.unregister(fd)
                open_fds.discard(fd)
                continue
            buf = outs[fd]
            room = cap - len(buf)
            if room > 0:
                with memoryview(scratch) as view:
                    buf += view[: min(k, room)]
            if k > room:
                truncated = True
    if timed_out:
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        kill_all_others()
    if exit_fd is not None:
        os.close(exit_fd)
    code = child.wait()
    wipe(scratch)
    out, err = outs[child.stdout_fd], outs[child.stderr_fd]
    for fd in (child.stdin_fd, child.stdout_fd, child.stderr_fd):
        if fd is not None:
            os.close(fd)
    _reap_children()
    header = {
        "ok": True,
        # A signal death reads as 128+N, as in a shell.
        "exit_code": code if code >= 0 else 128 - code,
        "signal": -code if code < 0 else 0,
        "duration_s": time.monotonic() - start,
        "timed_out": timed_out,
        "truncated": truncated,
        "stdout_len": len(out),
        "stderr_len": len(err),
    }
    return header, [out, err]  # bytearrays: serve() wipes them once sent


def _safe_path(root, name):
    root = os.path.realpath(root)
    path = os.path.realpath(os.path.join(root, name))
    if path != root and not path.startswith(root + os.sep):
        raise ValueError(f"path escapes {root}: {name!r}")
    return path


def op_put(req, read_body, cfg):
    import tarfile

    body = read_body()
    dest = req.get("dest") or cfg.get("workdir") or "/workspace"
    os.makedirs(dest, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:") as tar:
        for m in tar:
            path = _safe_path(dest, m.name)
            if m.isdir():
                os.makedirs(path, exist_ok=True)
            elif m.isfile():
                os.makedirs(os.path.dirname(path), exist_ok=True)
                if os.path.islink(path):
                    os.unlink(path)
                src = tar.extractfile(m)
                assert src is not None  # a regular file member
                with open(path, "wb") as f:
                    f.write(src.read())
                os.chmod(path, m.mode & 0o755)
            else:
                raise ValueError(f"only regular files and directories may be put: {m.name!r}")
    return {"ok": True}, b""


def op_get(req, read_body, cfg):
    import tarfile

    read_body()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for p in req["paths"]:
            if not os.path.lexists(p):
                raise FileNotFoundError(f"no such file in the sandbox: {p}")
            tar.add(p, arcname=p.lstrip("/"))
    return {"ok": True}, buf.getvalue()


def _ping(req, read_body, cfg):
    read_body()
    return {"ok": True}, b""


# Modules the zygote imported ahead from staged folders: {folder as the
# zygote sees it: [module names]}. A module name belongs to one folder.
_preloaded: dict[str, list[str]] = {}


def preload(entries):
    """Zygote only: import each [folder, modules] entry's modules once, so
    that every sandbox forked from then on finds them imported. A folder
    whose modules fail to import is left to the sandboxes to import."""
    fresh = [(folder, names) for folder, names in entries if folder not in _preloaded]
    for folder, names in fresh:
        # Other folders' modules are out of sight meanwhile: this folder's
        # imports bind to its own copies only.
        stashed = {n: sys.modules.pop(n) for held in _preloaded.values() for n in held if n in sys.modules}
        before, path = set(sys.modules), list(sys.path)
        sys.path.insert(0, folder)
        ok = True
        try:
            for name in names:
                __import__(name)
        except BaseException:
            ok = False
        finally:
            sys.path[:] = path
            sys.path_importer_cache.pop(folder, None)
        mine = [n for n in set(sys.modules) - before if _from(sys.modules[n], folder)]
        if not ok:
            for name in mine:
                sys.modules.pop(name, None)
            mine = []
        # The newest version of a module wins: an older folder that holds a
        # module of the same name gives up all of its modules.
        for older, held in list(_preloaded.items()):
            if set(held) & set(mine):
                del _preloaded[older]
            else:
                sys.modules.update((n, stashed[n]) for n in held if n in stashed)
        _preloaded[folder] = mine
    if fresh:
        import gc

        gc.freeze()


def _from(module, folder):
    return (getattr(module, "__file__", None) or "").startswith(folder + "/")


def settle_preloaded(binds):
    """In a new sandbox: keep the preloaded modules of the folders it binds
    (their __file__ now names the folder's path in the sandbox) and drop
    the rest, so that no sandbox finds a module it has no copy of."""
    targets = dict(binds)
    for folder, names in _preloaded.items():
        target = targets.get(folder)
        for name in names:
            module = sys.modules.get(name)
            if target is None or module is None or not _from(module, folder):
                sys.modules.pop(name, None)
            else:
                module.__file__ = target + str(module.__file__)[len(folder) :]


def op_spawn(req, read_body, cfg):
    """Zygote only: clone a fresh sandbox and hand the host its channel.

    The zygote answers at once: the new sandbox (PID 1 of its own
    namespaces, the zygote's sibling) sets itself up and says `ready` on
    that channel, or exits, which the host reads as a failed start (its
    traceback goes to the zygote's stderr).
    """
    import socket

    import nest

    read_body()
    preload(req.get("preload", []))
    host_end, child_end = socket.socketpair()
    uid, gid = os.getuid(), os.getgid()
    try:
        pid = nest.clone(nest.clone_flags(req["nest"]))
    except BaseException:
        host_end.close()
        child_end.close()
        raise
    if pid == 0:
        code = 1
        try:
            host_end.close()
            nest.enter(req["nest"], uid, gid)
            settle_preloaded(req["nest"].get("binds", []))
            fd = child_end.detach()
            os.dup2(fd, 0)
            os.dup2(fd, 1)
            os.closerange(3, 1 << 16)
            code = serve(req["agent"])
        except BaseException:
            import traceback

            traceback.print_exc()
        finally:
            os._exit(code & 0xFF if isinstance(code, int) else 1)
    child_end.close()
    # And a pidfd: the host learns when the sandbox is gone without a
    # search of /proc for it (this pid is in the zygote's PID namespace).
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        host_end.close()
        os.kill(pid, signal.SIGKILL)
        raise
    return {"ok": True, "pid": pid, "fd_follows": 2}, b"", [host_end.detach(), pidfd]


def op_kill(req, read_body, cfg):
    """Zygote only: end a sandbox it spawned that no longer answers."""
    read_body()
    try:
        os.kill(int(req["pid"]), signal.SIGKILL)
    except ProcessLookupError:
        pass
    _reap_children()
    return {"ok": True}, b""


def _unless_spent(op):
    def guarded(req, read_body, cfg):
        if _spent:
            read_body()
            return {"ok": False, "error": "this sandbox ran its last job in place: create a new one"}, b""
        return op(req, read_body, cfg)

    return guarded


SANDBOX_OPS = {
    "exec": _unless_spent(op_exec),
    "put": _unless_spent(op_put),
    "get": _unless_spent(op_get),
    "ping": _ping,
}
ZYGOTE_OPS = {"spawn": op_spawn, "kill": op_kill, "ping": _ping}


_lifetime_end = None


def _lifetime_over(signum, frame):
    # Commands run as the agent's uid and may send it SIGALRM themselves:
    # only the real end of the lifetime ends the sandbox.
    if _lifetime_end is not None and time.monotonic() >= _lifetime_end - 0.5:
        kill_all_others()
        os._exit(3)


def serve(cfg):
    """Answer requests on fd 0, replies on fd 1, until the host goes away."""
    zygote = cfg.get("role") == "zygote"
    ops = ZYGOTE_OPS if zygote else SANDBOX_OPS
    global _lifetime_end
    if not zygote:
        # (The zygote holds no job and no sandbox can see it; its forks must
        # stay dumpable until they have written their own uid maps.)
        make_undumpable()
        install_seccomp(cfg.get("sockets", True))
    apply_limits(cfg.get("limits", {}))
    # No KeyboardInterrupt: a command could send SIGINT. As PID 1 of its
    # namespace (zygote children, containers) the agent then ignores every
    # signal it has no handler for, SIGKILL from inside included.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    if cfg.get("lifetime_s"):
        # The sandbox's wall-clock lifetime: SIGALRM ends the agent, and
        # with it the sandbox's PID namespace. A handler, not the default
        # action: as PID 1 of a namespace the agent ignores default actions.
        _lifetime_end = time.monotonic() + max(1, int(cfg["lifetime_s"]))
        signal.signal(signal.SIGALRM, _lifetime_over)
        signal.alarm(max(1, int(cfg["lifetime_s"])))
    # Protocol output goes to a private copy of fd 1; commands never see it.
    out_fd = os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 1)
    os.close(null)
    _write_all(out_fd, encode_frame({"ok": True, "ready": True, "pid": os.getpid()}))
    while True:
        try:
            frame = read_header(0)
        except (ValueError, OSError) as e:
            sys.stderr.write(f"sandgym agent: the request stream broke: {e!r}\n")
            return 2
        if frame is None:
            break
        req, body_len = frame
        consumed: list[bytearray] = []

        def read_body(n=body_len, consumed=consumed):
            # Read once, when the op asks for it (or after it, if it never does).
            if not consumed:
                consumed.append(read_frame_body(0, n))
            return consumed[0]

        op = req.get("op")
        if op == "shutdown":
            try:
                _write_all(out_fd, encode_frame({"ok": True}))
            except OSError:
                pass  # a host that does not wait for the answer has closed its end
            break
        passed = None
        parts = []
        ending = False
        try:
            try:
                result = ops[op](req, read_body, cfg)
                # A last job's requester may ask the agent to end with it.
                ending = bool(req.get("end")) and _spent
                header, payload = result[0], result[1]
                parts = payload if isinstance(payload, list) else [payload]
                passed = result[2] if len(result) > 2 else None
            except HostGone:
                break
            except KeyError as e:
                header = {"ok": False, "error": f"unknown op or field: {e}"}
            except Exception as e:  # reported to the host, never fatal here
                header = {"ok": False, "error": f"{type(e).__name__}: {e}"}
            try:
                read_body()  # an op that failed early leaves its body unread
                # The job's stdin is with its command by now: wiped before the
                # reply goes out, so no copy is left once the host has it.
                for buf in consumed:
                    wipe(buf)
                send_frame(out_fd, header, parts)
                if passed is not None:
                    import socket

                    try:
                        with socket.socket(fileno=os.dup(out_fd)) as chan:
                            socket.send_fds(chan, [b"F"], passed)
                    finally:
                        for fd in passed:
                            os.close(fd)
            except (BrokenPipeError, EOFError):
                break
        finally:
            # Nothing of a job outlives its request: not its stdin (a
            # verifier's nonce, hidden tests), not its output.
            for buf in consumed + parts:
                if isinstance(buf, bytearray):
                    wipe(buf)
            del consumed[:], parts[:]
        if ending:
            break
    if not zygote and os.getpid() != 1:
        # (As PID 1 of its namespace, the agent's exit takes every other
        # process in it along: the kernel kills them.)
        kill_all_others()
    return 0


def main():
    cfg = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    if cfg.get("role") == "zygote":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # -I leaves it out
        for name in cfg.get("preload", []):
            __import__(name)  # warm for every fork
        prepare()
        import gc

        # What is loaded now stays out of every collection: a collection in a
        # sandbox would otherwise write to (and so copy) the pages of objects
        # it shares with the zygote.
        gc.freeze()
    return serve(cfg)


if __name__ == "__main__":
    sys.exit(main())
