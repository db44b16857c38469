"""Host side of SWE repo-issue verification.

`run_tests` runs pytest on a copy of a tree in a fresh sandbox and returns
per-test statuses; `verify` judges an agent's diff the way SWE-bench does,
with the holes it is known for closed. Nothing inside the sandbox is
trusted, the test process least of all: the code under test is imported
by the tests and runs in pytest's own process. docs/swe_repo_verifier.md
says what this guarantees and what it cannot.

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

import io
import json
import os
import re
import secrets
import shutil
import sys
import tarfile
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import Field

from sandgym.families import family
from sandgym.outcomes import Outcome
from sandgym.runtimes.base import Mount, Runtime, Sandbox, SandboxError, SandboxSpec
from sandgym.runtimes.staging import stage_dir, staging_root
from sandgym.specs.swe_repo import SWEHidden, SWETask, TestEnvironment
from sandgym.verifiers.models import Attempt, TestResult, Verdict
from sandgym.verifiers.retry import attempts_until_settled
from sandgym.verifiers.swe_repo.checkout import StartState, start_state, tar_dir
from sandgym.verifiers.swe_repo.sources import COMPILED_MARK, test_venv

VERIFIER_VERSION = "swe_repo/4"
BOUNDARY_DIR = "/opt/sandgym/swe_verifier"
VENV_DIR = "/opt/sandgym/venv"
WORKSPACE = "/workspace"
REPO_DIR = f"{WORKSPACE}/repo"
VENV_PYTHON = f"{VENV_DIR}/bin/python"
# Sandbox start, git apply and interpreter start-up, beyond the tests' budget.
HOST_GRACE_S = 30.0
MAX_DIFF_BYTES = 8 << 20
GUARD_EXIT = 86  # boundary/sandgym_swe_guard.py: the records channel was tampered with

STATUSES = ("FULL", "PARTIAL", "NO", "APPLY_FAILED", "EMPTY", "TIMEOUT", "INVALID_LOG", "ENV_ERROR")

# The image every SWE sandbox (the agent's and the verifier's) runs on.
IMAGE = f"recipe:{family('swe_repo').image_recipe}"


class SWEAttempt(Attempt):
    """An attempt with what the SWE verifier found besides the tests."""

    # References to the test machinery in the kept diff ("path:line: term").
    scan: list[str] = Field(default_factory=list)
    # How the test process was isolated, and the sentinels' expected and actual results.
    checks: dict[str, Any] = Field(default_factory=dict)


class SWEVerdict(Verdict):
    scan: list[str] = Field(default_factory=list)


# -- mounts and sandboxes ---------------------------------------------------------


def boundary_mount() -> Mount:
    return Mount(source=str(stage_dir(Path(__file__).parent / "boundary", ("*.py", "*.ini"))), target=BOUNDARY_DIR)


_STAGED_VENVS: dict[str, Path] = {}
_STAGED_LOCK = threading.Lock()


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)  # same file system: no space, same mtime (the bytecode checks it)
    except OSError:
        shutil.copy2(src, dst)


def staged_venv(environment: TestEnvironment) -> Path:
    """The test venv, placed once in the staging folder (ours alone to write,
    world-readable). A read-only mount from there is one the local runtime's
    zygote can serve: a verifier sandbox is then a clone of the zygote, not a
    new bubblewrap process, which takes about 50 ms off every verification.
    Named by the venv's own content key; made under a temporary name and
    renamed, so a copy is whole or absent (`sandgym gc` removes a killed
    copy's leftovers)."""
    venv = test_venv(environment)
    with _STAGED_LOCK:
        dest = _STAGED_VENVS.get(str(venv))
        if dest is not None and dest.is_dir():
            return dest
        dest = staging_root() / f"venv-{venv.name}-{COMPILED_MARK.lstrip('.')}"
        if not (dest.is_dir() and not dest.is_symlink()):
            tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{os.getpid()}-", dir=dest.parent))
            try:
                shutil.copytree(venv, tmp, symlinks=True, copy_function=_link_or_copy, dirs_exist_ok=True)
                os.chmod(tmp, 0o755)
                os.rename(tmp, dest)
            except OSError:
                shutil.rmtree(tmp, ignore_errors=True)
                if not dest.is_dir():  # not another process's copy, made first
                    raise
        _STAGED_VENVS[str(venv)] = dest
        return dest


def venv_mount(environment: TestEnvironment) -> Mount:
    return Mount(source=str(staged_venv(environment)), target=VENV_DIR)


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


def isolation_for(runtime: Runtime) -> str:
    """pytest in namespaces of its own where the sandbox allows them."""
    return "pidns" if getattr(runtime, "nested_namespaces", True) else "process"


# -- test runs -------------------------------------------------------------------------


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


def call_runner(sandbox: Sandbox, job: dict[str, Any], timeout_s: float, tree: bytes = b"") -> TestRun:
    """Run one runner job; the TestRun holds its answer. `tree`: a tar of the
    start tree (paths under `repo/`), which the runner writes to the
    workspace while the test process starts. Raises SandboxError when the
    sandbox itself failed (infrastructure, not the tests)."""
    nonce = secrets.token_hex(16)
    job = {**job, "nonce": nonce}
    t0 = time.perf_counter()
    res = sandbox.run_python(
        f"{BOUNDARY_DIR}/runner.py",
        stdin=json.dumps(job).encode() + b"\n" + tree,  # one JSON line (no raw newline in it), then the tar
        timeout=timeout_s + HOST_GRACE_S,
        max_output=96 << 20,
    )
    run = TestRun(duration_s=time.perf_counter() - t0)
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


def run_in_sandbox(
    sandbox: Sandbox,
    environment: TestEnvironment,
    tests: list[str] | None,
    timeout_s: float,
    repo_dir: str = REPO_DIR,
    isolation: str = "pidns",
) -> TestRun:
    """Run pytest on `repo_dir` inside `sandbox` (which has the two mounts of
    `sandbox_spec`), as it is. Raises SandboxError when the sandbox itself fails."""
    job = {
        "repo": repo_dir,
        "python": VENV_PYTHON,
        "import_root": environment.import_root,
        "tests": tests,
        "args": list(environment.test_args),
        "timeout_s": timeout_s,
        "isolation": isolation,
        "readonly": False,
    }
    run = call_runner(sandbox, job, timeout_s)
    if run.violations and not run.forged:
        run.problem = "; ".join([run.problem, *run.violations] if run.problem else run.violations)
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
        return run_in_sandbox(sandbox, environment, tests, timeout_s, isolation=isolation_for(runtime))


# -- diffs: parsed fail-closed -------------------------------------------------------------


@dataclass
class FileDiff:
    paths: tuple[str, ...]  # every path the section names (old and new), without the a/ b/ prefix
    text: str
    adds_file: bool = False
    symlink: bool = False
    problem: str = ""  # why the section cannot be read exactly; such a section is never applied


_MODES = {"100644", "100755"}
_EXT_HEADER = re.compile(
    r"^(?:(old mode|new mode|deleted file mode|new file mode) ([0-7]{6})"
    r"|(copy from|copy to|rename from|rename to) (.+)"
    r"|(similarity index|dissimilarity index) \d{1,3}%"
    r"|index [0-9a-f]{4,64}\.\.[0-9a-f]{4,64}(?: ([0-7]{6}))?)$"
)
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_BINARY_SIZE = re.compile(r"^(literal|delta) \d+$")
_BASE85 = re.compile(r"^[A-Za-z][0-9A-Za-z!#$%&()*+\-;<=>?@^_`{|}~]+$")
_C_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}
_PREFIX_PAIRS = (("a/", "b/"), ("b/", "a/"))  # git diff, git diff -R


