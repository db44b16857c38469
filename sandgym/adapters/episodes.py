"""Multi-turn episodes driven by tool calls: the part of the trainer adapters
that knows no trainer (`trl_env.py` and `verl_tools.py` build on it).

An `Episode` owns one sandgym env and plays one episode at a time in it:
`start(task_id)` resets, `call(name, arguments)` turns one tool call into
the env's action (`env.tool_action`, the `chat_tools()` contract of
`envs/base.py`) and steps, `finish()` ends an episode the model left open
and returns the verifier's outcome. Nothing here branches on a family:
the tools are the env's `chat_tools()`, or, for an env whose replies are
text (`chat_tools()` is None), one `act(action)` tool taking that text.

Every env call runs on the episode's own worker thread: Playwright's sync
API (the browser family) must stay on the thread that started it, while
trainers call tools from their main thread (TRL) or an event loop (verl).
"""

from __future__ import annotations

import atexit
import logging
import queue
import threading
import weakref
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sandgym.errors import SandgymError
from sandgym.outcomes import OUTCOME_NAMES, Outcome
from sandgym.specs import TaskSet

log = logging.getLogger("sandgym.adapters.episodes")

# The tool offered for an env whose actions are free text (chat_tools() is None).
TEXT_TOOL = "act"


class EpisodeOver(SandgymError, RuntimeError):
    """A tool was called after the episode ended (or before it began)."""


class ToolCallError(SandgymError, ValueError):
    """A tool call the env cannot take (unknown tool, bad arguments); no step was spent."""


@dataclass(frozen=True)
class ToolSpec:
    """One tool as chat models see it (OpenAI function-calling fields)."""

    name: str
    description: str
    parameters: dict[str, Any] = field(default_factory=dict)

    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


def text_tool_spec() -> ToolSpec:
    return ToolSpec(
        name=TEXT_TOOL,
        description="Take one action in the environment, written in the action syntax the task describes.",
        parameters={
            "type": "object",
            "properties": {"action": {"type": "string", "description": "The action, as text."}},
            "required": ["action"],
        },
    )


def tool_specs(env: Any) -> list[ToolSpec]:
    """The tools of an env (any sandgym env, wrapped or not), checked to be usable as function names."""
    schemas = env.unwrapped.chat_tools()
    if schemas is None:
        return [text_tool_spec()]
    specs = []
    for s in schemas:
        fn = s.get("function", s)
        name = fn.get("name")
        if not isinstance(name, str) or not name.isidentifier() or name.startswith("_"):
            raise ValueError(f"the env's chat tool name {name!r} is not a usable function name")
        specs.append(ToolSpec(name, fn.get("description") or "", fn.get("parameters") or {"type": "object"}))
    return specs


class OutcomeCounts:
    """Outcomes of scored episodes, thread-safe, for a trainer's logs.

    `metrics()` is a flat dict a trainer can log as it is: the count of each
    outcome (`passed`, `failed`, `timeout`, `violation`, `env_error`,
    `not_executed`), `episodes`, and `pass_rate` (passed over episodes that
    got a score, i.e. without env_error)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def add(self, outcome: str) -> None:
        with self._lock:
            self._counts[outcome] += 1

    def metrics(self, prefix: str = "sandgym/", *, reset: bool = False) -> dict[str, float]:
        """The counts so far (and, with `reset`, start counting afresh: per-logging-step numbers)."""
        with self._lock:
            counts = Counter(self._counts)
            if reset:
                self._counts.clear()
        total = sum(counts.values())
        scored = total - counts[Outcome.ENV_ERROR.value]
        out: dict[str, float] = {f"{prefix}{name}": float(counts[name]) for name in OUTCOME_NAMES}
        out[f"{prefix}episodes"] = float(total)
        out[f"{prefix}pass_rate"] = counts[Outcome.PASSED.value] / scored if scored else 0.0
        return out


def make_env_factory(
    env_id: str, tasks: str | Path | TaskSet | None = None, runtime: Any = "local", **env_kwargs: Any
) -> Callable[[], Any]:
    """A callable making the env with `gymnasium.make`, as every harness does.

    A runtime passed as an object is shared by every env made and stays the
    caller's to close; a runtime name gives each env its own."""
    import gymnasium

    from sandgym.families import check_env_id, register_envs

    register_envs()
    check_env_id(env_id)
    kwargs = {**env_kwargs, "runtime": runtime}
    if tasks is not None:
        kwargs["tasks"] = tasks

    def make() -> Any:
        return gymnasium.make(env_id, **kwargs)

    return make


class _Worker:
    """One daemon thread running submitted calls in order. Not a
    ThreadPoolExecutor: those refuse work once the interpreter starts to
    exit, and the envs of a trainer are closed at exit, on this thread."""

    def __init__(self) -> None:
        self._calls: queue.SimpleQueue[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]] | None] = (
            queue.SimpleQueue()
        )
        self._thread = threading.Thread(target=self._loop, name="sandgym-episode", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while (item := self._calls.get()) is not None:
            future, fn, args = item
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args))
                except BaseException as e:
                    future.set_exception(e)

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        future: Future[Any] = Future()
        self._calls.put((future, fn, args))
        return future

    def shutdown(self) -> None:
        self._calls.put(None)
        if threading.current_thread() is not self._thread:
            self._thread.join()


_open: weakref.WeakSet[Episode] = weakref.WeakSet()


