"""Wheels made by hand for the tests: a wheel is a zip with a dist-info folder."""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import stat
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

OUTSIDE = "/tmp/sandgym-wheel-escape"  # where the hostile wheels and builds aim, on the host


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}\n"


def make_wheel(
    folder: Path,
    name: str,
    files: dict[str, bytes],
    modes: dict[str, int] | None = None,
    record_extra: str = "",
    entry_points: str = "",
    version: str = "1.0",
    deflate: bool = False,
) -> Path:
    """`folder/<name>-<version>-py3-none-any.whl` holding `files` (zip member
    name -> bytes; `modes` gives a member's st_mode, e.g. a symlink's
    S_IFLNK, kept in the zip's external attributes) and a dist-info whose
    RECORD lists them, plus `record_extra` lines."""
    dist = f"{name}-{version}.dist-info"
    meta = {
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: sandgym-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    if entry_points:
        meta[f"{dist}/entry_points.txt"] = entry_points.encode()
    members = {**files, **meta}
    record = "".join(_record_line(n, d) for n, d in members.items()) + record_extra + f"{dist}/RECORD,,\n"
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for n, data in [*members.items(), (f"{dist}/RECORD", record.encode())]:
            info = zipfile.ZipInfo(n, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = ((modes or {}).get(n, stat.S_IFREG | 0o644)) << 16
            if deflate:
                info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
    return path


@contextmanager
def public_folder() -> Iterator[Path]:
    """A folder the unprivileged build user can read (pytest's tmp_path is root's alone)."""
    d = Path(tempfile.mkdtemp(prefix="sandgym-test-links-"))
    os.chmod(d, 0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def snapshot(root: Path) -> dict[str, tuple[int, int, int]]:
    """(mode, size, mtime_ns) of everything under `root`, links not followed."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = os.path.join(dirpath, n)
            st = os.lstat(p)
            out[os.path.relpath(p, root)] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return out