class _Unreadable(Exception):
    pass


def _unquote(token: str) -> str:
    """A path as git writes it: plain, or C-quoted with octal escapes for bytes."""
    if not token.startswith('"'):
        return token
    if len(token) < 2 or not token.endswith('"'):
        raise _Unreadable(f"unterminated quoted path {token!r}")
    out = bytearray()
    body, i = token[1:-1], 0
    while i < len(body):
        c = body[i]
        if c == '"':
            raise _Unreadable(f"unescaped quote in {token!r}")
        if c != "\\":
            out += c.encode("utf-8", "surrogateescape")
            i += 1
            continue
        nxt = body[i + 1 : i + 2]
        if nxt in _C_ESCAPES:
            out.append(_C_ESCAPES[nxt])
            i += 2
        elif re.fullmatch(r"[0-3][0-7]{2}", body[i + 1 : i + 4]):
            out.append(int(body[i + 1 : i + 4], 8))
            i += 4
        else:
            raise _Unreadable(f"unknown escape in {token!r}")
    return out.decode("utf-8", "surrogateescape")


def _split_quoted(rest: str) -> tuple[str, str] | None:
    """Two C-quoted tokens separated by a space, or None."""
    if not rest.startswith('"'):
        return None
    i = 1
    while i < len(rest):
        if rest[i] == "\\":
            i += 2
            continue
        if rest[i] == '"':
            break
        i += 1
    first, tail = rest[: i + 1], rest[i + 1 :]
    if not tail.startswith(" "):
        raise _Unreadable("no space after the first quoted path")
    return first, tail[1:]


