"""The verl token-in/token-out agent loop (sandgym.adapters.verl_agent_loop)
on real SWE and browser episodes, with a byte-level BPE tokenizer trained
here (tokenizers) and wrapped as a Hugging Face tokenizer with a chat
template; the "model" is a scripted token server that decodes the prompt
it is given and answers with the tokens of the env's oracle actions."""

from __future__ import annotations

import asyncio
from typing import Any

import gymnasium
import pytest

from sandgym.adapters.verl_agent_loop import SandgymAgentLoop
from tests.helpers import unwrapped

SPECIAL = ["<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
TEMPLATE = (
    "{% for m in messages %}{% if m.role %}<|{{ m.role }}|>{{ m.content }}<|end|>{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


@pytest.fixture(scope="module")
def tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = ["def apply the patch git diff --git a/ b/ submit click fill done bash", "```bash\nls\n```"] * 50
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|end|>", additional_special_tokens=SPECIAL)
    fast.chat_template = TEMPLATE
    return fast


def oracle_replies(env_id: str, task_id: str) -> list[str]:
    """The oracle's actions as text replies in the env's grammar."""
    env = gymnasium.make(env_id)
    try:
        env.reset(options={"task_id": task_id})
        actions = unwrapped(env).oracle_actions()
    finally:
        env.close()
    replies = []
    for a in actions:
        if isinstance(a, dict):  # SWE: {"tool": "bash", "command": ...} as one fenced block
            body = a.get("command", "")
            replies.append(f"~~~~{a['tool']}\n{body}~~~~\n" if body else f"~~~~{a['tool']}\n~~~~\n")
        else:
            replies.append(a)
    return replies


class Server:
    """A scripted token server: each call must get the whole context so far
    (prompt + every earlier token), and answers with the next reply's tokens
    and the end-of-turn token, as a chat model would."""

    def __init__(self, tokenizer: Any, replies: list[str]):
        self.tokenizer, self.replies = tokenizer, list(replies)
        self.contexts: list[list[int]] = []
        self.sent: list[list[int]] = []  # what it answered, call by call
        self.end = tokenizer.convert_tokens_to_ids("<|end|>")

    async def __call__(self, ids: list[int], params: dict[str, Any]) -> list[int]:
        self.contexts.append(list(ids))
        assert params["max_tokens"] > 0 and params["temperature"] == 0.5
        reply = self.replies.pop(0) if self.replies else "nothing to say"
        ids = self.tokenizer.encode(reply, add_special_tokens=False) + [self.end]
        self.sent.append(ids)
        return ids


def first_task(env_id: str) -> str:
    env = gymnasium.make(env_id)
    try:
        return unwrapped(env).task_set.tasks[0].id
    finally:
        env.close()


@pytest.mark.sandbox
@pytest.mark.parametrize(
    "env_id", ["sandgym/SWERepo-v0", pytest.param("sandgym/BrowserForm-v0", marks=pytest.mark.chromium)]
)
def test_token_in_token_out_episodes(tokenizer, env_id):
    task_id = first_task(env_id)
    replies = oracle_replies(env_id, task_id)
    # A wrong first move (a tool the env does not have) makes the env talk back once.
    server = Server(tokenizer, ["~~~~nope\n~~~~\n", *replies])
    # A byte-level tokenizer this small spends about a token per byte (a browser page is long).
    loop = SandgymAgentLoop(env_id, tokenizer, server, max_turns=len(replies) + 2, max_response_tokens=1 << 20)
    out = asyncio.run(loop.run(task_id=task_id, sampling_params={"temperature": 0.5}))
    assert out.reward_score == 1.0 and out.metrics["outcome"] == "passed" and out.metrics["task_id"] == task_id
    assert out.num_turns == len(replies) + 1 == len(server.contexts)
    assert len(out.response_ids) == len(out.response_mask) and set(out.response_mask) == {0, 1}
    # The prompt is the chat template on the task; the model's tokens are kept as sampled.
    assert tokenizer.decode(out.prompt_ids).startswith("<|user|>") and tokenizer.decode(out.prompt_ids).endswith(
        "<|assistant|>"
    )
    model = [t for t, m in zip(out.response_ids, out.response_mask, strict=True) if m == 1]
    assert model == [t for ids in server.sent for t in ids]
    # Every call saw exactly the context so far: prompt + the response up to then.
    for ctx in server.contexts:
        assert ctx[: len(out.prompt_ids)] == out.prompt_ids
        assert ctx[len(out.prompt_ids) :] == out.response_ids[: len(ctx) - len(out.prompt_ids)]
    # The env's turns (mask 0) are user messages ending in the generation prompt.
    env_text = tokenizer.decode([t for t, m in zip(out.response_ids, out.response_mask, strict=True) if m == 0])
    assert env_text.startswith("<|user|>") and env_text.endswith("<|assistant|>") and "nope" in env_text


@pytest.mark.sandbox
def test_the_response_budget_truncates_without_a_reward(tokenizer):
    env_id = "sandgym/SWERepo-v0"
    task_id = first_task(env_id)
    server = Server(tokenizer, ["~~~~bash\nls\n~~~~\n"] * 5)
    loop = SandgymAgentLoop(env_id, tokenizer, server, max_turns=5, max_response_tokens=40)
    out = asyncio.run(loop.run(task_id=task_id, sampling_params={"temperature": 0.5}))
    assert out.metrics["truncated"] and out.reward_score is None and not out.metrics["done"]
    assert len(out.response_ids) <= 40 and len(out.response_ids) == len(out.response_mask)
