"""Host side of SWE repo-issue verification.

`run_tests` runs pytest on a copy of a tree in a fresh sandbox and returns
per-test statuses; `verify` judges an agent's diff the way SWE-bench does,
with the holes it is known for closed:

1. the diff is split per file on the host; sections touching protected
   paths (tests, conftest.py, sitecustomize.py, *.pth, pytest config files)
   or adding symlinks are dropped and reported as a violation;
2. in a fresh sandbox: the start state (pristine tree + base_patch) is
   unpacked, the rest of the diff is applied with `git apply` (exact
   context, no fuzz), paths the test patch adds are removed, and the test
   patch is applied;
3. pytest runs FAIL_TO_PASS + PASS_TO_PASS under the verifier's runner
   (`boundary/runner.py`, mounted read-only): the verifier's own
   inifile and rootdir, no plugin autoload, no cache provider, an isolated
   interpreter, and the records plugin writing one JSON line per event to a
   pipe the runner reads. The runner's answer must carry this attempt's nonce;
4. the status is computed here from the records: every listed test needs
   an explicit pass (skipped or missing = failed), at least one test must
   have been collected, and pytest's exit code must agree with the records.

Statuses and outcomes: FULL -> passed; PARTIAL, NO, APPLY_FAILED, EMPTY ->
failed; TIMEOUT -> timeout; INVALID_LOG -> failed when the agent changed
something (its diff broke the run: os._exit, pytest.exit, a broken
collection), env_error otherwise; ENV_ERROR -> env_error (retried, every
attempt kept). Protected-path changes make the outcome `violation`
whatever the tests say. Reward 1 only for FULL.

Limits: the code under test runs in pytest's process, as the same user as
the runner; it can forge records on the pipe it shares with the plugin.
What it cannot do is reach the host, the runner's memory, descriptors or
nonce (non-dumpable), or the verifier's config, plugin and interpreter.
"""

from __future__ import annotations

import json
import re
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from sandgym.families import family
from sandgym.outcomes import Outcome
from sandgym.runtimes.base import Mount, Runtime, Sandbox, SandboxError, SandboxSpec
from sandgym.runtimes.staging import stage_dir
from sandgym.specs.swe_repo import SWEHidden, SWETask, TestEnvironment
from sandgym.verifiers.models import Attempt, TestResult, Verdict
from sandgym.verifiers.retry import attempts_until_settled
from sandgym.verifiers.swe_repo.checkout import start_state, tar_dir
from sandgym.verifiers.swe_repo.sources import test_venv

VERIFIER_VERSION = "swe_repo/1"
BOUNDARY_DIR = "/opt/sandgym/swe_verifier"
VENV_DIR = "/opt/sandgym/venv"
WORKSPACE = "/workspace"
REPO_DIR = f"{WORKSPACE}/repo"
VENV_PYTHON = f"{VENV_DIR}/bin/python"
# Sandbox start, git apply and interpreter start-up, beyond the tests' budget.
HOST_GRACE_S = 30.0
MAX_DIFF_BYTES = 8 << 20

STATUSES = ("FULL", "PARTIAL", "NO", "APPLY_FAILED", "EMPTY", "TIMEOUT", "INVALID_LOG", "ENV_ERROR")

# The image every SWE sandbox (the agent's and the verifier's) runs on.
IMAGE = f"recipe:{family('swe_repo').image_recipe}"


# -- mounts and sandboxes ---------------------------------------------------------


def boundary_mount() -> Mount:
    return Mount(source=str(stage_dir(Path(__file__).parent / "boundary", ("*.py", "*.ini"))), target=BOUNDARY_DIR)


def venv_mount(environment: TestEnvironment) -> Mount:
    return Mount(source=str(test_venv(environment)), target=VENV_DIR)


def sandbox_spec(environment: TestEnvironment, timeout_s: float, size_bytes: int, role: str, label: str) -> SandboxSpec:
    # The workspace holds the repository plus what tests write; /tmp is as large.
    disk_mb = max(256, 4 * (size_bytes >> 20) + 128)
    return SandboxSpec(
        image=IMAGE,
        memory_mb=2048,
        pids=256,
        disk_mb=disk_mb,
        file_size_mb=64,
        cpu_seconds=int(timeout_s) + 30,
        wall_timeout_s=timeout_s + HOST_GRACE_S + 60,
        mounts=(boundary_mount(), venv_mount(environment)),
        labels={"role": role, "task": label},
    )


