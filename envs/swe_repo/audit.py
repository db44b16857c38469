"""`sandgym tasks audit`: no answer within the agent's reach.

For each SWE task, a real agent sandbox of that task (the env's own spec
and start state) is searched from the inside (audit_scan.py): every file
the agent could read, every member of an archive among them, every blob of
every git object store among them (all refs, tags, stashes, reflogs,
packed or loose, unreachable). The sandbox reports digests only; the host
compares them with digests of the task's hidden data, which it makes in
the same sandbox after the search (the gold and test patches applied by
`git apply` to a copy under /tmp): the files the gold patch changes, as
fixed (an answer), and the files the test patch changes (hidden tests).
Equal bytes match, and so does equal text with all whitespace removed.

Sandboxes of one spec (image and mounts) see the same files outside the
workspace and /tmp: those are searched once per spec and runtime and kept
(`_SHARED`); every task's own workspace and /tmp are searched in its own
sandbox.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import tarfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sandgym.runtimes.base import Runtime, Sandbox, SandboxError, SandboxSpec
from sandgym.specs.swe_repo import SWETaskPair
from sandgym.verifiers.swe_repo.checkout import REPO_NAME, start_state
from sandgym.verifiers.swe_repo.diffs import split_diff
from sandgym.verifiers.swe_repo.sandbox import REPO_DIR, WORKSPACE

SCAN_SOURCE = (Path(__file__).parent / "audit_scan.py").read_text()
DIGEST_HEX = 32  # as audit_scan.py
MAX_BYTES = 4 << 20  # larger files are not read: source files are far smaller
# Contents shorter than this once whitespace is gone (an empty __init__.py,
# a one-line import) are not searched for: such text is everywhere and
# gives nothing away.
MIN_TEXT = 32
SHARED_SKIP = ("/proc", "/sys", "/dev", WORKSPACE, "/tmp")
FIXED_DIR = "/tmp/.sandgym-audit-fixed"
SCAN_TIMEOUT_S = 900.0
ATTEMPTS = 3
# Prints {path: base64 of its bytes} of the regular files named after the folder.
READ_FILES = (
    "import base64, json, os, sys\n"
    "root, out = sys.argv[1], {}\n"
    "for rel in sys.argv[2:]:\n"
    "    p = os.path.join(root, rel)\n"
    "    if os.path.isfile(p) and not os.path.islink(p):\n"
    "        out[rel] = base64.b64encode(open(p, 'rb').read()).decode()\n"
    "print(json.dumps(out))\n"
)


class AuditError(SandboxError):
    """The audit could not search a task (infrastructure: the factory
    counts it as such); the message says why."""


@dataclass(frozen=True)
class Finding:
    task: str
    where: str  # the path in the sandbox (git:GITDIR:OID, ARCHIVE!MEMBER)
    file: str  # the repository file whose hidden version it holds
    kind: str  # "answer" | "hidden_test"

    def row(self) -> dict[str, str]:
        return {"task": self.task, "where": self.where, "file": self.file}


@dataclass
class AuditReport:
    tasks: int = 0
    findings: list[Finding] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "tasks": self.tasks,
            "reachable_answers": [f.row() for f in self.findings if f.kind == "answer"],
            "hidden_tests_visible": [f.row() for f in self.findings if f.kind == "hidden_test"],
        }


def digests(data: bytes) -> tuple[str, str]:
    raw = hashlib.sha256(data).hexdigest()[:DIGEST_HEX]
    if b"\0" in data[:8192]:
        return raw, ""
    return raw, hashlib.sha256(b"".join(data.split())).hexdigest()[:DIGEST_HEX]


# (runtime, spec key) -> digest -> paths: what sandboxes of that spec see
# outside their workspace and /tmp.
_SHARED: dict[tuple[int, str], dict[str, list[str]]] = {}
_SHARED_LOCK = threading.Lock()


def _shared_key(spec: SandboxSpec) -> str:
    return json.dumps({"image": spec.image, "mounts": [m.model_dump() for m in spec.mounts]}, sort_keys=True)


def scan(sandbox: Sandbox, roots: list[str], skip: tuple[str, ...]) -> list[dict]:
    """audit_scan.py's rows for `roots`, run in `sandbox`."""
    job = json.dumps({"roots": roots, "skip": list(skip), "max_bytes": MAX_BYTES}).encode() + b"\n"
    res = sandbox.exec(
        ["/usr/bin/python3", "-I", "-S", "-c", SCAN_SOURCE],
        stdin=job,
        timeout=SCAN_TIMEOUT_S,
        env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
        cwd="/",
        max_output=512 << 20,
    )
    rows = []
    for line in res.stdout.splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    if res.timed_out or res.truncated or not rows or rows[-1] != {"done": True}:
        raise AuditError(
            f"the search did not finish (exit {res.exit_code}, timed out {res.timed_out}, "
            f"truncated {res.truncated}): {res.text('stderr')[-500:]}"
        )
    errors = [r["error"] for r in rows if "error" in r]
    if errors:
        raise AuditError("; ".join(errors[:3]))
    return [r for r in rows if "p" in r]


