"""The verifier's sandbox and the runner jobs it runs.

Every SWE sandbox (the agent's and the verifier's) runs on one image with
two read-only mounts: the boundary's code and the task's test venv (staged
so the local runtime's zygote can serve it). `call_runner` hands one job to
the boundary's runner (`boundary/runner.py`) and reads its answer
(`records.read_answer`); `run_tests` runs pytest on a copy of a tree.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from sandgym.families import family
from sandgym.runtimes.base import Mount, Runtime, Sandbox, SandboxSpec
from sandgym.runtimes.staging import stage_dir, staging_root
from sandgym.specs.swe_repo import TestEnvironment
from sandgym.verifiers.swe_repo.checkout import tar_dir
from sandgym.verifiers.swe_repo.records import TestRun, read_answer
from sandgym.verifiers.swe_repo.sources import COMPILED_MARK, test_venv

BOUNDARY_DIR = "/opt/sandgym/swe_verifier"
VENV_DIR = "/opt/sandgym/venv"
WORKSPACE = "/workspace"
REPO_DIR = f"{WORKSPACE}/repo"
VENV_PYTHON = f"{VENV_DIR}/bin/python"
# Sandbox start, git apply and interpreter start-up, beyond the tests' budget.
HOST_GRACE_S = 30.0

# The image every SWE sandbox (the agent's and the verifier's) runs on.
IMAGE = f"recipe:{family('swe_repo').image_recipe}"


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
    return read_answer(res, nonce, sandbox, timeout_s, time.perf_counter() - t0)


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
