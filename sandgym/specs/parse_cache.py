"""Parsed task files kept between loads of a large task set.

Parsing a task set's YAML is most of the time `TaskSet.load` takes (about
30 ms of HumanEval-164's 330 files, plus PyYAML's own import), and
`sandgym eval` pays it before its first episode. The cache keeps, per
task-set folder, each file's parsed data under the SHA-256 of its bytes:
every load still reads every file (the bytes decide, never a timestamp),
and a file whose bytes changed is parsed again. What a load finds in the
cache is validated by the spec models exactly as a parsed file is, so the
task set and its content hash are the same either way.

Where: `$SANDGYM_SPEC_CACHE` (`off` turns the cache off), else
`$XDG_CACHE_HOME/sandgym/specs` (`~/.cache/...`): the user's own folder,
mode 0700, each file 0600 (hidden tests are in it). A folder that is not
a directory of this user's, or that others may write, is not used. Only
sets of at least MIN_FILES files are kept (a small one parses in a few
milliseconds), at most MAX_SETS of them (the least recently loaded go
first). Entries are plain JSON, kept only where the data comes back from
JSON exactly (a YAML date or binary value is parsed every time); a cache
file that is unreadable, too large or of another FORMAT counts as empty.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any

from sandgym.safe_files import write_atomic

CACHE_ENV = "SANDGYM_SPEC_CACHE"
# Bumped whenever what the loader accepts or returns changes (yaml_text.py's
# guard, the limits in base.py): entries from an older loader are not used.
FORMAT = 1
MIN_FILES = 64
MAX_SETS = 32
MAX_CACHE_BYTES = 256 << 20

# The cache file this process read last, by path: (inode, size, mtime) and
# entries. `sandgym eval` reads a set's taskset.yaml (for its family), then
# the whole set: one JSON parse serves both. (One only: a process that
# loads many sets keeps none of their data alive here.)
_read_before: dict[Path, tuple[tuple[int, int, int], dict[str, Any]]] = {}


def cache_folder() -> Path | None:
    """The cache's folder, made if missing; None when off or unsafe to use."""
    raw = os.environ.get(CACHE_ENV, "").strip()
    if raw == "off":
        return None
    try:
        base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
        folder = Path(raw) if raw else Path(base) / "sandgym" / "specs"
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.stat(folder, follow_symlinks=False)
    except (OSError, RuntimeError):  # RuntimeError: no home folder known
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        return None
    return folder


class ParseCache:
    """One task-set folder's parsed files: `get` before parsing a file's
    bytes, `put` after, `save` once the whole set has loaded."""

    def __init__(self, path: Path):
        self.path = path
        self._old: dict[str, Any] | None = None  # read on the first get
        self._now: dict[str, Any] = {}  # what this load saw: the entries saved
        self._changed = False

    @classmethod
    def of(cls, root: Path) -> ParseCache | None:
        """The cache of the task set in folder `root` (None: the cache is off)."""
        folder = cache_folder()
        if folder is None:
            return None
        name = hashlib.sha256(str(root.resolve()).encode("utf-8", "surrogateescape")).hexdigest()[:32]
        return cls(folder / f"{name}.json")

    def _read(self) -> dict[str, Any]:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return {}
        try:
            with os.fdopen(fd, "rb") as f:
                st = os.fstat(f.fileno())
                version = (st.st_ino, st.st_size, st.st_mtime_ns)
                memo = _read_before.get(self.path)
                if memo is not None and memo[0] == version:
                    return memo[1]
                if st.st_size > MAX_CACHE_BYTES:
                    return {}
                data = json.loads(f.read())
        except (OSError, ValueError, RecursionError):
            return {}
        if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("files"), dict):
            return {}
        _read_before.clear()
        _read_before[self.path] = (version, data["files"])
        return data["files"]

    @staticmethod
    def key(raw: bytes) -> str:
        return hashlib.sha256(raw).hexdigest()

    def get(self, raw: bytes) -> Any:
        """The data a file of these bytes parsed to, or None (not kept)."""
        if self._old is None:
            self._old = self._read()
        k = self.key(raw)
        data = self._old.get(k)
        if data is not None:
            self._now[k] = data
        return data

    def put(self, raw: bytes, data: Any) -> None:
        """Keep what a file of these bytes parsed to, if JSON gives it back exactly."""
        if data is None:
            return
        try:
            same = json.loads(json.dumps(data, ensure_ascii=False)) == data
        except (TypeError, ValueError, RecursionError):  # a date, bytes, a set, NaN...
            same = False
        if same:
            self._now[self.key(raw)] = data
            self._changed = True

    def save(self) -> None:
        """Write what this load saw (a set of MIN_FILES files or more), then
        drop the least recently loaded sets past MAX_SETS. An unwritable
        cache only costs the next load its parse."""
        if len(self._now) < MIN_FILES:
            return
        try:
            if self._changed or len(self._now) != len(self._old or {}):
                body = json.dumps({"format": FORMAT, "files": self._now}, ensure_ascii=False, separators=(",", ":"))
                write_atomic(self.path, body, mode=0o600)
            else:
                os.utime(self.path)  # recently loaded: kept the longest
            kept = sorted(self.path.parent.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
            for old in kept[MAX_SETS:]:
                old.unlink(missing_ok=True)
        except OSError:
            pass
