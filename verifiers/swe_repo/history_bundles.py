"""Shipped git history of the `history` tasks: a chain of git bundles per repository.

A history task starts at a real commit of a public repository (the parent
of a fix commit). CI cannot fetch the repository, so its history ships with
sandgym, cut at each task's base commit:

    task_specs/swe_repo/history/<owner>__<name>/000-<commit>.bundle
                                                001-<commit>.bundle ...

Bundle 0 holds the whole first-parent history up to the first base commit;
bundle k holds only the commits after base k-1 up to base k (base k-1 is its
prerequisite). So a task whose base is base k needs bundles 0..k, and those
reach no commit later than base k: no later commit, tag, branch or reflog
ships with it, and the whole chain costs about one copy of the history. Each
bundle has one ref, `refs/sandgym/base`, at the commit its name gives.

The agent never sees these objects: its start state is one new commit of
the base tree (checkout.py); the chain only feeds the SWE cache mirror.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from sandgym.specs.swe_repo import COMMIT_RE
from sandgym.verifiers.swe_repo.git_sources import SANDGYM_REF, copy_commits, has_commit, run_git
from sandgym.verifiers.swe_repo.sources import RepoError

HISTORY_ENV = "SANDGYM_HISTORY_BUNDLES"
BUNDLE_REF = "refs/sandgym/base"
BUNDLE_RE = re.compile(r"(\d{3})-([0-9a-f]{40})\.bundle")


def history_dir() -> Path:
    """The shipped chains, or `$SANDGYM_HISTORY_BUNDLES` (the factory's tests write their own there)."""
    from sandgym.specs import bundled_dir

    override = os.environ.get(HISTORY_ENV)
    return Path(override) if override else bundled_dir() / "swe_repo" / "history"


def chain(folder: Path) -> list[tuple[str, Path]]:
    """(commit, bundle) of a repository's chain, in order; refuses gaps and odd names."""
    found: list[tuple[str, Path]] = []
    for p in sorted(folder.iterdir()) if folder.is_dir() else []:
        m = BUNDLE_RE.fullmatch(p.name)
        if not m or p.is_symlink() or not p.is_file():
            raise RepoError(f"{p}: not a history bundle (expected NNN-<40 hex>.bundle, a regular file)")
        if int(m.group(1)) != len(found):
            raise RepoError(f"{p}: the chain in {folder} has a gap before it (bundle {len(found)} is missing)")
        found.append((m.group(2), p))
    return found


def load_commit(mirror: Path, folder: Path, commit: str) -> bool:
    """Fetch the bundles of `folder` up to the one whose base is `commit` into
    the bare repository `mirror`; False when no bundle there has it."""
    links = chain(folder)
    upto = next((i for i, (c, _) in enumerate(links) if c == commit), None)
    if upto is None:
        return False
    if not (mirror / "HEAD").exists():
        mirror.mkdir(parents=True, exist_ok=True)
        run_git(["init", "-q", "--bare", "--template=", str(mirror)])
    for base, bundle in links[: upto + 1]:
        if has_commit(mirror, base):
            continue
        run_git(["fetch", "-q", "--no-tags", str(bundle.resolve()), f"+{BUNDLE_REF}:{SANDGYM_REF}/{base}"], mirror)
        if not has_commit(mirror, base):
            raise RepoError(f"{bundle}: holds no commit {base} at {BUNDLE_REF}")
    return True


def write_chain(source_git_dir: Path, bases: list[str], folder: Path) -> list[Path]:
    """Write the bundle chain of `bases` (each an ancestor of the next, oldest
    first) from `source_git_dir` into `folder` (emptied of old bundles)."""
    for i, c in enumerate(bases):
        if not COMMIT_RE.match(c):
            raise RepoError(f"{c!r} is not a full hex commit id")
        if i and run_git(["merge-base", bases[i - 1], c], source_git_dir).strip().decode() != bases[i - 1]:
            raise RepoError(f"{bases[i - 1]} is not an ancestor of {c}: the chain needs them in history order")
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.bundle"):
        old.unlink()
    out = []
    with tempfile.TemporaryDirectory(prefix="sandgym-bundles-") as tmp:
        scratch = Path(tmp) / "scratch.git"
        # A scratch repository with one ref per base, so nothing else of the source is reachable.
        copy_commits(source_git_dir, {f"refs/sandgym/b{i:03d}": c for i, c in enumerate(bases)}, scratch)
        for i, c in enumerate(bases):
            run_git(["update-ref", BUNDLE_REF, c], scratch)
            dest = folder / f"{i:03d}-{c}.bundle"
            run_git(["bundle", "create", "-q", str(dest), BUNDLE_REF] + ([f"^{bases[i - 1]}"] if i else []), scratch)
            out.append(dest)
    return out
