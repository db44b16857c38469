"""Judging stdio programs: code-function tasks of kind `stdio`
(CodeContests / APPS style), in any language of the `/run_code` table
(sandgym/fusion/languages.py).

Each attempt starts a fresh sandbox of the `polyglot` image that no agent
used, compiles the program there (compiled languages) and runs it once per
hidden case with the case's input on stdin. Only the inputs enter the
sandbox: the expected outputs stay on the host, where each run's stdout is
compared with them (line by line, trailing whitespace ignored). Per case:
passed, failed (wrong answer or a non-zero exit), timeout (its time
limit; never a wrong answer), error (the program did not compile).
"""

from __future__ import annotations

import math
import time

from sandgym.fusion.languages import BASE_ENV, IMAGE, LANGUAGES, Language
from sandgym.outcomes import Outcome
from sandgym.runtimes.base import Runtime, SandboxError, SandboxSpec
from sandgym.specs.code_function import CodeTaskPair, IOCase, output_lines, same_output
from sandgym.verifiers.models import Attempt, TestResult, Verdict
from sandgym.verifiers.retry import attempts_until_settled

VERIFIER_VERSION = "code_function.stdio/1"
COMPILE_TIMEOUT_S = 60.0
MAX_OUTPUT = 1 << 20  # bytes of a run's stdout kept (more is a wrong answer)
DETAIL_CHARS = 300


def stdio_spec(task: CodeTaskPair, cases: int) -> SandboxSpec:
    per_case = task.visible.timeout_s
    return SandboxSpec(
        image=IMAGE,
        network="none",
        cpu_seconds=math.ceil(max(per_case, COMPILE_TIMEOUT_S)) + 1,
        memory_mb=2048,  # the JVM's and compilers' reservations (fusion/languages.py)
        process_limits=True,
        pids=64,
        disk_mb=256,
        exec_workspace=True,  # compiled programs run from the workspace
        wall_timeout_s=COMPILE_TIMEOUT_S + cases * (per_case + 5) + 60,
        labels={"role": "verifier", "task": task.id},
    )


def _case_name(case: IOCase, i: int) -> str:
    return case.name or f"case_{i}"


def _first_difference(got: str, want: str) -> str:
    g, w = output_lines(got), output_lines(want)
    for i in range(max(len(g), len(w))):
        a = g[i] if i < len(g) else "<end of output>"
        b = w[i] if i < len(w) else "<end of output>"
        if a != b:
            return f"line {i + 1}: got {a[:DETAIL_CHARS]!r}, expected {b[:DETAIL_CHARS]!r}"
    return ""


def run_cases(
    task: CodeTaskPair, code: str, lang: Language, runtime: Runtime, cases: list[IOCase], hidden: bool
) -> Attempt:
    """One attempt: compile, then every case, in one fresh sandbox. With
    `hidden`, a wrong answer's detail does not show the expected output."""
    env = {**BASE_ENV, **lang.env}
    t0 = time.perf_counter()
    results: list[TestResult] = []
    try:
        with runtime.create(stdio_spec(task, len(cases))) as box:
            create_s = box.info.create_s
            box.put_files({**{k: v.encode() for k, v in lang.extra_files.items()}, lang.source: code.encode()})
            if lang.compile is not None:
                c = box.exec(list(lang.compile), timeout=COMPILE_TIMEOUT_S, env=env, max_output=MAX_OUTPUT)
                if c.timed_out or c.exit_code != 0:
                    why = "compile timeout" if c.timed_out else f"compile error: {c.text('stderr')[-1500:]}"
                    tests = [TestResult(name=_case_name(k, i), status="error", detail=why) for i, k in enumerate(cases)]
                    return Attempt(
                        outcome=Outcome.TIMEOUT if c.timed_out else Outcome.FAILED,
                        detail=why,
                        tests=tests,
                        duration_s=time.perf_counter() - t0,
                        create_s=create_s,
                    )
            for i, case in enumerate(cases):
                r = box.exec(
                    list(lang.run),
                    timeout=task.visible.timeout_s,
                    stdin=case.stdin.encode(),
                    env=env,
                    max_output=MAX_OUTPUT,
                )
                results.append(_judged(_case_name(case, i), r, case.stdout, hidden))
    except SandboxError as e:
        return Attempt(outcome=Outcome.ENV_ERROR, detail=str(e), duration_s=time.perf_counter() - t0)
    return Attempt(outcome=outcome_of(results), tests=results, duration_s=time.perf_counter() - t0, create_s=create_s)


def _judged(name: str, r, want: str, hidden: bool) -> TestResult:
    if r.timed_out:
        return TestResult(name=name, status="timeout", detail="time limit exceeded", duration_s=r.duration_s)
    got = r.stdout.decode("utf-8", "replace")
    if r.exit_code != 0:
        detail = f"exit {r.exit_code}: {r.text('stderr')[-DETAIL_CHARS:]}"
        return TestResult(name=name, status="failed", detail=detail, duration_s=r.duration_s)
    if r.truncated or not same_output(got, want):
        detail = "wrong answer" if hidden else f"wrong answer: {_first_difference(got, want)}"
        return TestResult(name=name, status="failed", detail=detail, duration_s=r.duration_s)
    return TestResult(name=name, status="passed", duration_s=r.duration_s)


def outcome_of(tests: list[TestResult]) -> Outcome:
    """Passed when every case passed; a wrong answer anywhere is a failure;
    otherwise a case that ran out of time makes it a timeout."""
    if tests and all(t.status == "passed" for t in tests):
        return Outcome.PASSED
    if any(t.status in ("failed", "error") for t in tests):
        return Outcome.FAILED
    if any(t.status == "timeout" for t in tests):
        return Outcome.TIMEOUT
    return Outcome.FAILED


def stdio_language(name: str) -> Language:
    """The `/run_code` language `name`; ValueError lists the supported ones."""
    if name not in LANGUAGES:
        raise ValueError(f"language {name!r} is not supported for stdio tasks; supported: {', '.join(LANGUAGES)}")
    return LANGUAGES[name]


def verify_stdio(task: CodeTaskPair, code: str, language: str, runtime: Runtime, retries: int = 2) -> Verdict:
    """Judge the program `code` in `language` against the hidden io_tests;
    infrastructure errors are retried, every attempt kept."""
    lang = stdio_language(language)
    attempts = attempts_until_settled(
        lambda: run_cases(task, code, lang, runtime, list(task.hidden.io_tests), hidden=True), retries
    )
    return Verdict.from_attempts(VERIFIER_VERSION, attempts)


def validate_stdio_task(task: CodeTaskPair, runtime: Runtime) -> list[str]:
    """What is wrong with a stdio task: every reference solution (Python and
    the others) must pass, and a program that prints nothing must not."""
    problems = []
    refs = {"python": task.hidden.reference_solution, **task.hidden.reference_solutions}
    for language, code in refs.items():
        if language not in LANGUAGES:
            problems.append(f"reference_solutions: {language!r} is not a /run_code language")
            continue
        got = verify_stdio(task, code, language, runtime)
        if got.outcome != Outcome.PASSED:
            why = got.detail or [t.detail for t in got.tests if t.status != "passed"][:1]
            problems.append(f"{language} reference solution {got.outcome.value}: {why}")
    if verify_stdio(task, "pass\n", "python", runtime).outcome == Outcome.PASSED:
        problems.append("a program that prints nothing passes: the tests are too weak")
    return problems
