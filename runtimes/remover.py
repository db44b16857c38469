"""Removing sandboxes on a thread of its own, so that close() returns at once.

Docker containers and Kubernetes pods alike: `submit(name)` queues one,
a daemon thread calls `remove(name)` (errors ignored: already gone, and
`sandgym gc` catches anything left), and stops after 5 s idle; the next
submit starts another. `drain()` waits until everything queued is done.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable


class BackgroundRemover:
    def __init__(self, remove: Callable[[str], object], thread_name: str, drain_timeout_s: float | None = None):
        self._remove = remove
        self._thread_name = thread_name
        self._drain_timeout_s = drain_timeout_s
        self._queue: deque[str] = deque()
        self._pending = 0
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def submit(self, name: str) -> None:
        with self._cond:
            self._queue.append(name)
            self._pending += 1
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name=self._thread_name, daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._queue and not self._cond.wait_for(lambda: bool(self._queue), timeout=5.0):
                    self._thread = None  # idle: the next submit starts another
                    return
                name = self._queue.popleft()
            try:
                self._remove(name)
            except Exception:  # already gone; gc catches anything left
                pass
            with self._cond:
                self._pending -= 1
                self._cond.notify_all()

    def drain(self) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self._pending == 0, timeout=self._drain_timeout_s)
