"""One single-turn and one multi-turn episode of sandgym/CodeFunction-v0.

Run: .venv/bin/python examples/code_function_episode.py
"""

import gymnasium as gym

import sandgym  # noqa: F401  (registers the envs)

# Single turn: one action holds the code; hidden tests judge it.
env = gym.make("sandgym/CodeFunction-v0")
obs, info = env.reset(seed=0, options={"task_id": "basic/second-largest"})
print(obs["task"], "\n")
answer = """```python
def second_largest(nums):
    distinct = sorted(set(nums))
    return distinct[-2] if len(distinct) >= 2 else None
```"""
obs, reward, terminated, truncated, info = env.step(answer)
print(obs["feedback"], "| reward", reward, "|", info["outcome"])
env.close()

# Multi turn: try on the visible examples first, then submit.
env = gym.make("sandgym/CodeFunction-v0", mode="multi", max_turns=3)
obs, info = env.reset(seed=0, options={"task_id": "basic/second-largest"})
obs, *_ = env.step("```python\ndef second_largest(nums):\n    return sorted(nums)[-2]\n```")
print("\n" + obs["feedback"])
obs, reward, terminated, truncated, info = env.step("SUBMIT\n" + answer)
print(obs["feedback"], "| reward", reward, "|", info["outcome"])
env.close()
