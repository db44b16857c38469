"""Host side of code-function verification.

Each attempt starts a fresh sandbox that no agent ever used, mounts the
boundary code (runner.py, candidate_host.py, plainvalues.py) read-only,
hands the runner the code and the hidden tests on stdin, and reads back
one JSON record that must carry this attempt's nonce. The outcome is
computed here from per-test records; the sandbox's exit code and anything
else it prints count for nothing.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from sandgym.outcomes import Outcome
from sandgym.runtimes.base import Mount, Runtime, Sandbox, SandboxError, SandboxSpec
from sandgym.runtimes.staging import stage_dir
from sandgym.specs.code_function import CodeTaskPair, Example
from sandgym.verifiers.models import Attempt, TestResult, Verdict
from sandgym.verifiers.retry import attempts_until_settled

from .stdio import validate_stdio_task, verify_stdio

VERIFIER_VERSION = "code_function/1"
BOUNDARY_DIR = "/opt/sandgym/verifier"
# Host-side allowance beyond the task's own time budget, for sandbox start
# and interpreter start-up.
HOST_GRACE_S = 20.0

Candidates = Literal["pidns", "process"]


def boundary_mount() -> Mount:
    # The judge (with candidate_host and plainvalues) is imported ahead
    # where the runtime forks sandboxes from a warm interpreter.
    return Mount(source=str(stage_dir(Path(__file__).parent / "boundary")), target=BOUNDARY_DIR, preload=("judge",))


def verifier_spec(task: CodeTaskPair) -> SandboxSpec:
    return SandboxSpec(
        memory_mb=1024,
        pids=128,
        disk_mb=64,
        cpu_seconds=int(task.visible.timeout_s) + 5,
        wall_timeout_s=task.visible.timeout_s + HOST_GRACE_S + 30,
        # Neither the judge nor the code under test needs a socket: none can
        # be made, so no candidate can reach another sandbox's, and the local
        # runtime spares the sandbox a network namespace of its own.
        network="no-sockets",
        mounts=(boundary_mount(),),
        labels={"role": "verifier", "task": task.id},
    )


def payload_for(task: CodeTaskPair, code: str, tests: list[Example] | None, nonce: str) -> dict:
    v = task.visible
    payload = {
        "nonce": nonce,
        "entry_point": v.entry_point,
        "context_code": v.context_code,
        "code": code,
        "timeout_s": v.timeout_s,
        "float_tolerance": v.float_tolerance,
    }
    if tests is None and task.hidden.check_code:
        payload["check_code"] = task.hidden.check_code
    else:
        cases = task.hidden.tests if tests is None else tests
        payload["tests"] = [
            {
                "name": getattr(c, "name", None) or f"test_{i}",
                "args": c.args,
                "kwargs": c.kwargs,
                "expected": c.expected,
            }
            for i, c in enumerate(cases)
        ]
    return payload


def run_in_sandbox(sandbox, payload: dict, isolation: Candidates, last: bool = False) -> tuple[dict | None, str]:
    """Run the runner in `sandbox`; (record or None, what went wrong).
    `last`: the sandbox is the verification's own and ends with it, so the
    runner may run in its agent's interpreter itself (Sandbox.run_python).

    With `process` isolation the candidate shares the judge's uid and PID
    namespace; a judge that dies by a signal while the sandbox's agent (PID
    1, out of the candidate's reach) lives was killed from inside: that is
    tampering, reported as a violation, never an infrastructure error.
    """
    res = sandbox.run_python(
        f"{BOUNDARY_DIR}/runner.py",
        stdin=json.dumps(payload).encode(),
        env={"SANDGYM_CANDIDATE_ISOLATION": isolation},
        timeout=payload["timeout_s"] + HOST_GRACE_S,
        max_output=80 << 20,
        last=last,
    )
    if res.timed_out:
        return None, "timeout"
    lines = res.stdout.strip().splitlines()
    try:
        record = json.loads(lines[-1]) if lines else None
    except ValueError:
        record = None
    if not isinstance(record, dict):
        if isolation == "process" and res.exit_code > 128 and sandbox.alive:
            return None, f"violation: the verifier's judge was killed by signal {res.exit_code - 128}"
        return None, f"the runner wrote no record (exit {res.exit_code}): {res.text('stderr')[-1500:]}"
    if record.get("nonce") != payload["nonce"]:
        return None, "violation: the record does not carry this attempt's nonce"
    return record, ""


def outcome_of(tests: list[TestResult]) -> Outcome:
    if tests and all(t.status == "passed" for t in tests):
        return Outcome.PASSED
    if any(t.status in ("failed", "error") for t in tests):
        return Outcome.FAILED
    if any(t.status == "timeout" for t in tests):
        return Outcome.TIMEOUT
    return Outcome.FAILED


def _attempt(
    task: CodeTaskPair,
    code: str,
    runtime: Runtime,
    isolation: Candidates,
    watch: Callable[[Sandbox | None], None] | None = None,
) -> Attempt:
    nonce = secrets.token_hex(16)
    payload = payload_for(task, code, None, nonce)
    t0 = time.perf_counter()
    try:
        with runtime.create(verifier_spec(task)) as sandbox:
            create_s = sandbox.info.create_s
            if watch is not None:
                watch(sandbox)
            try:
                record, problem = run_in_sandbox(sandbox, payload, isolation, last=True)
            finally:
                if watch is not None:
                    watch(None)
    except SandboxError as e:
        return Attempt(outcome=Outcome.ENV_ERROR, detail=str(e), duration_s=time.perf_counter() - t0)
    duration = time.perf_counter() - t0
    if record is None:
        if problem == "timeout":
            return Attempt(
                outcome=Outcome.TIMEOUT,
                detail="the verification ran out of time",
                duration_s=duration,
                create_s=create_s,
            )
        if problem.startswith("violation"):
            kind = "killed the verifier" if "killed" in problem else "forged verifier record"
            return Attempt(
                outcome=Outcome.VIOLATION, detail=problem, duration_s=duration, create_s=create_s, violations=[kind]
            )
        return Attempt(outcome=Outcome.ENV_ERROR, detail=problem, duration_s=duration, create_s=create_s)
    if "infra_error" in record:
        return Attempt(outcome=Outcome.ENV_ERROR, detail=record["infra_error"], duration_s=duration, create_s=create_s)
    tests = [TestResult(**t) for t in record.get("tests", [])]
    return Attempt(
        outcome=outcome_of(tests),
        tests=tests,
        duration_s=duration,
        create_s=create_s,
        detail=record.get("load_error", ""),
        output=record.get("output", "")[:4000],
        isolation=record.get("isolation", isolation),
    )


def candidate_isolation(runtime: Runtime) -> Candidates:
    """Namespaces of its own for the candidate where the sandbox allows them."""
    return "pidns" if getattr(runtime, "nested_namespaces", True) else "process"


def verify(
    task: CodeTaskPair,
    code: str,
    runtime: Runtime,
    retries: int = 2,
    isolation: Candidates | None = None,
    watch: Callable[[Sandbox | None], None] | None = None,
) -> Verdict:
    """Judge `code` against the hidden tests of `task`.

    An infrastructure error is retried up to `retries` times (after a
    backoff); every attempt is kept in the verdict, the first one included.
    `watch` is told of each verifier sandbox while it runs (and None after),
    so that the env can abort it from another thread.
    """
    if task.visible.kind == "stdio":  # a whole program, in Python here (verify_stdio names the language)
        return verify_stdio(task, code, "python", runtime, retries)
    chosen = isolation or candidate_isolation(runtime)
    attempts = attempts_until_settled(lambda: _attempt(task, code, runtime, chosen, watch), retries)
    return Verdict.from_attempts(VERIFIER_VERSION, attempts)


def run_examples(sandbox, task: CodeTaskPair, code: str, isolation: Candidates = "pidns") -> str:
    """The multi-turn `run` tool: the code against the visible examples, in the
    agent's own sandbox. Returns the feedback text the agent sees."""
    payload = payload_for(task, code, list(task.visible.examples), secrets.token_hex(8))
    try:
        record, problem = run_in_sandbox(sandbox, payload, isolation)
    except SandboxError as e:
        return f"sandbox error while running the code: {e}"
    if record is None:
        return "the run ran out of time" if problem == "timeout" else f"the run failed: {problem}"
    if "infra_error" in record:
        return f"sandbox error while running the code: {record['infra_error']}"
    lines = []
    if record.get("load_error"):
        lines.append(f"loading the code failed: {record['load_error']}")
    elif not task.visible.examples:
        lines.append(f"the code loaded and defines {task.visible.entry_point}; this task has no visible examples")
    else:
        for ex, t in zip(task.visible.examples, record.get("tests", []), strict=False):
            call = (
                f"{task.visible.entry_point}("
                + ", ".join([repr(a) for a in ex.args] + [f"{k}={v!r}" for k, v in ex.kwargs.items()])
                + ")"
            )
            lines.append(f"{t['status'].upper()}: {call}" + (f" -> {t['detail']}" if t.get("detail") else ""))
    if record.get("output"):
        lines.append("output:\n" + record["output"][-2000:])
    return "\n".join(lines)


def validate_task(task: CodeTaskPair, runtime: Runtime) -> list[str]:
    """What is wrong with a task (`sandgym tasks validate`): its reference
    solution must pass, and a function that returns None must not."""
    if task.visible.kind == "stdio":
        return validate_stdio_task(task, runtime)
    problems = []
    good = verify(task, task.hidden.reference_solution, runtime)
    if good.outcome != Outcome.PASSED:
        why = good.detail or [t.detail for t in good.tests if t.status != "passed"][:1]
        problems.append(f"reference solution {good.outcome.value}: {why}")
    empty = verify(task, f"def {task.visible.entry_point}(*args, **kwargs):\n    return None\n", runtime)
    if empty.outcome == Outcome.PASSED:
        problems.append("a function returning None passes: the tests are too weak")
    return problems
