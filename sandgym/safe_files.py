"""Reading files named by data from elsewhere, and writing outputs whole.

Every file the CLI reads (task files, predictions, samples, records) may
come from someone else: it may be a symlink to a host file, a FIFO that
never ends, a device that never stops. `read_bytes_bounded` opens it without
blocking, takes regular files only, optionally only inside a folder (the
real path, after every symlink), and reads at most a byte bound, gzip
included (decompressed bytes count).

`write_atomic` writes a file aside, fsyncs it and renames it over the
target, so a crash leaves the old file or the new one, never half of one.
"""

from __future__ import annotations

import errno
import gzip
import io
import os
import stat
import tempfile
from pathlib import Path

from sandgym.errors import SandgymError

# Predictions, samples and records files: SWE-bench's 2,294 predictions with
# patches are ~50 MB; a run's records hold capped artifacts.
MAX_INPUT_BYTES = 1 << 30


class UnsafeFile(SandgymError, ValueError):
    """A file that is not a regular file inside its folder, or too large; the message names it and the fix."""


def inside(path: str | Path, root: str | Path) -> bool:
    """Whether `path`'s real location (every symlink followed) is `root`'s or under it."""
    real, top = os.path.realpath(path), os.path.realpath(root)
    return os.path.commonpath([real, top]) == top


def read_bytes_bounded(path: str | Path, limit: int, root: str | Path | None = None) -> bytes:
    """The bytes of the regular file `path` (gzip-decompressed when it ends
    in .gz), at most `limit` of them, else UnsafeFile. With `root`, a path
    whose real location is outside `root` is refused before it is opened."""
    path = Path(path)
    target: str | Path = path
    if root is not None:
        # Its real path, resolved once (a task set reads hundreds of files).
        target, top = os.path.realpath(path), os.path.realpath(root)
        if os.path.commonpath([target, top]) != top:
            raise UnsafeFile(
                f"{path}: a symlink to {target}, outside {root}; copy the file into the folder instead of linking to it"
            )
    # Inside a folder: its real path, opened without following a symlink
    # (one put there after the check).
    flags = _READ | (os.O_NOFOLLOW if root is not None else 0)
    try:
        fd = os.open(target, flags)
    except OSError as e:
        raise UnsafeFile(f"{path}: cannot read: {e.strerror or e}") from None
    return _read_open(fd, path, limit)


# O_NONBLOCK: opening a FIFO returns at once (then refused as not a regular file).
_READ = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC


def _read_open(fd: int, path: Path, limit: int) -> bytes:
    """The bytes of the file open as `fd` (closed here), as read_bytes_bounded
    returns them; `path` names it in errors."""
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFile(f"{path}: not a regular file ({_kind(st.st_mode)}); give a file")
        if st.st_size > limit:
            raise UnsafeFile(f"{path}: {st.st_size:,} bytes; the limit is {limit:,}")
        os.set_blocking(fd, True)
        raw = f.read(limit + 1)
    if len(raw) > limit:  # grew while read
        raise UnsafeFile(f"{path}: more than {limit:,} bytes; the limit is {limit:,}")
    if path.suffix != ".gz":
        return raw
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(raw)) as z:
            data = z.read(limit + 1)
    except (OSError, EOFError) as e:
        raise UnsafeFile(f"{path}: not a gzip file ({e}); name it without .gz if it is plain text") from None
    if len(data) > limit:
        raise UnsafeFile(f"{path}: more than {limit:,} bytes once decompressed; the limit is {limit:,}")
    return data


class FolderReader:
    """The files of one folder inside `root`, each read as
    `read_bytes_bounded(folder / name, limit, root)` reads it, for a task
    set's hundreds of files: the folder's real location is checked and the
    folder opened once, and a name that is no symlink is opened through that
    descriptor (O_NOFOLLOW), with no path resolved per file. A symlink (it
    may point elsewhere inside `root`), or every name of a folder outside
    `root`, takes read_bytes_bounded's own way (its error names the file)."""

    def __init__(self, folder: Path, root: str | Path):
        self.folder, self.root = folder, root
        self.fd: int | None = None
        real, top = os.path.realpath(folder), os.path.realpath(root)
        if os.path.commonpath([real, top]) == top:
            try:
                self.fd = os.open(real, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW)
            except OSError:  # (each read reports it)
                self.fd = None

    def names(self) -> list[str]:
        """The names in the folder, sorted."""
        return sorted(os.listdir(self.folder if self.fd is None else self.fd))

    def read(self, name: str, limit: int) -> bytes:
        if self.fd is not None:
            try:
                fd = os.open(name, _READ | os.O_NOFOLLOW, dir_fd=self.fd)
            except OSError as e:
                if e.errno != errno.ELOOP:  # ELOOP: a symlink, read below
                    raise UnsafeFile(f"{self.folder / name}: cannot read: {e.strerror or e}") from None
            else:
                return _read_open(fd, self.folder / name, limit)
        return read_bytes_bounded(self.folder / name, limit, root=self.root)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> FolderReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISLNK, "a symlink"),
    ):
        if test(mode):
            return name
    return "not a file"


def write_atomic(path: str | Path, data: bytes | str, mode: int = 0o644) -> Path:
    """Write `data` to `path` whole: aside in the same folder, fsynced, renamed over it."""
    path = Path(path)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
