"""sandgym envs served through OpenEnv's own server (`sandgym serve`).

`build_app(env_id, env_kwargs, ...)` returns the FastAPI app that
`openenv.core.env_server.http_server` builds, around `SandgymEnvironment`:
an OpenEnv `Environment` that wraps one Gymnasium env made with
`gymnasium.make(env_id, **env_kwargs)`. Any OpenEnv client (for example
`openenv.GenericEnvClient(base_url=...)`) then plays whole episodes over
the `/ws` WebSocket, one env per connection:

- reset: `client.reset(task_id="basic/edit-distance", seed=0)` (both optional;
  `task_id` becomes `options={"task_id": ...}` of the Gymnasium reset);
- step: `client.step({"text": "<the agent's reply>"})`, or for envs that take
  structured actions `client.step({"call": {"tool": "bash", "command": "ls"}})`;
- state: `client.state()` -> `episode_id`, `step_count`, `env_id`, `task_id`, `done`.

Observations carry the env's `task` and `feedback` (further observation
keys in `metadata["observation"]`), `done` and `reward` from the Gymnasium
step, and the fields of its `info` (`outcome`, `reward_valid`, `pass_rate`,
`tests`, `turn`, `max_turns`, ...). These are
for the trainer: what the model is shown is the trainer's choice, as with
`info` in Gymnasium.

Sessions, in openenv 0.10 (`HTTPEnvServer`): each WebSocket connection gets
its own env (made by the factory in a one-thread executor of its own; every
reset/step of that session runs there). When the connection ends, with a
`close` message or without one, openenv closes the env, which closes its
sandboxes. A session with no reset/step for `session_timeout` seconds is
closed by openenv's reaper (it checks every max(timeout/4, 5) s), even when
its connection is still open; later calls on that connection get an error
saying so. The reaper counts from the last *finished* reset/step, so the
timeout must exceed the longest step plus the agent's thinking time.

All sessions share one sandbox runtime (one zygote for the local runtime),
and env kwargs are checked once, by making a probe env, when the app is
built; a task set the probe loaded is handed to every session rather than
parsed again. On shutdown the app closes any env still open, then the
runtime it made.

The plain HTTP `/reset` and `/step` routes are OpenEnv's stateless ones (a
fresh env per request); episodes need the WebSocket.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import os
import threading
import uuid
from typing import Any

import gymnasium
from fastapi import FastAPI
from openenv.core.env_server.http_server import create_fastapi_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import (
    Action,
    ConcurrencyConfig,
    EnvironmentMetadata,
    Observation,
    State,
)
from pydantic import Field, model_validator
from pydantic_core import PydanticCustomError

from sandgym.families import check_env_id, register_envs

from . import __version__
from .runtimes import Runtime, get_runtime
from .specs import TaskSet

RESET_ARGS = ("seed", "episode_id", "task_id")


class SandgymAction(Action):
    """One action of a sandgym env: the agent's text in the env's grammar
    (code function: a reply holding a ```python block; SWE repo: a fenced
    tool block; browser form: `click(e12)` ...), or, for envs that take
    structured actions, a mapping (SWE repo: `{"tool": "bash", "command": "ls"}`)."""

    text: str | None = Field(default=None, description="The agent's reply, passed to step() as a text action.")
    call: dict[str, Any] | None = Field(default=None, description="A structured action, passed to step() as a mapping.")

    @model_validator(mode="after")
    def _one_of(self) -> SandgymAction:
        if (self.text is None) == (self.call is None):
            # A custom error carries no exception object, so openenv can serialize it.
            raise PydanticCustomError(
                "text_or_call", "an action has exactly one of `text` (a string) or `call` (a mapping)"
            )
        return self


class SandgymObservation(Observation):
    """What the env returned: its observation, `done` and `reward` from the
    step, and the fields of its `info` (further `info` keys, if an env adds
    any, are in `metadata["info"]`)."""

    task: str = Field(default="", description="The task as the agent sees it.")
    feedback: str = Field(default="", description="Feedback on the last action (empty after reset).")
    task_id: str | None = Field(default=None, description="Id of the task of this episode.")
    mode: str | None = Field(default=None, description="single | multi")
    turn: int = Field(default=0, description="Actions taken in this episode.")
    max_turns: int = Field(default=0, description="Actions allowed in this episode.")
    tool: str | None = Field(default=None, description="What the last action did: run | submit | invalid.")
    outcome: str | None = Field(
        default=None,
        description="After the final step: passed | failed | timeout | env_error | not_executed | violation.",
    )
    reward_valid: bool | None = Field(
        default=None,
        description="After the final step: False when an infrastructure error stopped verification "
        "(the reward 0.0 is then not the model's score).",
    )
    pass_rate: float | None = Field(default=None, description="Share of hidden tests passed.")
    tests: list[dict[str, Any]] = Field(default_factory=list, description="Per hidden test: name and status.")
    truncated: bool = Field(default=False, description="The episode was cut off rather than ended by the env.")


class SandgymState(State):
    """Where the session's episode is."""

    env_id: str = Field(description="The registered sandgym env id served.")
    task_id: str | None = Field(default=None, description="Task of the current episode.")
    done: bool = Field(default=False, description="Whether the current episode has ended.")


_OBS_FIELDS = set(SandgymObservation.model_fields) - {"done", "reward", "metadata"}


def _plain(value: Any) -> Any:
    """A JSON-ready copy of an `info` value."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(v) for v in value]
    item = getattr(value, "item", None)  # numpy scalars
    if callable(item):
        try:
            return _plain(item())
        except (TypeError, ValueError):
            pass
    return str(value)


class SandgymEnvironment(Environment[SandgymAction, SandgymObservation, SandgymState]):
    """One session: one Gymnasium env, made at the first reset, in the thread
    openenv runs this session in. `close()` closes it (and its sandboxes);
    a closed session refuses further calls."""

    SUPPORTS_CONCURRENT_SESSIONS = True  # sandboxes belong to each env instance

    def __init__(self, env_id: str, env_kwargs: dict[str, Any] | None = None, sessions: _Sessions | None = None):
        super().__init__()
        self.env_id = env_id
        self.env_kwargs = dict(env_kwargs or {})
        self._sessions = sessions
        self._env: gymnasium.Env | None = None
        self._lock = threading.Lock()  # close() may come from another thread at shutdown
        self._closed = False
        self._state = SandgymState(env_id=env_id)
        if sessions is not None:
            sessions.add(self)

    # -- OpenEnv API -----------------------------------------------------------

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, task_id: str | None = None, **kwargs: Any
    ) -> SandgymObservation:
        if kwargs:
            raise ValueError(f"unknown reset argument(s) {sorted(kwargs)}; accepted: {', '.join(RESET_ARGS)}")
        with self._lock:
            env = self._gym_env()
            try:
                obs, info = env.reset(seed=seed, options={"task_id": task_id} if task_id is not None else None)
            except Exception as e:
                # The session stays usable: the env takes the next reset (a
                # failed one leaves no episode running, and its checker intact).
                self._state = SandgymState(env_id=self.env_id, done=True)
                if isinstance(e, KeyError):  # an unknown task id: the message lists the choices
                    raise ValueError(e.args[0] if e.args else str(e)) from None
                raise
            self._state = SandgymState(
                env_id=self.env_id,
                episode_id=episode_id or str(uuid.uuid4()),
                step_count=0,
                task_id=info.get("task_id"),
                done=False,
            )
            return self._observation(obs, info, reward=None, done=False, truncated=False)

    def step(self, action: SandgymAction, timeout_s: float | None = None, **kwargs: Any) -> SandgymObservation:
        """`timeout_s` is not used: every run and verification is bounded by
        the task's own timeout."""
        if not isinstance(action, SandgymAction):
            raise TypeError(f"a sandgym action is {{'text': str}} or {{'call': {{...}}}}, got {type(action).__name__}")
        with self._lock:
            if self._env is None:
                self._check_open()
                raise RuntimeError("no episode has begun in this session: reset first")
            env = self._gym_env()
            obs, reward, terminated, truncated, info = env.step(action.text if action.text is not None else action.call)
            done = bool(terminated or truncated)
            self._state.step_count += 1
            self._state.done = done
            if done and self._sessions is not None and self._sessions.observer is not None:
                self._sessions.observer.episode_done(env.unwrapped)
            return self._observation(obs, info, reward=float(reward), done=done, truncated=bool(truncated))

    @property
    def state(self) -> SandgymState:
        return self._state.model_copy()

    def get_metadata(self) -> EnvironmentMetadata:
        spec = gymnasium.spec(self.env_id)
        entry = spec.entry_point
        doc = ""
        if isinstance(entry, str):  # the env's module docstring, else its class's
            module_name, _, name = entry.partition(":")
            try:
                module = importlib.import_module(module_name)
                doc = (module.__doc__ or getattr(module, name).__doc__ or "").strip()
            except (ImportError, AttributeError):
                pass
        description = doc.split("\n\n")[0].replace("\n", " ") if doc else f"sandgym env {self.env_id}"
        return EnvironmentMetadata(
            name=self.env_id,
            description=description,
            version=__version__,
            author="sandgym",
        )

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            env, self._env = self._env, None
            try:
                if env is not None:
                    env.close()
            finally:
                if self._sessions is not None:
                    self._sessions.discard(self)

    # -- internals -------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(
                "this session is closed: it was idle longer than the server's session timeout "
                "(sandgym serve --session-timeout), or the server is shutting down; open a new session"
            )

    def _gym_env(self) -> gymnasium.Env:
        self._check_open()
        if self._env is None:
            self._env = gymnasium.make(self.env_id, **self.env_kwargs)
        return self._env

    def _observation(
        self, obs: Any, info: dict[str, Any], reward: float | None, done: bool, truncated: bool
    ) -> SandgymObservation:
        fields: dict[str, Any] = {}
        metadata: dict[str, Any] = {}
        if isinstance(obs, dict):
            fields.update({k: obs[k] for k in ("task", "feedback") if k in obs})
            # Family-specific observation keys (a browser's url, a screenshot...).
            more = {k: _plain(v) for k, v in obs.items() if k not in ("task", "feedback")}
            if more:
                metadata["observation"] = more
        else:
            fields["feedback"] = str(obs)
        extra: dict[str, Any] = {}
        for key, value in info.items():
            if key in _OBS_FIELDS and key not in ("task", "feedback", "truncated"):
                fields[key] = _plain(value)
            else:
                extra[key] = _plain(value)
        if extra:
            metadata["info"] = extra
        return SandgymObservation(done=done, reward=reward, truncated=truncated, metadata=metadata, **fields)


class _Sessions:
    """What all sessions of one app share: the runtime, and the set of envs
    still open (closed at shutdown)."""

    def __init__(self, runtime: Runtime, close_runtime: bool):
        self.runtime = runtime
        self.close_runtime = close_runtime
        self._live: set[SandgymEnvironment] = set()
        self._lock = threading.Lock()
        self.observer: Any = None  # told when an episode ends (sandgym.observability.metrics.ServeObserver)

    def add(self, env: SandgymEnvironment) -> None:
        with self._lock:
            self._live.add(env)

    def discard(self, env: SandgymEnvironment) -> None:
        with self._lock:
            self._live.discard(env)

    @property
    def open_envs(self) -> int:
        with self._lock:
            return len(self._live)

    def shutdown(self) -> None:
        with self._lock:
            live = list(self._live)
        try:
            for env in live:
                try:
                    env.close()
                except Exception:  # noqa: BLE001 - close the rest regardless
                    pass
        finally:
            if self.close_runtime:
                self.runtime.close()


def build_app(
    env_id: str,
    env_kwargs: dict[str, Any] | None = None,
    max_sessions: int = 8,
    session_timeout: float | None = 600.0,
    *,
    close_runtime: bool | None = None,
    warm: bool = True,
) -> FastAPI:
    """The OpenEnv app serving `env_id`.

    `env_kwargs` are passed to `gymnasium.make` for every session; their
    `runtime` (a name, default "local", or a `Runtime` object) becomes one
    runtime object shared by all sessions. It is closed on app shutdown when
    this function made it (or when `close_runtime=True`). `max_sessions`
    bounds concurrent WebSocket sessions; `session_timeout` (seconds, None:
    never) is openenv's idle-session timeout. `warm` starts the runtime (for
    the local runtime: its zygote) before the first session.

    Raises ValueError for an unknown env id, runtime or bad env kwargs
    (`RuntimeUnavailable` for a runtime that cannot run here).
    """
    register_envs()
    check_env_id(env_id)
    if max_sessions < 1:
        raise ValueError(f"max_sessions must be at least 1, got {max_sessions}")
    if session_timeout is not None and session_timeout <= 0:
        raise ValueError(f"session_timeout must be positive seconds (or None: never), got {session_timeout}")
    kwargs = dict(env_kwargs or {})
    runtime = kwargs.get("runtime", "local")
    made_runtime = isinstance(runtime, str)
    if made_runtime:
        runtime = get_runtime(runtime)
    kwargs["runtime"] = runtime
    sessions = _Sessions(runtime, made_runtime if close_runtime is None else close_runtime)
    try:
        probe = gymnasium.make(env_id, **kwargs)  # bad kwargs fail here, not in a session
        try:
            task_set = getattr(probe.unwrapped, "task_set", None)
            if isinstance(task_set, TaskSet):
                kwargs["tasks"] = task_set  # parsed once, shared read-only
        finally:
            probe.close()
        if warm:
            runtime.create().close()
        factory = functools.partial(SandgymEnvironment, env_id, kwargs, sessions)
        app = create_fastapi_app(
            factory,
            SandgymAction,
            SandgymObservation,
            concurrency_config=ConcurrencyConfig(max_concurrent_envs=max_sessions, session_timeout=session_timeout),
            env_name=env_id.split("/")[-1],
            state_cls=SandgymState,
        )
    except BaseException:
        if sessions.close_runtime:
            runtime.close()
        raise

    async def close_sessions_and_runtime() -> None:
        await asyncio.to_thread(sessions.shutdown)

    app.router.on_shutdown.append(close_sessions_and_runtime)
    app.state.sandgym_sessions = sessions
    try:  # Prometheus metrics on /metrics, in a registry of this app's own
        from .observability.metrics import ServeObserver, mount_metrics
    except ImportError:  # prometheus-client not installed: no /metrics
        pass
    else:
        app.state.sandgym_metrics = mount_metrics(app, env_id)
        sessions.observer = ServeObserver(app.state.sandgym_metrics, env_id)
    app.title = f"sandgym: {env_id}"
    return app


def app_from_environment() -> FastAPI:
    """The app `uvicorn sandgym.server:app` serves (as openenv.yaml's `app`
    names it), configured by environment variables: SANDGYM_ENV (default
    sandgym/CodeFunction-v0), SANDGYM_TASKS, SANDGYM_MODE, SANDGYM_MAX_TURNS,
    SANDGYM_REWARD, SANDGYM_ENV_OPTIONS (a JSON object of further env kwargs),
    SANDGYM_RUNTIME, SANDGYM_MAX_SESSIONS, SANDGYM_SESSION_TIMEOUT (0: never)."""
    env = os.environ
    kwargs: dict[str, Any] = {"runtime": env.get("SANDGYM_RUNTIME", "local")}
    for var, key, conv in (
        ("SANDGYM_TASKS", "tasks", str),
        ("SANDGYM_MODE", "mode", str),
        ("SANDGYM_MAX_TURNS", "max_turns", int),
        ("SANDGYM_REWARD", "reward", str),
    ):
        if env.get(var):
            kwargs[key] = conv(env[var])
    if env.get("SANDGYM_ENV_OPTIONS"):  # any further env kwargs, as a JSON object
        import json

        options = json.loads(env["SANDGYM_ENV_OPTIONS"])
        if not isinstance(options, dict):
            raise ValueError("SANDGYM_ENV_OPTIONS must be a JSON object of env kwargs")
        kwargs.update(options)
    timeout = float(env.get("SANDGYM_SESSION_TIMEOUT", "600"))
    return build_app(
        env.get("SANDGYM_ENV", "sandgym/CodeFunction-v0"),
        kwargs,
        max_sessions=int(env.get("SANDGYM_MAX_SESSIONS", "8")),
        session_timeout=timeout or None,
    )


def __getattr__(name: str) -> Any:
    if name == "app":
        app = app_from_environment()
        globals()["app"] = app
        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
