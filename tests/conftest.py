"""Shared fixtures. Sandboxes here are real: bubblewrap, installed by scripts/setup.sh."""

from __future__ import annotations

import os

import pytest

from sandgym.runtimes.local import LocalRuntime
from sandgym.specs import CodeHidden, CodeTask, CodeTaskPair


def pytest_collection_modifyitems(config, items):
    # Soak tests run in full only when asked; CI runs a bounded sample.
    if os.environ.get("SANDGYM_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow soak test: set SANDGYM_SLOW=1")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def runtime():
    rt = LocalRuntime()
    yield rt
    rt.close()


@pytest.fixture(scope="session")
def bwrap_runtime():
    """A runtime that starts one bubblewrap process per sandbox (no zygote)."""
    rt = LocalRuntime(zygote=False)
    yield rt
    rt.close()


def make_task(entry_point="solve", tests=None, check_code=None, examples=(), timeout_s=5.0,
              reference="def solve(x):\n    return x\n", task_id="t/task", context_code="") -> CodeTaskPair:
    return CodeTaskPair(
        visible=CodeTask(id=task_id, prompt=f"Write {entry_point}.", entry_point=entry_point,
                         examples=list(examples), timeout_s=timeout_s, context_code=context_code),
        hidden=CodeHidden(id=task_id, tests=list(tests or []), check_code=check_code,
                          reference_solution=reference),
    )
