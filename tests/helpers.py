"""Helpers shared by test modules of several folders."""

from __future__ import annotations

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
