"""World-readable copies of the code that sandboxes mount read-only.

Sandboxes run as an unprivileged user that may not traverse the folder the
package is installed in (e.g. under /root), so the agent and the verifier's
in-boundary code are copied once per process into a private temp folder
that the sandbox user can read but nobody but the host can write.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import py_compile
import shutil
import tempfile
import threading
from pathlib import Path

_lock = threading.Lock()
_staged: dict[str, Path] = {}
_root: Path | None = None


def staging_root() -> Path:
    global _root
    if _root is None:
        _root = Path(tempfile.mkdtemp(prefix="sandgym-stage-"))
        os.chmod(_root, 0o755)
        atexit.register(shutil.rmtree, _root, True)
    return _root


def stage_dir(src: Path, patterns: tuple[str, ...] = ("*.py",)) -> Path:
    """A read-only, world-readable copy of the files in `src` matching `patterns`."""
    files = sorted({p for pat in patterns for p in Path(src).glob(pat) if p.is_file()})
    digest = hashlib.sha256()
    for p in files:
        digest.update(p.name.encode() + b"\0" + p.read_bytes())
    key = f"{Path(src).name}-{digest.hexdigest()[:16]}"
    with _lock:
        if key in _staged:
            return _staged[key]
        dest = staging_root() / key
        dest.mkdir(mode=0o755)
        for p in files:
            shutil.copyfile(p, dest / p.name)
            os.chmod(dest / p.name, 0o644)
            if p.suffix == ".py":
                # Sandboxes cannot write bytecode here; an interpreter of the
                # host's version finds it ready (others compile as usual).
                py_compile.compile(str(dest / p.name), doraise=True)
        for sub in (dest, dest / "__pycache__"):
            if sub.exists():
                os.chmod(sub, 0o755)
                for f in sub.iterdir():
                    if f.is_file():
                        os.chmod(f, 0o644)
        _staged[key] = dest
        return dest


def stage_files(name: str, files: dict[str, str]) -> Path:
    """A read-only, world-readable folder holding the given text files."""
    digest = hashlib.sha256(repr(sorted(files.items())).encode()).hexdigest()[:16]
    key = f"{name}-{digest}"
    with _lock:
        if key in _staged:
            return _staged[key]
        dest = staging_root() / key
        dest.mkdir(mode=0o755)
        for fname, text in files.items():
            (dest / fname).write_text(text)
            os.chmod(dest / fname, 0o644)
        os.chmod(dest, 0o755)
        _staged[key] = dest
        return dest
