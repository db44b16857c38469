"""Helpers shared by test modules of several folders."""

from __future__ import annotations

import os

from sandgym.specs.code_function import CodeHidden, CodeTask, CodeTaskPair


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
