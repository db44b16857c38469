"""Helpers shared by test modules of several folders."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import gymnasium as gym

from sandgym.envs.base import SandgymEnv
from sandgym.specs import TaskSet
from sandgym.specs.code_function import CodeHidden, CodeTask, CodeTaskPair
from sandgym.specs.swe_repo import SWETaskPair

SANDBOX_UID = 65534 if os.geteuid() == 0 else os.geteuid()


def sandbox_user_processes() -> set[int]:
    """Our own descendants running as the sandbox user (other test runs on
    this machine have theirs)."""
    found, frontier = set(), [os.getpid()]
    while frontier:
        pid = frontier.pop()
        try:
            if pid != os.getpid() and os.stat(f"/proc/{pid}").st_uid == SANDBOX_UID:
                found.add(pid)
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as f:
                    frontier.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return found


def wait_until(check: Callable[[], object], what: str, timeout_s: float = 120.0) -> None:
    """Poll `check` every 0.2 s until it is true; AssertionError naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def unwrapped(env: gym.Env) -> SandgymEnv:
    """The sandgym env under `env`'s wrappers, typed as the env contract."""
    base = env.unwrapped
    assert isinstance(base, SandgymEnv), f"{type(base).__name__} is no SandgymEnv"
    return base


def make_task(
    entry_point="solve",
    tests=None,
    check_code=None,
    examples=(),
    timeout_s=5.0,
    reference="def solve(x):\n    return x\n",
    task_id="t/task",
    context_code="",
) -> CodeTaskPair:
    return CodeTaskPair(
        visible=CodeTask(
            id=task_id,
            prompt=f"Write {entry_point}.",
            entry_point=entry_point,
            examples=list(examples),
            timeout_s=timeout_s,
            context_code=context_code,
        ),
        hidden=CodeHidden(id=task_id, tests=list(tests or []), check_code=check_code, reference_solution=reference),
    )


def swe_tasks(ts: TaskSet) -> list[SWETaskPair]:
    """A SWE task set's tasks, typed as SWE tasks."""
    return [SWETaskPair.of(t) for t in ts.tasks]


def agent_host_pid(rt, sb) -> int:
    """The host PID of a sandbox's agent (local: PID 1 of the sandbox's PID
    namespace; docker: the container's init)."""
    if rt.name == "docker":
        return rt.client.containers.get(sb.info.id).attrs["State"]["Pid"]
    ns = sb.exec(["readlink", "/proc/self/ns/pid"]).text().strip()
    for p in os.listdir("/proc"):
        try:
            if p.isdigit() and os.readlink(f"/proc/{p}/ns/pid") == ns:
                with open(f"/proc/{p}/status") as f:
                    nspid = next(line for line in f if line.startswith("NSpid:")).split()
                if nspid[-1] == "1":
                    return int(p)
        except OSError:
            pass
    raise AssertionError(f"no agent found for {ns}")


def i386_syscall_source(nr: int, *args: int | bytes) -> str:
    """Python source that makes one i386 syscall (x86-64 only) through the
    32-bit gate, int 0x80, from a 64-bit process, and prints what it
    returned (a negative errno on failure). Up to four arguments, in ebx,
    ecx, edx and esi; bytes are passed as NUL-terminated strings placed
    below 4 GiB, where a 32-bit pointer reaches."""
    return (
        "import ctypes, mmap, struct\n"
        "m = mmap.mmap(-1, 4096, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x40,\n"  # MAP_32BIT
        "              prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)\n"
        "base = ctypes.addressof(ctypes.c_char.from_buffer(m))\n"
        "regs, at = [], 2048\n"
        f"for a in {list(args)!r}:\n"
        "    if isinstance(a, bytes):\n"
        "        m[at:at + len(a)] = a\n"
        "        regs.append(base + at)\n"
        "        at += len(a) + 1\n"
        "    else:\n"
        "        regs.append(a)\n"
        "regs += [0] * (4 - len(regs))\n"
        "# push rbx; mov eax, NR; mov ebx/ecx/edx/esi, ARG; int 0x80; pop rbx; ret\n"
        f"code = b'\\x53\\xb8' + struct.pack('<I', {nr})\n"
        "for op, value in zip(b'\\xbb\\xb9\\xba\\xbe', regs):\n"
        "    code += bytes([op]) + struct.pack('<I', value & 0xFFFFFFFF)\n"
        "m[0:len(code) + 4] = code + b'\\xcd\\x80\\x5b\\xc3'\n"
        "print(ctypes.CFUNCTYPE(ctypes.c_int)(base)())\n"
    )
