"""Turn a clone of the zygote into a fresh sandbox: new namespaces, new tmpfs.

The local runtime keeps one pristine agent (the zygote) inside a
bubblewrap sandbox; it never runs a command. Each new sandbox is a raw
clone(2) of it made straight into new user, PID, mount, network, IPC and
UTS namespaces (PID 1 there, no intermediate process), which mounts fresh
tmpfs for the workspace, /tmp, /dev/shm and /opt, binds the requested
read-only folders, brings up `lo`, drops every capability and becomes that
sandbox's agent. (A sandbox that may make no socket stays in the zygote's
network namespace: clone_flags.) A clone costs about as much as a few
syscalls; a new bubblewrap and interpreter cost tens of milliseconds.

Standard library only (ctypes for the syscalls Python 3.11 lacks).
"""

import ctypes
import fcntl
import os
import signal
import socket
import struct
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 0x4000, 1 << 18
PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT = 24, 38, 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
SIOCSIFFLAGS = 0x8914
IFF_UP, IFF_LOOPBACK, IFF_RUNNING = 0x1, 0x8, 0x40
LINUX_CAPABILITY_VERSION_3 = 0x20080522

_libc = ctypes.CDLL(None, use_errno=True)
for _name in ("mount", "prctl", "capset", "sethostname"):
    getattr(_libc, _name)  # looked up once, in the zygote, not in every sandbox
# clone(2) through PyDLL keeps the GIL held across the call, so the child
# resumes Python holding it. (The arguments after the flags are all zero,
# which makes their order, which differs between architectures, moot.)
_raw = ctypes.PyDLL(None, use_errno=True)
SYS_CLONE = {"x86_64": 56, "aarch64": 220}
MACHINE = os.uname().machine
CLONE_PARENT = 0x00008000
SANDBOX_NAMESPACES = CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS
# A sandbox is the zygote's sibling: the init of the zygote's own PID
# namespace (bubblewrap's) reaps it the moment it ends.
SANDBOX_CLONE = SANDBOX_NAMESPACES | CLONE_PARENT


def clone_flags(spec):
    """The clone flags of a sandbox: without a network namespace of its own
    when it can make no socket (the agent's syscall filter), since it has
    no use for one, and making one costs more than all else in a clone."""
    return SANDBOX_CLONE if spec.get("own_network", True) else SANDBOX_CLONE & ~CLONE_NEWNET


def _check(ret, what):
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source, target, fstype, flags, data=None):
    def enc(s):
        return s.encode() if isinstance(s, str) else s

    _check(_libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)), f"mount {target}")


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_capabilities():
    """No capability of the new user namespace survives setup."""
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    for cap in range(64):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            break  # past the last capability this kernel knows
    header = _CapHeader(LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(header), data), "capset")


def _loopback_up():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", IFF_UP | IFF_LOOPBACK | IFF_RUNNING))


def clone(flags):
    """clone(2) with `flags` (+SIGCHLD): the child's pid, 0 in the child.

    Unlike os.fork, it makes the child in new namespaces at once (PID 1 of
    a new PID namespace, with no process in between) and runs none of
    Python's after-fork hooks, which cost more than the clone itself. So
    the caller must be single-threaded, and the child must run only code
    that needs no hook: no threads of the parent's, no reseeded `random`
    (callers that run other code reseed it themselves). glibc's cached
    thread id also stays the parent's, so raise() and pthread_kill() in
    the child itself miss; the agent uses neither (os.fork in it, for
    commands, sets things right again).
    """
    number = SYS_CLONE.get(MACHINE)
    if number is None:
        raise OSError(38, f"clone: no syscall number known for {MACHINE}")
    zero = ctypes.c_void_p(0)
    pid = _raw.syscall(ctypes.c_long(number), ctypes.c_ulong(flags | signal.SIGCHLD), zero, zero, zero, zero)
    if pid < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"clone: {os.strerror(err)}")
    return pid


def _write(path, text):
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def enter(spec, uid, gid):
    """Set up a sandbox from inside its fresh namespaces (called in the child
    of clone(SANDBOX_NAMESPACES), PID 1 there). `uid`, `gid`: the zygote's
    ids, mapped to themselves.

    spec: workdir, disk_bytes, binds [[source, target]] with targets under
    /opt, hide (folders to cover with an empty tmpfs), hostname, own_network
    (False: the zygote's network namespace, see clone_flags).
    """
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} {uid} 1")
    _write("/proc/self/gid_map", f"{gid} {gid} 1")
    os.setsid()
    if "random" in sys.modules:
        # A raw clone runs none of os.fork's hooks: no random state shared with the zygote.
        sys.modules["random"].seed()
    _mount("none", "/", None, MS_REC | MS_PRIVATE)
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    size = int(spec["disk_bytes"])
    _mount("tmpfs", spec["workdir"], "tmpfs", MS_NOSUID | MS_NODEV, f"size={size},mode=0755")
    _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"size={size},mode=1777")
    if os.path.isdir("/dev/shm"):
        _mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=64m,mode=1777")
    # /dev is the zygote's tmpfs, the same for every sandbox forked from it:
    # read-only here, or one sandbox could leave files for the others (the
    # device nodes are mounts of their own and stay usable).
    _mount("none", "/dev", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    _mount("tmpfs", "/opt", "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    for source, target in spec.get("binds", []):
        os.makedirs(target, exist_ok=True)
        _mount(source, target, None, MS_BIND | MS_REC)
        _mount("none", target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    _mount("none", "/opt", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    for path in spec.get("hide", []):
        # Bind sources that the sandbox has no business seeing.
        _mount("tmpfs", path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k")
    hostname = spec.get("hostname", "sandbox").encode()
    _check(_libc.sethostname(hostname, len(hostname)), "sethostname")
    if spec.get("own_network", True):
        _loopback_up()
    os.chdir(spec["workdir"])
    drop_capabilities()
