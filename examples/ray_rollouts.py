"""Rollouts on a Ray cluster for a trainer: a pool of runner actors plays
episodes with a policy and hands back finished trajectories.

Run (a cluster on this machine: a head and two worker nodes):

    scripts/ray-cluster.sh up --workers 2
    RAY_ADDRESS=$(scripts/ray-cluster.sh address) .venv/bin/python examples/ray_rollouts.py
    scripts/ray-cluster.sh down

Without RAY_ADDRESS it starts a one-node Ray for itself. The policy here is
a plain Python callable (called on the node once per turn); a served model
is `policy="openai:MODEL@http://HOST:PORT/v1"` instead, its key taken from
$OPENAI_API_KEY.

- TRL-style (one synchronous call per training step): `pool.play(ids, epochs=G)`
  returns the group's trajectories in the order asked, rewards in `rec.reward`.
- verl-style (an async agent loop): `async for rec in pool.stream(ids)`
  yields each trajectory as its episode ends.
- Between steps, `pool.set_policy(...)` plays the next episodes with new weights.
"""

from __future__ import annotations

import asyncio
import os
import re
from typing import Any

from sandgym.rollouts import RolloutPool

TASKS = ["basic/second-largest", "basic/roman-to-int", "basic/slugify"]


def lazy_model(obs: dict[str, Any], info: dict[str, Any]) -> str:
    """A stand-in for a model: it always answers with a function that returns None."""
    found = re.search(r"`(\w+)\(", obs["task"])  # the prompt names the function: `name(args) -> ...`
    name = found.group(1) if found else "solve"
    return f"```python\ndef {name}(*args):\n    return None\n```"


async def verl_style(pool: RolloutPool) -> list[tuple[str, float | None]]:
    return [(rec.task_id, rec.reward) async for rec in pool.stream(TASKS)]


def main() -> None:
    with RolloutPool(
        "sandgym/CodeFunction-v0", policy=lazy_model, concurrency=2, address=os.environ.get("RAY_ADDRESS")
    ) as pool:
        print(f"runners on {len(pool.nodes)} node(s)")
        group = pool.play(TASKS, epochs=2)  # TRL-style: a GRPO group of 2 per prompt
        for rec in group:
            print(f"trl   {rec.task_id:24} epoch {rec.epoch} reward {rec.reward} node {rec.executor}")
        pool.set_policy("oracle")  # "new weights": the reference solutions
        for task_id, reward in sorted(asyncio.run(verl_style(pool))):
            print(f"verl  {task_id:24} reward {reward}")


if __name__ == "__main__":
    main()
