"""Uploads in the real Chromium in a real bubblewrap sandbox (shop-files-v1): the oracle
passes and the null fails on every task, the wrong file fails, a file the episode does
not have is refused, and an upload does not survive the reset."""

from __future__ import annotations

import sqlite3

import pytest

from sandgym.envs.browser_form.env import BrowserFormEnv
from sandgym.envs.browser_form.shop_upload_tasks import IMAGE_INPUT

from .apps import play

pytestmark = pytest.mark.chromium


@pytest.fixture(scope="module")
def env():
    e = BrowserFormEnv(tasks="shop-files-v1")
    yield e
    e.close()


def images(env) -> list[tuple]:
    con = sqlite3.connect(f"file:{env.session.state_dir / 'app.sqlite'}?mode=ro", uri=True)
    try:
        return con.execute("SELECT sku, filename FROM product_images").fetchall()
    finally:
        con.close()


def test_oracle_passes_and_null_fails_on_every_task(env):
    for task_id in env.task_set.ids:
        obs, reward, info = play(env, task_id, list(env.task_set.get(task_id).hidden.oracle))
        assert info["outcome"] == "passed" and reward == 1.0, (task_id, env.last_verdict.detail, obs["feedback"][-800:])
        _, reward, info = play(env, task_id, env.null_actions())
        assert info["outcome"] == "failed" and reward == 0.0, task_id


def test_the_other_file_fails_and_an_unknown_one_is_refused(env):
    task = next(t for t in env.task_set.tasks if len(t.visible.files or []) == 2)
    front, back = (f.name for f in task.visible.files)
    env.reset(options={"task_id": task.id})
    if task.visible.start_path == "/admin":
        sku = task.id.rsplit("image-", 1)[1]
        env.step(f'goto("/admin/products/{sku}")')
    obs, *_ = env.step(f'upload_file("{IMAGE_INPUT}", "../../../etc/passwd")')
    assert "no file '../../../etc/passwd' in this episode" in obs["feedback"]
    env.step(f'upload_file("{IMAGE_INPUT}", "{back}")')
    obs, *_ = env.step('click("button:Upload image")')
    assert "Image uploaded." in obs["feedback"] and f"Current image: {back}" in obs["feedback"]
    _, reward, _, _, info = env.step("done()")
    assert info["outcome"] == "failed" and reward == 0.0
    assert [name for _, name in images(env)] == [back]
    # The next episode of the same task starts without the image.
    env.reset(options={"task_id": task.id})
    assert images(env) == []
    assert front  # the right one was there to choose
