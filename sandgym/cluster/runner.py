"""The actor on each node: its runtime and its seats, kept warm between runs.

A runner is a detached, named Ray actor (`fleet.runner_name`): it outlives
the eval that started it, and the next eval on the cluster claims it
instead of paying for a new worker process, `import sandgym` there, its
runtime and its seats' envs. One claim at a time (`claim`): a runner
claimed by a live run answers "busy" and the next eval takes (or starts)
another runner on that node. A claim lapses when its run releases it,
or when the run has neither played nor renewed for `LEASE_S` (its
driver died); a claim made over the runner's own RPC (`runner_rpc.py`,
an eval without Ray) lapses when its connection closes instead. An
unclaimed runner ends itself after its idle time
(`idle_s`; `scripts/ray-cluster.sh down` ends every one).

What a claimed runner keeps from the run before: its process, its
runtime (by name) and, only when the new run's env is the very same (env
id, task-set hash, env options, runtime), its seats' envs; each episode
still resets to a fresh sandbox, as between two episodes of one run.
Everything of the run itself (its plan, policy, player, aborts) is
replaced at the claim, and a `play` that names another claim is refused.

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
import json
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from sandgym.records import EpisodeRecord

from .plan import RunPlan

LEASE_S = 60.0  # a claim with no play in flight and no call for this long lapses (its driver is gone)
WATCH_S = 1.0  # how often the runner checks its lease and its idle time
TAKEN_S = 90.0  # the longest a runner ended by `sandgym gc` waits for it to take the answer (a gc killed meanwhile)


class StaleClaim(RuntimeError):
    """A call for a claim this runner no longer holds."""


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


def env_key(plan: RunPlan) -> str:
    """What a seat's env is made of: two runs with the same key may share it."""
    opts = json.dumps(plan.env_kwargs, sort_keys=True, default=repr)
    return f"{plan.env_id}|{plan.task_set.hash}|{opts}|{plan.runtime_name}"


