"""SWE-bench instances and SWE task files from elsewhere, through the CLI (issue 37).

Each hostile case is refused by the command a user runs, in one line of
error that names the field and value, and nothing outside changes: no
task set written, no file of the folder around it touched, no host file's
content printed. Sandbox-free: each is refused before any sandbox or venv."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sandgym.specs import bundled_task_set

SECRET = "host-secret-37c1"


def sandgym(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sandgym", *args], capture_output=True, text=True, timeout=120, cwd=cwd
    )


def error_line(proc: subprocess.CompletedProcess[str], fields: int = 0) -> str:
    """The error, one line (a task spec's: the file, then one line per bad field)."""
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 + fields and lines[0].startswith("error:"), proc.stderr
    assert all(line.lstrip().startswith("field `") for line in lines[1:]), proc.stderr
    assert "Traceback" not in proc.stderr and SECRET not in proc.stdout + proc.stderr
    return " ".join(lines)


def tree_state(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def parent_repo(tmp_path) -> Path:
    """A git repository holding an empty --repos folder: what `owner/..` reached."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "secret.py").write_text(f"KEY = {SECRET!r}\n")
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    subprocess.run(["git", "-C", str(tmp_path), "add", "secret.py"], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "commit", "-qm", "x"], check=True, env={**env, "PATH": "/usr/bin:/bin"})
    (tmp_path / "repos").mkdir()
    return tmp_path


def instance(repo: str) -> dict:
    return {
        "instance_id": "evil__x-1",
        "repo": repo,
        "base_commit": "a" * 40,
        "patch": "diff --git a/x.py b/x.py\n",
        "test_patch": "diff --git a/t.py b/t.py\n",
        "problem_statement": "p",
        "FAIL_TO_PASS": '["t.py::test_x"]',
        "PASS_TO_PASS": "[]",
        "version": "1.0",
        "environment_setup_commit": "a" * 40,
    }


@pytest.mark.parametrize("repo", ["owner/..", "../repos", "owner/../x", "/abs/x", "o/.git"])
def test_an_instance_whose_repository_leaves_repos_is_refused(parent_repo, repo):
    (parent_repo / "rows.jsonl").write_text(json.dumps(instance(repo)) + "\n")
    before = tree_state(parent_repo)
    proc = sandgym(
        "tasks",
        "import",
        "swebench",
        "rows.jsonl",
        "--repos",
        "repos",
        "--out",
        "out",
        "--no-validate",
        cwd=parent_repo,
    )
    line = error_line(proc)
    assert repr(repo) in line and "owner/name" in line, line
    assert not (parent_repo / "out").exists() and tree_state(parent_repo) == before


def _one_task_set(tmp_path: Path, edit) -> Path:
    """The bundled SWE set cut to one task, whose visible spec `edit` changes."""
    root = tmp_path / "set"
    shutil.copytree(bundled_task_set("swe_repo"), root)
    tasks = sorted((root / "tasks").iterdir())
    hidden = sorted((root / "hidden").iterdir())
    for p in tasks[1:] + hidden[1:]:
        p.unlink()
    spec = yaml.safe_load(tasks[0].read_text())
    edit(spec)
    tasks[0].write_text(yaml.safe_dump(spec))
    return root


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (lambda s: s.update(repo={"kind": "bundled", "name": "/etc"}), ["'/etc'", "plain name"]),
        (lambda s: s.update(repo={"kind": "bundled", "name": "../../.."}), ["'../../..'", "plain name"]),
        (
            lambda s: s.update(repo={"kind": "git", "name": "owner/..", "commit": "a" * 40}),
            ["'owner/..'", "owner/name"],
        ),
        (
            lambda s: s.update(environment={"requirements": ["evil @ https://127.0.0.1:9/evil-1.0.tar.gz"]}),
            ["evil @ https://127.0.0.1:9/evil-1.0.tar.gz", "name==version"],
        ),
        (lambda s: s.update(environment={"requirements": ["-r /etc/shadow"]}), ["-r /etc/shadow"]),
        (lambda s: s.update(id="billing/../../x"), ["task id"]),
    ],
)
def test_a_task_file_naming_a_path_or_a_url_is_refused_in_one_line(tmp_path, edit, words):
    root = _one_task_set(tmp_path, edit)
    before = tree_state(tmp_path)
    for command in (["tasks", "list", str(root)], ["tasks", "validate", str(root)]):
        line = error_line(sandgym(*command, cwd=tmp_path), fields=1)
        assert "invalid task spec" in line, line
        for w in words:
            assert w in line, line
    assert tree_state(tmp_path) == before