def _strip(name: str, prefix: str) -> str:
    if not name.startswith(prefix):
        raise _Unreadable(f"{name!r} does not start with {prefix!r}")
    return name[len(prefix) :]


def _check_path(path: str) -> str:
    parts = path.split("/")
    if not path or path.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise _Unreadable(f"not a plain relative path: {path!r}")
    if any(p.lower() == ".git" for p in parts):
        raise _Unreadable(f"a path inside .git: {path!r}")
    return path


def _header_names(rest: str, renamed: tuple[str, str] | None) -> tuple[str, str, tuple[str, str]]:
    """(old path, new path, (old prefix, new prefix)) of a `diff --git` header."""
    quoted = _split_quoted(rest)
    if quoted is not None:
        tokens = [_unquote(quoted[0]), _unquote(quoted[1])]
    elif renamed is None:
        # Unquoted names may hold spaces: the header is "P/X Q/X", X the same on both sides.
        if (len(rest) - 5) % 2:
            raise _Unreadable(f"cannot split the header {rest!r}")
        n = (len(rest) - 5) // 2
        tokens = [rest[: n + 2], rest[n + 3 :]]
        if rest[n + 2] != " ":
            raise _Unreadable(f"cannot split the header {rest!r}")
    else:
        for old_p, new_p in _PREFIX_PAIRS:
            if rest == f"{old_p}{renamed[0]} {new_p}{renamed[1]}":
                return renamed[0], renamed[1], (old_p, new_p)
        raise _Unreadable(f"the header {rest!r} does not match its rename/copy lines")
    for old_p, new_p in _PREFIX_PAIRS:
        if tokens[0].startswith(old_p) and tokens[1].startswith(new_p):
            old, new = _strip(tokens[0], old_p), _strip(tokens[1], new_p)
            if renamed is None and old != new:
                raise _Unreadable(f"the header names two paths without a rename: {rest!r}")
            if renamed is not None and (old, new) != renamed:
                raise _Unreadable(f"the header {rest!r} does not match its rename/copy lines")
            return old, new, (old_p, new_p)
    raise _Unreadable(f"unexpected path prefixes in the header {rest!r} (a/ and b/ are expected)")


