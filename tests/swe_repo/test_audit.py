"""`sandgym tasks audit`: answers planted within the agent's reach are
found (a copy in the repository, whitespace changed or not, a dangling git
blob, a tag), a clean task is found clean, and the bundled billing set
audits at 0."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from sandgym.envs.swe_repo import audit
from sandgym.envs.swe_repo.audit import audit_task
from sandgym.specs.swe_repo import SWETaskPair
from sandgym.verifiers.swe_repo.checkout import GIT_IDENTITY, git_env, start_state, tar_dir

from .security_helpers import BULK, ROUNDING, make_diff

ROUNDING_FILE = "billing/money.py"  # the one file ROUNDING's gold patch changes


def fixed_files(task: SWETaskPair) -> dict[str, str]:
    """The files the gold patch changes, as fixed (the test's own git, on the host: trusted data)."""
    work = Path(tempfile.mkdtemp(prefix="sg-audit-test-"))
    try:
        with tarfile.open(fileobj=io.BytesIO(start_state(task.visible).tree_tar)) as tar:
            tar.extractall(work, filter="data")
        repo = work / "repo"
        subprocess.run(["git", "apply", "-"], cwd=repo, input=task.hidden.patch.encode(), check=True)
        names = audit._changed_paths(task.hidden.patch)
        return {n: (repo / n).read_text() for n in names if (repo / n).exists()}
    finally:
        shutil.rmtree(work)


def with_files(task: SWETaskPair, files: dict[str, str], suffix: str) -> SWETaskPair:
    """`task` whose start state also holds `files` (added by its base patch)."""
    extra = make_diff(task, files)
    visible = task.visible.model_copy(
        update={"id": f"{task.id}-{suffix}", "base_patch": task.visible.base_patch + extra}
    )
    hidden = task.hidden.model_copy(update={"id": visible.id})
    return SWETaskPair(visible=visible, hidden=hidden)


def test_a_clean_task_is_found_clean(runtime):
    assert ROUNDING_FILE in fixed_files(ROUNDING)
    assert audit_task(ROUNDING, runtime) == []
    assert audit_task(BULK, runtime) == []


def test_a_copy_of_the_fixed_file_in_the_repository_is_found(runtime):
    fixed = fixed_files(ROUNDING)[ROUNDING_FILE]
    # An exact copy, and one with its indentation and line ends changed.
    reshaped = "\n\n".join("\t" + line.rstrip() + "   " for line in fixed.splitlines())
    task = with_files(ROUNDING, {"vendor/money_copy.py": fixed, "notes/reflowed.txt": reshaped}, "planted")
    found = audit_task(task, runtime)
    # Each copy twice: the file, and its blob in the start commit.
    assert {(f.where, f.file, f.kind) for f in found if not f.where.startswith("git:")} == {
        ("/workspace/repo/vendor/money_copy.py", ROUNDING_FILE, "answer"),
        ("/workspace/repo/notes/reflowed.txt", ROUNDING_FILE, "answer"),
    }
    blobs = [f for f in found if f.where.startswith("git:/workspace/repo/.git:")]
    assert len(blobs) == 2 and {f.file for f in blobs} == {ROUNDING_FILE}


def test_a_copy_of_the_hidden_tests_is_found(runtime):
    tests_path = audit._changed_paths(BULK.hidden.test_patch)[0]
    first = BULK.hidden.test_patch.split("\ndiff --git ")[0]  # the section that adds tests_path
    assert f"+++ b/{tests_path}" in first and "new file mode" in first
    added = [line for line in first.splitlines() if line.startswith("+") and line[:4] != "+++ "]
    text = "".join(line[1:] + "\n" for line in added)
    task = with_files(BULK, {"docs/example_test.py": text}, "tests-planted")
    found = audit_task(task, runtime)
    planted = ("/workspace/repo/docs/example_test.py", tests_path, "hidden_test")
    assert [(f.where, f.file, f.kind) for f in found if not f.where.startswith("git:")] == [planted]
    assert {f.kind for f in found} == {"hidden_test"} and len(found) == 2  # the file and its blob


def test_a_dangling_blob_and_a_tagged_commit_are_found(runtime, monkeypatch):
    """A start state whose object store holds the fix: one blob no ref names
    (dangling), and one commit only a tag names."""
    fixed = fixed_files(ROUNDING)[ROUNDING_FILE]
    real = start_state(ROUNDING.visible)

    def leaky(kind: str):
        work = Path(tempfile.mkdtemp(prefix="sg-audit-leak-"))
        try:
            with tarfile.open(fileobj=io.BytesIO(real.repo_tar)) as tar:
                tar.extractall(work, filter="data")
            repo = work / "repo"
            env = {**git_env(str(work)), **GIT_IDENTITY}

            def git(*args: str, stdin: bytes | None = None) -> str:
                return subprocess.run(
                    ["git", *args], cwd=repo, env=env, input=stdin, check=True, capture_output=True
                ).stdout.decode()

            if kind == "dangling":
                git("hash-object", "-w", "--stdin", stdin=fixed.encode())
            else:
                (repo / ROUNDING_FILE).write_text(fixed)
                git("commit", "-q", "-am", "the fix")
                git("tag", "v-fixed")
                git("reset", "-q", "--hard", "HEAD~1")
                shutil.rmtree(repo / ".git" / "logs", ignore_errors=True)
                git("gc", "-q", "--prune=now")  # packed: objects and refs
            return dataclasses.replace(real, repo_tar=tar_dir(repo, "repo"))
        finally:
            shutil.rmtree(work)

    for kind in ("dangling", "tag"):
        state = leaky(kind)
        monkeypatch.setattr(audit, "start_state", lambda visible, state=state: state)
        found = audit_task(ROUNDING, runtime)
        assert found, kind
        assert all(f.where.startswith("git:/workspace/repo/.git:") and f.file == ROUNDING_FILE for f in found), found


def test_the_cli_audits_the_billing_set_at_zero(tmp_path):
    out = tmp_path / "audit.json"
    r = subprocess.run(
        [sys.executable, "-m", "sandgym", "tasks", "audit", "swe_repo/billing-v1", "--json", str(out)],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert r.returncode == 0, r.stdout + r.stderr
    data = json.loads(out.read_text())
    assert data == {"tasks": 5, "reachable_answers": [], "hidden_tests_visible": []}
    r = subprocess.run(
        [sys.executable, "-m", "sandgym", "tasks", "audit", "swe_repo/billing-v1", "--task-id", "billing/nope"],
        capture_output=True,
        text=True,
    )
    assert r.returncode != 0 and "billing/nope" in r.stdout + r.stderr


def test_a_copy_in_the_image_is_found(monkeypatch):
    """The search covers the whole filesystem, not only the workspace: an
    image whose /usr holds the fixed module (as Debian's python3-* packages
    would) is found. The image is a hard-linked copy of the SWE image's
    unpacked tree, with the module planted in it."""
    from sandgym.runtimes import rootfs as rootfs_module
    from sandgym.runtimes.local.runtime import LocalRuntime
    from sandgym.verifiers.swe_repo.sandbox import IMAGE

    rootfs_module.rootfs(IMAGE)  # (unpacked)
    real = rootfs_module.tree_dir(rootfs_module.recipe_of(IMAGE))
    # Beside the real tree: the same file system, and readable by the sandboxes' user.
    cache = Path(tempfile.mkdtemp(prefix=".test-", dir=real.parent))
    try:
        os.chmod(cache, 0o755)
        subprocess.run(["cp", "-al", str(real), str(cache / real.name)], check=True)
        planted = cache / real.name / "root/usr/lib/python3/dist-packages/billing/money.py"
        planted.parent.mkdir(parents=True)
        planted.write_text(fixed_files(ROUNDING)[ROUNDING_FILE])
        monkeypatch.setattr(rootfs_module, "rootfs_cache", lambda: cache)
        rt = LocalRuntime()
        try:
            found = audit_task(ROUNDING, rt)
        finally:
            rt.close()
    finally:
        shutil.rmtree(cache)
    assert [(f.where, f.file, f.kind) for f in found] == [
        ("/usr/lib/python3/dist-packages/billing/money.py", ROUNDING_FILE, "answer")
    ]
