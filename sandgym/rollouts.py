"""Rollouts for trainers, on a Ray cluster: a pool of runner actors (one
per node, seats sized by its CPUs, each seat keeping its env) that plays
episodes with a policy and hands back the finished trajectories as they
end.

    from sandgym.rollouts import RolloutPool

    with RolloutPool("sandgym/CodeFunction-v0", policy="openai:my-model@http://10.0.0.5:8000/v1",
                     concurrency=16, address="auto") as pool:
        batch = pool.play(task_ids, epochs=8)            # TRL-style: one call per step, in order
        async for traj in pool.stream(task_ids):         # verl-style: as they finish
            ...

A trajectory is the episode's record (`sandgym.records.EpisodeRecord`):
every step's action and observation, the reward (None when infrastructure
failed: not the model's 0), the outcome, per-test results and, for a chat
policy, its messages and token usage (`policy_data`). A policy is an
OpenAI-compatible endpoint (`"openai:MODEL@BASE_URL"`, or a `ChatPolicy`),
`"oracle"` / `"null"`, or a Python callable `fn(obs, info) -> action | None`
called once per turn on the node (pickled there; None ends the episode);
`set_policy` swaps it between steps of training.

A node lost mid-episode costs that try (kept in the record's `retries`)
and the episode is played again on another node. Needs `sandgym[ray]`.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any

from sandgym.records import EpisodeRecord

from .cluster.fleet import DEFAULT_IDLE_S, Fleet, Job
from .cluster.plan import RunPlan

__all__ = ["CallablePolicy", "RolloutPool"]


@dataclass
class CallableAgent:
    fn: Callable[[dict[str, Any], dict[str, Any]], Any]

    def act(self, obs: dict[str, Any], info: dict[str, Any]) -> Any:
        return self.fn(obs, info)


@dataclass
class CallablePolicy:
    """A Python callable as a policy: `fn(obs, info)` gives each action
    (obs is {"task": ..., "feedback": ...}), None to stop."""

    fn: Callable[[dict[str, Any], dict[str, Any]], Any]
    name: str = "callable"
    config: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.config = self.config or {"callable": getattr(self.fn, "__qualname__", repr(self.fn))}

    def begin(self, task: Any, env: Any) -> CallableAgent:
        return CallableAgent(self.fn)


def as_policy(policy: Any, seed: int | None = 0) -> Any:
    """A policy from what a trainer has: a spec string, a callable, or a policy object."""
    if isinstance(policy, str):
        from .policies import make_policy

        return make_policy(policy, seed=seed)
    if hasattr(policy, "begin") and hasattr(policy, "name"):
        return policy
    if callable(policy):
        return CallablePolicy(policy)
    raise TypeError(f"policy: give 'openai:MODEL@BASE_URL', 'oracle', 'null', a callable or a policy; got {policy!r}")


class RolloutPool:
    """Runner actors on a Ray cluster playing a policy's episodes."""

    def __init__(
        self,
        env_id: str = "sandgym/CodeFunction-v0",
        policy: Any = "oracle",
        tasks: Any = None,
        runtime: str = "local",
        concurrency: int = 4,
        address: str | None = None,
        seed: int | None = 0,
        env_kwargs: dict[str, Any] | None = None,
        episode_retries: int = 1,
        idle_s: float = DEFAULT_IDLE_S,
    ):
        """`tasks`: a task set, its folder or a bundled set's name (None: the
        env's own). `address`: the Ray cluster ("auto", HOST:PORT; None:
        $RAY_ADDRESS, else a one-node cluster here). `idle_s`: how long the
        runners wait, warm, for the next pool or eval once this one is closed
        (0: they end with it). Bad env options raise here, before any actor
        starts."""
        import gymnasium

        import sandgym  # noqa: F401  (registers the envs)
        from sandgym.envs.base import SandgymEnv
        from sandgym.families import check_env_id

        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        check_env_id(env_id)
        probe = gymnasium.make(env_id, tasks=tasks, runtime=runtime, **(env_kwargs or {}))
        try:
            inner = probe.unwrapped
            if not isinstance(inner, SandgymEnv):
                raise TypeError(f"{env_id} is not a sandgym env (envs.base.SandgymEnv)")
            self.task_set = inner.task_set
            kwargs = {**inner.config, **(env_kwargs or {})}
        finally:
            probe.close()
        self.seed = seed
        self.plan = RunPlan(
            run_id=uuid.uuid4().hex[:12],
            env_id=env_id,
            task_set=self.task_set,
            env_kwargs=kwargs,
            runtime_name=runtime,
            policy=as_policy(policy, seed),
            seed=seed,
            episode_retries=episode_retries,
        )
        self.fleet = Fleet(address, idle_s=idle_s)
        # Two episodes handed to each seat at once: the next starts on the node without a round trip here.
        self.fleet.start(self.plan, concurrency, in_flight=2)
        self.threads = ThreadPoolExecutor(2 * concurrency, thread_name_prefix="sandgym-rollout")
        self.index = {t.id: i for i, t in enumerate(self.task_set.tasks)}

    @property
    def nodes(self) -> list[str]:
        """The Ray node ids of the live runners."""
        return [r.node for r in self.fleet.runners if not r.lost]

    def submit(self, task_id: str, epoch: int = 0) -> Future[EpisodeRecord]:
        """Play one episode (reset with seed + epoch); its record when it ends."""
        import time

        self.task_set.get(task_id)  # an unknown id raises KeyError here, naming it
        job = Job(task_id, self.index[task_id], epoch, time.perf_counter())
        return self.threads.submit(self._play, job)

    def _play(self, job: Job) -> EpisodeRecord:
        rec, _ = self.fleet.play(job)
        assert rec is not None  # never cancelled nor closed here
        return rec

    def _submit_all(self, task_ids: Iterable[str], epochs: int) -> list[Future[EpisodeRecord]]:
        return [self.submit(t, e) for e in range(epochs) for t in task_ids]

    def play(self, task_ids: Iterable[str], epochs: int = 1) -> list[EpisodeRecord]:
        """Every task `epochs` times; the records in the order asked (epoch-major)."""
        return [f.result() for f in self._submit_all(list(task_ids), epochs)]

    def rollouts(self, task_ids: Iterable[str], epochs: int = 1) -> Iterator[EpisodeRecord]:
        """Every task `epochs` times; each record as soon as its episode ends."""
        for f in as_completed(self._submit_all(list(task_ids), epochs)):
            yield f.result()

    async def stream(self, task_ids: Iterable[str], epochs: int = 1) -> AsyncIterator[EpisodeRecord]:
        """`rollouts` for an event loop (verl's agent loop, an async trainer)."""
        for f in asyncio.as_completed([asyncio.wrap_future(f) for f in self._submit_all(list(task_ids), epochs)]):
            yield await f

    def set_policy(self, policy: Any) -> None:
        """Play the episodes started from now on with `policy` (new weights, a new endpoint)."""
        import ray

        self.plan.policy = as_policy(policy, self.seed)
        live = [r for r in self.fleet.runners if not r.lost]
        ray.get([r.handle.set_policy.remote(self.fleet.claim_id, self.plan.policy) for r in live])

    def close(self) -> None:
        """Wait for the episodes asked for, then release the runners (warm for the next pool or eval: `idle_s`)."""
        self.threads.shutdown(wait=True)
        self.fleet.close()

    def __enter__(self) -> RolloutPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
