"""The code-function family's side of the trainer reward (`sandgym.adapters.trainers`).

The family table names these two as its `trainer_prompt` and
`trainer_reward` hooks: a completion is judged exactly as
sandgym/CodeFunction-v0 judges a single-turn episode, its code read with the
env's action grammar and run against the hidden tests in a fresh sandbox.
"""

from __future__ import annotations

from sandgym.outcomes import Outcome
from sandgym.runtimes import Runtime
from sandgym.specs import TaskPair
from sandgym.specs.code_function import CodeTaskPair
from sandgym.verifiers.code_function.host import verify
from sandgym.verifiers.code_function.stdio import verify_stdio
from sandgym.verifiers.models import Verdict

from .actions import extract_code, extract_program
from .env import render_prompt


def prompt(task: TaskPair) -> str:
    """The single-turn env's prompt for `task`."""
    return render_prompt(CodeTaskPair.of(task), "single", 1)


def judge(task: TaskPair, completion: str, runtime: Runtime, retries: int) -> Verdict:
    """The verdict on one completion's code. A completion with no usable code
    fails without a sandbox: its verdict has no attempts."""
    pair = CodeTaskPair.of(task)
    if pair.visible.kind == "stdio":
        code, language, problem = extract_program(completion)
        if code is None:
            return Verdict(verifier_version="none", outcome=Outcome.FAILED, detail=problem)
        return verify_stdio(pair, code, language, runtime, retries=retries)
    code, problem = extract_code(completion, pair.visible.entry_point)
    if code is None:
        return Verdict(verifier_version="none", outcome=Outcome.FAILED, detail=problem)
    return verify(pair, code, runtime, retries=retries)
