"""The start state of an SWE task, prepared once on the host and cached.

The start state is the pristine tree with the task's `base_patch` applied.
Two tar streams are kept per task, both with paths under `repo/`:

- `tree.tar`: the files only; the verifier unpacks it into a fresh sandbox;
- `repo.tar`: the same files as a git repository holding ONE commit (fixed
  author and date, no remotes, tags, reflog, hooks or other objects), which
  the env unpacks into the agent's sandbox. Nothing of the pristine tree or
  the fix is in its object store: the base patch is applied before `git add`.

Entries live under `cache_dir()/swe_start/KEY/`, where KEY hashes what the
start state is made of (for a bundled project, its files' contents too:
`start_key`), so a reset costs a sandbox and one `put_archive`.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from sandgym.specs.swe_repo import SWETask
from sandgym.verifiers.swe_repo.sources import RepoError, bundled_digest, cache_dir, cache_lock, pristine_tree

CHECKOUT_VERSION = 1
REPO_NAME = "repo"
# One fixed identity and date: the base commit's id depends only on the tree.
GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "sandgym",
    "GIT_AUTHOR_EMAIL": "sandgym@localhost",
    "GIT_COMMITTER_NAME": "sandgym",
    "GIT_COMMITTER_EMAIL": "sandgym@localhost",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00+0000",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00+0000",
}


@dataclass(frozen=True)
class StartState:
    key: str
    tree_tar: bytes
    repo_tar: bytes
    base_commit: str
    size_bytes: int


# Recently used start states, in memory (a factory set holds hundreds).
MEMO_SIZE = 32
_memo: OrderedDict[str, StartState] = OrderedDict()
_memo_lock = threading.Lock()


def start_key(task: SWETask) -> str:
    """What the start state is made of: the source, the base patch, and for a
    bundled project (a folder that may change under the same name) a hash
    of its files, so a changed project is never served from the cache.
    sdists are pinned by sha256 and git trees by commit id already."""
    parts: dict[str, object] = {"v": CHECKOUT_VERSION, "repo": task.repo.model_dump(mode="json")}
    parts["base_patch"] = task.base_patch
    if task.repo.kind == "bundled":
        parts["files"] = bundled_digest(task.repo.name)
    raw = json.dumps(parts, sort_keys=True)
    return hashlib.sha256(raw.encode()).hexdigest()[:20]


def git_env(home: str) -> dict[str, str]:
    """An environment in which git reads no user or system configuration."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": home,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "LANG": "C",
        **GIT_IDENTITY,
    }


def _git(args: list[str], cwd: Path, env: dict[str, str], stdin: bytes | None = None) -> str:
    r = subprocess.run(["git", *args], cwd=cwd, env=env, input=stdin, capture_output=True)
    if r.returncode != 0:
        raise RepoError(f"git {' '.join(args[:2])} failed in {cwd}: {r.stderr.decode(errors='replace')[-1500:]}")
    return r.stdout.decode()


def tar_dir(root: Path, arcname: str) -> bytes:
    """A tar stream of regular files and folders under `root`, named `arcname/...`."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            rel = os.path.relpath(dirpath, root)
            base = arcname if rel == "." else f"{arcname}/{rel}"
            tar.add(dirpath, base, recursive=False)
            for name in sorted(filenames):
                path = os.path.join(dirpath, name)
                if os.path.isfile(path) and not os.path.islink(path):
                    tar.add(path, f"{base}/{name}", recursive=False)
    return buf.getvalue()


def _build(task: SWETask, dest: Path) -> None:
    work = Path(tempfile.mkdtemp(prefix="sg-start-"))
    try:
        repo = pristine_tree(task.repo, work / REPO_NAME)
        env = git_env(str(work))
        if task.base_patch.strip():
            try:
                _git(["apply", "--whitespace=nowarn", "-"], repo, env, task.base_patch.encode())
            except RepoError as e:
                raise RepoError(
                    f"task {task.id!r}: base_patch does not apply to the pristine "
                    f"{task.repo.kind} source {task.repo.name!r}: {e}"
                ) from None
        for cache in repo.rglob("__pycache__"):
            shutil.rmtree(cache, ignore_errors=True)
        size = sum(p.stat().st_size for p in repo.rglob("*") if p.is_file())
        tree = tar_dir(repo, REPO_NAME)
        _git(["init", "-q", "--template=", "-b", "main"], repo, env)
        _git(["add", "-A", "-f"], repo, env)
        _git(["commit", "-q", "--no-verify", "-m", "Start state"], repo, env)
        commit = _git(["rev-parse", "HEAD"], repo, env).strip()
        git_dir = repo / ".git"
        for leftover in ("logs", "hooks", "COMMIT_EDITMSG", "ORIG_HEAD", "description", "FETCH_HEAD"):
            target = git_dir / leftover
            if target.is_dir():
                shutil.rmtree(target)
            elif target.exists():
                target.unlink()
        tmp = Path(tempfile.mkdtemp(prefix=dest.name + ".", dir=dest.parent))
        (tmp / "tree.tar").write_bytes(tree)
        (tmp / "repo.tar").write_bytes(tar_dir(repo, REPO_NAME))
        (tmp / "meta.json").write_text(json.dumps({"base_commit": commit, "size_bytes": size, "task": task.id}))
        os.chmod(tmp, 0o755)
        os.rename(tmp, dest)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def start_state(task: SWETask) -> StartState:
    """The task's start state, built on first use (sdists may be downloaded)."""
    key = start_key(task)
    with _memo_lock:
        if key in _memo:
            _memo.move_to_end(key)
            return _memo[key]
    dest = cache_dir() / "swe_start" / key
    with cache_lock(dest):
        if not (dest / "meta.json").exists():
            if dest.exists():
                shutil.rmtree(dest)
            _build(task, dest)
    meta = json.loads((dest / "meta.json").read_text())
    state = StartState(
        key=key,
        tree_tar=(dest / "tree.tar").read_bytes(),
        repo_tar=(dest / "repo.tar").read_bytes(),
        base_commit=meta["base_commit"],
        size_bytes=meta["size_bytes"],
    )
    with _memo_lock:
        _memo[key] = state
        while len(_memo) > MEMO_SIZE:
            _memo.popitem(last=False)
    return state
