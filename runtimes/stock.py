"""Fresh sandboxes made ahead of need (`prestart`), for any backend.

A spec is stocked once it has been asked for twice within STOCK_WANTED_S
(a verifier asks for the same spec, labels aside, for every verification).
`take` pops a ready one under the lock: handed out once, never put back,
so no sandbox that ran anything is used again. Starter threads refill in
the background, at most STOCK_MAX ready or starting in all; a sandbox
unused for STOCK_MAX_IDLE_S, or of a spec no longer wanted, is discarded.

How many per spec: up to `per_key` ready or starting, and with
`count_in_use` those handed out and not closed yet count too (docker's
choice: a container start costs enough CPU that the refill should wait for
a close, in the agent's turn, rather than slow the run in progress).

The backend supplies `start(spec, variant)`, which makes one sandbox whose
lifetime allows STOCK_MAX_IDLE_S of waiting, and `discard(item)`; an item
says whether it is still `fresh()` (young enough, its agent silent) and
carries the stock's `key` once stocked.
"""

from __future__ import annotations

import os
import select
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from .base import SandboxSpec

# The bounds: sandboxes held ready in all (each costs its agent's memory, a
# runsc one its sentry too, docs/runtimes.md), how long one may wait unused
# (its agent's lifetime is extended by this much and the host restores the
# spec's lifetime at hand-out), how long a spec stays wanted after its last
# request, and how many are started at once.
STOCK_MAX = 4
STOCK_MAX_IDLE_S = 60.0
STOCK_WANTED_S = 120.0
STOCK_STARTERS = 2


def prestart_setting(value: int | None, env_name: str, default: int = 0) -> int:
    """Sandboxes to keep made ahead per repeating spec (0: none)."""
    if value is None:
        raw = os.environ.get(env_name, str(default)).strip() or str(default)
        if not raw.isdigit():
            raise ValueError(f"{env_name}={raw!r} is not a count: set it to 0 (off) or a small number such as 2")
        value = int(raw)
    if value < 0:
        raise ValueError(f"prestart={value} is negative: pass 0 (off) or a small number such as 2")
    return value


def waiting(ready_at: float, broken: bool, sock: socket.socket) -> bool:
    """Whether a stocked sandbox still waits as it started: young enough, its
    channel whole, and its agent silent (an idle agent sends nothing; a
    readable stream means it spoke or died)."""
    if time.monotonic() - ready_at > STOCK_MAX_IDLE_S or broken:
        return False
    try:
        poller = select.poll()  # not select(): no limit on the descriptor's number
        poller.register(sock, select.POLLIN | select.POLLHUP | select.POLLERR)
        return not poller.poll(0)
    except (OSError, ValueError):
        return False


class Stocked(Protocol):
    key: str

    def fresh(self) -> bool: ...


T = TypeVar("T", bound=Stocked)


class Stock(Generic[T]):
    def __init__(
        self,
        start: Callable[[SandboxSpec, str], T],
        discard: Callable[[T], None],
        per_key: int,
        name: str,
        count_in_use: bool,
    ):
        self._start = start
        self._discard = discard
        self.per_key = per_key
        self.name = name
        self.count_in_use = count_in_use
        self._ready: dict[str, deque[T]] = {}
        self._wanted: dict[str, tuple[SandboxSpec, str, float, int]] = {}  # key: spec, variant, last ask, asks
        self._starting: dict[str, int] = {}
        self._in_use: dict[str, int] = {}  # handed out and not closed yet
        self._cond = threading.Condition()
        self._threads: list[threading.Thread] = []
        self._closed = False
        self.hits = 0  # sandboxes handed out from the stock

    @staticmethod
    def key(spec: SandboxSpec, variant: str) -> str:
        return variant + "\0" + spec.model_copy(update={"labels": {}}).model_dump_json()

    def count(self) -> int:
        with self._cond:
            return sum(len(q) for q in self._ready.values())

    def take(self, spec: SandboxSpec, variant: str = "") -> T | None:
        key = self.key(spec, variant)
        stale: list[T] = []
        found = None
        with self._cond:
            self._closed = False
            _, _, _, asks = self._wanted.get(key, (spec, variant, 0.0, 0))
            self._wanted[key] = (spec, variant, time.monotonic(), asks + 1)
            queue = self._ready.get(key)
            while queue:
                candidate = queue.popleft()
                if candidate.fresh():
                    found = candidate
                    self.hits += 1
                    self._in_use[key] = self._in_use.get(key, 0) + 1
                    break
                stale.append(candidate)
            self._ensure_threads()
            self._cond.notify_all()
        for s in stale:
            self._discard(s)
        return found

    def _ensure_threads(self) -> None:
        self._threads = [t for t in self._threads if t.is_alive()]
        while len(self._threads) < STOCK_STARTERS:
            t = threading.Thread(target=self._run, name=f"sandgym-{self.name}-stock", daemon=True)
            t.start()
            self._threads.append(t)

    def _next(self) -> tuple[str, SandboxSpec, str] | None:
        """The spec to make a sandbox for now (lock held)."""
        now = time.monotonic()
        for key, (_, _, last, _) in list(self._wanted.items()):
            if now - last > STOCK_WANTED_S:
                del self._wanted[key]
        total = sum(len(q) for q in self._ready.values()) + sum(self._starting.values())
        if total >= STOCK_MAX:
            return None
        for key, (spec, variant, _, asks) in self._wanted.items():
            have = len(self._ready.get(key, ())) + self._starting.get(key, 0)
            if self.count_in_use:
                have += self._in_use.get(key, 0)
            if asks >= 2 and have < self.per_key:
                return key, spec, variant
        return None

    def _expired(self) -> list[T]:
        """Stocked sandboxes too old, dead, or of a spec no longer wanted (lock held)."""
        out = []
        for key, queue in list(self._ready.items()):
            keep = deque(s for s in queue if key in self._wanted and s.fresh())
            out += [s for s in queue if s not in keep]
            if keep:
                self._ready[key] = keep
            else:
                del self._ready[key]
        return out

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._closed:
                    return
                job = self._next()
                drop = self._expired()
                if job is None and not drop:
                    if not self._wanted and not self._ready:
                        return  # nothing to do: the next take() starts us again
                    self._cond.wait(timeout=5.0)
                    continue
                if job is not None:
                    self._starting[job[0]] = self._starting.get(job[0], 0) + 1
            for s in drop:
                self._discard(s)
            if job is None:
                continue
            key, spec, variant = job
            started = None
            try:
                started = self._start(spec, variant)
                started.key = key
            except Exception:
                time.sleep(1.0)  # the backend is struggling; callers create on the spot meanwhile
            with self._cond:
                self._starting[key] -= 1
                if started is not None and not self._closed:
                    self._ready.setdefault(key, deque()).append(started)
                    started = None
                self._cond.notify_all()
            if started is not None:  # closed while starting
                self._discard(started)

    def returned(self, key: str) -> None:
        """A sandbox handed out from the stock was closed: its place may be refilled."""
        with self._cond:
            self._in_use[key] = max(0, self._in_use.get(key, 0) - 1)
            if not self._in_use[key]:
                del self._in_use[key]
            self._cond.notify_all()

    def close(self) -> None:
        """Stop starting, wait for the starters, discard every stocked sandbox."""
        with self._cond:
            self._closed = True
            self._wanted.clear()
            self._cond.notify_all()
            threads = list(self._threads)
        for t in threads:
            if t is not threading.current_thread():
                t.join()
        with self._cond:
            left = [s for q in self._ready.values() for s in q]
            self._ready.clear()
            self._threads = []
        for s in left:
            self._discard(s)