# -- test runs -------------------------------------------------------------------------


@dataclass
class TestRun:
    """What one pytest run recorded. `statuses` maps node ids to passed /
    failed / skipped / error; a listed test without a record is missing."""

    statuses: dict[str, str] = field(default_factory=dict)
    collected: int = 0
    exit_code: int | None = None
    timed_out: bool = False
    output: str = ""
    valid: bool = True
    problem: str = ""  # why the log is invalid (or forged)
    forged: bool = False  # the runner's answer lacked this run's nonce
    collect_errors: dict[str, str] = field(default_factory=dict)
    details: dict[str, str] = field(default_factory=dict)
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


def parse_records(text: str, run: TestRun) -> None:
    """Fill `run` from the plugin's JSON lines and check they agree with the exit code."""
    collected = finish = None
    phases: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if not isinstance(rec, dict):
            continue
        kind = rec.get("kind")
        if kind == "collected" and isinstance(rec.get("n"), int):
            collected = rec["n"] if collected is None else collected + rec["n"]
        elif kind == "collect_error":
            run.collect_errors[str(rec.get("nodeid"))] = str(rec.get("detail", ""))[-1500:]
        elif kind == "report" and isinstance(rec.get("nodeid"), str):
            phases.setdefault(rec["nodeid"], {})[str(rec.get("when"))] = _phase_status(rec)
            if rec.get("detail"):
                run.details[rec["nodeid"]] = str(rec["detail"])[-1500:]
        elif kind == "finish" and isinstance(rec.get("exitstatus"), int):
            finish = rec["exitstatus"]
    for nodeid, by_phase in phases.items():
        worst = max(by_phase.values(), key=_RANK.__getitem__)
        # A pass needs the call itself to have passed, not only setup.
        run.statuses[nodeid] = "skipped" if worst == "passed" and "call" not in by_phase else worst
    run.collected = collected or 0
    problems = []
    if run.timed_out:
        return
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


def run_in_sandbox(
    sandbox: Sandbox, environment: TestEnvironment, tests: list[str] | None, timeout_s: float, repo_dir: str = REPO_DIR
) -> TestRun:
    """Run pytest on `repo_dir` inside `sandbox` (which has the two mounts of
    `sandbox_spec`). Raises SandboxError when the sandbox itself fails."""
    nonce = secrets.token_hex(16)
    job = {
        "nonce": nonce,
        "repo": repo_dir,
        "python": VENV_PYTHON,
        "import_root": environment.import_root,
        "tests": tests,
        "args": list(environment.test_args),
        "timeout_s": timeout_s,
    }
    t0 = time.perf_counter()
    res = sandbox.run_python(
        f"{BOUNDARY_DIR}/runner.py",
        stdin=json.dumps(job).encode(),
        timeout=timeout_s + HOST_GRACE_S,
        max_output=96 << 20,
    )
    run = TestRun(duration_s=time.perf_counter() - t0)
    if res.timed_out:
        run.timed_out, run.valid, run.problem = True, False, "the run outlived the runner's own deadline"
        return run
    answers = []
    for line in res.stdout.splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict) and obj.get("nonce") == nonce:
            answers.append(obj)
    if len(answers) != 1:
        run.valid = False
        if answers or (res.exit_code > 128 or res.exit_code < 0) and sandbox.alive:
            # Two answers with our nonce, or the runner killed from inside.
            run.forged = True
            run.problem = (
                f"the runner was killed by signal {abs(res.exit_code) & 0x7F}"
                if not answers
                else "more than one runner answer carries this run's nonce"
            )
        else:
            raise SandboxError(f"the SWE runner gave no answer (exit {res.exit_code}): {res.text('stderr')[-1500:]}")
        return run
    ans = answers[0]
    run.exit_code, run.timed_out = ans.get("exit_code"), bool(ans.get("timed_out"))
    run.output = str(ans.get("output", ""))
    parse_records(str(ans.get("records", "")), run)
    if run.timed_out:
        run.valid, run.problem = False, f"the tests ran longer than {timeout_s:g} s"
    return run


