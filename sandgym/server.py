"""sandgym envs served through OpenEnv's own server (`sandgym serve`, the
server image's `python3 -m sandgym.server`); docs/serving.md.

`build_app(env_id, env_kwargs, ...)` returns the FastAPI app that
`openenv.core.env_server.http_server` builds, around `SandgymEnvironment`:
an OpenEnv `Environment` that wraps one Gymnasium env made with
`gymnasium.make(env_id, **env_kwargs)`. Any OpenEnv client (the typed
`sandgym.client.SandgymClient`, or `openenv.GenericEnvClient`) then plays
whole episodes over the `/ws` WebSocket, one env per connection:

- reset: `client.reset(task_id="basic/edit-distance", seed=0)` (both optional;
  `task_id` becomes `options={"task_id": ...}` of the Gymnasium reset);
- step: `client.step({"text": "<the agent's reply>"})` (the one required
  field), or for envs that take structured actions
  `client.step({"text": "", "call": {"tool": "bash", "command": "ls"}})`;
- state: `client.state()` -> `episode_id`, `step_count`, `env_id`, `task_id`, `done`;
- tasks: openenv's Task API, `POST /<name>/tasks {"split": "test"}` and
  friends, lists the served task set (visible halves only).

Observations carry the env's `task` and `feedback` (further observation
keys in `metadata["observation"]`), `done` and `reward` from the Gymnasium
step, and the fields of its `info` every family shares (`task_id`,
`outcome`, `reward_valid`, `pass_rate`, `tests`; an env's own `info` keys,
such as its step count, in `metadata["info"]`). These are
for the trainer: what the model is shown is the trainer's choice, as with
`info` in Gymnasium.

Protocol misuse (a step with no episode, an unknown task or split, a bad
reset argument) raises `ProtocolError`: the HTTP routes answer it with a
4xx and a one-line `detail`, the WebSocket with an error frame carrying the
same message.

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
from collections.abc import Mapping
from typing import Any

import gymnasium
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from openenv.core.env_server.http_server import create_fastapi_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.mcp_types import (
    RESERVED_TOOL_NAMES,
    CallToolAction,
    CallToolObservation,
    ListToolsAction,
    ListToolsObservation,
    Tool,
    ToolError,
    ToolErrorType,
)
from openenv.core.env_server.types import ConcurrencyConfig, EnvironmentMetadata

from sandgym.families import FAMILIES, check_env_id, register_envs

from . import __version__
from .client import TASK_SPLIT, SandgymAction, SandgymObservation, SandgymState
from .runtimes import Runtime, get_runtime
from .specs import TaskSet

RESET_ARGS = ("seed", "episode_id", "task_id")
# The largest HTTP request body (a reset, a step's action, a Task API query)
# the app reads; a larger one is answered 413 before it is read whole.
MAX_BODY_BYTES = 16 << 20


class ProtocolError(ValueError):
    """A request the protocol does not allow (no episode to step, an unknown
    task or split, a bad reset argument): the HTTP routes answer it with
    `status` and a one-line `detail`, the WebSocket with an error frame
    carrying the same message; never a 500."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


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


