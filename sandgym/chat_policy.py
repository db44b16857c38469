"""A policy backed by any OpenAI-compatible chat-completions endpoint.

`--policy openai:MODEL@BASE_URL` (e.g. `openai:qwen3@http://127.0.0.1:8000/v1`),
spoken through the `openai` SDK. The key comes from $OPENAI_API_KEY; when it
is unset a placeholder goes to BASE_URL (the SDK needs one; local servers
ignore it), and to nowhere else.

Each episode is one conversation as the providers define it: the system
prompt, the task text as the first user message; then each assistant reply
is kept as returned (`tool_calls` included). When the reply called a tool
(the env's `chat_tools()`, made by the env into an action with
`tool_action`), the env's feedback goes back as a `role: "tool"` message
answering that call; when it replied in text (the env's action grammar),
the feedback is the next user turn. Only the first call of a reply is
played: the others are answered with a tool message saying so, so that the
sequence stays valid. A call the env cannot take (an unknown tool, bad
arguments) is answered with the error and the model asked again, at most
`MAX_BAD_CALLS` times; then its text is played. With tools,
`parallel_tool_calls: false` asks for one call per reply.

Endpoint failures (unreachable, a bad key, a reply that is not a chat
completion) raise `PolicyError`; the harness records them on the episode as
`env_error`, never as the model's 0. `preflight()` asks the endpoint once
before a run so that a dead endpoint or a refused key fails the run at once;
`BREAKER_5XX` requests in a row ending in HTTP 5xx open a circuit breaker,
after which the run's requests fail at once.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai

from sandgym.envs.base import Action, SandgymEnv
from sandgym.errors import SandgymError

from .specs import TaskPair

DEFAULT_SYSTEM_PROMPT = (
    "You are an agent solving a task. Follow the task's instructions about how to format your reply, "
    "or call one of the tools you are given."
)
NO_KEY = "sk-no-key"  # sent when $OPENAI_API_KEY is unset: the SDK refuses to run without a key
MAX_BAD_CALLS = 2
ONE_CALL_PER_TURN = "Not executed: only the first tool call of a reply is run. Call one tool per reply."
USAGE_KEYS = ("prompt_tokens", "completion_tokens", "total_tokens")
# Requests in a row (each after the SDK's own retries) that ended in HTTP 5xx
# before the policy stops asking: every later request fails at once.
BREAKER_5XX = 5


class CircuitBreaker:
    """Counts requests in a row that ended in a server error (5xx), across
    the episodes of a run; at `limit` it opens and stays open: an endpoint
    that keeps failing is not asked again for every episode left."""

    def __init__(self, limit: int = BREAKER_5XX):
        self.limit, self.failures, self.last = limit, 0, ""
        self._lock = threading.Lock()

    @property
    def open(self) -> bool:
        return self.failures >= self.limit

    def result(self, status: int | None, text: str = "") -> None:
        with self._lock:
            if self.open:
                return
            if status is not None and status >= 500:
                self.failures, self.last = self.failures + 1, text
            else:
                self.failures = 0


class PolicyError(SandgymError, RuntimeError):
    """The model endpoint failed; not the model's answer."""


def _one_line(text: object, limit: int = 300) -> str:
    return " ".join(str(text).split())[:limit]


def _endpoint_error(e: openai.OpenAIError, base_url: str) -> PolicyError:
    """The SDK's error as one line saying what failed and what to do."""
    if isinstance(e, (openai.AuthenticationError, openai.PermissionDeniedError)):
        return PolicyError(
            f"the endpoint {base_url} refused the API key (HTTP {e.status_code}): set OPENAI_API_KEY to a key "
            f"it accepts; {_one_line(e.message)}"
        )
    if isinstance(e, openai.APIConnectionError):  # refused, DNS, timeouts (after the SDK's retries)
        cause = e.__cause__ or e
        return PolicyError(f"cannot reach {base_url}: {_one_line(cause) or type(cause).__name__}")
    if isinstance(e, openai.APIStatusError):
        return PolicyError(f"HTTP {e.status_code} from {base_url}: {_one_line(e.message)}")
    return PolicyError(f"the endpoint {base_url} failed: {type(e).__name__}: {_one_line(e)}")


def assistant_message(message: Any) -> dict[str, Any]:
    """The reply as the conversation keeps it: role, content and its tool
    calls as returned (no provider-specific extras, which some servers refuse)."""
    out: dict[str, Any] = {"role": "assistant", "content": message.content}
    calls = []
    for call in message.tool_calls or []:
        fn = getattr(call, "function", None)
        calls.append(
            {
                "id": call.id,
                "type": getattr(call, "type", "function"),
                "function": {"name": getattr(fn, "name", None), "arguments": getattr(fn, "arguments", None)},
            }
        )
    if calls:
        out["tool_calls"] = calls
    elif out["content"] is None:
        out["content"] = ""  # an empty reply: a text turn with no text
    return out


