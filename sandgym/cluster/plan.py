"""What a node needs to play a run's episodes, sent to it once: plain data
and the policy, no runtime (each node makes its own) and no open handles."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from typing import Any

from sandgym.specs import TaskSet


@dataclass
class RunPlan:
    run_id: str
    env_id: str
    task_set: TaskSet
    env_kwargs: dict[str, Any]
    runtime_name: str  # made on each node by `get_runtime`
    policy: Any  # pickled to the nodes (a chat policy rebuilds its client there)
    seed: int | None
    episode_retries: int = 1
    retry_backoff_s: float = 2.0
    env_vars: dict[str, str] = field(default_factory=dict)  # set in the runners' processes (the API key)
    # HOST:PID of the process that made the plan (the eval, the rollout
    # pool's trainer): `sandgym gc --owner PID` ends the runners it claimed.
    driver: str = field(default_factory=lambda: driver_of(os.getpid()))


def driver_of(pid: int) -> str:
    """How a runner names the process (on this host) that claimed it."""
    return f"{socket.gethostname()}:{pid}"
