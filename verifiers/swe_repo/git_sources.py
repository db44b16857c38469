"""Git sources of the SWE repo-issue family: a repository at a commit.

A `RepoSource(kind="git", name="owner/name", commit=...)` names a tree by
its commit id, which is content-addressed already. The objects come from a
local clone or bare repository the user points to (`sandgym tasks import
swebench --repos DIR`, or `$SANDGYM_GIT_REPOS`, folders separated by `:`),
where the repository is `DIR/owner__name` or `DIR/name` (a `.git` suffix
is fine), or from the bundle chains that ship with sandgym
(`task_specs/swe_repo/history/`, history_bundles.py). Only the commits a
task needs are fetched, shallow (no history),
into a bare mirror per repository in the SWE cache
(`cache_dir()/git/owner__name.git`), so a checkout never needs the user's
clone again.

The pristine tree is written from the commit's tree object blob by blob
(`git ls-tree` + `git cat-file --batch`), not with `git archive`, which
would honour the repository's own `export-ignore` / `export-subst`
attributes. Symlinks and submodules are left out (as they are from sdists):
the verifier refuses symlinks anyway.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path, PurePosixPath

from sandgym.specs.swe_repo import COMMIT_RE, RepoSource, check_repo_name
from sandgym.verifiers.swe_repo.checkout import git_env
from sandgym.verifiers.swe_repo.sources import RepoError, cache_dir, cache_lock

REPOS_ENV = "SANDGYM_GIT_REPOS"
SANDGYM_REF = "refs/sandgym"  # refs that keep fetched commits in the mirror


def repo_slug(name: str) -> str:
    """`owner/name` -> `owner__name`, SWE-bench's own spelling (image and log names)."""
    try:
        check_repo_name(name)
    except ValueError as e:
        raise RepoError(str(e)) from None
    return name.replace("/", "__")


def mirror_dir(name: str) -> Path:
    return cache_dir() / "git" / f"{repo_slug(name)}.git"


def run_git(args: list[str], git_dir: Path | None = None, stdin: bytes | None = None) -> bytes:
    cmd = ["git"] + ([f"--git-dir={git_dir}"] if git_dir else []) + args
    r = subprocess.run(cmd, env=git_env(str(cache_dir())), input=stdin, capture_output=True)
    if r.returncode != 0:
        raise RepoError(f"git {' '.join(args[:2])} failed: {r.stderr.decode(errors='replace')[-1500:]}")
    return r.stdout


def has_commit(git_dir: Path, commit: str) -> bool:
    if not (git_dir / "HEAD").exists():
        return False
    r = subprocess.run(
        ["git", f"--git-dir={git_dir}", "cat-file", "-e", f"{commit}^{{commit}}"],
        env=git_env(str(cache_dir())),
        capture_output=True,
    )
    return r.returncode == 0


def is_git_repo(path: Path) -> Path | None:
    """The git dir of a clone (`path/.git`) or of a bare repository, else None."""
    if (path / ".git").is_dir():
        return path / ".git"
    if (path / "HEAD").is_file() and (path / "objects").is_dir():
        return path
    return None


def find_local_repo(repos_dir: str | Path, name: str) -> Path:
    """The clone of `owner/name` under `repos_dir`: `owner__name` or `name`, with or without `.git`."""
    root = Path(repos_dir)
    slug = repo_slug(name)  # checked: owner/name of safe segments, so nothing leaves `root`
    base = name.rsplit("/", 1)[-1]
    tried = []
    for stem in dict.fromkeys((slug, base)):
        for cand in (root / stem, root / f"{stem}.git"):
            tried.append(cand.name)
            if cand.is_dir() and is_git_repo(cand):
                return cand
    raise RepoError(
        f"repository {name!r}: no git clone in {root} (looked for {', '.join(tried)}); "
        f"clone it there, e.g. git clone https://github.com/{name} {root / repo_slug(name)}"
    )


def search_dirs(extra: list[Path] | None = None) -> list[Path]:
    dirs = list(extra or [])
    dirs += [Path(p) for p in os.environ.get(REPOS_ENV, "").split(":") if p]
    return dirs


def ingest(repo: Path, name: str, commits: list[str]) -> Path:
    """Fetch `commits` (shallow) from the local repository `repo` into the
    cache mirror of `name`; a commit already there is not fetched again."""
    mirror = mirror_dir(name)
    with cache_lock(mirror):
        if not (mirror / "HEAD").exists():
            mirror.mkdir(parents=True, exist_ok=True)
            run_git(["init", "-q", "--bare", "--template=", str(mirror)])
        for commit in dict.fromkeys(commits):
            if not COMMIT_RE.match(commit):
                raise RepoError(f"{commit!r} is not a full hex commit id")
            if has_commit(mirror, commit):
                continue
            # Any commit, named by id, whether or not a branch points at it.
            upload = "git -c safe.directory=* -c uploadpack.allowAnySHA1InWant=true upload-pack"
            try:
                url = f"file://{repo.resolve()}"
                run_git(["fetch", "-q", "--no-tags", "--depth=1", f"--upload-pack={upload}", url, commit], mirror)
            except RepoError as e:
                raise RepoError(
                    f"commit {commit} of {name!r} is not in {repo} ({e}); fetch it there first "
                    "(git fetch origin), or point --repos at a clone that has it"
                ) from None
            run_git(["update-ref", f"{SANDGYM_REF}/{commit}", commit], mirror)
    return mirror


