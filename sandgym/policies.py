"""Policies the harness can run: who chooses the actions.

A policy starts an episode for a task (`begin`, given the task and the
unwrapped env after its reset), and the returned agent gives one action per
call (`act`) until it has none left (None). `oracle` and `null` ask the env
for its family's scripted actions (`oracle_actions()`, `null_actions()`):
each family knows what its reference solution looks like as actions.

Optional hooks: an agent's `record_extras()` returns JSON data the harness
keeps in the episode's record (`policy_data`; the chat policy: its
messages and token usage); a policy's `preflight()` is called by
`sandgym eval` before the run, and its SandgymError stops the run at once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sandgym.envs.base import Action, NoReference, SandgymEnv

from .specs import TaskPair, TaskSet

POLICY_CHOICES = ("oracle", "null", "replay:FILE", "openai:MODEL@BASE_URL")


class Agent(Protocol):
    def act(self, obs: dict[str, Any], info: dict[str, Any]) -> Action | None: ...


class Policy(Protocol):
    name: str
    config: dict[str, Any]

    def begin(self, task: TaskPair, env: SandgymEnv) -> Agent | None:
        """An agent for this episode, or None if the policy has nothing for the task."""


@dataclass
class ScriptedAgent:
    actions: list[Action]
    _next: int = 0

    def act(self, obs: dict[str, Any], info: dict[str, Any]) -> Action | None:
        if self._next >= len(self.actions):
            return None
        self._next += 1
        return self.actions[self._next - 1]


@dataclass
class OraclePolicy:
    """Plays the task's reference solution (the env's `oracle_actions()`)."""

    name: str = "oracle"
    config: dict[str, Any] = field(default_factory=dict)

    def begin(self, task: TaskPair, env: SandgymEnv) -> Agent | None:
        try:
            return ScriptedAgent(list(env.oracle_actions()))
        except NoReference:  # e.g. MiniWoB pages: the episode is not_executed, not an env_error
            return None


@dataclass
class NullPolicy:
    """Does nothing useful and ends (the env's `null_actions()`): the floor
    every task must score 0 on."""

    name: str = "null"
    config: dict[str, Any] = field(default_factory=dict)

    def begin(self, task: TaskPair, env: SandgymEnv) -> Agent:
        return ScriptedAgent(list(env.null_actions()))


class ReplayPolicy:
    """Feeds recorded actions: JSONL lines {"task_id": ..., "actions": [...]}
    (each action a string, or a mapping for envs that take structured actions)."""

    name = "replay"

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.config = {"file": str(self.path)}
        self.by_task: dict[str, list[Action]] = {}
        self.lines: dict[str, int] = {}  # task id -> the line that holds it
        try:
            lines = self.path.read_bytes().decode("utf-8").split("\n")
        except OSError as e:
            raise ValueError(f"replay file {self.path}: cannot read: {e.strerror}") from None
        except UnicodeDecodeError as e:
            raise ValueError(f"replay file {self.path}: not UTF-8 text ({e.reason} at byte offset {e.start})") from None
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            where = f"replay file {self.path}, line {n}"
            try:
                row = json.loads(line)
            except ValueError as e:
                raise ValueError(f"{where}: not JSON: {e}") from None
            except RecursionError:
                raise ValueError(f"{where}: not JSON this reader takes (nested too deeply)") from None
            if not isinstance(row, dict) or not isinstance(row.get("task_id"), str):
                raise ValueError(f'{where}: expected {{"task_id": "...", "actions": ["...", ...]}}')
            actions = row.get("actions")
            if not isinstance(actions, list) or not all(isinstance(a, (str, dict)) for a in actions):
                raise ValueError(f"{where}: field `actions` must be a list of strings (or mappings)")
            if row["task_id"] in self.by_task:
                raise ValueError(f"{where}: task {row['task_id']!r} appears twice")
            self.by_task[row["task_id"]] = actions
            self.lines[row["task_id"]] = n

    def check_tasks(self, task_set: TaskSet) -> None:
        """Every task id of the file must be in the task set (a typo would
        otherwise silently leave a task not_executed). The harness calls this
        before any episode."""
        known = set(task_set.ids)
        for task_id, n in self.lines.items():
            if task_id not in known:
                close = [t for t in task_set.ids if task_id.rsplit("/", 1)[-1] in t][:3]
                raise ValueError(
                    f"replay file {self.path}, line {n}: task {task_id!r} is not in task set "
                    f"{task_set.meta.name!r}"
                    + (f" (did you mean {', '.join(close)}?)" if close else "")
                    + "; fix the id or drop the line"
                )

    def begin(self, task: TaskPair, env: SandgymEnv) -> Agent | None:
        actions = self.by_task.get(task.id)
        return ScriptedAgent(list(actions)) if actions is not None else None


def make_policy(
    spec: str,
    seed: int | None = None,
    temperature: float = 0.0,
    max_tokens: int | None = None,
    system_prompt: str | None = None,
) -> Policy:
    """The policy of `spec`; `max_tokens` and `system_prompt` (text, or @FILE) are the openai policy's."""
    if spec.startswith("openai:"):
        from .chat_policy import parse_openai_spec

        return parse_openai_spec(
            spec, seed=seed, temperature=temperature, max_tokens=max_tokens, system_prompt=system_prompt
        )
    if max_tokens is not None or system_prompt is not None:
        raise ValueError(f"--max-tokens and --system-prompt are for the openai:MODEL@BASE_URL policy, not {spec!r}")
    if spec == "oracle":
        return OraclePolicy()
    if spec == "null":
        return NullPolicy()
    if spec.startswith("replay:"):
        return ReplayPolicy(spec.split(":", 1)[1])
    raise ValueError(f"unknown policy {spec!r}; choices: {', '.join(POLICY_CHOICES)}")
