"""The env contract: what the harness, the policies and the server rely on.

Every sandgym env is a Gymnasium env with text observations (`task`,
`feedback`) and these parts besides. A family's env subclasses
`SandgymEnv` and provides the abstract ones; the rest have defaults.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any

import gymnasium as gym

from sandgym.errors import SandgymError
from sandgym.specs import TaskSet
from sandgym.verifiers.models import Verdict

Action = str | dict[str, Any]


class NoReference(SandgymError, LookupError):
    """The env has no scripted reference solution for its task."""


class SandgymEnv(gym.Env, abc.ABC):
    """Base of every sandgym env.

    After `reset`: `task_set` is the set episodes are drawn from. After the
    episode ends: `last_verdict` is the verifier's verdict (None: nothing
    was submitted), `artifact` what it judged, `timings` the seconds spent
    creating sandboxes, executing actions and verifying.
    """

    task_set: TaskSet
    reward_scheme: str = "binary"  # a RewardScheme, or an env's own (MiniWoB: "raw")
    last_verdict: Verdict | None = None
    artifact: str | None = None
    timings: dict[str, float]

    @property
    @abc.abstractmethod
    def config(self) -> dict[str, Any]:
        """The settings that shape episodes, as make() kwargs (for records)."""

    # Sequence (covariant): an env may return its own kind of action (list[str]).
    @abc.abstractmethod
    def oracle_actions(self) -> Sequence[Action]:
        """The current task's reference solution, as actions (the oracle policy plays them)."""

    @abc.abstractmethod
    def null_actions(self) -> Sequence[Action]:
        """Actions that do nothing useful and end the episode: every task must score 0 on them."""

    def chat_tools(self) -> list[dict[str, Any]] | None:
        """Tool schemas (OpenAI function-calling format) a chat model may call; None: replies are text."""
        return None

    def tool_action(self, name: str, arguments: dict[str, Any]) -> Action:
        """The action for one tool call of `chat_tools()` (default: a dict action)."""
        return {"tool": name, **arguments}
