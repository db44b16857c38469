"""What every record of a run carries: its id, env, task set, runtime,
policy and seed; and the run's summary, made of the same fields."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sandgym import __version__
from sandgym.policies import Policy
from sandgym.records import EpisodeRecord, Summary, summarize
from sandgym.runtimes import Runtime
from sandgym.specs import TaskPair, TaskSet


def env_version(env_id: str) -> str:
    return env_id.rsplit("-v", 1)[1] if "-v" in env_id else "0"


@dataclass
class RunIdentity:
    """One run's settings as its records name them (`run_id` is the one a
    resume takes over from the records on disk)."""

    run_id: str
    env_id: str
    task_set: TaskSet
    env_kwargs: dict[str, Any]  # the env's effective settings, defaults included
    runtime: Runtime
    runtime_name: str
    policy: Policy
    seed: int | None

    @property
    def policy_config(self) -> dict[str, Any]:
        return {"name": self.policy.name, **self.policy.config}

    def seed_of(self, epoch: int) -> int | None:
        """The seed of an epoch's resets: the run's seed plus the epoch."""
        return None if self.seed is None else self.seed + epoch

    def record(self, task: TaskPair, index: int, started: str, epoch: int = 0, **fields: Any) -> EpisodeRecord:
        """An episode's record: these settings plus the episode's own `fields`."""
        return EpisodeRecord(
            run_id=self.run_id,
            episode_id=f"{self.run_id}-{index:05d}" + (f"-{epoch}" if epoch else ""),
            task_id=task.id,
            task_version=task.visible.version,
            task_set=self.task_set.meta.name,
            task_set_hash=self.task_set.hash,
            env_id=self.env_id,
            env_version=env_version(self.env_id),
            env_kwargs=self.env_kwargs,
            runtime={"backend": self.runtime.name, "isolation": self.runtime.isolation, "name": self.runtime_name},
            policy=self.policy_config,
            seed=self.seed_of(epoch),
            epoch=epoch,
            started_at=started,
            **fields,
        )

    def summary(self, records: list[EpisodeRecord], wall_s: float) -> Summary:
        """The run's summary (summary.json) over `records`."""
        return summarize(
            records,
            wall_s,
            __version__,
            run_id=self.run_id,
            env_id=self.env_id,
            task_set=self.task_set.meta.name,
            task_set_hash=self.task_set.hash,
            policy=self.policy_config,
            runtime=self.runtime_name,
            seed=self.seed,
        )
