"""Host side of SWE repo-issue verification: the verify flow.

`verify` judges an agent's diff the way SWE-bench does, with the holes it
is known for closed. Its parts live beside it: `diffs.py` (diffs parsed
fail-closed), `path_policy.py` (which paths a diff may touch), `scan.py`
(the static scan), `sentinels.py` (hidden per-attempt tests), `sandbox.py`
(the verifier's sandbox and runner jobs; `run_tests` runs pytest on a copy
of a tree) and `records.py` (reading what the boundary writes back).
Nothing inside the sandbox is trusted, the test process least of all: the
code under test is imported by the tests and runs in pytest's own process.
docs/swe_repo_verifier.md says what this guarantees and what it cannot.

1. The diff (taken by the env with its own git configuration and fixed
   a/ b/ prefixes) is parsed here, fail-closed: a section whose header,
   paths, extended headers or hunks cannot be read exactly is dropped as a
   violation, never applied. Sections touching protected paths (tests,
   conftest.py, sitecustomize.py, *.pth, pytest config, bytecode, native
   extensions, .git) or adding symlinks, or new top-level modules that
   shadow the standard library or the test venv, are dropped and reported
   as a violation. The kept diff is scanned for references to the test
   machinery (`scan` on the attempt; machinery writes are violations).
2. One runner job in a fresh sandbox (`boundary/runner.py`, mounted
   read-only) gets the start state with the job, lets the test process
   start up (it waits for its secrets, which come once the tree is final),
   writes the tree, applies the diff with `git apply` (exact context, no
   fuzz) and reports every path that changed, which the host compares with
   the start state (a protected path, symlink or shadowing module there is
   a violation whatever the diff text said); removes what the test patch
   adds, applies it, and appends hidden sentinel tests (per-attempt random
   names, one that must pass and one that must fail) to the FAIL_TO_PASS
   test modules.
3. pytest runs FAIL_TO_PASS + PASS_TO_PASS + sentinels in its own user,
   PID and mount namespaces where the sandbox allows them (no view of the
   runner or the sandbox's agent; the repository read-only, /tmp and the
   workspace not executable), with the verifier's inifile and rootdir, no
   plugin autoload and an isolated interpreter. An audit hook armed before
   any project import (`boundary/sandgym_swe_guard.py`) is the only writer
   of the records channel, signs each record with a per-run key the tests
   cannot read, reports tampering events as `violation` records, and
   checks pytest's machinery and each test item at every call.
4. Here: the runner's answer must be the only line it printed, carry this
   attempt's nonce and come from a runner that exited 0; a runner killed by
   a signal, a second answer, an unsigned or out-of-order record, a guard
   violation, a sentinel with the wrong result or gone missing, a passing
   report for a call the plugin saw raise, or a test file whose hash
   changed makes the outcome `violation`. The status comes from the
   records: every listed test needs an explicit pass (skipped or missing =
   failed), at least one test collected, and pytest's exit code agreeing.

Statuses and outcomes: FULL -> passed; PARTIAL, NO, APPLY_FAILED, EMPTY ->
failed; TIMEOUT -> timeout; INVALID_LOG -> failed when the agent changed
something (its diff broke the run: os._exit, pytest.exit, a broken
collection), env_error otherwise; ENV_ERROR -> env_error (retried, every
attempt kept). A violation makes the outcome `violation` whatever the
tests say. Reward 1 only for FULL.

Limits (open, see docs/swe_repo_verifier.md): the code under test shares
pytest's process. What holds there holds because the guard sees the act
before it is done, or because a check reads what pytest did from outside
the reach of unaudited Python. Open: native code (a C extension the diff
cannot add, but memfd + an import hook could load) defeats everything
in-process; walking frames through `f_back` and writing object
attributes are not audited, so a candidate that knows this verifier can
still tamper in the window between the guard's checks (e.g. from a
finalizer run by the collector) without being seen; semantic cheats of
the code under test (always-equal objects, special-cased inputs) are
only as weak as the hidden tests. With docker (runc) the sandbox has no
user namespaces: pytest runs as the runner's user in its own session,
the repository is read-only by mode only, and it can signal the runner
(a runner killed by a signal is then a violation, never a pass).
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import Field

from sandgym.outcomes import Outcome
from sandgym.runtimes.base import Runtime, SandboxError
from sandgym.specs.swe_repo import SWEHidden, SWETask, SWETaskPair
from sandgym.verifiers.models import Attempt, TestResult, Verdict
from sandgym.verifiers.retry import attempts_until_settled
from sandgym.verifiers.swe_repo.checkout import start_state
from sandgym.verifiers.swe_repo.diffs import added_paths, patch_paths, split_diff
from sandgym.verifiers.swe_repo.path_policy import (
    filter_diff,
    shadowed_names,
    start_info,
    task_test_files,
    tree_violations,
)
from sandgym.verifiers.swe_repo.records import TestRun
from sandgym.verifiers.swe_repo.sandbox import REPO_DIR, VENV_PYTHON, call_runner, isolation_for, sandbox_spec
from sandgym.verifiers.swe_repo.scan import legacy_families, scan_diff
from sandgym.verifiers.swe_repo.sentinels import make_sentinels, sentinel_problems

VERIFIER_VERSION = "swe_repo/4"
MAX_DIFF_BYTES = 8 << 20

STATUSES = ("FULL", "PARTIAL", "NO", "APPLY_FAILED", "EMPTY", "TIMEOUT", "INVALID_LOG", "ENV_ERROR")


class SWEAttempt(Attempt):
    """An attempt with what the SWE verifier found besides the tests."""

    # References to the test machinery in the kept diff ("path:line: term").
    scan: list[str] = Field(default_factory=list)
    # How the test process was isolated, and the sentinels' expected and actual results.
    checks: dict[str, Any] = Field(default_factory=dict)


class SWEVerdict(Verdict):
    scan: list[str] = Field(default_factory=list)


def classify(run: TestRun, hidden: SWEHidden) -> tuple[str, list[TestResult]]:
    """(status, per-test results) of a valid run."""
    results = []
    for group in (hidden.FAIL_TO_PASS, hidden.PASS_TO_PASS):
        for t in group:
            s = run.status(t)
            if s == "passed":
                results.append(TestResult(name=t, status="passed"))
            else:
                detail = {
                    "skipped": "skipped (counts as failed)",
                    "missing": "no record: not collected or not run",
                }.get(s, "")
                detail = detail or run.details.get(t, "")[-600:]
                results.append(TestResult(name=t, status="error" if s == "error" else "failed", detail=detail))
    f2p = [run.status(t) == "passed" for t in hidden.FAIL_TO_PASS]
    p2p = [run.status(t) == "passed" for t in hidden.PASS_TO_PASS]
    if all(f2p) and all(p2p):
        return "FULL", results
    if any(f2p):
        return "PARTIAL", results
    return "NO", results


OUTCOME_OF = {
    "FULL": Outcome.PASSED,
    "PARTIAL": Outcome.FAILED,
    "NO": Outcome.FAILED,
    "APPLY_FAILED": Outcome.FAILED,
    "EMPTY": Outcome.FAILED,
    "TIMEOUT": Outcome.TIMEOUT,
    "ENV_ERROR": Outcome.ENV_ERROR,
}


def verify_once(
    task: SWETask,
    hidden: SWEHidden,
    kept: str,
    changed: bool,
    runtime: Runtime,
    scan: list[str] | None = None,
    scan_violations: list[str] | None = None,
    apply: str = "git",
) -> SWEAttempt:
    """One attempt at judging the kept diff: one runner job in a fresh sandbox."""
    t0 = time.perf_counter()
    tests = list(dict.fromkeys([*hidden.FAIL_TO_PASS, *hidden.PASS_TO_PASS]))
    checks: dict[str, Any] = {}

    def done(status: str, outcome: Outcome | None = None, **kw) -> SWEAttempt:
        return SWEAttempt(
            status=status,
            outcome=outcome or OUTCOME_OF[status],
            duration_s=time.perf_counter() - t0,
            scan=list(scan or []),
            checks=checks,
            **kw,
        )

    create_s = None
    host: dict[str, float] = {}  # the host's side of the phases (the runner reports its own)
    try:
        state = start_state(task)
        info = start_info(state)
        test_patch = hidden.test_patch if hidden.test_patch.strip() else ""
        patched = set(patch_paths(test_patch)) if test_patch else set()
        patched |= {p for p in task_test_files(hidden) if p in info.files}
        sentinels = make_sentinels(hidden, set(info.protected) | patched)
        isolation = isolation_for(runtime)
        job = {
            "repo": REPO_DIR,
            "python": VENV_PYTHON,
            "import_root": task.environment.import_root,
            "tests": tests + [s.nodeid for s in sentinels],
            "args": list(task.environment.test_args),
            "timeout_s": task.timeout_s,
            "isolation": isolation,
            "readonly": True,
            "prepare": {
                "diff": kept if kept.strip() else None,
                "apply": apply,
                "test_patch": test_patch or None,
                "remove": added_paths(test_patch) if test_patch else [],
                "sentinels": [{"file": s.file, "code": s.code} for s in sentinels],
                "legacy": legacy_families(kept, info),
                "protected": sorted(set(info.protected) | patched),
            },
        }
        spec = sandbox_spec(task.environment, task.timeout_s, state.size_bytes, "verifier", task.id)
        host["host_job_s"] = time.perf_counter() - t0
        with runtime.create(spec) as sandbox:
            create_s = sandbox.info.create_s
            run = call_runner(sandbox, job, task.timeout_s, state.tree_tar)
            host["host_runner_s"] = run.duration_s
            t1 = time.perf_counter()
        host["host_close_s"] = time.perf_counter() - t1
    except SandboxError as e:
        return done("ENV_ERROR", detail=str(e), create_s=create_s)
    ans = run.answer
    phases: dict[str, Any] = ans["phases"] if isinstance(ans.get("phases"), dict) else {}
    phases.update({k: round(v, 4) for k, v in host.items()})
    checks.update({"isolation": run.isolation, "sentinels": {}, "phases": phases})
    failed_apply = ans.get("apply_failed")
    if failed_apply:
        log = failed_apply.get("log", "")
        if failed_apply.get("which") == "diff":
            return done("APPLY_FAILED", detail=f"the diff does not apply to the base commit:\n{log}", create_s=create_s)
        return done(
            "APPLY_FAILED" if changed else "ENV_ERROR",
            detail=f"the test patch does not apply after the diff:\n{log}",
            create_s=create_s,
        )
    output = run.output[-4000:]
    violations = list(scan_violations or [])
    violations += tree_violations(ans.get("tree_changes") or [], task.environment, info.files, task_test_files(hidden))
    violations += [f"test file changed while the tests ran: {p}" for p in ans.get("test_file_changes") or []]
    if run.forged:
        violations.append(f"forged verifier record: {run.problem}")
    violations += run.violations
    if run.valid and not run.forged:
        sentinel_violations, checks["sentinels"] = sentinel_problems(run, sentinels)
        violations += sentinel_violations
    if violations:
        # The tests' own verdict, when the records can still be read, goes in the detail.
        readable = run.valid and not run.forged and not run.violations
        tested, results = classify(run, hidden) if readable else ("INVALID_LOG", [])
        return done(
            tested,
            Outcome.VIOLATION,
            tests=results,
            detail="; ".join(violations)[:3000],
            violations=violations,
            output=output,
            create_s=create_s,
            isolation=str(run.isolation.get("isolation", "")) or None,
        )
    if run.timed_out:
        return done("TIMEOUT", detail=run.problem, output=output, create_s=create_s)
    if not run.valid:
        # The start state and the gold patch give valid logs (validated per
        # task): an invalid one after a real change is the change's doing.
        return done(
            "INVALID_LOG",
            Outcome.FAILED if changed else Outcome.ENV_ERROR,
            detail=f"invalid test log: {run.problem}",
            output=output,
            create_s=create_s,
        )
    status, results = classify(run, hidden)
    detail = ""
    if run.collect_errors:
        detail = "collection errors in: " + ", ".join(sorted(run.collect_errors)[:10])
    return done(
        status,
        tests=results,
        detail=detail,
        output=output,
        create_s=create_s,
        isolation=str(run.isolation.get("isolation", "")) or None,
    )


def verify(task: SWETaskPair, diff: str, runtime: Runtime, retries: int = 2, apply: str = "git") -> SWEVerdict:
    """Judge `diff` (git diff against the task's base commit) for `task`.
    Infrastructure errors are retried up to `retries` times; every attempt is kept.

    `apply="swebench"` (a SWE-bench prediction, not an agent's diff taken by
    the env): applied in the sandbox as SWE-bench applies it (`git apply`,
    then `patch --fuzz=5`), and a patch that cannot be read or applied is
    APPLY_FAILED (SWE-bench's error instance), never a violation."""
    if apply not in ("git", "swebench"):
        raise ValueError(f"apply must be 'git' or 'swebench', got {apply!r}")
    visible, hidden = task.visible, task.hidden
    t0 = time.perf_counter()
    if len(diff.encode("utf-8", "surrogateescape")) > MAX_DIFF_BYTES:
        attempt = SWEAttempt(
            status="APPLY_FAILED",
            outcome=Outcome.FAILED,
            detail=f"the diff is {len(diff.encode('utf-8', 'surrogateescape'))} bytes; the limit is {MAX_DIFF_BYTES}",
        )
        return _verdict(attempt, [attempt], [], [])
    sections = split_diff(diff)
    if apply == "swebench":
        problems = [s.problem for s in sections if s.problem]
        if not sections or problems:
            what = f"a diff section cannot be read ({problems[0]})" if problems else "it holds no `diff --git` section"
            attempt = SWEAttempt(
                status="APPLY_FAILED", outcome=Outcome.FAILED, detail=f"the patch does not apply: {what}"
            )
            return _verdict(attempt, [attempt], [], [])
    elif diff.strip() and not sections:
        attempt = SWEAttempt(
            status="EMPTY",
            outcome=Outcome.FAILED,
            detail="the submission holds no `diff --git` section: nothing to apply",
        )
        return _verdict(attempt, [attempt], [], [])
    info = start_info(start_state(visible))
    kept, dropped = filter_diff(
        diff, visible.environment.import_root, shadowed_names(visible.environment), info.files, task_test_files(hidden)
    )
    scan, scan_violations = scan_diff(kept, info)
    parse_s = round(time.perf_counter() - t0, 4)
    attempts = attempts_until_settled(
        lambda: verify_once(visible, hidden, kept, bool(kept.strip()), runtime, scan, scan_violations, apply), retries
    )
    for a in attempts:
        if isinstance(a, SWEAttempt) and "phases" in a.checks:
            a.checks["phases"]["host_parse_s"] = parse_s
    return _verdict(attempts[-1], attempts, dropped, scan)


def _verdict(final: Attempt, attempts: list[Attempt], dropped: list[str], scan: list[str]) -> SWEVerdict:
    outcome, violations, detail = final.outcome, list(final.violations), final.detail
    if dropped and outcome != Outcome.ENV_ERROR:
        outcome = Outcome.VIOLATION
        violations += [f"protected path changed: {d}" for d in dropped]
        detail = "changes to protected paths were dropped: " + "; ".join(dropped) + (f"\n{detail}" if detail else "")
    return SWEVerdict(
        verifier_version=VERIFIER_VERSION,
        outcome=outcome,
        status=final.status,
        tests=final.tests,
        detail=detail,
        violations=violations,
        attempts=attempts,
        scan=scan,
    )


def status_text(verdict: Verdict) -> str:
    """One paragraph for the agent's last observation."""
    passed = sum(t.status == "passed" for t in verdict.tests)
    text = f"Verdict: {verdict.status} -> {verdict.outcome.value} ({passed}/{len(verdict.tests)} tests passed)."
    if verdict.outcome == Outcome.ENV_ERROR:
        text += " An infrastructure error prevented verification; this is not a score."
    if verdict.detail:
        text += f"\n{verdict.detail[:1500]}"
    return text
