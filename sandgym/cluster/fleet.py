"""The runners of one run on a Ray cluster, and their seats.

`Fleet.start` connects to the cluster (`ray.init(address=...)`), puts one
runner actor on each node that has CPUs (pinned there: a node-affinity
strategy, so placement spreads over every node) with seats in proportion
to the node's CPUs, the total being the run's concurrency. `Fleet.play`
takes a free seat for an episode, plays it, and gives the seat back. When
the seat's node is lost mid-episode, the try is kept (`lost_try_record`) and the
episode is played again on a seat of another node; the lost node's seats
are dropped.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sandgym.errors import SandgymError
from sandgym.outcomes import Outcome
from sandgym.records import EpisodeRecord

from .plan import RunPlan

READY_TIMEOUT_S = 300.0  # for the runners to come up (a worker process per node, sandgym imported there)
LOST_NODE_RETRIES = 3  # an episode played again on other nodes at most this many times after losing its node
WAIT_POLL_S = 0.5


class ClusterError(SandgymError, RuntimeError):
    """The Ray cluster cannot run the episodes (unreachable, no node with CPUs, every node lost)."""


@dataclass(eq=False)
class Runner:
    handle: Any  # the actor
    node: str  # Ray's node id
    host: str
    seats: int
    lost: str = ""  # why it is gone (its node died)


@dataclass(eq=False)
class Seat:
    runner: Runner
    index: int


@dataclass
class Job:
    """One episode as a runner plays it."""

    task_id: str
    index: int
    epoch: int
    submitted: float  # perf_counter when it was queued, in this process
    retries: list[dict[str, Any]] = field(default_factory=list)
    key: str = field(default_factory=lambda: uuid.uuid4().hex)

    def payload(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "index": self.index,
            "epoch": self.epoch,
            "retries": self.retries,
            "queue_s": max(0.0, time.perf_counter() - self.submitted),
            "sent_at": time.time(),  # its wait in the seat's queue on the node counts too
            "key": self.key,
        }


def executor_of(runner: Runner) -> dict[str, str]:
    """What a record says about where it was played."""
    return {"kind": "ray", "node": runner.node}


def split_seats(cpus: dict[str, float], total: int) -> dict[str, int]:
    """`total` seats over the nodes in proportion to their CPUs (largest
    remainder; ties to the first node listed); nodes given none are left out."""
    whole = sum(cpus.values())
    if whole <= 0 or total < 1:
        return {}
    share = {n: total * c / whole for n, c in cpus.items()}
    seats = {n: int(s) for n, s in share.items()}
    rest = total - sum(seats.values())
    for n in sorted(share, key=lambda n: seats[n] - share[n])[:rest]:
        seats[n] += 1
    return {n: k for n, k in seats.items() if k > 0}


def is_node_loss(e: BaseException) -> bool:
    """Did this call fail because its actor (its node) is gone, rather than by a bug in the episode?"""
    import ray.exceptions as rex

    return isinstance(e, (rex.RayActorError, rex.ObjectLostError, rex.NodeDiedError, rex.OwnerDiedError))


class Fleet:
    """One runner per node, and a queue of the free seats."""

    def __init__(self, address: str | None = None, num_cpus_per_seat: float = 1.0):
        self.address = address
        self.num_cpus_per_seat = num_cpus_per_seat
        self.runners: list[Runner] = []
        self.free: queue.SimpleQueue[Seat] = queue.SimpleQueue()
        self.lock = threading.Lock()
        self.we_started_ray = False
        self.log: Callable[[str], None] = lambda message: None

    # -- start and stop --------------------------------------------------

    def connect(self) -> None:
        """Join the cluster at `address` ("auto": the one started on this
        machine; None: $RAY_ADDRESS, else a new one-node cluster here)."""
        import ray

        if ray.is_initialized():
            return
        try:
            ray.init(
                address=self.address,
                include_dashboard=False,
                logging_level=logging.WARNING,
                log_to_driver=False,
                configure_logging=True,
            )
        except (ConnectionError, RuntimeError, ValueError, ray.exceptions.RayError) as e:  # AuthenticationError
            raise ClusterError(
                f"--ray-address {self.address or os.environ.get('RAY_ADDRESS') or '(none)'}: "
                f"cannot join the Ray cluster ({e}); start one (scripts/ray-cluster.sh up) or fix the address "
                "(a cluster with token authentication also needs RAY_AUTH_MODE=token and its token: "
                "RAY_AUTH_TOKEN_PATH or RAY_AUTH_TOKEN)"
            ) from None
        self.we_started_ray = True

    def node_cpus(self) -> dict[str, float]:
        """The live nodes with CPUs, by Ray node id."""
        import ray

        return {
            n["NodeID"]: float(n.get("Resources", {}).get("CPU", 0.0))
            for n in ray.nodes()
            if n.get("Alive") and n.get("Resources", {}).get("CPU", 0.0) > 0
        }

    def start(self, plan: RunPlan, concurrency: int, in_flight: int = 1) -> None:
        """A runner on each node with CPUs, `concurrency` seats in all, each
        taking `in_flight` episodes at once (played one after the other)."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from .runner import NodeRunner

        self.connect()
        cpus = self.node_cpus()
        if not cpus:
            raise ClusterError("the Ray cluster has no live node with CPUs to run episodes on")
        seats = split_seats(cpus, concurrency)
        plan_ref = ray.put(plan)
        actor: Any = ray.remote(NodeRunner)
        pending = []
        for node, k in seats.items():
            handle = actor.options(
                num_cpus=min(k * self.num_cpus_per_seat, cpus[node]),
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=False),
                max_restarts=0,
                max_concurrency=max(16, 4 * k),
            ).remote(plan_ref, k)
            pending.append((handle, handle.ready.remote()))
        try:
            infos = ray.get([ref for _, ref in pending], timeout=READY_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError:
            self.close()
            raise ClusterError(
                f"the runners did not start within {READY_TIMEOUT_S:g} s: the nodes lack free CPUs "
                "for them (ray status shows what is used)"
            ) from None
        except ray.exceptions.RayError as e:
            self.close()
            raise ClusterError(f"a runner failed to start on its node: {e}") from None
        for (handle, _), info in zip(pending, infos, strict=True):
            self.runners.append(Runner(handle, info["node"], info["host"], info["seats"]))
        self.log(
            f"Ray: {sum(r.seats for r in self.runners)} seats on {len(self.runners)} nodes ("
            + ", ".join(f"{r.node[:12]}: {r.seats}" for r in self.runners)
            + ")"
        )
        # Seats in turn over the nodes: the first episodes spread over every node.
        for _ in range(in_flight):
            for i in range(max(r.seats for r in self.runners)):
                for r in self.runners:
                    if i < r.seats:
                        self.free.put(Seat(r, i))

    def close(self) -> None:
        """Each runner closes its envs and its runtime, then the actors end."""
        import ray

        live = [r for r in self.runners if not r.lost]
        if live:
            try:
                ray.get([r.handle.close.remote() for r in live], timeout=60)
            except ray.exceptions.RayError:
                pass  # a runner that cannot close is killed below; its sandboxes die with it
        for r in self.runners:
            try:
                ray.kill(r.handle)
            except Exception:  # already gone
                pass
        self.runners = []
        if self.we_started_ray:
            ray.shutdown()
            self.we_started_ray = False

    # -- seats -----------------------------------------------------------

    def live_seats(self) -> int:
        return sum(r.seats for r in self.runners if not r.lost)

    def take(self) -> Seat:
        """A free seat on a live node (waiting for one to come free)."""
        while True:
            if self.live_seats() == 0:
                lost = "; ".join(f"{r.host}/{r.node[:12]}: {r.lost}" for r in self.runners)
                raise ClusterError(
                    f"every Ray node of the run was lost ({lost}); the finished episodes are on disk: "
                    "`sandgym eval --resume` plays the rest"
                )
            try:
                seat = self.free.get(timeout=WAIT_POLL_S)
            except queue.Empty:
                continue
            if not seat.runner.lost:
                return seat

    def give_back(self, seat: Seat) -> None:
        if not seat.runner.lost:
            self.free.put(seat)

    def mark_lost(self, runner: Runner, why: str) -> None:
        with self.lock:
            if not runner.lost:
                runner.lost = why
                self.log(
                    f"Ray node {runner.node[:12]} ({runner.host}) was lost: its running episodes are played "
                    f"again on other nodes ({self.live_seats()} seats left)"
                )

    # -- playing ---------------------------------------------------------

    def play(
        self,
        job: Job,
        cancelled: Callable[[], bool] = lambda: False,
        closed: Callable[[], bool] = lambda: False,
        on_seat: Callable[[Callable[[str], None] | None], None] = lambda abort: None,
    ) -> tuple[EpisodeRecord | None, Runner | None]:
        """Play `job` on a free seat; on losing the seat's node, keep the try
        in the job's retries (`lost_try_record`) and play it again elsewhere. Returns (None, None) when the
        caller no longer wants the record (`closed()`: another party recorded
        the episode; `cancelled()` after a node loss: it would only be ended)."""
        import ray

        from sandgym.harness.episode import now

        lost = 0
        while True:
            seat = self.take()
            runner = seat.runner

            def abort(why: str, runner: Runner = runner) -> None:
                runner.handle.abort.remote(job.key, why)

            on_seat(abort)
            started, t0 = now(), time.perf_counter()
            ref = runner.handle.play.remote(seat.index, job.payload())
            try:
                while True:
                    done, _ = ray.wait([ref], timeout=WAIT_POLL_S)
                    if done:
                        rec: EpisodeRecord = ray.get(ref)
                        break
                    if closed():  # recorded by the supervisor; the seat finishes the episode on its own
                        self.give_back(seat)
                        return None, None
            except ray.exceptions.RayError as e:
                if not is_node_loss(e):
                    raise
                on_seat(None)
                why = f"the Ray node {runner.node} ({runner.host}) was lost during this try: {type(e).__name__}"
                self.mark_lost(runner, why)
                job.retries.append(lost_try_record(runner, started, why, time.perf_counter() - t0))
                lost += 1
                if cancelled() or closed():
                    return None, None
                if lost > LOST_NODE_RETRIES:
                    raise ClusterError(
                        f"task {job.task_id}: lost its node {lost} times; the cluster is failing"
                    ) from None
                continue
            on_seat(None)
            self.give_back(seat)
            rec.executor = executor_of(runner)
            return rec, runner


def lost_try_record(runner: Runner, started_at: str, why: str, seconds: float) -> dict[str, Any]:
    """A try whose node was lost, as a record's `retries` keeps it (its steps died with the node)."""
    return {
        "started_at": started_at,
        "outcome": Outcome.ENV_ERROR.value,
        "error": why,
        "attempts": [],
        "steps": [],
        "timings": {"queue_s": 0.0, "create_s": 0.0, "exec_s": 0.0, "verify_s": 0.0, "total_s": seconds},
        "executor": executor_of(runner),
    }
