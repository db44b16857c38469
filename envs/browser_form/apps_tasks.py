"""The apps-v1 task set: every task of the generated apps in one set (shop-v1,
shop-files-v1, tracker-v1 and wiki-v1, 312 tasks over three apps).

`python -m sandgym.envs.browser_form.apps_tasks OUT` writes the set; the
bundled copy under task_specs/browser_form/apps-v1 is its output (a test
checks that they agree). The tasks are the four makers' own, unchanged (same
ids, same content), so the four sets keep their hashes and a result on one
of them is a result on the same tasks here. Each task names its `app`; ids
start with it, so in id order a run switches app (a new sandbox) twice.
"""

from __future__ import annotations

import sys
from pathlib import Path

from sandgym.specs import TaskSet
from sandgym.specs.base import TaskSetMeta

from . import shop_tasks, shop_upload_tasks, tracker_tasks, wiki_tasks

MAKERS = (shop_tasks, shop_upload_tasks, tracker_tasks, wiki_tasks)


def make_task_set() -> TaskSet:
    parts = [maker.make_task_set() for maker in MAKERS]
    meta = TaskSetMeta(
        name="apps-v1",
        family="browser_form",
        description="Three web apps with generated data in one set: the shop and its back office (with uploads), "
        "the issue tracker and the wiki; every task of shop-v1, shop-files-v1, tracker-v1 and wiki-v1, each "
        "naming its app; state-changing and information-seeking, three levels.",
    )
    return TaskSet(meta, [pair for part in parts for pair in part.tasks])


if __name__ == "__main__":  # pragma: no cover - the bundled set's maker
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "task_specs/browser_form/apps-v1")
    task_set = make_task_set()
    task_set.write(out)
    print(f"{len(task_set)} tasks written to {out}")
