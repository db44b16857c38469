"""verl's multi-turn tool interface for any sandgym env, without importing verl.

verl (and its GPU dependencies) is not installable here, so this module
implements the *shape* of verl's `verl.tools.base_tool.BaseTool`, as read in
volcengine/verl (`verl/tools/base_tool.py`, `verl/tools/schemas.py`,
`verl/experimental/agent_loop/tool_agent_loop.py`):

- `__init__(config: dict, tool_schema)`: one object per tool, made from the
  tool-config YAML (`class_name`, `config`, `tool_schema`);
- `async create(instance_id=None, **kwargs) -> (instance_id, ToolResponse)`:
  per-rollout state; `create_kwargs` (from the dataset row's
  `extra_info.tools_kwargs.<tool>.create_kwargs`) arrive as keywords or as
  `create_kwargs={...}`;
- `async execute(instance_id, parameters) -> (ToolResponse, step_reward, metrics)`;
- `async calc_reward(instance_id) -> float`; `async release(instance_id)`.

The tools of one env share one sandgym episode per instance id: the first
`create` for an id starts it (on the row's `task_id`), every tool's
`release` drops a reference and the last one closes it. This fits a rollout
that creates each tool once per trajectory with the trajectory's id (verl's
SGLang multi-turn rollout passes the request id). verl's `ToolAgentLoop`
instead creates and releases a fresh instance around every single call, so
no state survives between calls there: use a rollout that keeps the
instance, or pass the same `instance_id` yourself.

`verl_tool_config(env_id, ...)` writes the tool-config dict (dump it as
YAML for `actor_rollout_ref.rollout.multi_turn.tool_config_path`), one entry
per tool of the env's `chat_tools()`.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import uuid4

from .episodes import Episode, EpisodeOver, OutcomeCounts, ToolCallError, make_env_factory, tool_specs
from .trainers import VerificationUnavailable


@dataclass
class ToolResponse:
    """The fields of verl's `verl.tools.schemas.ToolResponse` (text, image, video)."""

    text: str | None = None
    image: Any = None
    video: Any = None


class _Session:
    def __init__(self) -> None:
        self.episode: Episode | None = None  # set by the create() that started it
        self.refs = 0
        self.lock = asyncio.Lock()


# (env key, instance id) -> the episode every tool of that env and rollout shares.
_sessions: dict[tuple[str, str], _Session] = {}
_factories: dict[str, Callable[[], Any]] = {}
_counts: dict[str, OutcomeCounts] = {}
_registry_lock = threading.Lock()


def outcome_metrics(env_id: str | None = None, **kwargs: Any) -> dict[str, float]:
    """Outcome counts of episodes scored by `calc_reward` (one env id, or all summed)."""
    with _registry_lock:
        counters = [c for key, c in _counts.items() if env_id is None or key.startswith(env_id + "|")]
    total: dict[str, float] = {}
    for c in counters:
        for k, v in c.metrics(**kwargs).items():
            total[k] = total.get(k, 0.0) + v
    prefix = kwargs.get("prefix", "sandgym/")
    if total:
        scored = total[f"{prefix}episodes"] - total[f"{prefix}env_error"]
        total[f"{prefix}pass_rate"] = total[f"{prefix}passed"] / scored if scored else 0.0
    return total


def _env_key(config: Mapping[str, Any]) -> str:
    return f"{config['env_id']}|" + json.dumps(
        {k: v for k, v in config.items() if k not in ("env_id", "type", "tool", "env_error_score")},
        sort_keys=True,
        default=str,
    )


def _schema_dict(tool_schema: Any) -> dict[str, Any] | None:
    if tool_schema is None:
        return None
    if hasattr(tool_schema, "model_dump"):  # verl's OpenAIFunctionToolSchema (pydantic)
        return dict(tool_schema.model_dump(exclude_unset=True, exclude_none=True))
    return dict(tool_schema)


