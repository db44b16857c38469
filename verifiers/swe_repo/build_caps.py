"""The caps on building a task's test environment from data from elsewhere.

A task names its requirements; the wheels they resolve to come from
strangers. Whatever they hold, the build is bounded: bytes downloaded,
the wheels' unpacked size, each build process's memory, and each step's
time. Each cap is an environment variable, so an operator can raise it
for a task that truly needs more; the error that stops a build names it.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from sandgym.errors import SandgymError

MB = 1024 * 1024


class Cap(NamedTuple):
    variable: str
    default: int
    unit: str  # "MB" or "s"
    what: str  # "the bytes downloaded": what the cap bounds, for messages


DOWNLOAD = Cap("SANDGYM_BUILD_DOWNLOAD_MB", 2048, "MB", "the bytes pip downloads for one environment")
UNPACKED = Cap("SANDGYM_BUILD_UNPACKED_MB", 4096, "MB", "the wheels' unpacked size (and any one file written)")
MEMORY = Cap("SANDGYM_BUILD_MEMORY_MB", 2048, "MB", "the memory (address space) of each build process")
TIME = Cap("SANDGYM_BUILD_TIMEOUT_S", 600, "s", "the time of each download or build step")


class CapError(SandgymError, RuntimeError):
    """A build went over a cap, or a cap's variable is not a whole number; one line."""


def value(cap: Cap) -> int:
    """The cap's value: its variable's, or its default."""
    raw = os.environ.get(cap.variable, "").strip()
    if not raw:
        return cap.default
    if not raw.isdigit() or int(raw) < 1:
        raise CapError(f"{cap.variable}={raw!r} is not a whole number of {cap.unit} >= 1; set it to e.g. {cap.default}")
    return int(raw)


def in_bytes(cap: Cap) -> int:
    return value(cap) * MB


def over(cap: Cap, doing: str) -> CapError:
    """The one-line error for `doing` ("downloading [...]") stopped at `cap`."""
    v = value(cap)
    return CapError(
        f"{doing} stopped: over the cap on {cap.what}, {v} {cap.unit} ({cap.variable}); "
        f"if the task truly needs more, raise it (e.g. {cap.variable}={v * 4}) and run again"
    )