class BodyLimit:
    """ASGI middleware: HTTP request bodies of at most `max_bytes`, else 413
    with a one-line `detail` (by Content-Length before anything is read, or
    as a chunked body's bytes arrive). WebSocket frames are uvicorn's to bound."""

    def __init__(self, app: Any, max_bytes: int = MAX_BODY_BYTES):
        self.app = app
        self.max_bytes = max_bytes

    def _detail(self, size: str) -> str:
        return f"the request body is {size} bytes; this server takes at most {self.max_bytes:,}"

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        from fastapi import HTTPException

        for name, value in scope.get("headers", []):
            if name == b"content-length" and (not value.isdigit() or int(value) > self.max_bytes):
                size = f"{int(value):,}" if value.isdigit() else repr(value.decode("latin-1")[:40])
                return await JSONResponse(status_code=413, content={"detail": self._detail(size)})(scope, receive, send)
        seen = 0

        async def bounded_receive() -> dict[str, Any]:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:  # raised inside the route: the app answers it (413)
                    raise HTTPException(status_code=413, detail=self._detail(f"more than {self.max_bytes:,}"))
            return message

        await self.app(scope, bounded_receive, send)


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
            raise ProtocolError(f"unknown reset argument(s) {sorted(kwargs)}; accepted: {', '.join(RESET_ARGS)}")
        if task_id is not None and not isinstance(task_id, str):
            raise ProtocolError(f"reset argument task_id must be a string (a task id), got {task_id!r}")
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
            raise ProtocolError(f"reset argument seed must be an integer, got {seed!r}")
        with self._lock:
            env = self._gym_env()
            try:
                obs, info = env.reset(seed=seed, options={"task_id": task_id} if task_id is not None else None)
            except Exception as e:
                # The session stays usable: the env takes the next reset (a
                # failed one leaves no episode running, and its checker intact).
                self._state = SandgymState(env_id=self.env_id, done=True)
                if isinstance(e, KeyError):  # an unknown task id: the message lists the choices
                    raise ProtocolError(e.args[0] if e.args else str(e), status=404) from None
                raise
            self._state = SandgymState(
                env_id=self.env_id,
                episode_id=episode_id or str(uuid.uuid4()),
                step_count=0,
                task_id=info.get("task_id"),
                done=False,
            )
            return self._observation(obs, info, reward=None, done=False, truncated=False)

    def step(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> Any:
        """`timeout_s` is not used: every run and verification is bounded by
        the task's own timeout. Besides sandgym's own action, openenv's MCP
        actions (RFC 003): `ListToolsAction` (no reset needed) lists the env's
        tools, `CallToolAction` plays one tool call as a step."""
        if isinstance(action, SandgymAction) and action.mcp is not None:
            action = _mcp_action(action.mcp)
        if isinstance(action, ListToolsAction):
            return self._list_tools()
        if isinstance(action, CallToolAction):
            return self._call_tool(action)
        if not isinstance(action, SandgymAction):
            raise ProtocolError(f"a sandgym action is {{'text': str}}, got {type(action).__name__}", status=422)
        with self._lock:
            if self._env is None:
                self._check_open()
                raise ProtocolError(
                    "no episode has begun in this session: reset first. The HTTP /step route is stateless "
                    "(a fresh env per request); play episodes over the WebSocket /ws (an openenv EnvClient, "
                    "e.g. sandgym.client.SandgymClient)",
                    status=409,
                )
            env = self._gym_env()
            obs, reward, terminated, truncated, info = env.step(action.value)
            done = bool(terminated or truncated)
            self._state.step_count += 1
            self._state.done = done
            if done and self._sessions is not None and self._sessions.observer is not None:
                self._sessions.observer.episode_done(env.unwrapped)
            return self._observation(obs, info, reward=float(reward), done=done, truncated=bool(truncated))

    # -- openenv's MCP actions (RFC 003), played through step() --------------

    def _list_tools(self) -> ListToolsObservation:
        """The env's tools (its `chat_tools()`, the schemas chat models get) as MCP tools."""
        with self._lock:
            schemas = self._sandgym_env().chat_tools() or []
        tools = [
            Tool(
                name=t["function"]["name"],
                description=t["function"].get("description", ""),
                input_schema=t["function"].get("parameters") or {"type": "object", "properties": {}},
            )
            for t in schemas
            if t["function"]["name"] not in RESERVED_TOOL_NAMES
        ]
        return ListToolsObservation(tools=tools, done=self._state.done, reward=None)

    def _call_tool(self, action: CallToolAction) -> CallToolObservation:
        """One tool call, made into the env's action by the env (`tool_action`)
        and played as one step; the result is the step's observation as
        sandgym's own step gives it. A call the env cannot take (an unknown
        tool, bad arguments) is an `invalid_args`/`tool_not_found` error and no
        step."""
        with self._lock:
            if self._env is None:
                self._check_open()
                raise ProtocolError("no episode has begun in this session: reset first, then call tools", 409)
            env = self._gym_env()
            names = {t["function"]["name"] for t in self._sandgym_env().chat_tools() or []}
            if action.tool_name not in names:
                return CallToolObservation(
                    tool_name=action.tool_name,
                    error=ToolError(
                        error_type=ToolErrorType.TOOL_NOT_FOUND,
                        message=f"unknown tool {action.tool_name!r}; the tools are {', '.join(sorted(names))}",
                    ),
                    done=self._state.done,
                )
            try:
                value = self._sandgym_env().tool_action(action.tool_name, dict(action.arguments))
            except ValueError as e:
                return CallToolObservation(
                    tool_name=action.tool_name,
                    error=ToolError(error_type=ToolErrorType.INVALID_ARGS, message=str(e)),
                    done=self._state.done,
                )
            obs, reward, terminated, truncated, info = env.step(value)
            done = bool(terminated or truncated)
            self._state.step_count += 1
            self._state.done = done
            if done and self._sessions is not None and self._sessions.observer is not None:
                self._sessions.observer.episode_done(env.unwrapped)
            seen = self._observation(obs, info, reward=float(reward), done=done, truncated=bool(truncated))
        result = seen.model_dump(mode="json", exclude={"done", "reward", "metadata"})
        return CallToolObservation(
            tool_name=action.tool_name, result=result, done=done, reward=float(reward), metadata=seen.metadata
        )

    # -- openenv's Task API (POST /<name>/tasks, /num_tasks, /task, /task_range) --

    def _task_set(self, split: str) -> TaskSet:
        tasks = self.env_kwargs.get("tasks")
        if not isinstance(tasks, TaskSet):
            raise NotImplementedError
        if split != TASK_SPLIT:
            raise ProtocolError(f"unknown split {split!r}: the served task set is the one split {TASK_SPLIT!r}", 404)
        return tasks

    def list_splits(self) -> list[dict[str, str]]:
        self._task_set(TASK_SPLIT)
        return [{"name": TASK_SPLIT, "type": "test"}]

    def list_tasks(self, split: str) -> list[dict[str, Any]]:
        return self.get_task_range(split)

    def num_tasks(self, split: str) -> int:
        return len(self._task_set(split))

    def get_task(self, split: str, index: int) -> dict[str, Any]:
        tasks = self._task_set(split).tasks
        if not 0 <= index < len(tasks):
            raise IndexError(index)  # openenv answers 400 "Invalid task index"
        return _task_entry(tasks[index])

    def get_task_range(self, split: str, start: int | None = None, stop: int | None = None) -> list[dict[str, Any]]:
        return [_task_entry(t) for t in self._task_set(split).tasks[start:stop]]

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

    def _sandgym_env(self) -> Any:
        """The env under Gymnasium's wrappers: its `chat_tools()` and `tool_action()`."""
        return self._gym_env().unwrapped

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


def _mcp_action(data: dict[str, Any]) -> ListToolsAction | CallToolAction:
    """openenv's MCP action from its payload (kept whole by SandgymAction)."""
    from pydantic import ValidationError

    model = ListToolsAction if data.get("type") == "list_tools" else CallToolAction
    try:
        return model.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(x) for x in err["loc"]) or data.get("type", "")
        raise ProtocolError(f"MCP action {data.get('type')!r}: field {where}: {err['msg']}", 422) from None


