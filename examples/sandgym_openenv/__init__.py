"""A `verifiers` (0.4.0) taskset for sandgym's served envs:
`vf-eval sandgym-openenv --env.taskset.base_url URL ...`.

It runs in verifiers' own virtualenv, not sandgym's (it imports no sandgym
module): put this folder's parent on PYTHONPATH and verifiers' loader finds
it by its id. verifiers' OpenEnv taskset (`openenv`) plays one task per entry
of its `resets`; this one, when `resets` is left as is, fills them from the
served task list (openenv's Task API, which `sandgym serve` answers): one
`reset(task_id=...)` per served task, each task named by its id. The env that
plays them is verifiers' own `OpenEnvEnv`: it steps the server with the
model's replies (JSON actions) and scores the sum of the step rewards
(`openenv_reward`). See examples/verifiers_openenv.py and docs/trainers.md.
"""

from collections.abc import Iterator

import httpx
from verifiers.v1.tasksets.openenv import OpenEnvData, OpenEnvEnv, OpenEnvTask, OpenEnvTaskset

__all__ = ["OpenEnvEnv", "SandgymTaskset", "served_task_ids"]

SPLIT = "test"  # the one split sandgym serves


def served_task_ids(base_url: str, timeout: float = 30.0) -> list[str]:
    """The ids of the tasks a sandgym server serves, in its order."""
    base = base_url.rstrip("/")
    with httpx.Client(timeout=timeout) as http:
        names = http.get(f"{base}/list_environments")
        names.raise_for_status()
        (name,) = names.json()
        tasks = http.post(f"{base}/{name}/tasks", json={"split": SPLIT})
        tasks.raise_for_status()
        return [t["task_id"] for t in tasks.json()["tasks"]]


class SandgymTaskset(OpenEnvTaskset):
    def load(self) -> Iterator[OpenEnvTask]:
        config = self.config
        if config.base_url is None or config.resets != [{}]:  # [{}], the default: every served task
            yield from super().load()
            return
        for task_id in served_task_ids(config.base_url):
            data = OpenEnvData(
                id=task_id,
                name=task_id,
                prompt=None,
                env=None,
                base_url=config.base_url,
                use_docker=False,
                provider_kwargs={},
                reset={"task_id": task_id},
            )
            yield OpenEnvTask(data, config.task)