@atexit.register
def _close_open_episodes() -> None:
    # A trainer never closes its environments: their sandboxes and browsers go at exit.
    for episode in list(_open):
        episode.close()


class Episode:
    """One env and the episode being played in it (see the module docstring).

    make_env: a no-argument callable returning a sandgym env (`make_env_factory`).
    After `finish()`: `outcome` (an outcome name), `reward` (the env's reward;
    None for env_error: an infrastructure failure is no score), `verdict`."""

    def __init__(self, make_env: Callable[[], Any]):
        self._worker = _Worker()
        self._lock = threading.Lock()
        self._closed = False
        try:
            self.env = self._run(make_env)
            self.tools = self._run(tool_specs, self.env)
        except BaseException:
            self._worker.shutdown()
            raise
        self._tool_names = {t.name for t in self.tools}
        self._text_actions = [t.name for t in self.tools] == [TEXT_TOOL] and self.env.unwrapped.chat_tools() is None
        self.task_id: str | None = None
        self.turns = 0
        self.done = True
        self.outcome: str | None = None
        self.reward: float | None = None
        self.scored = False  # counted by a reward function already
        _open.add(self)

    # -- the episode -----------------------------------------------------------------

    def start(self, task_id: str | None = None, seed: int | None = None) -> dict[str, Any]:
        """Reset onto `task_id` (None: one drawn by the env); the first observation."""
        options = {"task_id": task_id} if task_id is not None else None
        obs, info = self._run(lambda: self.env.reset(seed=seed, options=options))
        self.task_id = info.get("task_id", task_id) if isinstance(info, dict) else task_id
        self.turns, self.done, self.outcome, self.reward, self.scored = 0, False, None, None, False
        return obs if isinstance(obs, dict) else {"feedback": str(obs)}

    def call(self, name: str, arguments: dict[str, Any] | None = None) -> str:
        """One tool call: the env's feedback (and, when it ends the episode, the outcome)."""
        if self.done:
            raise EpisodeOver(
                "the episode is over: no more tool calls"
                if self.task_id
                else "no episode is running: reset the environment first"
            )
        if name not in self._tool_names:
            raise ToolCallError(f"unknown tool {name!r}; the tools are {', '.join(sorted(self._tool_names))}")
        arguments = dict(arguments or {})
        if self._text_actions:
            action: Any = arguments.get("action")
            if not isinstance(action, str) or set(arguments) - {"action"}:
                raise ToolCallError(f"tool {TEXT_TOOL!r} takes one argument `action`, a string")
        else:
            try:
                action = self.env.unwrapped.tool_action(name, arguments)
            except (ValueError, TypeError, KeyError) as e:
                raise ToolCallError(str(e)) from None
        try:
            obs, reward, terminated, truncated, info = self._run(self.env.step, action)
        except Exception as e:
            self._broken(e)
            raise EpisodeOver(f"the environment failed (env_error), the episode is over: {e}") from e
        self.turns += 1
        text = obs.get("feedback", "") if isinstance(obs, dict) else str(obs)
        if terminated or truncated:
            self._ended(reward, info)
            text = f"{text.rstrip()}\n\nThe episode is over (outcome: {self.outcome})."
        return str(text)

    def finish(self) -> str | None:
        """End an episode the model left open by playing the env's null actions
        (which submit the work as it stands: the verifier judges the state the
        model left); the outcome. None: no episode was started."""
        if self.task_id is None:
            return None
        if not self.done:
            try:
                for action in self._run(lambda: list(self.env.unwrapped.null_actions())):
                    obs, reward, terminated, truncated, info = self._run(self.env.step, action)
                    if terminated or truncated:
                        self._ended(reward, info)
                        break
                else:
                    self._ended(0.0, {"outcome": Outcome.NOT_EXECUTED.value, "reward_valid": True})
            except Exception as e:
                self._broken(e)
        return self.outcome

    @property
    def verdict(self) -> Any:
        return getattr(self.env.unwrapped, "last_verdict", None)

    def _broken(self, error: Exception) -> None:
        """The env raised instead of answering: infrastructure, so no score."""
        log.warning("sandgym: the env failed in task %s, scored as env_error: %s", self.task_id, error)
        self._ended(0.0, {"outcome": Outcome.ENV_ERROR.value, "reward_valid": False})

    def _ended(self, reward: float, info: dict[str, Any]) -> None:
        self.done = True
        self.outcome = str(info.get("outcome") or Outcome.NOT_EXECUTED.value)
        valid = info.get("reward_valid", self.outcome != Outcome.ENV_ERROR.value)
        self.reward = float(reward) if valid and self.outcome != Outcome.ENV_ERROR.value else None

    # -- threads and lifecycle -------------------------------------------------------------

    def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return self.submit(fn, *args).result()

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        """Run `fn` on the episode's thread (every env call goes there)."""
        with self._lock:
            if self._closed:
                raise EpisodeOver("this environment is closed")
            return self._worker.submit(fn, *args)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        env = getattr(self, "env", None)
        if env is not None:
            try:
                self._worker.submit(env.close).result()
            finally:
                self._worker.shutdown()
        _open.discard(self)

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("done" if self.done else f"turn {self.turns}")
        return f"Episode({self.env.spec.id if getattr(self.env, 'spec', None) else '?'}, {self.task_id!r}, {state})"