def _task_entry(task: Any) -> dict[str, Any]:
    """A task as the Task API lists it: its id and visible half (never the hidden one)."""
    return {"task_id": task.id, "family": task.family, "visible": task.visible.model_dump(mode="json")}


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
                except Exception:  # close the rest regardless
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
    max_body_bytes: int = MAX_BODY_BYTES,
    max_concurrent_envs: int | None = None,
) -> FastAPI:
    """The OpenEnv app serving `env_id`.

    `env_kwargs` are passed to `gymnasium.make` for every session; their
    `runtime` (a name, default "local", or a `Runtime` object) becomes one
    runtime object shared by all sessions. It is closed on app shutdown when
    this function made it (or when `close_runtime=True`). `max_sessions`
    bounds concurrent WebSocket sessions (`max_concurrent_envs`, openenv's
    name for it, takes its place when given); `session_timeout` (seconds, None:
    never) is openenv's idle-session timeout. `warm` starts the runtime (for
    the local runtime: its zygote) before the first session. HTTP request
    bodies over `max_body_bytes` are answered 413.

    Raises ValueError for an unknown env id, runtime or bad env kwargs
    (`RuntimeUnavailable` for a runtime that cannot run here).
    """
    register_envs()
    check_env_id(env_id)
    if max_concurrent_envs is not None:
        max_sessions = max_concurrent_envs
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

    async def protocol_error(request: Request, exc: Exception) -> JSONResponse:
        status = exc.status if isinstance(exc, ProtocolError) else 400
        return JSONResponse(status_code=status, content={"detail": str(exc)})

    app.add_exception_handler(ProtocolError, protocol_error)
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
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


