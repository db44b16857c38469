"""A token-in/token-out agent loop for verl, over any sandgym env, without importing verl.

verl's agent loops (`verl.experimental.agent_loop`: `AgentLoopBase.run`,
`ToolAgentLoop`) hand the trainer, per trajectory, an `AgentLoopOutput`:
`prompt_ids` (the chat template applied to the first messages),
`response_ids` (every token after them: the model's own, exactly as it
generated them, and the env's turns between them) and `response_mask`
(1 on the model's tokens, 0 on the env's), with `num_turns` and a reward.
The model's tokens are never decoded and encoded again into the record:
what was trained on is what was sampled.

`SandgymAgentLoop(env_id, tokenizer, generate)` plays one episode of a
sandgym env that way (SWE, browser and code envs alike: text actions in
the env's grammar). `tokenizer` is a Hugging Face tokenizer with a chat
template (`apply_chat_template`, `decode`); `generate(ids, sampling_params)`
is the token server (verl's `server_manager.generate`, vLLM, SGLang), an
async callable giving the new token ids. Each turn: the model's tokens are
decoded for the env only, the env steps on the text, and its feedback
becomes a user message whose tokens are the chat template applied to that
message alone with the generation prompt, less the template's preamble
(what `[{}]` renders: a default system prompt), as verl's ToolAgentLoop
computes them. The loop ends when the episode ends, after `max_turns`
model turns, or when the response reaches `max_response_tokens` (then
`metrics["truncated"]` is true and `reward_score` is None: the episode
was not judged; so too after `max_turns` without an end).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import gymnasium

Generate = Callable[[list[int], dict[str, Any]], Awaitable[list[int]]]


@dataclass
class AgentLoopOutput:
    """verl's AgentLoopOutput fields for one trajectory (token ids are ints)."""

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    reward_score: float | None
    num_turns: int
    metrics: dict[str, Any] = field(default_factory=dict)


def _ids(value: Any) -> list[int]:
    """apply_chat_template(tokenize=True) gives a list, or a BatchEncoding with input_ids."""
    if isinstance(value, dict) or hasattr(value, "input_ids"):
        value = value["input_ids"]
    return [int(i) for i in value]


class SandgymAgentLoop:
    def __init__(
        self,
        env_id: str,
        tokenizer: Any,
        generate: Generate,
        env_kwargs: dict[str, Any] | None = None,
        max_turns: int = 10,
        max_response_tokens: int = 8192,
        system_prompt: str | None = None,
    ):
        if max_turns < 1 or max_response_tokens < 1:
            raise ValueError("max_turns and max_response_tokens must be at least 1")
        self.env_id, self.tokenizer, self.generate = env_id, tokenizer, generate
        self.env_kwargs = dict(env_kwargs or {})
        self.max_turns, self.max_response_tokens = max_turns, max_response_tokens
        self.system_prompt = system_prompt
        # The template's preamble for any message list (a default system prompt), left
        # out of the env's turns: the prompt already holds it.
        self._preamble = _ids(tokenizer.apply_chat_template([{}], add_generation_prompt=False, tokenize=True))

    def _env_turn(self, text: str) -> list[int]:
        ids = _ids(
            self.tokenizer.apply_chat_template(
                [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True
            )
        )
        return ids[len(self._preamble) :] if ids[: len(self._preamble)] == self._preamble else ids

    async def run(
        self, task_id: str | None = None, seed: int | None = None, sampling_params: dict[str, Any] | None = None
    ) -> AgentLoopOutput:
        """One episode on `task_id` (None: the env's choice by `seed`)."""
        env = await asyncio.to_thread(gymnasium.make, self.env_id, **self.env_kwargs)
        try:
            return await self._play(env, task_id, seed, dict(sampling_params or {}))
        finally:
            await asyncio.to_thread(env.close)

    async def _play(self, env: Any, task_id: str | None, seed: int | None, params: dict[str, Any]) -> AgentLoopOutput:
        t0 = time.perf_counter()
        options = {"task_id": task_id} if task_id is not None else None
        obs, info = await asyncio.to_thread(env.reset, seed=seed, options=options)
        messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        messages.append({"role": "user", "content": str(obs["task"])})
        prompt_ids = _ids(self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True))
        response_ids: list[int] = []
        mask: list[int] = []
        reward: float | None = None
        done = truncated = False
        turns = 0
        while turns < self.max_turns:
            room = self.max_response_tokens - len(response_ids)
            out = list(await self.generate(prompt_ids + response_ids, {**params, "max_tokens": room}))[:room]
            turns += 1
            response_ids += out
            mask += [1] * len(out)
            text = self.tokenizer.decode(out, skip_special_tokens=True)
            obs, r, terminated, trunc, info = await asyncio.to_thread(env.step, text)
            reward, done = float(r), bool(terminated or trunc)
            if done:
                break
            turn = self._env_turn(str(obs.get("feedback", "")))
            if len(response_ids) + len(turn) >= self.max_response_tokens:
                truncated = True  # no room for the env's turn and another reply
                break
            response_ids += turn
            mask += [0] * len(turn)
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=response_ids,
            response_mask=mask,
            reward_score=reward if done else None,
            num_turns=turns,
            metrics={
                "task_id": info.get("task_id"),
                "outcome": info.get("outcome"),
                "done": done,
                "truncated": truncated,
                "generate_and_env_s": round(time.perf_counter() - t0, 4),
            },
        )