class SandgymTool:
    """One tool of a sandgym env, in verl's `BaseTool` shape (see the module docstring).

    config: `env_id` (required), `tasks` (a task-set folder), `runtime`
    ("local"), `env_kwargs` (the env's options), `tool` (the tool's name;
    default: the schema's), `env_error_score` (a float to give an
    infrastructure failure; unset: `calc_reward` raises, as
    `compute_score` does, since verl has no "no score" value)."""

    def __init__(self, config: Mapping[str, Any], tool_schema: Any = None):
        if not isinstance(config, Mapping) or not config.get("env_id"):
            raise ValueError("SandgymTool config needs env_id (e.g. env_id: sandgym/SWERepo-v0)")
        self.config = dict(config)
        schema = _schema_dict(tool_schema)
        self.name = str(self.config.get("tool") or (schema or {}).get("function", {}).get("name") or "")
        if not self.name:
            raise ValueError("SandgymTool needs the tool's name: config `tool` or a tool_schema")
        self._key = _env_key(self.config)
        with _registry_lock:
            if self._key not in _factories:
                _factories[self._key] = make_env_factory(
                    str(self.config["env_id"]),
                    self.config.get("tasks"),
                    self.config.get("runtime", "local"),
                    **dict(self.config.get("env_kwargs") or {}),
                )
                _counts[self._key] = OutcomeCounts()
        self.counts = _counts[self._key]
        self.tool_schema = schema

    def get_openai_tool_schema(self) -> dict[str, Any] | None:
        return self.tool_schema

    async def create(self, instance_id: str | None = None, **kwargs: Any) -> tuple[str, ToolResponse]:
        """Join (or start) the episode of `instance_id` on `task_id`; returns the
        id and, for the call that started it, the env's first feedback."""
        instance_id = instance_id or str(uuid4())
        create_kwargs = {**(kwargs.pop("create_kwargs", None) or {}), **kwargs}
        task_id = create_kwargs.get("task_id")
        key = (self._key, instance_id)
        with _registry_lock:
            session = _sessions.get(key)
            started = session is None
            if session is None:
                session = _sessions[key] = _Session()
            session.refs += 1
        if not started:
            return instance_id, ToolResponse(text="")
        # No await since the session was registered: this call takes its lock
        # before any other tool of the rollout can execute in it.
        async with session.lock:
            try:
                session.episode = await asyncio.to_thread(Episode, _factories[self._key])
                obs = await asyncio.to_thread(session.episode.start, None if task_id is None else str(task_id))
            except BaseException:
                with _registry_lock:
                    _sessions.pop(key, None)
                if session.episode is not None:
                    await asyncio.to_thread(session.episode.close)
                raise
        return instance_id, ToolResponse(text=str(obs.get("feedback") or ""))

    async def execute(
        self, instance_id: str, parameters: Mapping[str, Any] | str, **kwargs: Any
    ) -> tuple[ToolResponse, float, dict[str, Any]]:
        """One call of this tool in the instance's episode. A call the env cannot
        take comes back as text for the model, not as an exception."""
        session = self._session(instance_id)
        try:
            params = json.loads(parameters) if isinstance(parameters, str) else dict(parameters or {})
        except json.JSONDecodeError as e:
            return ToolResponse(text=f"Error: the arguments are not JSON ({e})"), 0.0, {"error": "arguments"}
        async with session.lock:
            ep = self._episode(session)
            try:
                text = await asyncio.to_thread(ep.call, self.name, params)
            except (ToolCallError, EpisodeOver) as e:
                return ToolResponse(text=f"Error: {e}"), 0.0, {"error": type(e).__name__}
        metrics: dict[str, Any] = {"turns": ep.turns, "done": ep.done}
        if ep.done:
            metrics["outcome"] = ep.outcome
        return ToolResponse(text=text), 0.0, metrics

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        """The episode's reward from its verdict, ending it first if the model
        left it open (the env's null actions submit the work as it stands)."""
        session = self._session(instance_id)
        async with session.lock:
            ep = self._episode(session)
            outcome = await asyncio.to_thread(ep.finish)
        if outcome is None:
            raise RuntimeError(f"instance {instance_id!r} has no episode: create() it with a task_id first")
        if not ep.scored:
            ep.scored = True
            self.counts.add(outcome)
        if ep.reward is None:
            score = self.config.get("env_error_score")
            if score is None:
                raise VerificationUnavailable(
                    f"the episode of {ep.task_id} ended in env_error (an infrastructure failure, not the "
                    "model's): there is no score; set env_error_score in the tool config to give one"
                )
            return float(score)
        return ep.reward

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        """Drop this tool's hold on the episode; the last release closes its env."""
        key = (self._key, instance_id)
        with _registry_lock:
            session = _sessions.get(key)
            if session is None:
                return
            session.refs -= 1
            if session.refs > 0:
                return
            del _sessions[key]
        async with session.lock:  # a call still running in the episode finishes first
            if session.episode is not None:
                await asyncio.to_thread(session.episode.close)

    def _session(self, instance_id: str) -> _Session:
        with _registry_lock:
            session = _sessions.get((self._key, instance_id))
        if session is None:
            raise KeyError(f"no instance {instance_id!r} of tool {self.name!r}: call create() first")
        return session

    @staticmethod
    def _episode(session: _Session) -> Episode:
        if session.episode is None:
            raise EpisodeOver("the instance's episode failed to start")
        return session.episode


def verl_tool_config(
    env_id: str,
    *,
    tasks: str | Path | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
    env_error_score: float | None = None,
) -> dict[str, Any]:
    """verl's tool-config dict for every tool of `env_id` (dump it as YAML)."""
    make = make_env_factory(env_id, tasks, "local", **dict(env_kwargs or {}))
    env = make()
    try:
        specs = tool_specs(env)
    finally:
        env.close()
    config: dict[str, Any] = {"type": "native", "env_id": env_id}
    if tasks is not None:
        config["tasks"] = str(Path(tasks).resolve())
    if env_kwargs:
        config["env_kwargs"] = dict(env_kwargs)
    if env_error_score is not None:
        config["env_error_score"] = env_error_score
    return {
        "tools": [
            {"class_name": f"{__name__}.SandgymTool", "config": dict(config), "tool_schema": spec.schema()}
            for spec in specs
        ]
    }


__all__ = ["SandgymTool", "ToolResponse", "outcome_metrics", "verl_tool_config"]
