"""Where episodes are played: the seam between the worker threads and the
machines that run the envs.

A worker thread takes an episode off the queue and hands it to the run's
executor, which returns the episode's record; everything else (the queue,
the supervisor writing records, deadlines, Ctrl-C, `--resume`) is the same
for every executor. The local executor plays the episode in the worker
thread itself, on the env it keeps in its slot. Another executor (the Ray
one, `sandgym.cluster.executor`) plays it elsewhere and puts an `abort`
callable in the slot, which `Episode.abort` calls so that a deadline or a
second Ctrl-C reaches the remote env too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from sandgym.records import EpisodeRecord

from .episode import Episode, EpisodePlayer


class Executor(Protocol):
    """Plays a run's episodes somewhere; `start` before the first, `close` after the last."""

    kind: str
    # Episodes handed to each of the `concurrency` slots at once: more than 1
    # when a slot is far away (the next one waits there, not in a round trip).
    in_flight: int

    def start(self, player: EpisodePlayer, concurrency: int, log: Callable[[str], None]) -> None:
        """Get ready to play `player`'s episodes, `concurrency` at once; `log` takes notes for the operator."""

    def run_episode(self, player: EpisodePlayer, ep: Episode, slot: dict[str, Any]) -> EpisodeRecord:
        """Play one episode (its env_error tries included) and return its record."""

    def close(self) -> None:
        """Release whatever `start` took (remote envs, actors, connections)."""


class LocalExecutor:
    """Episodes played in the worker threads of this process: each worker
    keeps its env in its slot between episodes. Its records carry no
    `executor` field (records made before executors existed read the same)."""

    kind = "local"
    in_flight = 1

    def start(self, player: EpisodePlayer, concurrency: int, log: Callable[[str], None]) -> None:
        return None

    def run_episode(self, player: EpisodePlayer, ep: Episode, slot: dict[str, Any]) -> EpisodeRecord:
        return player.run_episode(ep, slot)

    def close(self) -> None:
        return None
