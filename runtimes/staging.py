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
    return _stage(Path(src).name, {p.name: p.read_bytes() for p in files})


def stage_files(name: str, files: dict[str, str]) -> Path:
    """A read-only, world-readable folder holding the given text files."""
    return _stage(name, {fname: text.encode() for fname, text in files.items()})


def _stage(name: str, files: dict[str, bytes]) -> Path:
    digest = hashlib.sha256()
    for fname, data in sorted(files.items()):
        digest.update(fname.encode() + b"\0" + data + b"\0")
    key = f"{name}-{digest.hexdigest()[:16]}"
    with _lock:
        if key in _staged:
            return _staged[key]
        dest = staging_root() / key
        dest.mkdir(mode=0o755)
        for fname, data in files.items():
            (dest / fname).write_bytes(data)
            if fname.endswith(".py"):
                # Sandboxes cannot write bytecode here; an interpreter of the
                # host's version finds it ready (others compile as usual).
                py_compile.compile(str(dest / fname), doraise=True)
        for sub in (dest, dest / "__pycache__"):
            if sub.exists():
                os.chmod(sub, 0o755)
                for f in sub.iterdir():
                    if f.is_file():
                        os.chmod(f, 0o644)
        _staged[key] = dest
        return dest