def _file_line(line: str, marker: str, prefix: str, expected: str, dev_null_ok: bool) -> None:
    name = line[len(marker) :]
    if name.endswith("\t"):  # git ends names holding spaces with a tab
        name = name[:-1]
    if name == "/dev/null":
        if not dev_null_ok:
            raise _Unreadable(f"{marker.strip()} /dev/null where a file is expected")
        return
    if _strip(_unquote(name), prefix) != expected:
        raise _Unreadable(f"{line!r} names another path than the header")


def _parse_section(lines: list[str]) -> FileDiff:
    text = "".join(lines)
    body = [line[:-1] if line.endswith("\n") else line for line in lines]
    section = FileDiff(paths=(), text=text)
    try:
        rest = body[0][len("diff --git ") :]
        i, modes, moves = 1, {}, {}
        while i < len(body) and not body[i].startswith(("--- ", "GIT binary patch", "Binary files ", "@@")):
            m = _EXT_HEADER.match(body[i])
            if not m:
                raise _Unreadable(f"unexpected line in the header: {body[i][:200]!r}")
            if m.group(1):
                modes[m.group(1)] = m.group(2)
            elif m.group(3):
                moves[m.group(3)] = _unquote(m.group(4))
            elif m.group(6):
                modes["index"] = m.group(6)
            i += 1
        renamed = None
        for kind in ("rename", "copy"):
            if f"{kind} from" in moves or f"{kind} to" in moves:
                if f"{kind} from" not in moves or f"{kind} to" not in moves:
                    raise _Unreadable(f"{kind} from/to lines do not pair up")
                renamed = (moves[f"{kind} from"], moves[f"{kind} to"])
        old, new, (old_p, new_p) = _header_names(rest, renamed)
        paths = {_check_path(old), _check_path(new)}
        section.paths = tuple(sorted(paths))
        for what, mode in modes.items():
            if mode == "120000":
                section.symlink = True
            elif mode not in _MODES:
                raise _Unreadable(f"{what} {mode} is not a regular file's mode")
        section.adds_file = "new file mode" in modes
        deleted = "deleted file mode" in modes
        if i == len(body):
            return section  # a mode change, a rename, an empty new file
        if body[i].startswith("Binary files "):
            if i + 1 != len(body):
                raise _Unreadable("lines after a `Binary files` line")
            return section  # git apply refuses it: nothing to apply
        if body[i] == "GIT binary patch":
            i += 1
            blocks = 0
            while i < len(body):
                if not _BINARY_SIZE.match(body[i]):
                    raise _Unreadable(f"unexpected line in a binary patch: {body[i][:200]!r}")
                i += 1
                while i < len(body) and body[i] != "":
                    if not _BASE85.match(body[i]):
                        raise _Unreadable("a binary patch line that is not base85")
                    i += 1
                if i == len(body):
                    raise _Unreadable("a binary patch without its closing blank line")
                i += 1
                blocks += 1
            if blocks not in (1, 2):
                raise _Unreadable("a binary patch without data")
            return section
        if not body[i].startswith("--- ") or i + 1 >= len(body) or not body[i + 1].startswith("+++ "):
            raise _Unreadable("hunks without `---` and `+++` lines")
        _file_line(body[i], "--- ", old_p, old, section.adds_file)
        _file_line(body[i + 1], "+++ ", new_p, new, deleted)
        i += 2
        if i == len(body):
            raise _Unreadable("`---` and `+++` lines without a hunk")
        while i < len(body):
            m = _HUNK.match(body[i])
            if not m:
                raise _Unreadable(f"expected a hunk header: {body[i][:200]!r}")
            old_n = 1 if m.group(2) is None else int(m.group(2))
            new_n = 1 if m.group(4) is None else int(m.group(4))
            i += 1
            while old_n > 0 or new_n > 0:
                if i >= len(body):
                    raise _Unreadable("a hunk ends before its line counts")
                c = body[i][:1]
                if c in (" ", ""):  # an empty line is an empty context line
                    old_n, new_n = old_n - 1, new_n - 1
                elif c == "-":
                    old_n -= 1
                elif c == "+":
                    new_n -= 1
                elif c != "\\":
                    raise _Unreadable(f"unexpected line in a hunk: {body[i][:200]!r}")
                if old_n < 0 or new_n < 0:
                    raise _Unreadable("a hunk holds more lines than its header says")
                i += 1
            while i < len(body) and body[i].startswith("\\"):
                i += 1
        return section
    except _Unreadable as e:
        section.problem = str(e)
        return section


