"""Soak: many verifications at once, then nothing left behind.

The full soak (SANDGYM_SLOW=1) runs 1000 episodes; CI runs a bounded
sample of 60 through the same code path.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from sandgym.specs import TaskSet, bundled_task_set
from sandgym.verifiers.code_function.host import verify
from tests.code_function.test_security import sandbox_user_processes


def soak(runtime, n: int) -> None:
    runtime.create().close()
    before = sandbox_user_processes()
    fds_before = len(os.listdir("/proc/self/fd"))
    tasks = TaskSet.load(bundled_task_set("code_function")).tasks
    jobs = [(tasks[i % len(tasks)], i % 3) for i in range(n)]

    def one(job):
        task, kind = job
        if kind == 2:  # a short budget: the soak is about churn, not waiting
            task = task.model_copy(update={"visible": task.visible.model_copy(update={"timeout_s": 0.5})})
        code = {
            0: task.hidden.reference_solution,
            1: f"def {task.visible.entry_point}(*a, **k):\n    return None\n",
            2: "while True:\n    pass\n",
        }[kind]
        return kind, verify(task, code, runtime).outcome.value

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(one, jobs))
    expected = {0: "passed", 1: "failed", 2: "timeout"}
    wrong = [(k, o) for k, o in results if o != expected[k]]
    assert not wrong, wrong[:5]
    deadline = time.monotonic() + 10
    while sandbox_user_processes() - before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not (sandbox_user_processes() - before)
    assert len(os.listdir("/proc/self/fd")) <= fds_before + 2  # no leaked channels


def test_soak_sample(runtime):
    soak(runtime, 60)


@pytest.mark.slow
def test_soak_full(runtime):
    soak(runtime, 1000)
