"""What the boundary writes back, read on the host.

The runner (`boundary/runner.py`) prints one JSON answer carrying the
attempt's nonce; in it are the records the guard (`boundary/sandgym_swe_guard.py`)
signed during the pytest run. `read_answer` decides whether the answer can
be believed; `parse_records` fills a `TestRun` from the records and checks
they agree with each other and with pytest's exit code.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from sandgym.runtimes.base import ExecResult, Sandbox, SandboxError

GUARD_EXIT = 86  # boundary/sandgym_swe_guard.py: the records channel was tampered with


@dataclass
class TestRun:
    """What one pytest run recorded. `statuses` maps node ids to passed /
    failed / skipped / error; a listed test without a record is missing."""

    statuses: dict[str, str] = field(default_factory=dict)
    collected: int = 0
    collected_ids: list[str] = field(default_factory=list)
    exit_code: int | None = None
    timed_out: bool = False
    output: str = ""
    valid: bool = True
    problem: str = ""  # why the log is invalid (or forged)
    forged: bool = False  # the runner's answer cannot be believed
    violations: list[str] = field(default_factory=list)  # tampering the guard or the records show
    collect_errors: dict[str, str] = field(default_factory=dict)
    details: dict[str, str] = field(default_factory=dict)
    # node id -> per call report, whether the plugin saw the call raise (None: not seen)
    calls: dict[str, list[bool | None]] = field(default_factory=dict)
    isolation: dict[str, Any] = field(default_factory=dict)
    answer: dict[str, Any] = field(default_factory=dict)
    duration_s: float = 0.0

    def status(self, test: str) -> str:
        return self.statuses.get(test, "missing")

    @property
    def passed(self) -> list[str]:
        return [t for t, s in self.statuses.items() if s == "passed"]


_RANK = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}


def _phase_status(rec: dict) -> str:
    if rec.get("outcome") == "failed":
        return "failed" if rec.get("when") == "call" else "error"
    if rec.get("outcome") == "skipped":
        return "skipped"
    return "passed"


def parse_records(records: list[dict], run: TestRun) -> None:
    """Fill `run` from the guard's signed records and check they agree with
    each other and with the exit code."""
    collected = finish = None
    armed = False
    phases: dict[str, dict[str, str]] = {}
    for rec in records:
        if not isinstance(rec, dict):
            continue
        kind = rec.get("kind")
        if kind == "armed":
            armed = True
        elif kind == "violation":
            run.violations.append(f"{rec.get('event')}: {str(rec.get('detail'))[:500]}")
        elif kind == "collected" and isinstance(rec.get("n"), int):
            if collected is not None:
                run.violations.append("records: a second collection record")
            collected = rec["n"]
            run.collected_ids = [i for i in rec.get("ids", []) if isinstance(i, str)]
        elif kind == "collect_error":
            run.collect_errors[str(rec.get("nodeid"))] = str(rec.get("detail", ""))[-1500:]
        elif kind == "report" and isinstance(rec.get("nodeid"), str):
            when = str(rec.get("when"))
            if when == "call":
                # What the plugin saw the call do (for plain test functions, around
                # pytest's own call of the function: no wrapper in between can hide
                # what it raised); None: the call was not seen.
                seen = rec.get("raised")
                run.calls.setdefault(rec["nodeid"], []).append(seen if isinstance(seen, bool) else None)
            by_phase = phases.setdefault(rec["nodeid"], {})
            if when in by_phase:
                run.violations.append(f"records: a second {when} report for {rec['nodeid']}")
            by_phase[when] = _phase_status(rec)
            if rec.get("detail"):
                run.details[rec["nodeid"]] = str(rec["detail"])[-1500:]
        elif kind == "finish" and isinstance(rec.get("exitstatus"), int):
            if finish is not None:
                run.violations.append("records: a second session-finish record")
            finish = rec["exitstatus"]
    for nodeid, by_phase in phases.items():
        worst = max(by_phase.values(), key=_RANK.__getitem__)
        # A pass needs the call itself to have passed, not only setup.
        run.statuses[nodeid] = "skipped" if worst == "passed" and "call" not in by_phase else worst
        if by_phase.get("call") == "passed" and run.calls.get(nodeid) != [False]:
            seen = run.calls.get(nodeid) or []
            run.violations.append(
                f"records: {nodeid} was reported passed, but its call "
                + ("raised" if True in seen else "was not seen" if None in seen or not seen else "ran more than once")
            )
    run.collected = collected or 0
    problems = []
    if run.timed_out:
        return
    if records and not armed:
        problems.append("the guard did not arm")
    if collected is None or finish is None:
        problems.append(
            f"pytest did not finish (exit code {run.exit_code}): no "
            f"{'collection' if collected is None else 'session-finish'} record"
        )
    elif finish != run.exit_code:
        problems.append(f"pytest reported exit status {finish} but the process exited with {run.exit_code}")
    if run.collected <= 0 and not problems and not run.collect_errors:
        # (Every listed file failing to import is a consistent log: the tests fail.)
        problems.append("no test was collected")
    bad = any(s in ("failed", "error") for s in run.statuses.values()) or run.collect_errors
    if not problems:
        if run.exit_code == 0 and bad:
            problems.append("pytest exited 0 although tests failed")
        elif run.exit_code == 1 and not bad:
            problems.append("pytest exited 1 although no test failed")
        elif run.exit_code not in (0, 1):
            problems.append(f"pytest exited {run.exit_code} (interrupted, internal or usage error)")
    if problems:
        run.valid, run.problem = False, "; ".join(problems)


def read_answer(res: ExecResult, nonce: str, sandbox: Sandbox, timeout_s: float, duration_s: float) -> TestRun:
    """The TestRun of one runner job from what the runner printed (`res`):
    its answer must be the only line, carry `nonce` and come from a runner
    that exited 0, or the run is forged. Raises SandboxError when the
    sandbox itself failed (infrastructure, not the tests)."""
    run = TestRun(duration_s=duration_s)
    if res.timed_out:
        run.timed_out, run.valid, run.problem = True, False, "the run outlived the runner's own deadline"
        return run
    lines = [line for line in res.text("stdout").splitlines() if line.strip()]
    answers = []
    for line in lines:
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict) and obj.get("nonce") == nonce:
            answers.append(obj)

    def forged(problem: str) -> TestRun:
        run.valid, run.forged, run.problem = False, True, problem
        return run

    if not answers:
        if res.exit_code > 128 and sandbox.alive and not res.oom_killed:
            # Nothing outside the sandbox kills the runner: the tests did.
            return forged(f"the runner was killed by signal {res.exit_code - 128}")
        raise SandboxError(f"the SWE runner gave no answer (exit {res.exit_code}): {res.text('stderr')[-1500:]}")
    if len(answers) > 1:
        return forged("more than one runner answer carries this run's nonce")
    if len(lines) > 1:
        return forged("something besides the runner wrote to the runner's output")
    if res.exit_code != 0:
        # The runner exits 0 whenever it printed: its answer is not believed otherwise.
        return forged(f"the runner printed an answer but exited {res.exit_code}")
    ans = answers[0]
    run.answer = ans
    if ans.get("infra_error"):
        raise SandboxError(f"the SWE runner could not run the tests: {ans['infra_error']}")
    if "apply_failed" in ans:
        return run
    run.isolation = ans.get("isolation") or {}
    run.exit_code, run.timed_out = ans.get("exit_code"), bool(ans.get("timed_out"))
    run.output = str(ans.get("output", ""))
    for problem in ans.get("channel_problems") or []:
        run.violations.append(f"records channel: {problem}")
    if run.exit_code == GUARD_EXIT:
        run.violations.append("records channel: the guard found its channel replaced or closed")
    records = ans.get("records") or []
    parse_records(records if isinstance(records, list) else [], run)
    if run.timed_out:
        run.valid, run.problem = False, f"the tests ran longer than {timeout_s:g} s"
    return run
