"""Trajectory records: one JSON object per episode (JSONL), and the run summary."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from .outcomes import OUTCOME_NAMES
from .passk import pass_at_k

RECORD_VERSION = 1


class StepRecord(BaseModel):
    index: int
    action: str
    observation: str  # the feedback the agent saw after this action
    tool: str  # run | submit | invalid
    reward: float
    duration_s: float


class Timings(BaseModel):
    queue_s: float = 0.0  # waiting for a worker
    create_s: float = 0.0  # creating the agent's sandboxes
    exec_s: float = 0.0  # running the agent's commands
    verify_s: float = 0.0  # all verification attempts
    total_s: float = 0.0


class EpisodeRecord(BaseModel):
    record_version: int = RECORD_VERSION
    run_id: str
    episode_id: str
    task_id: str
    task_version: int
    task_set: str
    task_set_hash: str
    env_id: str
    env_version: str
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    runtime: dict[str, str]  # backend, isolation
    policy: dict[str, Any]  # name and config
    seed: int | None
    epoch: int = 0  # which sample of the task this is (--epochs, --samples): 0, 1, ...
    steps: list[StepRecord] = Field(default_factory=list)
    artifact: str | None = None  # what was verified: code, a diff, or the app's final state
    verifier_version: str | None = None
    outcome: str
    status: str | None = None  # the family verifier's own status (SWE: FULL, PARTIAL, NO, ...)
    reward: float | None  # None when infrastructure failed: not the model's score
    pass_rate: float | None = None
    tests: list[dict[str, Any]] = Field(default_factory=list)
    violations: list[str] = Field(default_factory=list)
    attempts: list[dict[str, Any]] = Field(default_factory=list)
    timings: Timings = Field(default_factory=Timings)
    started_at: str
    error: str | None = None  # a harness-level failure, with its message
    retries: list[dict[str, Any]] = Field(default_factory=list)  # earlier tries that ended in env_error


class Summary(BaseModel):
    run_id: str
    env_id: str
    task_set: str
    task_set_hash: str
    policy: dict[str, Any]
    runtime: str
    seed: int | None
    n_episodes: int
    outcomes: dict[str, int]
    reward_mean: float | None  # over episodes with a valid reward
    n_scored: int  # episodes with a valid reward
    wall_s: float
    sandgym_version: str
    n_tasks: int = 0  # distinct tasks among the episodes
    samples_per_task: int = 1  # the most episodes of any one task (--epochs, --samples)
    # pass@k (k in 1, 10, 100 where every task has k samples), unbiased estimator; see sandgym.passk
    pass_at_k: dict[str, float] = Field(default_factory=dict)


def summarize(records: list[EpisodeRecord], wall_s: float, sandgym_version: str, **fields: Any) -> Summary:
    """The summary of `records`; `fields` are the run's own (run_id, env_id, task_set, ...)."""
    rewards = [r.reward for r in records if r.reward is not None]
    per_task: dict[str, int] = {}
    for r in records:
        per_task[r.task_id] = per_task.get(r.task_id, 0) + 1
    return Summary(
        n_episodes=len(records),
        outcomes=count_outcomes([r.outcome for r in records]),
        reward_mean=sum(rewards) / len(rewards) if rewards else None,
        n_scored=len(rewards),
        wall_s=wall_s,
        sandgym_version=sandgym_version,
        n_tasks=len(per_task),
        samples_per_task=max(per_task.values(), default=1),
        pass_at_k=pass_at_k((r.task_id, r.outcome) for r in records),
        **fields,
    )


def policy_label(policy: dict[str, Any]) -> str:
    """What to call a run's policy in tables: the model when there is one
    (chat models, predictions), the replay file's name, else the policy's name."""
    if policy.get("model"):
        return str(policy["model"])
    if policy.get("name") == "replay" and policy.get("file"):
        return "replay:" + str(policy["file"]).replace("\\", "/").rsplit("/", 1)[-1]
    return str(policy.get("name", "?"))


def count_outcomes(outcomes: list[str]) -> dict[str, int]:
    counts = {name: 0 for name in OUTCOME_NAMES}
    for o in outcomes:
        counts[o] = counts.get(o, 0) + 1
    return counts