class NodeRunner:
    """One node's seats, played for one run (or rollout pool) at a time."""

    def __init__(self, idle_s: float):
        """`idle_s`: how long it waits unclaimed before it ends itself (0: never; its run kills it)."""
        import ray

        self.node_id: str = ray.get_runtime_context().get_node_id()
        self.idle_s = idle_s
        self.seats: list[SeatThread] = []
        self.runtimes: dict[str, Any] = {}  # by runtime name, made on first use
        self.claim_id = ""
        self.player: Any = None
        self.plan: RunPlan | None = None
        self.key = ""  # env_key of the seats' envs
        self.claims = 0  # how many runs claimed this runner
        self.driver = ""  # HOST:PID of the last run that claimed it (plan.driver), kept after its release
        self.in_flight = 0
        self.touched = time.monotonic()
        self.playing: dict[str, Any] = {}  # job key -> its Episode, while it plays
        self.aborted: dict[str, str] = {}  # job key -> why, for an abort that came before its play
        self.lock = threading.Lock()
        self.ending = False
        self.taken = threading.Event()  # `sandgym gc` has the answer of `end` (`answer_taken`)
        self.held = False  # the claim is held by a connection of `runner_rpc` (not leased by time)
        self.rpc_address = ""  # HOST:PORT of its own RPC (warm runners on a cluster with a token)
        if idle_s > 0:
            from .runner_rpc import serve

            self.rpc_address = serve(self, ray.util.get_node_ip_address())
        threading.Thread(target=self._watch, name="sandgym-runner-watch", daemon=True).start()

    # -- claims ----------------------------------------------------------

    async def claim(self, claim_id: str, plan: RunPlan, seats: int) -> dict[str, Any] | None:
        """Take this runner for run `claim_id` with `seats` seats; None when another live claim holds it."""
        return await asyncio.to_thread(self.take_claim, claim_id, plan, seats)

    def take_claim(self, claim_id: str, plan: RunPlan, seats: int, held: bool = False) -> dict[str, Any] | None:
        """`claim`, from any thread; `held`: a connection holds it (it lapses when that closes, not by time)."""
        import os
        import socket

        from sandgym.harness.episode import EpisodePlayer
        from sandgym.harness.identity import RunIdentity
        from sandgym.runtimes import get_runtime

        with self.lock:
            if self.ending or (self.claim_id and self.claim_id != claim_id):
                return None
            self.claim_id = claim_id
            self.held = held
            self.touched = time.monotonic()
        warm = bool(self.seats)
        key = env_key(plan)
        if key != self.key:  # another env: the seats' envs are not this run's
            self._each_seat_wait(self._drop_env)
            self.key = key
        kept = sum("env" in s.slot for s in self.seats)  # the seats are idle: no claim held them
        while len(self.seats) < seats:
            self.seats.append(SeatThread(f"sandgym-seat-{len(self.seats)}"))
        os.environ.update(plan.env_vars)
        if plan.runtime_name not in self.runtimes:
            self.runtimes[plan.runtime_name] = get_runtime(plan.runtime_name)
        runtime = self.runtimes[plan.runtime_name]
        identity = RunIdentity(
            plan.run_id,
            plan.env_id,
            plan.task_set,
            plan.env_kwargs,
            runtime,
            plan.runtime_name,
            plan.policy,
            plan.seed,
        )
        with self.lock:
            self.plan = plan
            self.driver = plan.driver
            self.player = EpisodePlayer(identity, plan.episode_retries, plan.retry_backoff_s)
            self.playing.clear()
            self.aborted.clear()
            self.claims += 1
        return {
            "node": self.node_id,
            "host": socket.gethostname(),
            "seats": seats,
            "warm": warm,
            "kept_envs": kept,
            "claims": self.claims,
            "pid": os.getpid(),
            "rpc": self.rpc_address,
        }

    async def renew(self, claim_id: str) -> bool:
        """Keep the claim alive (the driver is there); False: it lapsed."""
        with self.lock:
            if self.claim_id != claim_id:
                return False
            self.touched = time.monotonic()
            return True

    async def release(self, claim_id: str) -> None:
        """The run is over: the runner is free for the next (its idle time starts)."""
        self.release_now(claim_id)

    def release_now(self, claim_id: str) -> None:
        with self.lock:
            if claim_id and self.claim_id == claim_id:
                self._unclaim()

    def _unclaim(self) -> None:  # under self.lock
        import os

        for k in self.plan.env_vars if self.plan else ():  # the run's API key goes with it
            os.environ.pop(k, None)
        self.claim_id = ""
        self.held = False
        self.player = None
        self.plan = None
        self.playing.clear()
        self.aborted.clear()
        self.touched = time.monotonic()

    # -- episodes --------------------------------------------------------

    async def play(self, claim_id: str, seat: int, job: dict[str, Any]) -> EpisodeRecord:
        """Play one episode on a seat's env; its record (env_error tries included)."""
        return await asyncio.wrap_future(self.start_play(claim_id, seat, job))

    def start_play(self, claim_id: str, seat: int, job: dict[str, Any]) -> Future[EpisodeRecord]:
        """`play`, from any thread: the episode queued on its seat, its record to come."""
        with self.lock:
            if not claim_id or self.claim_id != claim_id:
                raise StaleClaim(f"this runner is no longer claimed by run {claim_id}")
            player = self.player
            self.in_flight += 1
            self.touched = time.monotonic()
        fut = self.seats[seat].submit(lambda: self._play(player, seat, job))

        def done(_: Future[EpisodeRecord]) -> None:
            with self.lock:
                self.in_flight -= 1
                self.touched = time.monotonic()

        fut.add_done_callback(done)
        return fut

    async def abort(self, key: str, why: str) -> None:
        """Stop the episode of job `key` (its deadline, a second Ctrl-C): no
        more steps or tries, its env killed; or, when it has not started
        yet, as soon as it does."""
        self.abort_now(key, why)

    def abort_now(self, key: str, why: str) -> None:
        with self.lock:
            ep = self.playing.get(key)
            if ep is None:
                self.aborted[key] = why
        if ep is not None:
            ep.abort(why)

    async def set_policy(self, claim_id: str, policy: Any) -> None:
        """Play the next episodes with `policy` (a trainer's new weights); running ones keep theirs."""
        with self.lock:
            if self.claim_id != claim_id or self.player is None:
                raise StaleClaim(f"this runner is no longer claimed by run {claim_id}")
            self.player.run.policy = policy

    async def close(self) -> None:
        """Close every seat's env in its own thread, then the runtimes (the actor is killed next)."""
        with self.lock:
            self.ending = True
        await self._each_seat(self._drop_env)
        self._close_all()

    def _play(self, player: Any, seat: int, job: dict[str, Any]) -> EpisodeRecord:
        from sandgym.harness.episode import Episode, drop_env, now

        slot = self.seats[seat].slot
        task = player.run.task_set.get(job["task_id"])
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
            rec: EpisodeRecord = player.run_episode(ep, slot)
        finally:
            with self.lock:
                self.playing.pop(key, None)
        if ep.cancel.is_set():
            drop_env(slot)  # it was killed: the next episode gets a fresh one
        return rec

    # -- the end of a runner ----------------------------------------------

    @staticmethod
    def _drop_env(seat: SeatThread) -> None:
        from sandgym.harness.episode import drop_env

        drop_env(seat.slot)

    async def _each_seat(self, fn: Callable[[SeatThread], None]) -> None:
        """`fn(seat)` in every seat's own thread (after what it is playing)."""
        done = [asyncio.wrap_future(s.submit(functools.partial(fn, s))) for s in self.seats]
        await asyncio.gather(*done, return_exceptions=True)

    def _each_seat_wait(self, fn: Callable[[SeatThread], None]) -> None:
        """`_each_seat`, from a thread that may block."""
        for f in [s.submit(functools.partial(fn, s)) for s in self.seats]:
            try:
                f.result()
            except Exception:  # a broken env is dropped all the same
                pass

    def _close_all(self) -> None:
        for s in self.seats:
            s.stop()
        for rt in self.runtimes.values():
            try:
                rt.close()
            except Exception:  # the actor ends anyway; its sandboxes die with its process
                pass
        self.runtimes.clear()

    async def end(self, include_claimed: bool = False, driver: str | None = None) -> dict[str, str] | None:
        """`sandgym gc`: end this runner now (its envs closed, then the actor
        killed once gc has the answer: `answer_taken`) when no run holds it;
        `include_claimed`: even when one does; `driver`: only when that
        process (HOST:PID) made its last claim, held or not. Its RPC address
        when it is ending, else None. The decision is taken under the lock,
        so a run cannot claim it in between."""
        with self.lock:
            if driver is not None and self.driver != driver:
                return None
            if (self.claim_id or self.in_flight) and not include_claimed and driver is None:
                return None
            self.ending = True  # no claim from here on
            self.claim_id = ""
            playing = list(self.playing.values())
        for ep in playing:  # their seats come free for the envs to be closed
            ep.abort("its runner was ended by sandgym gc")
        # It kills itself once gc has this answer: killed before the reply is out, gc would get
        # "the actor died" instead, as from a runner that ended on its own, and not count it.
        threading.Thread(target=self._end, args=(self.taken,), name="sandgym-runner-end", daemon=True).start()
        return {"rpc": self.rpc_address}

    async def answer_taken(self) -> None:
        """`sandgym gc` has the answer of `end`: the runner may go."""
        self.taken.set()

    def _watch(self) -> None:
        """Lapse a claim whose driver is gone; end the runner once idle for `idle_s`."""
        while True:
            time.sleep(WATCH_S)
            with self.lock:
                if self.ending:  # closed, or ended by `sandgym gc`: that ends it
                    return
                quiet = time.monotonic() - self.touched
                if self.claim_id and not self.held and self.in_flight == 0 and quiet > LEASE_S:
                    self._unclaim()
                    continue
                if self.idle_s <= 0 or self.claim_id or self.in_flight or quiet <= self.idle_s:
                    continue
                self.ending = True  # no claim from here on
            self._end()
            return

    def _end(self, taken: threading.Event | None = None) -> None:
        """Close the envs and runtimes, then kill the actor (`taken`: once `end`'s answer is with its caller)."""
        import ray

        from sandgym.harness.episode import drop_env

        # The seats are idle (no claim, nothing in flight): each env is closed from its own thread.
        futs = [s.submit(functools.partial(drop_env, s.slot)) for s in self.seats]
        for f in futs:
            try:
                f.result(timeout=60)
            except Exception:  # a broken env must not keep the runner alive
                pass
        self._close_all()
        if taken is not None:
            taken.wait(TAKEN_S)  # no word (that gc was killed): it goes all the same
        ray.kill(ray.get_runtime_context().current_actor, no_restart=True)
