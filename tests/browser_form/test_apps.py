"""apps-v1: the three generated apps' tasks in one set (shop, tracker, wiki).

Without a browser: the bundled set is its maker's output, holds every task
of the four per-app sets unchanged, and those sets keep their hashes. In a
browser: one env plays a task of each app in turn (each switch a new
sandbox); with the `slow` marker the whole set's oracle and null, on local
and on docker, each run's counts and wall time printed.
"""

from __future__ import annotations

import os
import time

import pytest

from sandgym.envs.browser_form.apps_tasks import make_task_set
from sandgym.envs.browser_form.env import BrowserFormEnv
from sandgym.specs import TaskSet
from sandgym.specs.base import bundled_dir
from sandgym.specs.browser_form import BrowserTaskPair

from .apps import check_oracle_and_null, first_of_each_app, play

TASKS = "apps-v1"
# The per-app sets apps-v1 is made of, and their content hashes when it was made: they must not move.
PARTS = {
    "shop-v1": "sha256:52f4654fa054005b573c1b8c05262afe10394a56b0650b61f4bae63e13a7573e",
    "shop-files-v1": "sha256:cae812141c41f72fe436028705851ae08d599927c122e3743adcd27a80becf14",
    "tracker-v1": "sha256:38a9017ef43ad4769ca4685ef365a0c820110fa85e4893b9a00d63c33430711f",
    "wiki-v1": "sha256:7bd2b8dec68ddccb95487f214f47c4f2c05490cc8a8493f5ba0b93a6511bfdba",
}


def bundled(name: str) -> TaskSet:
    return TaskSet.load(bundled_dir() / "browser_form" / name)


def test_the_bundled_set_is_the_generators_output_and_the_app_sets_keep_their_hashes():
    apps = bundled(TASKS)
    assert apps.hash == make_task_set().hash
    pairs = [BrowserTaskPair.of(t) for t in apps.tasks]
    assert len(pairs) >= 300
    assert {p.visible.app for p in pairs} == {"shop", "tracker", "wiki"}
    assert all(p.id.startswith(f"{p.visible.app}/") for p in pairs)  # in id order, each app's tasks together
    levels = {(p.visible.level, p.hidden.answer is None) for p in pairs}
    assert levels == {(lvl, state) for lvl in (1, 2, 3) for state in (True, False)}
    parts = {name: bundled(name) for name in PARTS}
    assert {name: s.hash for name, s in parts.items()} == PARTS
    # every task of the four sets, the same content, and nothing else
    whole = TaskSet(apps.meta, [t for s in parts.values() for t in s.tasks])
    assert whole.ids == apps.ids and whole.hash == apps.hash


@pytest.mark.chromium
def test_one_env_plays_each_app_in_turn():
    """A mixed set: each task whose app differs from the running one gets that app's sandbox,
    and the episode after the switch is as fresh as any (its oracle passes, its null fails)."""
    e = BrowserFormEnv(tasks=TASKS)
    try:
        ids = first_of_each_app(e)
        assert [i.split("/")[0] for i in ids] == ["shop", "tracker", "wiki"]
        for task_id in ids:
            check_oracle_and_null(e, task_id)
        _, _, info = play(e, ids[0], ["done()"])  # and back to the first app
        assert info["outcome"] == "failed" and e.app == "shop"
    finally:
        e.close()


def play_whole_set(runtime: str) -> None:
    """Every task's oracle and null on `runtime`; all counted before any failure is raised."""
    e = BrowserFormEnv(tasks=TASKS, runtime=runtime)
    counts = {"oracle passed": 0, "null failed": 0}
    wrong: list[str] = []
    load0, t0 = os.getloadavg(), time.monotonic()
    try:
        for task_id in e.task_set.ids:
            _, reward, info = play(e, task_id, list(BrowserTaskPair.of(e.task_set.get(task_id)).hidden.oracle))
            if info["outcome"] == "passed" and reward == 1.0:
                counts["oracle passed"] += 1
            else:
                wrong.append(f"{task_id}: oracle {info['outcome']}: {e.last_verdict.detail if e.last_verdict else ''}")
            _, reward, info = play(e, task_id, e.null_actions())
            if info["outcome"] == "failed" and reward == 0.0 and info["reward_valid"]:
                counts["null failed"] += 1
            else:
                wrong.append(f"{task_id}: null {info['outcome']}")
    finally:
        e.close()
    print(
        f"\n{TASKS} on {runtime}: {len(e.task_set)} tasks, {counts}, "
        f"{time.monotonic() - t0:.0f} s, load average {load0[0]:.1f} -> {os.getloadavg()[0]:.1f}"
    )
    assert not wrong, "\n".join(w[:600] for w in wrong)


@pytest.mark.slow
@pytest.mark.chromium
def test_oracle_passes_and_null_fails_on_every_task_on_local():
    play_whole_set("local")


@pytest.mark.slow
@pytest.mark.chromium
@pytest.mark.docker
def test_oracle_passes_and_null_fails_on_every_task_on_docker():
    play_whole_set("docker")
