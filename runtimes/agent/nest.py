"""Turn a fork of the zygote into a fresh sandbox: new namespaces, new tmpfs.

The local runtime keeps one pristine agent (the zygote) inside a
bubblewrap sandbox; it never runs a command. Each new sandbox is a fork
of it that enters new user, PID, mount, network, IPC and UTS namespaces,
mounts fresh tmpfs for the workspace, /tmp, /dev/shm and /opt, binds the
requested read-only folders, brings up `lo`, drops every capability and
becomes that sandbox's agent. A fork costs about as much as a few
syscalls; a new bubblewrap and interpreter cost tens of milliseconds.

Standard library only (ctypes for the syscalls Python 3.11 lacks).
"""

import ctypes
import fcntl
import os
import socket
import struct

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


def enter(spec, report_fd):
    """Become PID 1 of a fresh sandbox. The calling process writes the new
    PID (as the zygote sees it) to `report_fd` and exits; only the new
    sandbox's init returns from here.

    spec: workdir, disk_bytes, binds [[source, target]] with targets under
    /opt, hide (folders to cover with an empty tmpfs), hostname.
    """
    uid, gid = os.getuid(), os.getgid()
    _check(
        _libc.unshare(CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS),
        "unshare",
    )
    with open("/proc/self/setgroups", "w") as f:
        f.write("deny")
    with open("/proc/self/uid_map", "w") as f:
        f.write(f"{uid} {uid} 1")
    with open("/proc/self/gid_map", "w") as f:
        f.write(f"{gid} {gid} 1")
    pid = os.fork()
    if pid:
        os.write(report_fd, str(pid).encode())
        os._exit(0)
    os.close(report_fd)
    os.setsid()
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
    _loopback_up()
    os.chdir(spec["workdir"])
    drop_capabilities()
