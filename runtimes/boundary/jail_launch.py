"""Start one `jail` sandbox (runtimes/jail/runtime.py); standard library only.

`python3 -I -S jail_launch.py outer CONFIG_JSON`, as root, with the agent's
channel on fds 0 and 1. The process stays outside as the sandbox's reaper
(a child subreaper, root, out of the sandbox's reach: another uid); its
child enters the jail: chroot, no groups, the sandbox's own uid and gid,
no_new_privs, a seccomp filter of its own, then `inner` runs sandgym's
in-sandbox agent there.

The agent shares its uid with the commands it runs, so the filter keeps
every signal off it (and `kill(-1)`, which would reach it); the agent's
"kill everything else" (a timeout, the end of the sandbox) is asked of the
reaper instead, which sees the uid's processes in its /proc. When the agent
exits, the reaper kills and reaps all that is left of the uid and exits.
"""

import ctypes
import json
import os
import select
import signal
import struct
import sys
import threading
import time

PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
PR_SET_CHILD_SUBREAPER = 36
AUDIT_ARCH_X86_64 = 0xC000003E
X32_BIT = 0x40000000
# x86-64 syscalls refused with EPERM: every new socket (no network, no
# Unix sockets to other sandboxes; socketpair stays), reading or writing
# other processes, signals by pidfd or with a payload, kernel surfaces a
# sandbox has no use for, and what container root could do but a sandbox
# must not.
DENIED = {
    41: "socket",
    101: "ptrace",
    310: "process_vm_readv",
    311: "process_vm_writev",
    312: "kcmp",
    424: "pidfd_send_signal",
    129: "rt_sigqueueinfo",
    297: "rt_tgsigqueueinfo",
    425: "io_uring_setup",
    426: "io_uring_enter",
    427: "io_uring_register",
    321: "bpf",
    298: "perf_event_open",
    323: "userfaultfd",
    248: "add_key",
    249: "request_key",
    250: "keyctl",
    272: "unshare",
    308: "setns",
    161: "chroot",
    165: "mount",
    155: "pivot_root",
    135: "personality",
}
KILL, TKILL, TGKILL = 62, 200, 234
AGENT = "/opt/sandgym/agent"
SWEEP_TIMEOUT_S = 30.0


def seccomp_program(agent_pid, agent_pgid):
    """The filter, as BPF: refuse DENIED; refuse kill() of the agent, of its
    process group and of -1 (everything), and tkill/tgkill of the agent.
    pid_t is 32 bits: the kernel ignores the high half of the argument, so
    only the low half (offset 16 on x86-64) is compared."""
    ld_abs, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    kill_process, allow, eperm, enosys = 0x80000000, 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 38
    prog = []  # (code, k, true label, false label); a label None means the next instruction

    def op(code, k, jt=None, jf=None):
        prog.append((code, k, jt, jf))

    op(ld_abs, 4)
    op(jeq, AUDIT_ARCH_X86_64, None, "kill")
    op(ld_abs, 0)
    op(jge, X32_BIT, "enosys")
    op(jeq, KILL, "kill_arg")
    op(jeq, TKILL, "tid_arg")
    op(jeq, TGKILL, "tid_arg")
    for nr in sorted(DENIED):
        op(jeq, nr, "eperm")
    op(ret, allow)
    labels = {"kill_arg": len(prog)}
    op(ld_abs, 16)
    op(jeq, agent_pid, "eperm")
    op(jeq, 0xFFFFFFFF, "eperm")  # kill(-1)
    op(jeq, (-agent_pgid) & 0xFFFFFFFF, "eperm")
    op(ret, allow)
    labels["tid_arg"] = len(prog)
    op(ld_abs, 16)
    op(jeq, agent_pid, "eperm")
    op(ret, allow)
    for name, value in (("eperm", eperm), ("enosys", enosys), ("kill", kill_process)):
        labels[name] = len(prog)
        op(ret, value)
    out = []
    for i, (code, k, jt, jf) in enumerate(prog):
        t = labels[jt] - i - 1 if jt else 0
        f = labels[jf] - i - 1 if jf else 0
        out.append(struct.pack("=HBBI", code, t, f, k))
    return b"".join(out)


