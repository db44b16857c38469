"""sandgym as the reward of TRL's GRPOTrainer: every completion is judged by
hidden tests in a fresh sandbox.

Run: .venv/bin/python examples/trl_reward.py   (TRL is not needed to run this)

It builds the batch TRL would pass to a reward function (prompts from the
bundled tasks, completions = the reference solutions plus one wrong answer)
and prints the rewards.
"""

from sandgym.adapters.trainers import TaskReward, load_tasks, trl_reward_func, trl_rows
from sandgym.specs.code_function import CodeTaskPair

tasks = load_tasks()  # the bundled code-function tasks; or load_tasks("path/to/task/set")

# Dataset rows: "prompt" (what the model sees) and "task_id" (which hidden tests judge it).
rows = {r["task_id"]: r for r in trl_rows(tasks)}

# One reward function; TRL logs it as rewards/sandgym_code_binary/mean. Its scorer
# holds the sandboxes that judge completions: close it when training ends.
scorer = TaskReward(tasks, reward="binary")
reward_func = trl_reward_func(task_id_column="task_id", scorer=scorer)

# What GRPOTrainer passes: one entry per completion, extra dataset columns as lists.
batch = [  # (task id, what the completion is, completion text)
    (
        tid,
        "reference",
        f"Here is my solution.\n```python\n{CodeTaskPair.of(tasks.get(tid)).hidden.reference_solution}```",
    )
    for tid in ("basic/second-largest", "basic/roman-to-int")
]
wrong = "```python\ndef second_largest(nums):\n    return sorted(nums)[-2]\n```"  # fails on duplicates
batch.append(("basic/second-largest", "wrong", wrong))
prompts = [rows[tid]["prompt"] for tid, _, _ in batch]
completions = [text for _, _, text in batch]
task_ids = [tid for tid, _, _ in batch]

rewards = reward_func(prompts=prompts, completions=completions, task_id=task_ids)
for (task_id, kind, _), reward in zip(batch, rewards, strict=True):
    print(f"{task_id:24} {kind:10} reward {reward}")
print(reward_func.__name__, rewards)  # None would mean the sandbox failed: no score, not a 0
scorer.close()

# With TRL (pip install trl datasets), the same function goes to the trainer:
#
#   from datasets import Dataset
#   from trl import GRPOConfig, GRPOTrainer
#
#   dataset = Dataset.from_list(trl_rows())                 # columns: prompt, task_id
#   # or trl_rows(conversational=True) for chat prompts: completions then arrive
#   # as lists of {"role", "content"} messages, which the reward function reads too.
#   trainer = GRPOTrainer(
#       model="Qwen/Qwen2.5-0.5B-Instruct",
#       reward_funcs=trl_reward_func(reward="pass_rate"),   # or a list with other rewards
#       args=GRPOConfig(output_dir="grpo-sandgym", num_generations=8),
#       train_dataset=dataset,
#   )
#   trainer.train()
