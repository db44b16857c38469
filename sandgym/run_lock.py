"""One writer per run folder.

Two `sandgym eval` runs on one `--out` would interleave their records, and
a later `--resume` would take one run's settings and drop the other's
records. A run holds an exclusive `flock` on `.sandgym.lock` in its folder
for as long as it writes there; a second run finds it held and refuses in
one line naming the folder and the holder's pid.

The lock belongs to an open file, not to a name: the kernel drops it when
the holder's last descriptor closes, which a `kill -9` does too, so no lock
outlives its process. The descriptor is close-on-exec (no sandbox or helper
the run starts inherits it) and the file is never removed (removing it
would let a second run lock a fresh file while the first holds the old
one).
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

from sandgym.errors import SandgymError

LOCK_NAME = ".sandgym.lock"


class RunFolderBusy(SandgymError, FileExistsError):
    """Another process writes this run folder; the message names the folder and its pid."""


class RunLock:
    """The held lock of a run folder; `release()` (or leaving the `with`) lets it go."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.path = self.folder / LOCK_NAME
        # O_NOFOLLOW: a lock file planted as a symlink is refused, never followed.
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
        self.fd: int | None = os.open(self.path, flags, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            holder = _holder(self.fd)
            os.close(self.fd)
            self.fd = None
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            raise RunFolderBusy(
                f"{self.folder}: another sandgym eval{f' (pid {holder})' if holder else ''} is writing this run "
                "folder; wait for it to end, or choose another --out"
            ) from None
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"{os.getpid()}\n".encode(), 0)

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the descriptor drops the lock
            self.fd = None

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _holder(fd: int) -> str:
    """The pid the holder wrote into the lock file ('' if it has not yet)."""
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return ""
    return text if text.isdigit() else ""


def lock_run_folder(folder: str | Path) -> RunLock:
    """Hold `folder`'s lock (the folder must exist); RunFolderBusy while another process holds it."""
    return RunLock(folder)