def _index(rows: list[dict]) -> dict[str, list[str]]:
    by: dict[str, list[str]] = {}
    for r in rows:
        for d in (r["r"], r["n"]):
            if d:
                by.setdefault(d, []).append(r["p"])
    return by


def _tar_files(data: bytes, strip: str) -> dict[str, bytes]:
    out = {}
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for m in tar:
            if m.isfile() and m.name.startswith(strip):
                f = tar.extractfile(m)
                if f is not None:
                    out[m.name[len(strip) :]] = f.read()
    return out


def _changed_paths(patch: str) -> list[str]:
    return sorted({p for s in split_diff(patch) for p in s.paths})


def hidden_files(sandbox: Sandbox, task: SWETaskPair) -> tuple[dict[str, bytes], dict[str, bytes]]:
    """(fixed files the gold patch changes, test files as the test patch
    leaves them), made in `sandbox` by git apply on a copy of the start repo
    under /tmp. Call after the search: the copies are then in /tmp."""
    h = task.hidden
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, text in (("gold.patch", h.patch), ("test.patch", h.test_patch)):
            data = text.encode()
            info = tarfile.TarInfo(f".sandgym-audit/{name}")
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    sandbox.put_archive(buf.getvalue(), "/tmp")
    git = "git -c core.hooksPath=/dev/null -c core.fsmonitor=false apply --whitespace=nowarn"
    script = (
        f"set -e; rm -rf {FIXED_DIR}; cp -a {REPO_DIR} {FIXED_DIR}; cd {FIXED_DIR}; "
        f"{git} /tmp/.sandgym-audit/gold.patch; "
        f"if [ -s /tmp/.sandgym-audit/test.patch ]; then {git} /tmp/.sandgym-audit/test.patch; fi"
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null"}
    res = sandbox.exec(["/bin/sh", "-c", script], timeout=300, env=env, cwd="/")
    if res.exit_code != 0:
        raise AuditError(f"task {task.id}: the gold or test patch does not apply: {res.text('stderr')[-500:]}")
    gold, tests = _changed_paths(h.patch), _changed_paths(h.test_patch)
    res = sandbox.exec(
        ["/usr/bin/python3", "-I", "-S", "-c", READ_FILES, FIXED_DIR, *gold, *tests],
        timeout=120,
        env={"PATH": "/usr/bin:/bin"},
        cwd="/",
        max_output=256 << 20,
    )
    if res.exit_code != 0:
        raise AuditError(f"task {task.id}: reading the fixed files failed: {res.text('stderr')[-500:]}")
    files = {p: base64.b64decode(data) for p, data in json.loads(res.stdout).items()}
    return {p: files[p] for p in gold if p in files}, {p: files[p] for p in tests if p in files}


def audit_task(task: SWETaskPair, runtime: Runtime) -> list[Finding]:
    """Search a real agent sandbox of `task` for its answer and hidden tests."""
    from .env import agent_spec

    start = start_state(task.visible)
    spec = agent_spec(task, start, 60.0, 30)
    sandbox = runtime.create(spec)
    try:
        sandbox.put_archive(start.repo_tar, WORKSPACE)
        key = (id(runtime), _shared_key(spec))
        with _SHARED_LOCK:
            shared = _SHARED.get(key)
        if shared is None:
            shared = _index(scan(sandbox, ["/"], SHARED_SKIP))
            with _SHARED_LOCK:
                _SHARED[key] = shared
        own = _index(scan(sandbox, [WORKSPACE, "/tmp"], ()))
        fixed, tests = hidden_files(sandbox, task)
    finally:
        sandbox.close()
    starting = _tar_files(start.tree_tar, f"{REPO_NAME}/")
    found: list[Finding] = []
    for kind, files in (("answer", fixed), ("hidden_test", tests)):
        for path, data in sorted(files.items()):
            raw, norm = digests(data)
            wanted = {raw}
            before = starting.get(path)
            # Text equal to the start's once whitespace is gone is no answer.
            if norm and len(b"".join(data.split())) >= MIN_TEXT and (before is None or digests(before)[1] != norm):
                wanted.add(norm)
            if len(data.strip()) < MIN_TEXT:
                continue
            where = sorted({p for d in wanted for index in (shared, own) for p in index.get(d, [])})
            for w in where:
                found.append(Finding(task.id, w, path, kind))
    return found


def audit_tasks(
    tasks: list[SWETaskPair],
    runtime: Runtime,
    progress: Callable[[int, int], None] = lambda done, total: None,
) -> AuditReport:
    report = AuditReport(tasks=len(tasks))
    for i, task in enumerate(tasks):
        report.findings += _with_retries(task, runtime)
        progress(i + 1, len(tasks))
    return report


def _with_retries(task: SWETaskPair, runtime: Runtime) -> list[Finding]:
    # A sandbox that fails to start or to run the search (a loaded host:
    # EAGAIN on fork) is infrastructure: tried again, then raised.
    for attempt in range(ATTEMPTS):
        try:
            return audit_task(task, runtime)
        except SandboxError:
            if attempt == ATTEMPTS - 1:
                raise
            time.sleep(2.0 * (attempt + 1))
    raise AssertionError("unreachable")