def run_tests(
    runtime: Runtime, tree: Path, environment: TestEnvironment, tests: list[str] | None, timeout_s: float
) -> TestRun:
    """Run `tests` (pytest node ids relative to `tree`; None = the whole suite)
    on a copy of `tree` in a fresh sandbox. Raises SandboxError (infrastructure)."""
    tree = Path(tree)
    if not tree.is_dir():
        raise ValueError(f"tree {tree} is not a folder")
    tar = tar_dir(tree, "repo")
    spec = sandbox_spec(environment, timeout_s, len(tar), "verifier", tree.name)
    with runtime.create(spec) as sandbox:
        sandbox.put_archive(tar, WORKSPACE)
        return run_in_sandbox(sandbox, environment, tests, timeout_s)


# -- diffs -------------------------------------------------------------------------------


@dataclass
class FileDiff:
    paths: tuple[str, ...]  # every path the section names (old and new)
    text: str
    adds_file: bool = False
    symlink: bool = False


_HEADER = re.compile(r"^diff --git (?:\"?a/(.+?)\"? \"?b/(.+?)\"?)$")


def _unquote(path: str) -> str:
    if path.startswith('"') and path.endswith('"'):
        path = path[1:-1].encode("latin-1", "backslashreplace").decode("unicode_escape")
        path = path.encode("latin-1", "replace").decode("utf-8", "replace")
    return path


def split_diff(diff: str) -> list[FileDiff]:
    """Per-file sections of a git diff; text before the first header is ignored."""
    sections: list[list[str]] = []
    for line in diff.splitlines(keepends=True):
        if line.startswith("diff --git "):
            sections.append([line])
        elif sections:
            sections[-1].append(line)
    out = []
    for lines in sections:
        paths: set[str] = set()
        m = _HEADER.match(lines[0].rstrip("\n"))
        if m:
            paths.update(_unquote(p) for p in m.groups())
        adds = symlink = False
        for line in lines[1:]:
            if line.startswith(("@@", "GIT binary patch")):
                break
            for prefix in ("--- a/", "+++ b/", "rename from ", "rename to ", "copy from ", "copy to "):
                if line.startswith(prefix):
                    paths.add(_unquote(line[len(prefix) :].rstrip("\n")))
            if line.startswith("new file mode"):
                adds = True
            if line.rstrip("\n").endswith("120000") and ("mode" in line):
                symlink = True
        out.append(FileDiff(tuple(sorted(paths)), "".join(lines), adds, symlink))
    return out


PROTECTED_NAMES = {
    "conftest.py",
    "sitecustomize.py",
    "usercustomize.py",
    "pytest.ini",
    "tox.ini",
    "setup.cfg",
    "pyproject.toml",
    ".pytest.ini",
}
PROTECTED_DIRS = {"tests", "test", "testing"}


def protected_reason(path: str) -> str | None:
    """Why the verifier keeps the agent's hands off `path`, or None."""
    parts = PurePosixPath(path).parts
    if not parts:
        return None
    name = parts[-1]
    if name in PROTECTED_NAMES:
        return f"{path}: {name} configures or hooks into the test run"
    if name.endswith(".pth"):
        return f"{path}: .pth files run code at interpreter start"
    if (name.startswith("test_") or name.endswith("_test.py")) and name.endswith(".py"):
        return f"{path}: a test file"
    if any(p in PROTECTED_DIRS for p in parts[:-1]):
        return f"{path}: under a test folder"
    return None


def filter_diff(diff: str) -> tuple[str, list[str]]:
    """(the diff without protected sections, one line per dropped section)."""
    kept, dropped = [], []
    for section in split_diff(diff):
        reasons = [r for p in section.paths if (r := protected_reason(p))]
        if section.symlink:
            reasons.append(f"{', '.join(section.paths)}: symlinks are not accepted in a diff")
        if reasons:
            dropped.extend(reasons)
        else:
            kept.append(section.text)
    return "".join(kept), dropped


def added_paths(patch: str) -> list[str]:
    return [p for s in split_diff(patch) if s.adds_file for p in s.paths]


# -- verification -----------------------------------------------------------------


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


