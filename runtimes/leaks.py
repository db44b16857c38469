"""What `sandgym gc` reports, and what it collects that no one backend owns.

Every collector (the backend table's `collector`, and `collect` here)
returns a list of `Leaks`: what it removed, one entry per kind. Here: the
temporary folders of processes that are gone (tempdirs.py) and the host
processes of browser sandboxes of any backend whose owner is gone.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Leaks:
    """What a collector removed (or killed) of one kind."""

    kind: str  # singular, e.g. "sandbox container"
    items: list[str]
    verb: str = "removed"  # "killed" for processes


def collect(include_live: bool = False, owner: int | None = None) -> list[Leaks]:
    """Browser-sandbox processes (a bubblewrap sandbox, a `docker exec`
    client, an exec relay) and temporary folders whose owner is gone (or
    any other process's, with include_live; or only `owner`'s)."""
    from .browser import reap_orphans
    from .tempdirs import reap_tempdirs

    killed = reap_orphans(include_live=include_live, owner_pid=owner)
    folders = reap_tempdirs(include_live=include_live, owner=owner)
    return [
        Leaks("browser-sandbox process", [str(p) for p in killed], "killed"),
        Leaks("temporary folder", [str(p) for p in folders]),
    ]