def ensure_commit(name: str, commit: str, repos_dirs: list[Path] | None = None) -> Path:
    """The mirror holding `commit`, fetched from a clone under `repos_dirs` or `$SANDGYM_GIT_REPOS` if needed."""
    mirror = mirror_dir(name)
    if has_commit(mirror, commit):
        return mirror
    from sandgym.verifiers.swe_repo.history_bundles import history_dir, load_commit

    with cache_lock(mirror):  # the history shipped with sandgym (history_bundles.py)
        if load_commit(mirror, history_dir() / repo_slug(name), commit):
            return mirror
    problems = []
    for d in search_dirs(repos_dirs):
        try:
            return ingest(find_local_repo(d, name), name, [commit])
        except RepoError as e:
            problems.append(str(e))
    where = "; ".join(problems) if problems else f"no folder given and ${REPOS_ENV} is not set"
    raise RepoError(
        f"commit {commit} of {name!r} is not in the SWE cache ({mirror}) and no clone has it ({where}); "
        f"import the tasks with `sandgym tasks import swebench FILE --repos DIR`, or set {REPOS_ENV}=DIR "
        f"where DIR holds {repo_slug(name)} (a clone or bare repository)"
    )


def _safe_path(path: str) -> bool:
    parts = PurePosixPath(path).parts
    return bool(parts) and not path.startswith("/") and not any(p in ("..", ".git", "") for p in parts)


def write_tree(git_dir: Path, commit: str, dest: Path) -> Path:
    """Write the files of `commit` into `dest` (created; must not exist)."""
    dest = Path(dest)
    listing = run_git(["ls-tree", "-r", "-z", "--full-tree", commit], git_dir)
    blobs: list[tuple[str, str, str]] = []  # (mode, sha, path)
    for entry in listing.split(b"\0"):
        if not entry:
            continue
        meta, _, raw_path = entry.partition(b"\t")
        mode, kind, sha = meta.decode().split()
        path = raw_path.decode("utf-8", "surrogateescape")
        if kind != "blob" or mode == "120000":
            continue  # submodules and symlinks are not source here
        if not _safe_path(path):
            raise RepoError(f"commit {commit}: unsafe path {path!r} in its tree")
        blobs.append((mode, sha, path))
    dest.mkdir(parents=True)
    if not blobs:
        return dest
    proc = subprocess.Popen(
        ["git", f"--git-dir={git_dir}", "cat-file", "--batch"],
        env=git_env(str(cache_dir())),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        for mode, sha, path in blobs:
            proc.stdin.write(sha.encode() + b"\n")
            proc.stdin.flush()
            header = proc.stdout.readline().split()
            if len(header) != 3 or header[1] != b"blob":
                raise RepoError(f"commit {commit}: cannot read blob {sha} ({path})")
            data = proc.stdout.read(int(header[2]))
            proc.stdout.read(1)  # the newline after each object
            target = dest / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            os.chmod(target, 0o755 if mode == "100755" else 0o644)
    finally:
        proc.stdin.close()
        proc.stdout.close()
        proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
    return dest


def tree_at(name: str, commit: str, dest: Path, repos_dirs: list[Path] | None = None) -> Path:
    return write_tree(ensure_commit(name, commit, repos_dirs), commit, dest)


def git_tree(source: RepoSource, dest: Path) -> Path:
    """The pristine tree of a git source (sources.pristine_tree for kind git)."""
    return tree_at(source.name, source.commit, dest)


def export_commits(name: str, commits: dict[str, str], dest: Path) -> Path:
    """Copy `commits` ({ref name: commit}) from the cache mirror of `name` into the bare repository `dest`."""
    mirror = mirror_dir(name)
    return copy_commits(mirror, commits, dest)


def copy_commits(source_git_dir: Path, commits: dict[str, str], dest: Path) -> Path:
    """Fetch `commits` ({ref name: commit}) from `source_git_dir` into the bare repository `dest`
    (created when missing), one ref each; shallow sources stay shallow there."""
    if not (dest / "HEAD").exists():
        dest.mkdir(parents=True, exist_ok=True)
        run_git(["init", "-q", "--bare", "--template=", "-b", "main", str(dest)])
    if not commits:
        return dest
    upload = "git -c safe.directory=* -c uploadpack.allowAnySHA1InWant=true upload-pack"
    refspecs = [f"+{commit}:{ref}" for ref, commit in commits.items()]
    run_git(
        [
            "fetch",
            "-q",
            "--no-tags",
            "--update-shallow",
            f"--upload-pack={upload}",
            f"file://{source_git_dir.resolve()}",
        ]
        + refspecs,
        dest,
    )
    return dest