def split_diff(diff: str) -> list[FileDiff]:
    """Per-file sections of a git diff, each parsed fail-closed (see FileDiff.problem);
    text before the first header is ignored (never applied)."""
    sections: list[list[str]] = []
    for line in diff.splitlines(keepends=True):
        if line.startswith("diff --git "):
            sections.append([line])
        elif sections:
            sections[-1].append(line)
    return [_parse_section(lines) for lines in sections]


PROTECTED_NAMES = {
    "conftest.py",
    "sitecustomize.py",
    "usercustomize.py",
    "pytest.ini",
    "tox.ini",
    "setup.cfg",
    "pyproject.toml",
    ".pytest.ini",
    # pytest collects neither by default, but a package's own config may
    # (jsonpointer's and voluptuous's suites are a top-level tests.py).
    "tests.py",
    "test.py",
}
PROTECTED_DIRS = {"tests", "test", "testing"}
# Native code runs in the tests' process beyond the reach of any audit hook.
NATIVE_SUFFIXES = (".so", ".pyd", ".dylib", ".dll")


def protected_reason(path: str, test_files: frozenset[str] = frozenset()) -> str | None:
    """Why the verifier keeps the agent's hands off `path`, or None.
    `test_files`: the files a task's tests are in, whatever their names."""
    parts = PurePosixPath(path).parts
    if not parts:
        return None
    name = parts[-1]
    if path in test_files:
        return f"{path}: the task's tests are in it"
    if name in PROTECTED_NAMES:
        return f"{path}: {name} configures or hooks into the test run"
    if name.endswith(".pth"):
        return f"{path}: .pth files run code at interpreter start"
    if (name.startswith("test_") or name.endswith("_test.py")) and name.endswith(".py"):
        return f"{path}: a test file"
    if any(p in PROTECTED_DIRS for p in parts[:-1]):
        return f"{path}: under a test folder"
    if "__pycache__" in parts or name.endswith((".pyc", ".pyo")):
        return f"{path}: bytecode would run instead of the source"
    if name.endswith(NATIVE_SUFFIXES) or ".so." in name:
        return f"{path}: native code is not accepted in a diff"
    if any(p.lower() == ".git" for p in parts):
        return f"{path}: inside .git"
    return None


_SHADOW_CACHE: dict[str, frozenset[str]] = {}
_SHADOW_LOCK = threading.Lock()


def shadowed_names(environment: TestEnvironment) -> frozenset[str]:
    """Top-level module names of the standard library, the test venv and the verifier."""
    venv = test_venv(environment)
    with _SHADOW_LOCK:
        if str(venv) not in _SHADOW_CACHE:
            names = set(sys.stdlib_module_names) | {"pytest", "_pytest", "pluggy", "py"}
            names |= {"sandgym_swe_records", "sandgym_swe_guard", "pytest_child", "runner"}
            for site in venv.glob("lib/python3*/site-packages"):
                for p in site.iterdir():
                    if p.name.endswith((".dist-info", ".egg-info", ".pth")) or p.name.startswith((".", "__")):
                        continue
                    names.add(p.name.split(".", 1)[0])
            _SHADOW_CACHE[str(venv)] = frozenset(names)
        return _SHADOW_CACHE[str(venv)]