@dataclass
class ChatAgent:
    policy: ChatPolicy
    env: SandgymEnv
    tools: list[dict] | None = None  # the env's tool schemas (`env.chat_tools()`); None: text replies
    messages: list[dict] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=lambda: dict.fromkeys((*USAGE_KEYS, "requests"), 0))
    pending: list[str] = field(default_factory=list)  # ids of the last reply's tool calls; the first was played

    def act(self, obs: dict[str, Any], info: dict[str, Any]) -> Action | None:
        if not self.messages:
            if self.policy.system_prompt:
                self.messages.append({"role": "system", "content": self.policy.system_prompt})
            self.messages.append({"role": "user", "content": str(obs["task"])})
        else:
            self._answer(str(obs["feedback"]))
        for attempt in range(MAX_BAD_CALLS + 1):
            message = self._ask()
            self.messages.append(message)
            calls = message.get("tool_calls") or []
            self.pending = [c["id"] for c in calls]
            if not calls:
                return message["content"]
            try:
                return self._action(calls[0])
            except ValueError as e:
                if attempt == MAX_BAD_CALLS:  # the model keeps calling wrongly: its text is its action
                    return message["content"] or ""
                self._answer(f"Error: {e}. Nothing was run; call one of the tools with valid arguments.")
        raise AssertionError("unreachable")

    def record_extras(self) -> dict[str, Any]:
        """What the episode's record keeps of the conversation (the harness's hook)."""
        return {"messages": self.messages, "usage": dict(self.usage)}

    def _answer(self, text: str) -> None:
        """`text` back to the model: the tool message of the call played (the
        others told they were not run), or a user turn after a text reply."""
        if not self.pending:
            self.messages.append({"role": "user", "content": text})
            return
        first, *rest = self.pending
        self.messages.append({"role": "tool", "tool_call_id": first, "content": text})
        self.messages += [{"role": "tool", "tool_call_id": r, "content": ONE_CALL_PER_TURN} for r in rest]
        self.pending = []

    def _ask(self) -> dict[str, Any]:
        reply = self.policy.complete(self.messages, self.tools)
        self.usage["requests"] += 1
        usage = getattr(reply, "usage", None)
        for key in USAGE_KEYS:
            value = getattr(usage, key, None)
            if isinstance(value, int):
                self.usage[key] += value
        return assistant_message(reply.choices[0].message)

    def _action(self, call: dict[str, Any]) -> Action:
        """The env action of one tool call; ValueError (told to the model) when the env cannot take it."""
        fn = call["function"]
        names = {t["function"]["name"] for t in self.tools or []}
        if fn["name"] not in names:
            raise ValueError(f"unknown tool {fn['name']!r}; the tools are {', '.join(sorted(names))}")
        try:
            args = json.loads(fn["arguments"] or "{}")
        except (TypeError, ValueError) as e:
            raise ValueError(f"the arguments of {fn['name']!r} are not JSON: {e}") from None
        if not isinstance(args, dict):
            raise ValueError(f"the arguments of {fn['name']!r} must be a JSON object")
        return self.env.tool_action(fn["name"], args)


