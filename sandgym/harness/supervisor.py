"""The supervisor: the calling thread's part of a run. It starts the
workers, alone writes the records they hand back, and enforces deadlines
and interrupts.

Every episode has a wall-clock deadline (`episode_timeout_s`): past it the
episode is `env_error` and its env is killed (`Episode.abort`). Ctrl-C
(SIGINT) stops handing out episodes and lets the running ones finish; a
second Ctrl-C (or SIGTERM) abandons them: their envs are killed and each is
recorded as `env_error` with the error "interrupted". A worker that does
not come back within `abort_grace_s` of its env being killed is given up
on: its episode is recorded here, with the steps taken so far, and another
worker takes its place.
"""

from __future__ import annotations

import contextlib
import queue
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from sandgym.records import EpisodeRecord, OutputError, RecordWriter

from .episode import INTERRUPTED, EpisodePlayer
from .executor import Executor
from .workers import EpisodeQueue, Messages, Worker, play_episodes


@contextlib.contextmanager
def noting_signals(seen: list[int]) -> Iterator[None]:
    """SIGINT and SIGTERM become notes in `seen` that the supervisor acts
    on (never an exception raised in the middle of writing a record).
    Signals reach only the main thread: elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def note(signum: int, frame: object) -> None:
        seen.append(signum)

    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s in old:
        signal.signal(s, note)
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


class Supervisor:
    """One run's supervision, from the first worker started to the last one ended."""

    def __init__(
        self,
        player: EpisodePlayer,
        todo: EpisodeQueue,
        writer: RecordWriter,
        records: list[EpisodeRecord],
        concurrency: int,
        episode_timeout_s: float | None,
        abort_grace_s: float,
        log: Callable[[str], None],
        on_record: Callable[[EpisodeRecord], None] | None = None,
        executor: Executor | None = None,
    ):
        self.player, self.todo, self.writer, self.records = player, todo, writer, records
        self.executor = executor  # where the workers play episodes (None: in their own threads)
        self.concurrency = concurrency
        self.episode_timeout_s = episode_timeout_s
        self.abort_grace_s = abort_grace_s
        self.log = log
        self.on_record = on_record
        self.messages: Messages = queue.SimpleQueue()
        self.stop = threading.Event()
        self.live: list[Worker] = []
        self.next_n = 0  # the number of the next worker started
        self.failures: list[BaseException] = []  # raised by a worker, an observer or on_record
        self.output_failed: list[OutputError] = []
        self.signals_seen: list[int] = []
        self.announced = False  # the first signal was acted on
        self.abandoned = False
        self.given_up_at: float | None = None  # after abandoning: when to stop waiting for the workers
        self.stuck_workers: list[threading.Thread] = []  # workers that never came back from a killed env

    def run(self) -> None:
        """Start the workers, write what they hand back, enforce deadlines and
        interrupts, and return once every worker has ended (or was given up
        on). A worker's failure, or the records' (OutputError), is raised here."""
        per_slot = self.executor.in_flight if self.executor is not None else 1  # episodes handed to a slot at once
        n_workers = min(self.concurrency * per_slot, max(self.todo.qsize(), 1))
        with noting_signals(self.signals_seen):
            for _ in range(n_workers):
                self._start_worker()
            while self.live:
                self._handle(*self._next_message())
                self._act_on_signals()
                if self.output_failed and not self.abandoned:
                    self._abandon(f"{INTERRUPTED}: the records could not be written")
                if self.failures and not self.stop.is_set():
                    self.stop.set()
                self._enforce_deadlines()
                if self._giving_up():
                    self.stuck_workers += [w.thread for w in self.live if w.thread is not None and w.thread.is_alive()]
                    break
        if self.output_failed:
            raise self.output_failed[0]
        if self.failures:
            raise self.failures[0]

    def _start_worker(self) -> None:
        w = Worker(self.next_n)
        self.next_n += 1
        w.thread = threading.Thread(
            target=play_episodes,
            args=(w, self.todo, self.messages, self.stop, self.player, self.episode_timeout_s, self.executor),
            name=f"sandgym-episode-{w.n}",
            daemon=False,
        )
        self.live.append(w)
        w.thread.start()

    def _next_message(self) -> tuple[str, Worker | None, Any]:
        """The next worker message, or ("", None, None) when the next
        deadline (or half a second) comes first."""
        wait = 0.5
        now = time.monotonic()
        for w in self.live:
            ep = w.episode
            if ep is not None and ep.deadline is not None and not ep.cancel.is_set():
                wait = min(wait, max(0.01, ep.deadline - now))
        try:
            return self.messages.get(timeout=wait)
        except queue.Empty:
            return "", None, None

    def _handle(self, kind: str, w: Worker | None, payload: Any) -> None:
        if kind == "record":
            ep, rec = payload
            if not ep.closed:
                ep.closed = True
                self._keep(rec)
        elif kind == "error":
            self.failures.append(payload)
        elif kind == "exit" and w is not None:
            if w in self.live:
                self.live.remove(w)
            if w.thread is not None:
                w.thread.join()  # it has returned from its work: this join is immediate

    def _keep(self, rec: EpisodeRecord) -> None:
        """Write a record (the only writer), then tell the observer and the caller."""
        if self.output_failed:
            return
        try:
            self.writer.write(rec)
        except OutputError as e:
            self.output_failed.append(e)
            return
        self.records.append(rec)
        if self.player.observer is not None:
            try:
                self.player.observer.recorded(rec)
            except Exception as e:  # an observer's bug ends the run, in order
                self.failures.append(e)
        if self.on_record is not None:
            try:
                self.on_record(rec)
            except Exception as e:  # the caller's bug ends the run, in order
                self.failures.append(e)

    def _abandon(self, why: str) -> None:
        """Kill every running episode's env and record the episode as env_error;
        the workers then have `abort_grace_s` to come back."""
        self.abandoned = True
        self.stop.set()
        for w in self.live:
            ep = w.episode
            if ep is None or ep.closed:
                continue
            ep.abort(why)
            ep.closed = True
            self._keep(self.player.record_unfinished(ep, why))
        self.given_up_at = time.monotonic() + self.abort_grace_s

    def _act_on_signals(self) -> None:
        """The 1st signal stops handing out episodes; the 2nd SIGINT (or a
        SIGTERM) abandons the running ones."""
        seen = self.signals_seen
        sigints = seen.count(signal.SIGINT)
        if seen and not self.announced:
            self.announced = True
            self.stop.set()
            running = sum(1 for w in self.live if w.episode is not None)
            if signal.SIGTERM not in seen:
                self.log(
                    f"Ctrl-C: no new episodes; waiting for {running} running episode(s) to finish "
                    "(Ctrl-C again abandons them)"
                )
        if (sigints >= 2 or signal.SIGTERM in seen) and not self.abandoned:
            self._abandon(f"{INTERRUPTED}: abandoned by a second Ctrl-C (or SIGTERM); its env was killed")
            self.log(
                "abandoned the running episodes: their envs were killed and they are recorded as "
                f"env_error ({INTERRUPTED})"
            )

    def _enforce_deadlines(self) -> None:
        """Abort an episode past its deadline; give up on a worker that did
        not come back from its killed env (its episode recorded here)."""
        now = time.monotonic()
        for w in list(self.live):
            ep = w.episode
            if ep is None or ep.closed:
                continue
            if ep.deadline is not None and now >= ep.deadline and not ep.cancel.is_set():
                why = (
                    f"deadline: the episode ran longer than {self.episode_timeout_s:g} s "
                    "(--episode-timeout); its env was killed"
                )
                ep.abort(why)
                self.log(f"task {ep.task.id}: {why}")
            if ep.aborted_at is not None and now - ep.aborted_at >= self.abort_grace_s and not ep.closed:
                ep.closed = True
                self._keep(self.player.record_unfinished(ep, f"{ep.why}; the worker did not return"))
                self.live.remove(w)
                if w.thread is not None:
                    self.stuck_workers.append(w.thread)
                self.log(f"task {ep.task.id}: its worker did not return after its env was killed")
                if not self.stop.is_set() and not self.todo.empty():
                    self._start_worker()

    def _giving_up(self) -> bool:
        """Stop waiting for the workers: the grace after abandoning is over, or a third Ctrl-C."""
        over = self.given_up_at is not None and time.monotonic() >= self.given_up_at
        return over or self.signals_seen.count(signal.SIGINT) >= 3