def shadow_reason(path: str, import_root: str, shadowed: frozenset[str], existing: frozenset[str]) -> str | None:
    """A new top-level module, at the repository root or the import root, that
    would be imported instead of one of the standard library or the test venv."""
    parts = PurePosixPath(path).parts
    root = () if import_root in ("", ".") else PurePosixPath(import_root).parts
    for base in {(), root}:
        rel = parts[len(base) :]
        if parts[: len(base)] != base or not rel:
            continue
        if len(rel) == 1 and not rel[0].endswith(".py"):
            continue
        top = rel[0][:-3] if len(rel) == 1 else rel[0]
        present = any(f == "/".join((*base, top)) or f.startswith("/".join((*base, top)) + "/") for f in existing)
        if top in shadowed and not present and "/".join((*base, top + ".py")) not in existing:
            return f"{path}: a new module named like {top!r} of the standard library or the test venv"
    return None


def filter_diff(
    diff: str,
    import_root: str = ".",
    shadowed: frozenset[str] = frozenset(),
    existing: frozenset[str] = frozenset(),
    test_files: frozenset[str] = frozenset(),
) -> tuple[str, list[str]]:
    """(the diff without protected or unreadable sections, one line per dropped section)."""
    kept, dropped = [], []
    for section in split_diff(diff):
        if section.problem:
            dropped.append(f"unreadable diff section ({section.problem}): never applied")
            continue
        reasons = [r for p in section.paths if (r := protected_reason(p, test_files))]
        if section.symlink:
            reasons.append(f"{', '.join(section.paths)}: symlinks are not accepted in a diff")
        if section.adds_file and shadowed:
            reasons += [r for p in section.paths if (r := shadow_reason(p, import_root, shadowed, existing))]
        if reasons:
            dropped.extend(reasons)
        else:
            kept.append(section.text if section.text.endswith("\n") else section.text + "\n")
    return "".join(kept), dropped


def added_paths(patch: str) -> list[str]:
    return [p for s in split_diff(patch) if s.adds_file for p in s.paths]


def patch_paths(patch: str) -> list[str]:
    return sorted({p for s in split_diff(patch) for p in s.paths})


# -- the start state, read once per task --------------------------------------------------


@dataclass(frozen=True)
class StartInfo:
    files: frozenset[str]
    protected: tuple[str, ...]
    texts: dict[str, str]  # the .py files that are not protected


_INFO: dict[str, StartInfo] = {}
_INFO_LOCK = threading.Lock()


def start_info(state: StartState) -> StartInfo:
    with _INFO_LOCK:
        if state.key in _INFO:
            return _INFO[state.key]
    files, texts = set(), {}
    with tarfile.open(fileobj=io.BytesIO(state.tree_tar)) as tar:
        for m in tar.getmembers():
            if not m.isfile() or not m.name.startswith("repo/"):
                continue
            rel = m.name[len("repo/") :]
            files.add(rel)
            if rel.endswith(".py") and protected_reason(rel) is None:
                f = tar.extractfile(m)
                texts[rel] = f.read().decode("utf-8", "replace") if f else ""
    info = StartInfo(frozenset(files), tuple(sorted(p for p in files if protected_reason(p))), texts)
    with _INFO_LOCK:
        while len(_INFO) > 64:
            _INFO.pop(next(iter(_INFO)))
        _INFO[state.key] = info
    return info


# -- what a changed file used before the change -------------------------------------------

# API families whose use by the package's changed code the guard reports,
# unless the file used them before the change (then a fix may keep them).
FAMILIES = {
    "gc": re.compile(r"\bgc\b"),
    "frame": re.compile(r"_getframe|currentframe|\bf_back\b|\binspect\b|_current_frames"),
    "ctypes": re.compile(r"\bctypes\b|\bcffi\b"),
    "trace": re.compile(r"settrace|setprofile"),
    "audit": re.compile(r"addaudithook"),
    "code": re.compile(r"__code__|CodeType"),
    "spawn": re.compile(r"subprocess|os\.exec|spawn|os\.system"),
    "native": re.compile(r"_xxsubinterpreters|_testcapi"),
    "importhook": re.compile(r"meta_path|path_hooks"),
}


