"""Trajectory records: one JSON object per episode (JSONL), and the run summary."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from .outcomes import OUTCOME_NAMES

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


def count_outcomes(outcomes: list[str]) -> dict[str, int]:
    counts = {name: 0 for name in OUTCOME_NAMES}
    for o in outcomes:
        counts[o] = counts.get(o, 0) + 1
    return counts
