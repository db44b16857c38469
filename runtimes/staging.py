"""World-readable copies of the code that sandboxes mount read-only.

Sandboxes run as an unprivileged user that may not traverse the folder the
package is installed in (e.g. under /root), so the agent and the verifier's
in-boundary code are copied into a folder that the sandbox user can read
and nobody but this user can write: /tmp/sandgym-stage-UID/NAME-HASH.
Copies are content-addressed and shared by every process of this user, so
a killed run leaves nothing new behind; they are created by an atomic
rename and never changed (a copy half-written by a killed process,
.tmp-<pid>-*, is removed by `sandgym gc`).
"""

from __future__ import annotations

import atexit
import hashlib
import os
import py_compile
import shutil
import stat
import tempfile
import threading
from pathlib import Path

# The runtimes' in-sandbox code (agent, launchers): the source of what
# backends stage for their sandboxes.
BOUNDARY_DIR = Path(__file__).parent / "boundary"

_lock = threading.Lock()
_staged: dict[str, Path] = {}
_seen_dirs: dict[tuple, Path] = {}
_root: Path | None = None


def _trusted(path: Path) -> bool:
    """Ours, a real folder, and writable by nobody else."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022


def staging_root() -> Path:
    global _root
    if _root is None:
        shared = Path(tempfile.gettempdir()) / f"sandgym-stage-{os.geteuid()}"
        try:
            shared.mkdir(mode=0o755)
        except FileExistsError:
            pass
        if _trusted(shared):
            _root = shared
        else:  # someone else made it: use a private one for this process (gc: sandgym-stage-<pid>-*)
            _root = Path(tempfile.mkdtemp(prefix=f"sandgym-stage-{os.getpid()}-"))
            os.chmod(_root, 0o755)
            atexit.register(shutil.rmtree, _root, True)
    return _root


def stage_dir(src: Path, patterns: tuple[str, ...] = ("*.py",)) -> Path:
    """A read-only, world-readable copy of the files in `src` matching `patterns`."""
    files = sorted({p for pat in patterns for p in Path(src).glob(pat) if p.is_file()})
    # Staged again only when a file's size or mtime changed: a verifier asks
    # for its boundary folder once per verification.
    seen = (str(src), patterns, tuple((p.name, *_size_mtime(p)) for p in files))
    with _lock:
        if seen in _seen_dirs:
            return _seen_dirs[seen]
    dest = stage_bytes(Path(src).name, {p.name: p.read_bytes() for p in files})
    with _lock:
        _seen_dirs[seen] = dest
    return dest


def _size_mtime(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_size, st.st_mtime_ns


def stage_files(name: str, files: dict[str, str]) -> Path:
    """A read-only, world-readable folder holding the given text files."""
    return stage_bytes(name, {fname: text.encode() for fname, text in files.items()})


def stage_bytes(name: str, files: dict[str, bytes]) -> Path:
    """A read-only, world-readable folder holding the given files."""
    digest = hashlib.sha256()
    for fname, data in sorted(files.items()):
        digest.update(fname.encode() + b"\0" + data + b"\0")
    key = f"{name}-{digest.hexdigest()[:16]}"
    with _lock:
        if key in _staged:
            return _staged[key]
        dest = staging_root() / key
        if not _trusted(dest):
            _write_staged(dest, files)
        _staged[key] = dest
        return dest


def _write_staged(dest: Path, files: dict[str, bytes]) -> None:
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{os.getpid()}-", dir=dest.parent))  # gc: a dead pid's is removed
    for fname, data in files.items():
        (tmp / fname).write_bytes(data)
        if fname.endswith(".py"):
            # Sandboxes cannot write bytecode here; an interpreter of the
            # host's version finds it ready (others compile as usual).
            py_compile.compile(str(tmp / fname), doraise=True)
    for sub in (tmp, tmp / "__pycache__"):
        if sub.exists():
            os.chmod(sub, 0o755)
            for f in sub.iterdir():
                if f.is_file():
                    os.chmod(f, 0o644)
    try:
        os.rename(tmp, dest)
    except OSError:  # another process staged the same content first
        shutil.rmtree(tmp, ignore_errors=True)
        if not _trusted(dest):
            raise