def legacy_families(kept: str, info: StartInfo) -> dict[str, list[str]]:
    """{path: the API families its start version used} for the files the kept diff touches."""
    out = {}
    for section in split_diff(kept):
        for path in section.paths:
            text = info.texts.get(path)
            if text is not None:
                out[path] = [name for name, pattern in FAMILIES.items() if pattern.search(text)]
    return out


# -- the static scan ------------------------------------------------------------------------

# References that write to or reach into the test machinery: violations when
# the file did not use them before. (Quotes joined by + are joined first.)
SCAN_VIOLATIONS = {
    "_pytest": re.compile(r"\b_pytest\b"),
    "pluggy": re.compile(r"\bpluggy\b"),
    "sandgym": re.compile(r"sandgym"),
    "conftest": re.compile(r"\bconftest\b"),
    "import pytest": re.compile(r"\bimport\s+pytest\b|\bfrom\s+pytest\b|__import__\(\s*['\"]pytest"),
    "sys.modules of the tests": re.compile(r"sys\s*\.\s*modules\s*(?:\[|\.get\()\s*['\"][^'\"]*(?:pytest|pluggy|test)"),
}
# Introspection a fix rarely needs: recorded, not a violation by itself.
SCAN_NOTES = {
    "pytest": re.compile(r"\bpytest\b"),
    "sys.modules": re.compile(r"sys\s*\.\s*modules"),
    "gc": re.compile(r"\bgc\s*\.|\bimport\s+gc\b|\bfrom\s+gc\s+import"),
    "inspect": re.compile(r"\binspect\b"),
    "ctypes": re.compile(r"\bctypes\b|\bcffi\b"),
    "atexit": re.compile(r"\batexit\b"),
    "os._exit": re.compile(r"\b_exit\s*\("),
    "/proc": re.compile(r"/proc\b"),
    "builtins": re.compile(r"\bbuiltins\b|__builtins__"),
    "settrace": re.compile(r"settrace|setprofile"),
    "frames": re.compile(r"_getframe|\bf_back\b|\bf_locals\b|\bf_globals\b|\btb_frame\b|\bgi_frame\b"),
    "audit": re.compile(r"addaudithook|sys\s*\.\s*audit\b"),
    "__code__": re.compile(r"__code__|CodeType"),
}
_JOINED_QUOTES = re.compile(r"""(['"])\s*\+?\s*\1""")


def scan_diff(kept: str, info: StartInfo | None) -> tuple[list[str], list[str]]:
    """(hits "path:line: term", violations) over the lines the kept diff adds."""
    hits, violations = [], []
    for section in split_diff(kept):
        path = section.paths[-1] if section.paths else "?"
        before = (info.texts.get(path, "") if info else "") if not section.adds_file else ""
        line_no = 0
        for line in section.text.splitlines():
            m = _HUNK.match(line)
            if m:
                line_no = int(m.group(3)) - 1
                continue
            if line.startswith((" ", "+")) and not line.startswith("+++ "):
                line_no += 1
            if not line.startswith("+") or line.startswith("+++ "):
                continue
            code = _JOINED_QUOTES.sub("", line[1:])
            for term, pattern in SCAN_VIOLATIONS.items():
                if pattern.search(code) and not pattern.search(before):
                    violations.append(f"{path}:{line_no}: the fix reaches into the test machinery ({term})")
                    hits.append(f"{path}:{line_no}: {term}")
            for term, pattern in SCAN_NOTES.items():
                if pattern.search(code):
                    hits.append(f"{path}:{line_no}: {term}")
    return hits[:200], violations[:50]


# -- sentinels -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sentinel:
    file: str
    name: str
    must_pass: bool
    code: str

    @property
    def nodeid(self) -> str:
        return f"{self.file}::{self.name}"


