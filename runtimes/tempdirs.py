"""Temporary folders named after the process that made them.

Temporary folders a sandgym process makes are named
sandgym-<kind>-<pid>-XXXXXXXX (owned_tempdir), so that `sandgym gc` can
tell those of a process that is gone (killed before it could clean up)
from those of one still running.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

from .host_processes import pid_alive
from .rootfs import cache_root, rootfs_cache
from .staging import staging_root

OWNED = re.compile(r"^sandgym-(?P<kind>[a-z][a-z-]*?)-(?P<pid>\d+)-[A-Za-z0-9_]+$")
STAGING_TMP = re.compile(r"^\.tmp-(?P<pid>\d+)-[A-Za-z0-9_]+$")


def build_root() -> Path:
    """The cache's folder of build areas (owned_tempdir folders in which a
    build sandbox lays a cache entry out, a rename away from its place);
    `sandgym gc` removes those of a process that is gone."""
    return cache_root() / "build"


def owned_tempdir(kind: str, parent: str | Path | None = None) -> Path:
    """A new private folder sandgym-<kind>-<pid>-XXXXXXXX (in the temp folder
    unless `parent`), which `sandgym gc` removes once this process is gone."""
    return Path(tempfile.mkdtemp(prefix=f"sandgym-{kind}-{os.getpid()}-", dir=parent))


def reap_tempdirs(include_live: bool = False, root: str | Path | None = None, owner: int | None = None) -> list[Path]:
    """Remove what killed sandgym processes left in the temp folder (and in
    the cache's build areas): folders named by owned_tempdir() whose owner
    process is gone (or all of them, with include_live; or only `owner`'s),
    and half-written copies in the staging folder. Only this user's folders
    are touched. Returns what was removed."""
    base = Path(root or tempfile.gettempdir())
    removed: list[Path] = []
    me = os.geteuid()
    candidates: list[tuple[Path, int]] = []
    for folder in (base, *([build_root()] if root is None else [])):
        try:
            for entry in os.scandir(folder):
                m = OWNED.match(entry.name)
                if m and entry.is_dir(follow_symlinks=False):
                    candidates.append((Path(entry.path), int(m["pid"])))
        except OSError:
            pass
    staging = staging_root() if root is None else base / f"sandgym-stage-{me}"
    # Half-written copies: of staged code, and of unpacked image roots (runtimes/rootfs.py).
    for folder in (staging, *([rootfs_cache()] if root is None else [])):
        try:
            for entry in os.scandir(folder):
                m = STAGING_TMP.match(entry.name)
                if m and entry.is_dir(follow_symlinks=False):
                    candidates.append((Path(entry.path), int(m["pid"])))
        except OSError:
            pass
    for path, pid in candidates:
        try:
            if os.lstat(path).st_uid != me:
                continue
        except OSError:
            continue
        if owner is not None:
            if pid != owner:
                continue
        elif pid == os.getpid() or (not include_live and pid_alive(pid)):
            continue
        shutil.rmtree(path, ignore_errors=True)
        if not path.exists():
            removed.append(path)
    return removed
