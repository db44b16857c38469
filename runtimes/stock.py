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
lifetime allows `max_idle_s` of waiting, and `discard(item)`; an item
says whether it is still `fresh()` (young enough, its agent silent, for
pods: the pod still running) and carries the stock's `key` once stocked.

The defaults above suit a host's own sandboxes (local, docker). A backend
whose creates are slow and far away (k8s pods) passes bigger bounds and
two more: `demand`, which sizes each spec's share by what it observes
(Little's law: takes per second over the last DEMAND_WINDOW_S times the
seconds a start takes, on top of `per_key`), and `rate_per_s`, a token
bucket that smooths the refill (no burst of creates after a burst of
takes). `wanted(spec, variant, n)` declares a spec wanted at once with at
least `n` ready (a pool sized by config). Observers (`add_observer`, the
core's metrics) get (stock name, event, value) for each start ("started",
its seconds), failed start ("start_failed"), discard ("discarded") and,
from backends that report them (`claimed`), each claim ("claim_warm" or
"claim_cold", the seconds the caller waited).
"""

from __future__ import annotations

import math
import os
import select
import socket
import threading
import time
import weakref
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
# The window over which `demand` counts takes per spec.
DEMAND_WINDOW_S = 30.0

_live: weakref.WeakSet[Stock] = weakref.WeakSet()


_observers: list[Callable[[str, str, float], None]] = []


def live_stocks() -> list[Stock]:
    """The stocks of this process that are not closed (for metrics)."""
    return [s for s in list(_live) if not s._closed]


def add_observer(fn: Callable[[str, str, float], None]) -> None:
    _observers.append(fn)


def remove_observer(fn: Callable[[str, str, float], None]) -> None:
    if fn in _observers:
        _observers.remove(fn)


def emit(name: str, event: str, value: float = 1.0) -> None:
    """Tell every observer (quick callbacks; one that fails is ignored)."""
    for fn in list(_observers):
        try:
            fn(name, event, value)
        except Exception:
            pass


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


def waiting(ready_at: float, broken: bool, sock: socket.socket, max_idle_s: float = STOCK_MAX_IDLE_S) -> bool:
    """Whether a stocked sandbox still waits as it started: young enough, its
    channel whole, and its agent silent (an idle agent sends nothing; a
    readable stream means it spoke or died)."""
    if time.monotonic() - ready_at > max_idle_s or broken:
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
        max_total: int = STOCK_MAX,
        starters: int = STOCK_STARTERS,
        max_idle_s: float = STOCK_MAX_IDLE_S,
        demand: bool = False,
        rate_per_s: float | None = None,
    ):
        if per_key < 0 or max_total < 1 or starters < 1 or (rate_per_s is not None and rate_per_s <= 0):
            raise ValueError(
                f"stock {name}: per_key={per_key} must be >= 0, max_total={max_total} and "
                f"starters={starters} >= 1, rate_per_s={rate_per_s} > 0 (or None: unbounded)"
            )
        self._start = start
        self._discard = discard
        self.per_key = per_key
        self.name = name
        self.count_in_use = count_in_use
        self.max_total = max_total
        self.starters = starters
        self.max_idle_s = max_idle_s
        self.demand = demand
        self.rate_per_s = rate_per_s
        self._floor: dict[str, int] = {}  # key: ready wanted at least (wanted())
        self._takes: dict[str, deque[float]] = {}  # key: monotonic times of recent takes
        self._start_s = 0.0  # moving average of a start's seconds
        self._tokens = float(starters)
        self._tokens_at = time.monotonic()
        self.misses = 0  # takes that found nothing ready
        self.started = self.start_failures = self.discarded = 0
        self._ready: dict[str, deque[T]] = {}
        self._wanted: dict[str, tuple[SandboxSpec, str, float, int]] = {}  # key: spec, variant, last ask, asks
        self._starting: dict[str, int] = {}
        self._in_use: dict[str, int] = {}  # handed out and not closed yet
        self._cond = threading.Condition()
        self._threads: list[threading.Thread] = []
        self._closed = False
        self.hits = 0  # sandboxes handed out from the stock
        _live.add(self)

    def _event(self, event: str, value: float = 1.0) -> None:
        emit(self.name, event, value)

    def claimed(self, warm: bool, seconds: float) -> None:
        """A backend's report of one claim: served from the stock (warm) or made on the spot (cold)."""
        self._event("claim_warm" if warm else "claim_cold", seconds)

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
            now = time.monotonic()
            takes = self._takes.setdefault(key, deque())
            takes.append(now)
            while takes and now - takes[0] > DEMAND_WINDOW_S:
                takes.popleft()
            queue = self._ready.get(key)
            while queue:
                candidate = queue.popleft()  # the oldest first: claims are served in order
                if candidate.fresh():
                    found = candidate
                    self.hits += 1
                    self._in_use[key] = self._in_use.get(key, 0) + 1
                    break
                stale.append(candidate)
            if found is None:
                self.misses += 1
            self._ensure_threads()
            self._cond.notify_all()
        for s in stale:
            self.discarded += 1
            self._event("discarded")
            self._discard(s)
        return found

    def wanted(self, spec: SandboxSpec, variant: str = "", n: int = 1) -> None:
        """Keep at least `n` of `spec` ready from now on (within max_total),
        without waiting for it to be asked for twice."""
        key = self.key(spec, variant)
        with self._cond:
            self._closed = False
            _, _, _, asks = self._wanted.get(key, (spec, variant, 0.0, 0))
            self._wanted[key] = (spec, variant, time.monotonic(), max(asks, 2))
            self._floor[key] = n
            self._ensure_threads()
            self._cond.notify_all()

    def target(self, key: str) -> int:
        """How many of this key to keep ready or starting (lock held)."""
        want = max(self.per_key, self._floor.get(key, 0))
        if self.demand:
            now = time.monotonic()
            recent = [t for t in self._takes.get(key, ()) if now - t <= DEMAND_WINDOW_S]
            if recent:
                # Little's law: the takes that arrive while one start is under way.
                span = max(now - recent[0], self._start_s, 1.0)
                want = max(want, self.per_key + math.ceil(len(recent) / span * max(self._start_s, 0.1)))
        return min(want, self.max_total)

    def ready_count(self, spec: SandboxSpec, variant: str = "") -> int:
        with self._cond:
            return sum(1 for s in self._ready.get(self.key(spec, variant), ()) if s.fresh())

    def metrics(self) -> dict:
        """Ready, starting, handed out, target (summed over specs), hits and misses."""
        with self._cond:
            taken = self.hits + self.misses
            return {
                "name": self.name,
                "ready": sum(len(q) for q in self._ready.values()),
                "starting": sum(self._starting.values()),
                "in_use": sum(self._in_use.values()),
                "target": sum(self.target(k) for k in self._wanted),
                "specs": len(self._wanted),
                "hits": self.hits,
                "misses": self.misses,
                "hit_rate": self.hits / taken if taken else None,
                "started": self.started,
                "start_failures": self.start_failures,
                "discarded": self.discarded,
            }

    def _take_token(self) -> float:
        """Seconds to wait before the next start may begin (0: go; a token is spent) (lock held)."""
        if self.rate_per_s is None:
            return 0.0
        now = time.monotonic()
        self._tokens = min(float(self.starters), self._tokens + (now - self._tokens_at) * self.rate_per_s)
        self._tokens_at = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return 0.0
        return (1.0 - self._tokens) / self.rate_per_s

    def _ensure_threads(self) -> None:
        self._threads = [t for t in self._threads if t.is_alive()]
        while len(self._threads) < self.starters:
            t = threading.Thread(target=self._run, name=f"sandgym-{self.name}-stock", daemon=True)
            t.start()
            self._threads.append(t)

    def _next(self) -> tuple[str, SandboxSpec, str] | None:
        """The spec to make a sandbox for now (lock held)."""
        now = time.monotonic()
        for key, (_, _, last, _) in list(self._wanted.items()):
            if now - last > STOCK_WANTED_S and key not in self._floor:  # wanted() keeps its specs
                del self._wanted[key]
        total = sum(len(q) for q in self._ready.values()) + sum(self._starting.values())
        if total >= self.max_total:
            return None
        # The spec furthest below its target first.
        best, short = None, 0
        for key, (spec, variant, _, asks) in self._wanted.items():
            have = len(self._ready.get(key, ())) + self._starting.get(key, 0)
            if self.count_in_use:
                have += self._in_use.get(key, 0)
            if asks >= 2 and self.target(key) - have > short:
                best, short = (key, spec, variant), self.target(key) - have
        return best

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
                    pause = self._take_token()
                    if pause > 0:  # smoothed refill: wait for the bucket
                        self._cond.wait(timeout=pause)
                        job = None
                        if not drop:
                            continue
                if job is not None:
                    self._starting[job[0]] = self._starting.get(job[0], 0) + 1
            for s in drop:
                self.discarded += 1
                self._event("discarded")
                self._discard(s)
            if job is None:
                continue
            key, spec, variant = job
            started = None
            t0 = time.perf_counter()
            try:
                started = self._start(spec, variant)
                started.key = key
                took = time.perf_counter() - t0
                self.started += 1
                self._start_s = took if not self._start_s else 0.8 * self._start_s + 0.2 * took
                self._event("started", took)
            except Exception:
                self.start_failures += 1
                self._event("start_failed")
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
            self._floor.clear()
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
