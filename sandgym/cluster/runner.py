"""The actor on each node: its runtime and its seats.

A seat is a thread of its own that keeps one env between episodes (a
browser, a zygote, a pooled sandbox), because Playwright's sync API is bound
to the thread that started it. The actor's methods are coroutines (a Ray
async actor), so `play` on every seat and `abort` run at once while the
seats do the work.

This module imports Ray only inside the actor's methods: the class becomes
an actor in `fleet.py` (`ray.remote(NodeRunner)`).
"""

from __future__ import annotations

import asyncio
import functools
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from sandgym.records import EpisodeRecord

from .plan import RunPlan


class SeatThread:
    """One thread that runs the calls it is given, in order, and keeps an env in `slot`."""

    def __init__(self, name: str):
        self.slot: dict[str, Any] = {}
        self.calls: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]] | None] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self.thread.start()

    def submit(self, fn: Callable[[], Any]) -> Future[Any]:
        fut: Future[Any] = Future()
        self.calls.put((fn, fut))
        return fut

    def stop(self) -> None:
        self.calls.put(None)

    def _serve(self) -> None:
        while (item := self.calls.get()) is not None:
            fn, fut = item
            try:
                fut.set_result(fn())
            except BaseException as e:  # handed to the caller
                fut.set_exception(e)


class NodeRunner:
    """One node's share of a run (or of a rollout pool): `seats` envs, played one episode each at a time."""

    def __init__(self, plan: RunPlan, seats: int):
        import os

        import ray

        from sandgym.harness.episode import EpisodePlayer
        from sandgym.harness.identity import RunIdentity
        from sandgym.runtimes import get_runtime

        os.environ.update(plan.env_vars)
        self.node_id: str = ray.get_runtime_context().get_node_id()
        self.plan = plan
        self.runtime = get_runtime(plan.runtime_name)
        identity = RunIdentity(
            plan.run_id,
            plan.env_id,
            plan.task_set,
            plan.env_kwargs,
            self.runtime,
            plan.runtime_name,
            plan.policy,
            plan.seed,
        )
        self.player = EpisodePlayer(identity, plan.episode_retries, plan.retry_backoff_s)
        self.seats = [SeatThread(f"sandgym-seat-{i}") for i in range(seats)]
        self.playing: dict[str, Any] = {}  # job key -> its Episode, while it plays
        self.aborted: dict[str, str] = {}  # job key -> why, for an abort that came before its play
        self.lock = threading.Lock()

    async def ready(self) -> dict[str, Any]:
        """Where this runner is: its node and seats (the first call: the actor is up)."""
        import socket

        return {"node": self.node_id, "host": socket.gethostname(), "seats": len(self.seats)}

    async def play(self, seat: int, job: dict[str, Any]) -> EpisodeRecord:
        """Play one episode on a seat's env; its record (env_error tries included)."""
        return await asyncio.wrap_future(self.seats[seat].submit(lambda: self._play(seat, job)))

    async def abort(self, key: str, why: str) -> None:
        """Stop the episode of job `key` (its deadline, a second Ctrl-C): no
        more steps or tries, its env killed; or, when it has not started
        yet, as soon as it does."""
        with self.lock:
            ep = self.playing.get(key)
            if ep is None:
                self.aborted[key] = why
        if ep is not None:
            ep.abort(why)

    async def set_policy(self, policy: Any) -> None:
        """Play the next episodes with `policy` (a trainer's new weights); running ones keep theirs."""
        self.player.run.policy = policy

    async def close(self) -> None:
        """Close every seat's env in its own thread, then the runtime."""
        from sandgym.harness.episode import drop_env

        done = [asyncio.wrap_future(s.submit(functools.partial(drop_env, s.slot))) for s in self.seats]
        await asyncio.gather(*done, return_exceptions=True)
        for s in self.seats:
            s.stop()
        self.runtime.close()

    def _play(self, seat: int, job: dict[str, Any]) -> EpisodeRecord:
        from sandgym.harness.episode import Episode, drop_env, now

        slot = self.seats[seat].slot
        task = self.plan.task_set.get(job["task_id"])
        ep = Episode(
            task,
            job["index"],
            job["epoch"],
            # Its wait for a seat (measured where it waited) and in this seat's queue.
            time.perf_counter() - job["queue_s"] - max(0.0, time.time() - job["sent_at"]),
            retries=list(job["retries"]),
            slot=slot,
        )
        ep.started_at = now()
        ep.t0 = time.perf_counter()
        key = job["key"]
        with self.lock:
            self.playing[key] = ep
            why = self.aborted.pop(key, None)
        if why is not None:
            ep.abort(why)
        try:
            rec = self.player.run_episode(ep, slot)
        finally:
            with self.lock:
                self.playing.pop(key, None)
        if ep.cancel.is_set():
            drop_env(slot)  # it was killed: the next episode gets a fresh one
        return rec
