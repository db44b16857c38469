"""The runners of one run on a Ray cluster, and their seats.

`Fleet.start` connects to the cluster (`ray.init(address=...)`, begun in
the background by `connect_soon` while the eval loads its tasks), and
claims one runner actor on each node that has CPUs (pinned there: a
node-affinity strategy, so placement spreads over every node) with seats
in proportion to the node's CPUs, the total being the run's concurrency.
Runners are detached and named (`runner_name`): the first run on a node
starts one, later runs claim it warm (runner.py says what carries over and
what does not); a runner another live run holds is passed over for the
next name. `Fleet.close` releases them; each ends itself after `idle_s`
unclaimed (`idle_s` 0: the runners are the run's own, killed at its end). `Fleet.play`
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

NAMESPACE = "sandgym"  # the Ray namespace of the named runners
RUNNER_PREFIX = "sandgym-runner-"  # their names' start (`runner_name`)
DEFAULT_IDLE_S = 600.0  # an unclaimed runner ends itself after this long (sandgym eval --ray-idle)
MAX_RUNNERS_PER_NODE = 16  # runs at once on one node, each on a runner of its own
RENEW_S = 15.0  # how often a run tells its runners it is alive (runner.LEASE_S is the limit)
READY_TIMEOUT_S = 300.0  # for the runners to come up (a worker process per node, sandgym imported there)
LOST_NODE_RETRIES = 3  # an episode played again on other nodes at most this many times after losing its node
WAIT_POLL_S = 0.5


class ClusterError(SandgymError, RuntimeError):
    """The Ray cluster cannot run the episodes (unreachable, no node with CPUs, every node lost)."""


class NodeLost(Exception):
    """A runner (its node) went away while it played an episode."""


# Waits up to the seconds given for an episode played on a seat: its record, or None (not yet); raises NodeLost.
Pending = Callable[[float], EpisodeRecord | None]


@dataclass(eq=False)
class Runner:
    handle: Any  # the actor
    node: str  # Ray's node id
    host: str
    seats: int
    lost: str = ""  # why it is gone (its node died)
    warm: bool = False  # claimed from an earlier run, not started for this one
    kept_envs: int = 0  # seats whose env it kept from that run (the same env, task set, options, runtime)
    rpc: str = ""  # HOST:PORT of its own RPC (runner_rpc), for the next eval to reach it without Ray


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


def runner_name(node: str, index: int) -> str:
    """The name of a node's `index`th warm runner; the sandgym version in it
    keeps a runner of other code from being claimed."""
    from sandgym import __version__

    return f"{RUNNER_PREFIX}{__version__}-{node[:16]}-{index}"


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

    def __init__(self, address: str | None = None, num_cpus_per_seat: float = 1.0, idle_s: float = DEFAULT_IDLE_S):
        if idle_s < 0:
            raise ClusterError(f"--ray-idle {idle_s:g}: give the seconds a runner waits for the next run, or 0")
        self.address = address
        self.num_cpus_per_seat = num_cpus_per_seat
        self.idle_s = idle_s
        self.claim_id = uuid.uuid4().hex
        self.runners: list[Runner] = []
        self.free: queue.SimpleQueue[Seat] = queue.SimpleQueue()
        self.lock = threading.Lock()
        self.we_started_ray = False
        self.log: Callable[[str], None] = lambda message: None
        self.connecting: threading.Thread | None = None
        self.connect_error: BaseException | None = None
        self.closing = threading.Event()

    # -- start and stop --------------------------------------------------

    def connect_soon(self) -> None:
        """Begin `connect` in a thread (importing Ray and joining the cluster
        take a second or two, spent while the caller does its own start)."""

        def connect() -> None:
            try:
                self.connect()
            except BaseException as e:  # raised again in `start`
                self.connect_error = e

        self.connecting = threading.Thread(target=connect, name="sandgym-ray-connect", daemon=True)
        self.connecting.start()

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

    def connected(self) -> None:
        """Joined (waiting for `connect_soon`'s thread, or connecting now)."""
        if self.connecting is not None:
            self.connecting.join()
            self.connecting = None
            if self.connect_error is not None:
                raise self.connect_error
        self.connect()

    def node_cpus(self) -> dict[str, float]:
        """The live nodes with CPUs, by Ray node id."""
        import ray

        return {
            n["NodeID"]: float(n.get("Resources", {}).get("CPU", 0.0))
            for n in ray.nodes()
            if n.get("Alive") and n.get("Resources", {}).get("CPU", 0.0) > 0
        }

    def _runner(self, node: str, index: int, seats: int, cpus: float) -> Any:
        """The handle of node `node`'s runner number `index` (warm: started if missing; else the run's own)."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from .runner import NodeRunner

        actor: Any = ray.remote(NodeRunner)
        where = NodeAffinitySchedulingStrategy(node_id=node, soft=False)
        if self.idle_s == 0:
            return actor.options(
                num_cpus=min(seats * self.num_cpus_per_seat, cpus),
                scheduling_strategy=where,
                max_restarts=0,
                max_concurrency=max(16, 4 * seats),
            ).remote(0.0)
        # No CPUs reserved: a warm runner must not hold a node's CPUs from
        # other work while it waits; the run's concurrency sizes its seats.
        return actor.options(
            name=runner_name(node, index),
            namespace=NAMESPACE,
            lifetime="detached",
            get_if_exists=True,
            num_cpus=0,
            scheduling_strategy=where,
            max_restarts=0,
            max_concurrency=1000,
        ).remote(self.idle_s)

    def start(self, plan: RunPlan, concurrency: int, in_flight: int = 1) -> None:
        """Claim a runner on each node with CPUs, `concurrency` seats in all,
        each taking `in_flight` episodes at once (played one after the other)."""
        import ray

        self.connected()
        cpus = self.node_cpus()
        if not cpus:
            raise ClusterError("the Ray cluster has no live node with CPUs to run episodes on")
        seats = split_seats(cpus, concurrency)
        plan_ref = ray.put(plan)
        index = dict.fromkeys(seats, 0)  # the next runner name to try on each node
        deadline = time.monotonic() + READY_TIMEOUT_S
        while index:
            asked = []
            for node, i in index.items():
                if i >= MAX_RUNNERS_PER_NODE:
                    self.close()
                    raise ClusterError(
                        f"node {node[:12]}: {MAX_RUNNERS_PER_NODE} runs already hold its runners; "
                        "wait for one to end (or `scripts/ray-cluster.sh down`)"
                    )
                handle = self._runner(node, i, seats[node], cpus[node])
                asked.append((node, handle, handle.claim.remote(self.claim_id, plan_ref, seats[node])))
            ray.wait([ref for *_, ref in asked], num_returns=len(asked), timeout=max(0.0, deadline - time.monotonic()))
            taken = {}
            for node, handle, ref in asked:
                try:
                    info = ray.get(ref, timeout=max(0.0, deadline - time.monotonic()))
                except ray.exceptions.GetTimeoutError:
                    self.close()
                    raise ClusterError(
                        f"the runners did not start within {READY_TIMEOUT_S:g} s: the nodes lack the "
                        "resources for them (ray status shows what is used)"
                    ) from None
                except ray.exceptions.RayActorError:
                    info = None  # a runner that just ended (its idle time ran out): the next name
                except ray.exceptions.RayError as e:
                    self.close()
                    raise ClusterError(f"a runner failed to start on its node: {e}") from None
                if info is None:
                    taken[node] = index[node] + 1
                    continue
                self.runners.append(
                    Runner(
                        handle,
                        info["node"],
                        info["host"],
                        info["seats"],
                        warm=info["warm"],
                        kept_envs=info["kept_envs"],
                        rpc=info.get("rpc", ""),
                    )
                )
            index = taken
        warm = sum(r.warm for r in self.runners)
        self.log(
            f"Ray: {sum(r.seats for r in self.runners)} seats on {len(self.runners)} nodes ("
            + ", ".join(f"{r.node[:12]}: {r.seats}" for r in self.runners)
            + f"); {warm} of {len(self.runners)} runners warm from an earlier run"
        )
        threading.Thread(target=self._renew, name="sandgym-ray-renew", daemon=True).start()
        self.queue_seats(in_flight)

    def queue_seats(self, in_flight: int) -> None:
        """Every seat, `in_flight` times, in turn over the nodes: the first episodes spread over every node."""
        for _ in range(in_flight):
            for i in range(max(r.seats for r in self.runners)):
                for r in self.runners:
                    if i < r.seats:
                        self.free.put(Seat(r, i))

    def _renew(self) -> None:
        """Tell the runners this run is alive, between episodes too (a long pause in a trainer)."""
        while not self.closing.wait(RENEW_S):
            for r in self.runners:
                if not r.lost:
                    r.handle.renew.remote(self.claim_id)

    def close(self) -> None:
        """Release the runners for the next run (each ends itself after
        `idle_s`); the run's own runners (`idle_s` 0) close their envs and
        runtime, then are killed."""
        import ray

        self.closing.set()
        live = [r for r in self.runners if not r.lost]
        if self.idle_s > 0:
            try:
                ray.get([r.handle.release.remote(self.claim_id) for r in live], timeout=60)
            except ray.exceptions.RayError:
                pass  # a runner that cannot answer lapses its claim by itself (runner.LEASE_S)
        else:
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

    def send(self, seat: Seat, job: Job) -> Pending:
        """Hand `job` to `seat`; what waits for its record."""
        import ray

        ref = seat.runner.handle.play.remote(self.claim_id, seat.index, job.payload())

        def pending(timeout: float) -> EpisodeRecord | None:
            done, _ = ray.wait([ref], timeout=timeout)
            if not done:
                return None
            try:
                rec: EpisodeRecord = ray.get(ref)
            except ray.exceptions.RayError as e:
                if is_node_loss(e):
                    raise NodeLost(type(e).__name__) from None
                raise
            return rec

        return pending

    def abort(self, runner: Runner, key: str, why: str) -> None:
        runner.handle.abort.remote(key, why)

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
        from sandgym.harness.episode import now

        lost = 0
        while True:
            seat = self.take()
            runner = seat.runner

            def abort(why: str, runner: Runner = runner) -> None:
                self.abort(runner, job.key, why)

            on_seat(abort)
            started, t0 = now(), time.perf_counter()
            pending = self.send(seat, job)
            try:
                while True:
                    rec = pending(WAIT_POLL_S)
                    if rec is not None:
                        break
                    if closed():  # recorded by the supervisor; the seat finishes the episode on its own
                        self.give_back(seat)
                        return None, None
            except NodeLost as e:
                on_seat(None)
                why = f"the Ray node {runner.node} ({runner.host}) was lost during this try: {e}"
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
