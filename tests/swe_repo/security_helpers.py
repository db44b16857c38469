"""Shared parts of the SWE security tests (test_security_*.py): the
bundled billing tasks the attacks target, hostile diffs made against their
start state, and the check that nothing outside the sandbox changed (the
bundled project, the cached start state, the verifier's staged code, host
paths an attack writes to, and no process of the sandbox user (local) or
container (docker) left behind)."""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
import subprocess
import tarfile
import time
from collections.abc import Mapping
from pathlib import Path

from sandgym.outcomes import Outcome
from sandgym.runtimes import SandboxSpec
from sandgym.specs import TaskSet
from sandgym.specs.swe_repo import SWETaskPair
from sandgym.verifiers.swe_repo.checkout import git_env, start_state
from sandgym.verifiers.swe_repo.sandbox import IMAGE, boundary_mount
from sandgym.verifiers.swe_repo.sources import bundled_projects_dir, cache_dir
from tests.helpers import sandbox_user_processes

TASKS = TaskSet.load(Path(__file__).resolve().parents[2] / "task_specs" / "swe_repo" / "billing-v1")
ROUNDING = SWETaskPair.of(TASKS.get("billing/round-half-even"))  # F2P: tests/test_money.py rounding tests
BULK = SWETaskPair.of(TASKS.get("billing/bulk-threshold"))  # its test patch adds tests/test_bulk_pricing.py
SANDBOX_UID = 65534 if os.geteuid() == 0 else os.geteuid()
HOST_MARKERS = [Path("/tmp/sandgym-swe-pwned"), Path("/var/tmp/sandgym-swe-pwned")]


def tree_hash(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts:
            h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def our_containers() -> set[str]:
    """Containers this test process made (other runs on this machine have theirs)."""
    import docker

    from sandgym.runtimes.docker.runtime import OWNER_LABEL, owner_label

    found = docker.from_env().containers.list(
        all=True, filters={"label": f"{OWNER_LABEL}={owner_label()}"}, ignore_removed=True
    )
    return {c.name for c in found if c.name is not None}  # every container has a name


@contextlib.contextmanager
def nothing_outside_changes(runtime):
    start_state(ROUNDING.visible)
    docker = getattr(runtime, "name", "") == "docker"
    if not docker:
        # The zygotes (one per image: the default one's, the SWE image's) are up before the baseline.
        runtime.create().close()
        runtime.create(SandboxSpec(image=IMAGE)).close()
    watched = [
        bundled_projects_dir() / "billing",
        cache_dir() / "swe_start" / start_state(ROUNDING.visible).key,
        Path(boundary_mount().source),
    ]
    before = {str(p): tree_hash(p) for p in watched}
    procs = sandbox_user_processes()
    containers = our_containers() if docker else set()
    for m in HOST_MARKERS:
        m.unlink(missing_ok=True)
    yield
    deadline = time.monotonic() + 10
    while sandbox_user_processes() - procs and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not (sandbox_user_processes() - procs), "processes outlived the sandbox"
    if docker:
        assert our_containers() <= containers, "containers outlived the verification"
    assert {str(p): tree_hash(p) for p in watched} == before, "something outside the sandbox changed"
    for m in HOST_MARKERS:
        assert not m.exists(), f"{m} was written from inside a sandbox"


def make_diff(task: SWETaskPair, files: Mapping[str, str | None], gold: bool = False) -> str:
    """A git diff against the task's start state: `files` maps paths to new
    contents (None deletes); `gold` applies the gold patch first."""
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"sg-attack-{os.getpid()}-{time.monotonic_ns()}"
    work.mkdir()
    try:
        with tarfile.open(fileobj=io.BytesIO(start_state(task.visible).tree_tar)) as tar:
            tar.extractall(work, filter="data")
        repo = work / "repo"
        env = git_env(str(work))

        def git(*args, stdin=None):
            return subprocess.run(
                ["git", *args], cwd=repo, env=env, input=stdin, check=True, capture_output=True
            ).stdout

        git("init", "-q")
        git("add", "-A", "-f")
        git("commit", "-q", "-m", "start")
        if gold:
            git("apply", "-", stdin=task.hidden.patch.encode())
        for rel, text in files.items():
            if text is None:
                (repo / rel).unlink()
            else:
                (repo / rel).parent.mkdir(parents=True, exist_ok=True)
                (repo / rel).write_text(text)
        git("add", "-A", "-f")
        return git("diff", "--cached", "--binary").decode()
    finally:
        shutil.rmtree(work)


def source(task: SWETaskPair, rel: str) -> str:
    with tarfile.open(fileobj=io.BytesIO(start_state(task.visible).tree_tar)) as tar:
        member = tar.extractfile(f"repo/{rel}")
        assert member is not None, f"repo/{rel} is not a regular file"
        return member.read().decode()


def with_prefix(task: SWETaskPair, rel: str, code: str) -> dict[str, str]:
    """The module `rel` with `code` run at its import (after its __future__ import)."""
    text = source(task, rel)
    anchor = "from __future__ import annotations\n"
    assert anchor in text
    return {rel: text.replace(anchor, anchor + code + "\n", 1)}


def assert_not_scored(verdict, *allowed: Outcome):
    assert verdict.outcome in allowed, (verdict.outcome, verdict.status, verdict.detail)
    assert verdict.reward() == 0.0


F2P = list(ROUNDING.hidden.FAIL_TO_PASS)


def at_call(task: SWETaskPair, code: str, gold: bool = False) -> str:
    """A diff that defines `code` (a function `_sg_attack()`) in billing/money.py
    and calls it from round_amount, i.e. while a test is running."""
    text = source(task, "billing/money.py")
    text = text.replace("from __future__ import annotations\n", "from __future__ import annotations\n" + code, 1)
    text = text.replace("    quantum = Decimal(1)", "    _sg_attack()\n    quantum = Decimal(1)", 1)
    return make_diff(task, {"billing/money.py": text}, gold=gold)


def violated(verdict, *needles: str) -> None:
    assert_not_scored(verdict, Outcome.VIOLATION)
    text = " | ".join(verdict.violations)
    for needle in needles:
        assert needle in text, (needle, verdict.violations, verdict.attempts[-1].output[-2000:])