def install_seccomp(agent_pid, agent_pgid):
    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]

    libc = ctypes.CDLL(None, use_errno=True)
    prog = seccomp_program(agent_pid, agent_pgid)
    fprog = SockFprog(len(prog) // 8, prog)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "seccomp filter refused")


def enter(cfg, sweep_fds):
    """In the child: become the sandbox, then run the agent inside."""
    for fd in sweep_fds:
        os.set_inheritable(fd, True)
    os.chroot(cfg["jail"])
    os.chdir("/")
    os.setgroups([])
    os.setresgid(cfg["gid"], cfg["gid"], cfg["gid"])
    os.setresuid(cfg["uid"], cfg["uid"], cfg["uid"])
    install_seccomp(os.getpid(), os.getpgid(0))
    os.chdir(cfg["workdir"])
    argv = ["python3", "-I", "-S", "/opt/sandgym/jail_launch.py", "inner", json.dumps(cfg["agent"])]
    os.execve("/usr/bin/python3", argv + [str(fd) for fd in sweep_fds], {"PATH": "/usr/bin:/bin"})


def inner(agent_cfg, request_fd, done_fd):
    """In the jail: the agent, its sweeps asked of the reaper."""
    for fd in (request_fd, done_fd):
        os.set_inheritable(fd, False)  # not for the commands it execs
    sys.path.insert(0, AGENT)
    import agent  # noqa: E402 - found in the jail only

    def sweep():
        os.write(request_fd, b"s")
        ready, _, _ = select.select([done_fd], [], [], SWEEP_TIMEOUT_S)
        if ready:
            os.read(done_fd, 1)

    # The agent sweeps its PID namespace through /proc; here the reaper sweeps the uid.
    agent.kill_all_others = sweep
    sys.argv = [f"{AGENT}/agent.py", agent_cfg]
    return agent.main()


def uid_processes(uid, keep):
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) not in keep:
            try:
                if os.stat(f"/proc/{name}").st_uid != uid:
                    continue
                with open(f"/proc/{name}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                        pids.append(int(name))
            except (OSError, IndexError):
                pass  # gone meanwhile
    return pids


def kill_uid(uid, keep=()):
    """SIGKILL every live process of `uid` but `keep`, until none is left
    (a fork can race one pass)."""
    for _ in range(1000):
        pids = uid_processes(uid, set(keep))
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.001)


def serve_sweeps(request_fd, done_fd, uid, agent_pid):
    while os.read(request_fd, 1):
        kill_uid(uid, keep=(agent_pid,))
        try:
            os.write(done_fd, b"d")
        except OSError:
            return


def reap_until(pid):
    """Reap every child (orphans of the sandbox land here) until `pid` exits."""
    while True:
        try:
            done, _ = os.waitpid(-1, 0)
        except ChildProcessError:
            return
        except InterruptedError:
            continue
        if done == pid:
            return


def outer(cfg):
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # until the agent's pid is known
    request_r, request_w = os.pipe()
    done_r, done_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        try:
            os.close(request_r)
            os.close(done_w)
            enter(cfg, (request_w, done_r))
        except BaseException as e:  # noqa: BLE001 - reported on stderr, the host sees the agent never start
            sys.stderr.write(f"sandgym jail: cannot enter the sandbox: {e!r}\n")
        os._exit(127)
    os.close(request_w)
    os.close(done_r)
    # The channel is the agent's: once it exits, the host reads EOF.
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    signal.signal(signal.SIGTERM, lambda *_: os.kill(pid, signal.SIGKILL))
    threading.Thread(target=serve_sweeps, args=(request_r, done_w, cfg["uid"], pid), daemon=True).start()
    reap_until(pid)
    # What the sandbox left: killed, then reaped; again while a child is left.
    while True:
        kill_uid(cfg["uid"])
        while True:
            try:
                done, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return 0
            if done == 0:
                break  # children still running
        time.sleep(0.01)


if __name__ == "__main__":
    if sys.argv[1] == "inner":
        sys.exit(inner(sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
    sys.exit(outer(json.loads(sys.argv[2])))
