"""sandgym as verl's custom reward function: every response is judged by
hidden tests in a fresh sandbox.

Run: .venv/bin/python examples/verl_reward.py   (verl is not needed to run this)

It builds rows in verl's parquet layout from the bundled tasks, scores the
reference solutions plus one wrong answer the way verl's reward manager
calls the function, and prints the rewards.

In verl's config, point custom_reward_function at this file (importing it
runs nothing but the import below) or at sandgym/adapters/trainers.py itself:

    custom_reward_function.path=examples/verl_reward.py
    custom_reward_function.name=compute_score
    # optional, passed to compute_score as keywords:
    # +custom_reward_function.reward_kwargs.reward=pass_rate
    # +custom_reward_function.reward_kwargs.env_error_score=0.0  (else an infra failure stops training)

With reward_model.reward_manager=batch, use name=compute_score_batch: the
whole batch is verified in parallel. The parquet files come from verl_rows():

    import pandas as pd
    pd.DataFrame(verl_rows()).to_parquet("sandgym_train.parquet")   # data.train_files=...
"""

from sandgym.adapters.trainers import compute_score, compute_score_batch, load_tasks, verl_rows
from sandgym.specs.code_function import CodeTaskPair

if __name__ == "__main__":
    tasks = load_tasks()
    rows = {r["reward_model"]["ground_truth"]: r for r in verl_rows(tasks)}

    batch = []  # (row, what the response is, response) as verl's reward manager sees them after decoding
    for tid in ("basic/second-largest", "basic/roman-to-int"):
        batch.append(
            (rows[tid], "reference", f"```python\n{CodeTaskPair.of(tasks.get(tid)).hidden.reference_solution}```")
        )
    batch.append(
        (
            rows["basic/second-largest"],
            "wrong",
            "```python\ndef second_largest(nums):\n    return sorted(nums)[-2]\n```",
        )
    )

    for row, kind, response in batch:
        score = compute_score(  # exactly how verl's naive reward manager calls it
            data_source=row["data_source"],
            solution_str=response,
            ground_truth=row["reward_model"]["ground_truth"],
            extra_info=row["extra_info"],  # carries {"task_set": <folder>}
        )
        print(f"{row['reward_model']['ground_truth']:24} {kind:10} reward {score}")

    scores = compute_score_batch(  # how verl's batch reward manager calls it
        data_sources=[r["data_source"] for r, _, _ in batch],
        solution_strs=[s for _, _, s in batch],
        ground_truths=[r["reward_model"]["ground_truth"] for r, _, _ in batch],
        extra_infos=[r["extra_info"] for r, _, _ in batch],
    )
    print("batch:", scores)
