"""The candidate's side of the boundary: runs its code, answers calls.

runner.py starts this side before it reads the hidden tests, so nothing
of them is in this process's memory; it runs in new user, PID and mount
namespaces (spawn()), where the runner and the sandbox's agent have no PID
to signal. Messages are JSON lines on a pipe pair:

    here -> runner:  {"ready": true}                             once, before any candidate code
    runner -> here:  {"context_code", "code", "entry_point"}     once
    here -> runner:  {"loaded": true} | {"load_error": "..."}
    runner -> here:  {"args": [...], "kwargs": {...}}            per call
    here -> runner:  {"value": <plain value>} | {"error": "..."}

Everything here is untrusted once the candidate's code has run: the runner
checks whatever comes back. Standard library only.
"""

import ctypes
import json
import os
import signal
import sys

import plainvalues

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
MS_NOSUID, MS_NODEV, MS_NOEXEC = 2, 4, 8
MS_REC, MS_PRIVATE = 0x4000, 1 << 18
PR_SET_PDEATHSIG = 1
PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 24, 38
LINUX_CAPABILITY_VERSION_3 = 0x20080522


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _check(ret, what):
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


# libc, and the functions used, looked up at import: where the runtime
# imports this module ahead (a warm interpreter that forks sandboxes), no
# sandbox pays for them again. PyDLL for clone: see _clone.
_LIBC = ctypes.CDLL(None, use_errno=True)
_RAW = ctypes.PyDLL(None, use_errno=True)
for _lib, _names in ((_LIBC, ("mount", "prctl", "capset", "unshare")), (_RAW, ("syscall",))):
    for _name in _names:
        getattr(_lib, _name)


def _libc():
    return _LIBC


SYS_CLONE = {"x86_64": 56, "aarch64": 220}
CLONE_NR = SYS_CLONE.get(os.uname().machine)


def _clone(flags):
    """clone(2) with `flags` (+SIGCHLD): the child's pid, 0 in the child.

    Through PyDLL, so the GIL stays held and the child resumes Python
    holding it; none of os.fork's after-fork hooks run, so the caller must
    be single-threaded (the runner forks this side before anything else).
    glibc's cached thread id stays the runner's, so raise() in this
    process misses (signal.raise_signal fails; os.abort still ends it).
    The arguments after the flags are zero, so their per-architecture
    order does not matter.
    """
    if CLONE_NR is None:
        raise OSError(38, "clone: unknown architecture")
    zero = ctypes.c_void_p(0)
    pid = _RAW.syscall(ctypes.c_long(CLONE_NR), ctypes.c_ulong(flags | signal.SIGCHLD), zero, zero, zero, zero)
    if pid < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"clone: {os.strerror(err)}")
    return pid


def spawn(isolate):
    """Start the candidate's process: (pid, cloned); pid is 0 in it.

    Isolated, it is made by one clone(2) straight into new user, PID and
    mount namespaces (PID 1 there); where the sandbox refuses that, by a
    fork that confine() later has unshare them. Not isolated: a fork.
    """
    if isolate:
        try:
            return _clone(CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS), True
        except OSError:
            pass
    return os.fork(), False


def confine(isolate, cloned):
    """In the candidate's process, once its descriptors are in place."""
    if cloned:
        if "random" in sys.modules:
            sys.modules["random"].seed()  # as os.fork's hook would: no state shared with the runner
        _confine(_libc())
    elif isolate:
        enter_namespaces()


def enter_namespaces():
    """Become PID 1 of new user, PID and mount namespaces, with a /proc of our own.

    The calling process stays outside as a relay: it waits for the inner
    process and exits with its status; the inner one dies with it.
    """
    libc = _libc()
    _check(libc.unshare(CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS), "unshare")
    pid = os.fork()
    if pid:
        status = os.waitpid(pid, 0)[1]
        os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
    _confine(libc)


def _confine(libc):
    """In the candidate's new namespaces: die with the parent, a /proc of its own, no capabilities."""
    # Should the parent die first, the pipes close and serve() ends anyway.
    _check(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl")
    # A /proc of its own hides the verifier's processes from view. Signals
    # need no mount to be contained: outside PIDs are not in this namespace.
    # gVisor refuses mounts here; its /proc then stays the sandbox's.
    if libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) == 0:
        libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
    # The capabilities this process got with its new user namespace reach
    # only its own mounts and PIDs, yet gVisor lets them lift RLIMIT_NPROC
    # (a fork bomb then takes the whole sandbox down): none survive setup.
    # (This folder is mounted on its own, stdlib only: the agent's nest.py
    # does the same for sandboxes, but cannot be imported from here.)
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    for cap in range(64):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            break  # past the last capability this kernel knows
    _check(libc.capset(ctypes.byref(_CapHeader(LINUX_CAPABILITY_VERSION_3, 0)), (_CapData * 2)()), "capset")


def _short_error(exc):
    import traceback  # here, not at the top: it imports tokenize (milliseconds), wanted only on errors

    return "".join(traceback.format_exception_only(type(exc), exc)).strip()[-2000:]


def serve(rfd, wfd):
    rfile = os.fdopen(rfd, "r", encoding="utf-8")

    def send(obj):
        data = (json.dumps(obj, separators=(",", ":"), allow_nan=False) + "\n").encode()
        while data:
            data = data[os.write(wfd, data) :]

    send({"ready": True})
    setup = json.loads(rfile.readline())
    module = {"__name__": "__candidate__", "__builtins__": __builtins__}
    try:
        source = setup["context_code"] + "\n" + setup["code"]
        exec(compile(source, "<candidate>", "exec"), module)
        fn = module.get(setup["entry_point"])
        if not callable(fn):
            name = setup["entry_point"]
            made = sorted(k for k, v in module.items() if callable(v) and not k.startswith("__"))[:10]
            raise NameError(
                f"no function named {name!r}: the code does not define a function named {name!r}"
                + (f" (it defines {', '.join(made)})" if made else "")
            )
    except BaseException as e:  # SystemExit included: it is the candidate's failure
        send({"load_error": _short_error(e)})
        return
    send({"loaded": True})
    for line in rfile:
        try:
            call = json.loads(line)
            args = plainvalues.decode(call["args"])
            kwargs = plainvalues.decode(call["kwargs"])
        except Exception as e:
            send({"error": f"bad call: {e}"})
            continue
        try:
            result = fn(*args, **kwargs)
            reply = {"value": plainvalues.encode(result)}
        except BaseException as e:
            reply = {"error": _short_error(e)}
        send(reply)