def _git_apply(sandbox: Sandbox, patch: str, name: str) -> tuple[bool, str]:
    """Apply `patch` strictly (exact context, no fuzz) inside the sandbox's repo."""
    path = f"/tmp/sg-verify/{name}"
    sandbox.put_files({name: patch.encode()}, "/tmp/sg-verify")
    res = sandbox.exec(
        ["git", "apply", "--verbose", "--whitespace=nowarn", path],
        timeout=120,
        cwd=REPO_DIR,
        env={
            "HOME": "/tmp/sg-verify",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": "/dev/null",
            "GIT_CEILING_DIRECTORIES": WORKSPACE,
        },
    )
    return res.ok, (res.text("stderr") + res.text("stdout"))[-2000:]


def _attempt(task: SWETask, hidden: SWEHidden, kept: str, changed: bool, runtime: Runtime) -> Attempt:
    t0 = time.perf_counter()
    tests = list(dict.fromkeys([*hidden.FAIL_TO_PASS, *hidden.PASS_TO_PASS]))

    def done(status: str, outcome: Outcome | None = None, **kw) -> Attempt:
        return Attempt(status=status, outcome=outcome or OUTCOME_OF[status], duration_s=time.perf_counter() - t0, **kw)

    try:
        state = start_state(task)
        spec = sandbox_spec(task.environment, task.timeout_s, state.size_bytes, "verifier", task.id)
        with runtime.create(spec) as sandbox:
            create_s = sandbox.info.create_s
            sandbox.put_archive(state.tree_tar, WORKSPACE)
            if kept.strip():
                ok, log = _git_apply(sandbox, kept, "agent.diff")
                if not ok:
                    return done(
                        "APPLY_FAILED", detail=f"the diff does not apply to the base commit:\n{log}", create_s=create_s
                    )
            if hidden.test_patch.strip():
                doomed = added_paths(hidden.test_patch)
                if doomed:
                    sandbox.exec(["rm", "-rf", "--", *doomed], timeout=60, cwd=REPO_DIR)
                ok, log = _git_apply(sandbox, hidden.test_patch, "test.diff")
                if not ok:
                    status = "APPLY_FAILED" if changed else "ENV_ERROR"
                    return done(
                        status, detail=f"the test patch does not apply after the diff:\n{log}", create_s=create_s
                    )
            run = run_in_sandbox(sandbox, task.environment, tests, task.timeout_s)
    except SandboxError as e:
        return done("ENV_ERROR", detail=str(e))
    output = run.output[-4000:]
    if run.forged:
        return done(
            "INVALID_LOG",
            Outcome.VIOLATION,
            detail=run.problem,
            violations=["forged verifier record"],
            output=output,
            create_s=create_s,
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
    return done(status, tests=results, detail=detail, output=output, create_s=create_s)


def verify(task, diff: str, runtime: Runtime, retries: int = 2) -> Verdict:
    """Judge `diff` (git diff against the task's base commit) for `task`, a
    TaskPair(visible=SWETask, hidden=SWEHidden). Infrastructure errors are
    retried up to `retries` times; every attempt is kept."""
    visible, hidden = task.visible, task.hidden
    if len(diff.encode()) > MAX_DIFF_BYTES:
        attempt = Attempt(
            status="APPLY_FAILED",
            outcome=Outcome.FAILED,
            detail=f"the diff is {len(diff.encode())} bytes; the limit is {MAX_DIFF_BYTES}",
        )
        return _verdict(attempt, [attempt], [])
    sections = split_diff(diff)
    if diff.strip() and not sections:
        attempt = Attempt(
            status="EMPTY",
            outcome=Outcome.FAILED,
            detail="the submission holds no `diff --git` section: nothing to apply",
        )
        return _verdict(attempt, [attempt], [])
    kept, dropped = filter_diff(diff)
    attempts = attempts_until_settled(lambda: _attempt(visible, hidden, kept, bool(kept.strip()), runtime), retries)
    return _verdict(attempts[-1], attempts, dropped)


def _verdict(final: Attempt, attempts: list[Attempt], dropped: list[str]) -> Verdict:
    outcome, violations, detail = final.outcome, list(final.violations), final.detail
    if dropped and outcome != Outcome.ENV_ERROR:
        outcome = Outcome.VIOLATION
        violations += [f"protected path changed: {d}" for d in dropped]
        detail = "changes to protected paths were dropped: " + "; ".join(dropped) + (f"\n{detail}" if detail else "")
    return Verdict(
        verifier_version=VERIFIER_VERSION,
        outcome=outcome,
        status=final.status,
        tests=final.tests,
        detail=detail,
        violations=violations,
        attempts=attempts,
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
