"""A policy backed by any OpenAI-compatible chat-completions endpoint.

`--policy openai:MODEL@BASE_URL` (e.g. `openai:qwen3@http://127.0.0.1:8000/v1`).
The key comes from $OPENAI_API_KEY (none is sent when it is unset).

Each episode is one conversation: the task text as the first user message,
the env's feedback as the following ones. The model may answer in text
(the env's action grammar) or call the tools `run_code` / `submit_code`,
which are turned into that grammar. Endpoint failures (unreachable, a bad
key, a reply that is not a chat completion) raise `PolicyError`; the
harness records them on the episode as `env_error`, never as the model's 0.
"""

from __future__ import annotations

import copy
import json
import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from sandgym.envs.base import Action, SandgymEnv
from sandgym.errors import SandgymError

from .specs import TaskPair

SYSTEM_PROMPT = "You are solving a programming task. Follow the task's instructions about how to format your reply."
RETRY_STATUSES = {429, 500, 502, 503, 504}


class PolicyError(SandgymError, RuntimeError):
    """The model endpoint failed; not the model's answer."""


def env_action(message: dict, env: SandgymEnv, tools: list[dict] | None) -> Action:
    """The env action for one assistant message: its text, or its tool call
    made into an action by the env (`tool_action`)."""
    calls = message.get("tool_calls") or []
    if not calls:
        content = message.get("content")
        if not isinstance(content, str):
            raise PolicyError("the reply has neither text content nor a tool call")
        return content
    fn = calls[0].get("function") or {}
    names = {t["function"]["name"] for t in tools or []}
    if fn.get("name") not in names:
        raise PolicyError(f"unknown tool call {fn.get('name')!r}; the tools are {', '.join(sorted(names))}")
    try:
        args = json.loads(fn.get("arguments") or "{}")
    except ValueError as e:
        raise PolicyError(f"tool call arguments are not JSON: {e}") from None
    if not isinstance(args, dict):
        raise PolicyError("tool call arguments must be a JSON object")
    try:
        return env.tool_action(fn["name"], args)
    except ValueError as e:
        raise PolicyError(str(e)) from None


@dataclass
class ChatAgent:
    policy: ChatPolicy
    env: SandgymEnv
    tools: list[dict] | None = None  # the env's tool schemas (`env.chat_tools()`); None: text replies
    messages: list[dict] = field(default_factory=list)

    def act(self, obs: dict[str, Any], info: dict[str, Any]) -> Action | None:
        if not self.messages:
            self.messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": obs["task"]}]
        else:
            # Tool results go back as plain user turns: every endpoint takes those.
            self.messages.append({"role": "user", "content": obs["feedback"]})
        action = env_action(self.policy.complete(self.messages, self.tools), self.env, self.tools)
        self.messages.append(
            {"role": "assistant", "content": action if isinstance(action, str) else json.dumps(action)}
        )
        return action


class ChatPolicy:
    name = "openai"

    def __init__(
        self,
        model: str,
        base_url: str,
        temperature: float = 0.0,
        max_tokens: int = 2048,
        seed: int | None = None,
        timeout_s: float = 120.0,
        retries: int = 3,
        use_tools: bool = True,
    ):
        if not model or not base_url.startswith(("http://", "https://")):
            raise ValueError("policy openai needs openai:MODEL@BASE_URL, e.g. openai:my-model@http://127.0.0.1:8000/v1")
        self.model, self.base_url = model, base_url.rstrip("/")
        self.temperature, self.max_tokens, self.seed = temperature, max_tokens, seed
        self.timeout_s, self.retries, self.use_tools = timeout_s, retries, use_tools
        self.api_key = os.environ.get("OPENAI_API_KEY")
        # What a record needs to reproduce the run (never the key).
        self.config = {
            "model": model,
            "base_url": self.base_url,
            "temperature": temperature,
            "max_tokens": max_tokens,
            "seed": seed,
            "tools": use_tools,
        }

    def reseeded(self, seed: int | None) -> ChatPolicy:
        """The same policy asking the endpoint for another seed (one per epoch,
        so that samples of one task differ); `config` stays the run's."""
        other = copy.copy(self)
        other.seed = seed
        return other

    def begin(self, task: TaskPair, env: SandgymEnv) -> ChatAgent:
        # The env's tools, when it has any and tools are on; otherwise replies
        # are text in the grammar the task prompt states.
        return ChatAgent(self, env, env.chat_tools() if self.use_tools else None)

    def _post(self, body: dict) -> dict:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(
            f"{self.base_url}/chat/completions", data=json.dumps(body).encode(), headers=headers, method="POST"
        )
        last = ""
        for attempt in range(self.retries + 1):
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as resp:
                    raw = resp.read()
                try:
                    return json.loads(raw)
                except ValueError:
                    raise PolicyError(f"the endpoint's reply is not JSON: {raw[:200]!r}") from None
            except urllib.error.HTTPError as e:
                detail = e.read()[:300].decode("utf-8", "replace")
                if e.code in (401, 403):
                    raise PolicyError(
                        f"the endpoint refused the API key (HTTP {e.code}): set OPENAI_API_KEY; {detail}"
                    ) from None
                if e.code not in RETRY_STATUSES:
                    raise PolicyError(f"HTTP {e.code} from {self.base_url}: {detail}") from None
                last = f"HTTP {e.code}: {detail}"
            except (urllib.error.URLError, TimeoutError, ConnectionError) as e:
                last = f"cannot reach {self.base_url}: {getattr(e, 'reason', e)}"
            if attempt < self.retries:
                time.sleep(min(8.0, 0.5 * 2**attempt))
        raise PolicyError(f"{last} (after {self.retries + 1} tries)")

    def complete(self, messages: list[dict], tools: list[dict] | None = None) -> dict:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
        }
        if self.seed is not None:
            body["seed"] = self.seed
        if tools:
            body["tools"] = tools
        reply = self._post(body)
        try:
            message = reply["choices"][0]["message"]
        except (KeyError, IndexError, TypeError):
            raise PolicyError(f"not a chat completion: {str(reply)[:200]}") from None
        if not isinstance(message, dict):
            raise PolicyError(f"not a chat completion: {str(reply)[:200]}")
        return message


def parse_openai_spec(spec: str, seed: int | None = None, temperature: float = 0.0) -> ChatPolicy:
    """`openai:MODEL@BASE_URL` -> ChatPolicy."""
    rest = spec.split(":", 1)[1]
    if "@" not in rest:
        raise ValueError(
            f"policy {spec!r}: expected openai:MODEL@BASE_URL, e.g. openai:my-model@http://127.0.0.1:8000/v1"
        )
    model, base_url = rest.split("@", 1)
    return ChatPolicy(model, base_url, temperature=temperature, seed=seed)