def options_from_environment(env_id: str, env: Mapping[str, str]) -> dict[str, Any]:
    """Env kwargs from SANDGYM_<OPTION> variables, one per option of the env's
    registered spec (SANDGYM_MAX_STEPS=20 -> max_steps=20), read as the type
    of the option's default (an int, a float, a bool: 1/0, true/false; else text)."""
    kwargs: dict[str, Any] = {}
    for key, default in gymnasium.spec(env_id).kwargs.items():
        value = env.get(f"SANDGYM_{key.upper()}")
        if key in ("tasks", "runtime") or not value:
            continue
        if isinstance(default, bool):
            if value.lower() not in ("1", "0", "true", "false"):
                raise ValueError(f"SANDGYM_{key.upper()}={value!r}: expected true or false")
            kwargs[key] = value.lower() in ("1", "true")
        elif isinstance(default, (int, float)):
            kwargs[key] = type(default)(value)
        else:
            kwargs[key] = value
    return kwargs


def app_from_environment(env_id: str | None = None, warm: bool = True) -> FastAPI:
    """The app `uvicorn sandgym.server:app` serves (as openenv.yaml's `app`
    names it), configured by environment variables: SANDGYM_ENV (default: the
    first family's env, sandgym/CodeFunction-v0), SANDGYM_TASKS, SANDGYM_<OPTION>
    for any option of the env (`options_from_environment`: SANDGYM_MODE,
    SANDGYM_MAX_TURNS ...), SANDGYM_ENV_OPTIONS (a JSON object of further env
    kwargs), SANDGYM_RUNTIME, SANDGYM_MAX_SESSIONS (or openenv's
    MAX_CONCURRENT_ENVS), SANDGYM_SESSION_TIMEOUT (0: never). `env_id` (the family apps `app_<family>`, named by
    manifests/<family>/openenv.yaml) takes the place of SANDGYM_ENV."""
    env = os.environ
    env_id = check_env_id(env_id or env.get("SANDGYM_ENV") or next(iter(FAMILIES.values())).env_id)
    kwargs: dict[str, Any] = {"runtime": env.get("SANDGYM_RUNTIME", "local")}
    if env.get("SANDGYM_TASKS"):
        kwargs["tasks"] = env["SANDGYM_TASKS"]
    kwargs.update(options_from_environment(env_id, env))
    if env.get("SANDGYM_ENV_OPTIONS"):  # any further env kwargs, as a JSON object
        import json

        options = json.loads(env["SANDGYM_ENV_OPTIONS"])
        if not isinstance(options, dict):
            raise ValueError("SANDGYM_ENV_OPTIONS must be a JSON object of env kwargs")
        kwargs.update(options)
    timeout = float(env.get("SANDGYM_SESSION_TIMEOUT", "600"))
    return build_app(
        env_id,
        kwargs,
        max_sessions=int(env.get("SANDGYM_MAX_SESSIONS") or env.get("MAX_CONCURRENT_ENVS") or "8"),
        session_timeout=timeout or None,
        warm=warm,
    )


def __getattr__(name: str) -> Any:
    # `app` serves SANDGYM_ENV; `app_<family>` serves that family's env.
    family = name.removeprefix("app_")
    if name == "app" or (name.startswith("app_") and family in FAMILIES):
        app = app_from_environment(FAMILIES[family].env_id if name != "app" else None)
        globals()[name] = app
        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    """The server image's entry point (see the Dockerfile, which keeps
    openenv's Gradio UI from being imported first). Serves
    `app_from_environment()` on SANDGYM_HOST (default 0.0.0.0, so that a
    published port reaches it) and SANDGYM_PORT (default 8000). The
    runtime warms up (its first sandbox) while the server already answers
    /health, so that openenv's `from_docker_image` finds it ready soon."""
    import sys

    import uvicorn

    app = app_from_environment(warm=False)
    runtime = app.state.sandgym_sessions.runtime

    def warm() -> None:
        try:
            runtime.create().close()
        except Exception as e:  # the sessions' own sandboxes will report it
            print(f"sandgym: warming the {runtime.name} runtime failed: {e}", file=sys.stderr)

    threading.Thread(target=warm, name="sandgym-warm", daemon=True).start()
    uvicorn.run(
        app,
        host=os.environ.get("SANDGYM_HOST", "0.0.0.0"),
        port=int(os.environ.get("SANDGYM_PORT", "8000")),
        log_level=os.environ.get("SANDGYM_LOG_LEVEL", "info"),
    )


if __name__ == "__main__":
    main()