class ChatPolicy:
    name = "openai"

    def __init__(
        self,
        model: str,
        base_url: str,
        temperature: float = 0.0,
        max_tokens: int | None = None,
        seed: int | None = None,
        timeout_s: float = 120.0,
        retries: int = 3,
        use_tools: bool = True,
        system_prompt: str = DEFAULT_SYSTEM_PROMPT,
    ):
        if model and base_url and "://" not in base_url:
            raise ValueError(
                f"policy openai: the base URL {base_url!r} has no scheme: http:// is missing "
                f"(e.g. openai:{model}@http://{base_url})"
            )
        if not model or not base_url.startswith(("http://", "https://")):
            raise ValueError("policy openai needs openai:MODEL@BASE_URL, e.g. openai:my-model@http://127.0.0.1:8000/v1")
        if max_tokens is not None and max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {max_tokens}; leave it out for the server's default")
        self.model, self.base_url = model, base_url.rstrip("/")
        self.temperature, self.max_tokens, self.seed = temperature, max_tokens, seed
        self.timeout_s, self.retries, self.use_tools = timeout_s, retries, use_tools
        self.system_prompt = system_prompt
        # The SDK retries connection errors, 408, 409, 429 and 5xx with its own backoff.
        self.client = openai.OpenAI(
            base_url=self.base_url,
            api_key=os.environ.get("OPENAI_API_KEY") or NO_KEY,
            max_retries=retries,
            timeout=timeout_s,
        )
        self.breaker = CircuitBreaker()  # shared by reseeded copies: one endpoint
        # What a record needs to reproduce the run (never the key).
        self.config = {
            "model": model,
            "base_url": self.base_url,
            "temperature": temperature,
            "max_tokens": max_tokens,
            "seed": seed,
            "tools": use_tools,
            "system_prompt": system_prompt,
        }

    def reseeded(self, seed: int | None) -> ChatPolicy:
        """The same policy asking the endpoint for another seed (one per epoch,
        so that samples of one task differ); `config` stays the run's."""
        other = object.__new__(ChatPolicy)
        other.__dict__.update(self.__dict__)  # the client shared, not rebuilt (copy.copy would)
        other.seed = seed
        return other

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (to a Ray node) without its client, nor the key it holds."""
        return {k: v for k, v in self.__dict__.items() if k not in ("client", "breaker")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        """A client made where it is unpickled, with that machine's $OPENAI_API_KEY."""
        self.__dict__.update(state)
        self.breaker = CircuitBreaker()
        self.client = openai.OpenAI(
            base_url=self.base_url,
            api_key=os.environ.get("OPENAI_API_KEY") or NO_KEY,
            max_retries=self.retries,
            timeout=self.timeout_s,
        )

    def begin(self, task: TaskPair, env: SandgymEnv) -> ChatAgent:
        # The env's tools, when it has any and tools are on; otherwise replies
        # are text in the grammar the task prompt states.
        return ChatAgent(self, env, env.chat_tools() if self.use_tools else None)

    def preflight(self) -> None:
        """One cheap request (GET /models) before a run: PolicyError when the
        endpoint is unreachable or refuses the key. An endpoint that answers
        but lists no models (404, 405, 501) passes."""
        try:
            self.client.with_options(max_retries=1, timeout=min(self.timeout_s, 30.0)).models.list()
        except openai.APIStatusError as e:
            if e.status_code not in (404, 405, 501):
                raise _endpoint_error(e, self.base_url) from None
        except openai.OpenAIError as e:
            raise _endpoint_error(e, self.base_url) from None

    def complete(self, messages: list[dict], tools: list[dict] | None = None) -> Any:
        """One chat completion (the SDK's object); PolicyError when there is none."""
        body: dict[str, Any] = {"model": self.model, "messages": messages, "temperature": self.temperature}
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        if self.seed is not None:
            body["seed"] = self.seed
        if tools:
            body["tools"] = tools
            body["parallel_tool_calls"] = False  # only the first call of a reply is played
        if self.breaker.open:
            raise PolicyError(
                f"circuit open: {self.breaker.failures} requests in a row to {self.base_url} ended in a server "
                f"error (last: {self.breaker.last}); not asking again in this run"
            )
        try:
            reply = self.client.chat.completions.create(**body)
        except openai.APIStatusError as e:
            error = _endpoint_error(e, self.base_url)
            self.breaker.result(e.status_code, str(error))
            raise error from None
        except openai.OpenAIError as e:
            raise _endpoint_error(e, self.base_url) from None
        except ValueError as e:  # a 200 whose body is not JSON
            raise PolicyError(f"the endpoint's reply is not JSON: {_one_line(e)}") from None
        choices = getattr(reply, "choices", None)
        if not isinstance(choices, list) or not choices or getattr(choices[0], "message", None) is None:
            raise PolicyError(f"not a chat completion: {_one_line(reply, 200)}")
        self.breaker.result(200)
        return reply


def parse_openai_spec(
    spec: str,
    seed: int | None = None,
    temperature: float = 0.0,
    max_tokens: int | None = None,
    system_prompt: str | None = None,
) -> ChatPolicy:
    """`openai:MODEL@BASE_URL` -> ChatPolicy. `system_prompt`: the text, or
    @FILE to read it from a file ("" for none; None for the default)."""
    rest = spec.split(":", 1)[1]
    if "@" not in rest:
        raise ValueError(
            f"policy {spec!r}: expected openai:MODEL@BASE_URL, e.g. openai:my-model@http://127.0.0.1:8000/v1"
        )
    model, base_url = rest.split("@", 1)
    if system_prompt is None:
        system_prompt = DEFAULT_SYSTEM_PROMPT
    elif system_prompt.startswith("@"):
        path = Path(system_prompt[1:])
        try:
            system_prompt = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            why = e.strerror if isinstance(e, OSError) else "not UTF-8 text"
            raise ValueError(f"--system-prompt @{path}: cannot read it ({why}); give the text or @FILE") from None
    return ChatPolicy(
        model, base_url, temperature=temperature, seed=seed, max_tokens=max_tokens, system_prompt=system_prompt
    )
