"""The worker threads: each takes episodes off one queue, plays them on the
env it keeps, and hands every record to the supervisor.

Workers are not daemon threads (none is left running inside Playwright
when the interpreter exits) and say explicitly when they end: their last
message is always "exit", never a join timeout. A worker closes its env in
its own thread (Playwright's sync API is bound to the thread that made it).
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from .episode import Episode, EpisodePlayer, drop_env, now
from .executor import Executor, LocalExecutor


@dataclass(eq=False)
class Worker:
    n: int
    thread: threading.Thread | None = None
    episode: Episode | None = None  # the one it plays now
    slot: dict[str, Any] = field(default_factory=dict)  # its env, kept between episodes


# What workers tell the supervisor: ("record", worker, (episode, record)),
# ("error", worker, exception) or ("exit", worker, None).
Messages: TypeAlias = queue.SimpleQueue[tuple[str, Worker, Any]]


class EpisodeQueue:
    """The episodes still to play, in order, taken one at a time."""

    def __init__(self) -> None:
        self._todo: queue.SimpleQueue[Episode] = queue.SimpleQueue()
        self._take_lock = threading.Lock()
        self._head_since = 0.0  # when the episode now at the head of the queue got there

    def put(self, ep: Episode) -> None:
        self._todo.put(ep)

    def empty(self) -> bool:
        return self._todo.empty()

    def qsize(self) -> int:
        return self._todo.qsize()

    def take(self) -> Episode | None:
        """The next episode (None: none left), its wait counted from when it
        reached the head of the queue: a worker could have taken it then."""
        with self._take_lock:
            try:
                ep = self._todo.get_nowait()
            except queue.Empty:
                return None
            ep.submitted, self._head_since = max(ep.submitted, self._head_since), time.perf_counter()
            return ep


def play_episodes(
    w: Worker,
    todo: EpisodeQueue,
    messages: Messages,
    stop: threading.Event,
    player: EpisodePlayer,
    episode_timeout_s: float | None,
    executor: Executor | None = None,
) -> None:
    """A worker thread's life: play episodes (through `executor`; None: in
    this thread) until the queue is empty or the run stops; hand each record
    to the supervisor; always end with "exit"."""
    executor = executor or LocalExecutor()
    try:
        while not stop.is_set():
            ep = todo.take()
            if ep is None:
                return
            ep.slot = w.slot
            ep.started_at = now()
            ep.t0 = time.perf_counter()
            if player.observer is not None:
                player.observer.started((ep.task.id, ep.epoch), ep.submitted, ep.t0)
            if episode_timeout_s is not None:
                ep.deadline = time.monotonic() + episode_timeout_s
            w.episode = ep
            try:
                rec = executor.run_episode(player, ep, w.slot)
            finally:
                w.episode = None
            messages.put(("record", w, (ep, rec)))
            if ep.cancel.is_set():
                drop_env(w.slot)  # it was killed: the next episode gets a fresh one
    except BaseException as e:  # re-raised in the supervising thread
        messages.put(("error", w, e))
    finally:
        drop_env(w.slot)
        messages.put(("exit", w, None))