def make_sentinels(hidden: SWEHidden, test_files: set[str]) -> list[Sentinel]:
    """A must-pass and a must-fail test per FAIL_TO_PASS module (at most
    three), named like their neighbours plus a random tag."""
    rng = secrets.SystemRandom()
    files: list[str] = []
    for t in hidden.FAIL_TO_PASS:
        path = t.split("::", 1)[0]
        if path.endswith(".py") and path in test_files and path not in files and protected_reason(path):
            files.append(path)
    out = []
    for path in files[:3]:
        words = [
            w
            for t in hidden.FAIL_TO_PASS
            if t.startswith(path + "::")
            for w in re.split(r"[^a-z0-9]+", t.split("::")[-1].split("[")[0].lower())
            if w and w != "test"
        ] or ["case", "value", "check"]
        for must_pass in (True, False):
            name = f"test_{rng.choice(words)}_{rng.choice(words)}_{secrets.token_hex(3)}"
            values = [rng.randint(2, 999) for _ in range(3)]
            total = sum(values) + (0 if must_pass else rng.randint(1, 9))
            code = f"\n\ndef {name}():\n    values = {values}\n    assert sum(values) == {total}\n"
            out.append(Sentinel(path, name, must_pass, code))
    return out


def sentinel_problems(run: TestRun, sentinels: list[Sentinel]) -> tuple[list[str], dict[str, list[str]]]:
    """(violations, {name: [expected, got]}) of a valid run."""
    problems, seen = [], {}
    for s in sentinels:
        got = run.status(s.nodeid)
        seen[s.name] = ["pass" if s.must_pass else "fail", got]
        others = [t for t in run.statuses if t.startswith(s.file + "::")]
        if got == "missing":
            if others or s.nodeid in run.collected_ids:
                problems.append(f"sentinel {s.nodeid} went missing while its module ran")
            continue
        calls = run.calls.get(s.nodeid)
        if s.must_pass and (got == "failed" or (calls and True in calls)):
            problems.append(f"sentinel {s.nodeid}, which must pass, failed")
        if not s.must_pass and got not in ("failed", "error"):
            problems.append(f"sentinel {s.nodeid}, which must fail, was {got}")
        if not s.must_pass and got == "failed" and calls != [True]:
            problems.append(f"sentinel {s.nodeid}, which must fail, was not seen failing")
    return problems, seen


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


def task_test_files(hidden: SWEHidden) -> frozenset[str]:
    """The files the task's tests are in (from their node ids)."""
    files = (t.split("::", 1)[0] for t in (*hidden.FAIL_TO_PASS, *hidden.PASS_TO_PASS))
    return frozenset(f for f in files if f.endswith(".py"))


def tree_violations(
    changes: list, environment: TestEnvironment, existing: frozenset[str], test_files: frozenset[str] = frozenset()
) -> list[str]:
    """What the applied diff changed that it must not have, whatever its text said."""
    shadowed = shadowed_names(environment)
    out = []
    for rel, what in changes:
        if what in ("symlink", "special"):
            out.append(f"{rel}: the applied diff made a {what} file")
        elif reason := protected_reason(rel, test_files):
            out.append(f"{reason} (changed in the applied tree)")
        elif what == "added" and (reason := shadow_reason(rel, environment.import_root, shadowed, existing)):
            out.append(f"{reason} (added in the applied tree)")
    return out


def _attempt(
    task: SWETask,
    hidden: SWEHidden,
    kept: str,
    changed: bool,
    runtime: Runtime,
    scan: list[str] | None = None,
    scan_violations: list[str] | None = None,
) -> SWEAttempt:
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


def verify(task, diff: str, runtime: Runtime, retries: int = 2) -> SWEVerdict:
    """Judge `diff` (git diff against the task's base commit) for `task`, a
    TaskPair(visible=SWETask, hidden=SWEHidden). Infrastructure errors are
    retried up to `retries` times; every attempt is kept."""
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
    if diff.strip() and not sections:
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
        lambda: _attempt(visible, hidden, kept, bool(kept.strip()), runtime, scan, scan_violations), retries
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
