"""The typed OpenEnv client of `sandgym serve`, and the models both ends share.

    from sandgym.client import SandgymAction, SandgymClient

    with SandgymClient(base_url="http://127.0.0.1:8000").sync() as env:
        print(env.task_ids())                       # the served task set, over HTTP
        r = env.reset(task_id="basic/edit-distance")
        r = env.step(SandgymAction(text=model_reply))   # or env.step(model_reply)
        r.observation.outcome, r.reward, r.done        # typed fields

`SandgymClient.from_docker_image(tag)` (openenv's) starts the server image
and connects to it. An action is one required text field, so a model's raw
reply is a valid action; envs that also take structured actions (the SWE
tool-call mapping) get it in the optional `call` field instead. Errors the
server reports come back as `SandgymServerError` (a RuntimeError) with the
server's code and, for refused actions, what was wrong with which field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx
from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field, model_validator
from pydantic_core import PydanticCustomError

TASK_SPLIT = "test"  # every served task set is one split of this name


MCP_TYPES = ("list_tools", "call_tool")  # the `type` of openenv's ListToolsAction, CallToolAction


def _meta(data: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": data["metadata"]} if "metadata" in data else {}


class SandgymAction(Action):
    """One action: the agent's reply as text, in the env's grammar (code
    function: a reply holding a ```python block; SWE repo: a fenced tool
    block; browser form: `click(e12)` ...). For envs that take structured
    actions, `call` may carry one as a mapping instead (SWE repo:
    `{"tool": "bash", "command": "ls"}`); `text` is then left empty."""

    text: str = Field(description="The agent's reply, passed to the env's step() as a text action.")
    call: dict[str, Any] | None = Field(
        default=None,
        description="Optional structured action (a mapping), passed to step() instead of `text`; leave `text` empty.",
    )

    mcp: dict[str, Any] | None = Field(
        default=None,
        description="An OpenEnv MCP action (RFC 003), as openenv's ListToolsAction or CallToolAction "
        'send it: {"type": "list_tools"} or {"type": "call_tool", "tool_name": ..., "arguments": {...}}.',
    )

    @model_validator(mode="before")
    @classmethod
    def _call_alone(cls, data: Any) -> Any:
        # openenv hands the env's action model every step payload, MCP ones
        # included (it takes them apart only for its generic Action): they
        # are kept whole in `mcp`, for the server to play as openenv's own.
        if isinstance(data, dict) and data.get("type") in MCP_TYPES:
            return {"text": "", "mcp": {k: v for k, v in data.items() if k != "metadata"}, **_meta(data)}
        # Clients of the earlier protocol send `{"call": {...}}` with no text.
        if isinstance(data, dict) and "text" not in data and data.get("call") is not None:
            return {**data, "text": ""}
        return data

    @model_validator(mode="after")
    def _not_both(self) -> SandgymAction:
        given = [bool(self.text), self.call is not None, self.mcp is not None]
        if sum(given) > 1:
            # A custom error carries no exception object, so openenv can serialize it.
            raise PydanticCustomError(
                "text_or_call",
                "an action is `text` (a string) or `call` or `mcp` (a mapping), not both: drop one",
            )
        return self

    @property
    def value(self) -> str | dict[str, Any]:
        """What the Gymnasium env's step() takes."""
        return self.call if self.call is not None else self.text


class SandgymObservation(Observation):
    """What the env returned: its observation, `done` and `reward` from the
    step, and the `info` fields shared by every family. The rest of `info`
    (an env's own keys, such as its step count and limit) is in
    `metadata["info"]`; further observation keys in `metadata["observation"]`."""

    task: str = Field(default="", description="The task as the agent sees it.")
    feedback: str = Field(default="", description="Feedback on the last action (empty after reset).")
    task_id: str | None = Field(default=None, description="Id of the task of this episode.")
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


class SandgymServerError(RuntimeError):
    """The server refused a request: `code` is openenv's error code
    (VALIDATION_ERROR, EXECUTION_ERROR, CAPACITY_REACHED, ...)."""

    def __init__(self, message: str, code: str, errors: list[dict[str, Any]] | None = None):
        self.code = code
        self.errors = errors or []
        super().__init__(f"{message} (code: {code})")


def _describe_errors(errors: list[Any]) -> str:
    parts = []
    for e in errors:
        if isinstance(e, dict):
            where = ".".join(str(p) for p in e.get("loc", ()) if p != "data")
            parts.append(f"{where}: {e.get('msg', e)}" if where else str(e.get("msg", e)))
    return "; ".join(parts)


def as_action(action: SandgymAction | str | Mapping[str, Any]) -> SandgymAction:
    """A raw reply (str), an action mapping, or an action, as an action."""
    if isinstance(action, SandgymAction):
        return action
    if isinstance(action, str):
        return SandgymAction(text=action)
    if isinstance(action, Mapping):
        return SandgymAction.model_validate(dict(action))
    raise TypeError(
        f"a sandgym action is a SandgymAction, a str (the model's reply) or a mapping, got {type(action).__name__}"
    )


class SandgymClient(EnvClient[SandgymAction, SandgymObservation, SandgymState]):
    """OpenEnv client for any sandgym env served by `sandgym serve` (every
    family shares the action and observation models). `step()` takes a
    `SandgymAction`, a raw reply (str) or an action mapping."""

    def _step_payload(self, action: SandgymAction | str | Mapping[str, Any]) -> dict[str, Any]:
        return as_action(action).model_dump(exclude_none=True, exclude={"metadata"})

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[SandgymObservation]:
        fields = dict(payload.get("observation") or {})
        fields["done"] = payload.get("done", False)
        fields["reward"] = payload.get("reward")
        obs = SandgymObservation.model_validate(fields)
        return StepResult(observation=obs, reward=obs.reward, done=obs.done, metadata=payload.get("metadata"))

    def _parse_state(self, payload: dict[str, Any]) -> SandgymState:
        return SandgymState.model_validate(payload)

    async def _send_and_receive(self, message: dict[str, Any]) -> dict[str, Any]:
        try:
            return await super()._send_and_receive(message)
        except RuntimeError as e:
            # openenv's own error keeps only the message: re-read the frame's fields.
            reply = getattr(self, "_last_error", None)
            if reply is None:
                raise
            self._last_error = None
            detail = _describe_errors(reply.get("errors") or [])
            text = reply.get("message", "server error") + (f": {detail}" if detail else "")
            raise SandgymServerError(text, str(reply.get("code", "UNKNOWN")), reply.get("errors")) from e

    async def _receive(self) -> dict[str, Any]:
        reply = await super()._receive()
        self._last_error = reply.get("data", {}) if reply.get("type") == "error" else None
        return reply

    # -- tasks, over openenv's Task API (HTTP) ------------------------------------

    def _http_url(self) -> str:
        if self.base_url is None:
            raise RuntimeError("the client is not connected yet: connect() or reset() first")
        url = self.base_url
        for ws, http in (("wss://", "https://"), ("ws://", "http://")):
            if url.startswith(ws):
                url = http + url[len(ws) :]
        return url

    async def _list_tasks_async(self) -> list[dict[str, Any]]:
        async with httpx.AsyncClient(base_url=self._http_url(), timeout=30, headers=self._headers) as http:
            r = await http.get("/list_environments")
            r.raise_for_status()
            name = r.json()[0]
            r = await http.post(f"/{name}/tasks", json={"split": TASK_SPLIT})
            r.raise_for_status()
            return list(r.json()["tasks"])

    def list_tasks(self) -> Any:
        """The served tasks, as `{"task_id", "family", "visible"}` mappings
        (the visible half only); awaitable in async code."""
        return self._dispatch(self._list_tasks_async)

    async def _task_ids_async(self) -> list[str]:
        return [t["task_id"] for t in await self._list_tasks_async()]

    def task_ids(self) -> Any:
        """Ids of the served tasks, for `reset(task_id=...)`."""
        return self._dispatch(self._task_ids_async)
