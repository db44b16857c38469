"""Helpers the generated apps' tests share (shop, shop-files, tracker): play
an episode's actions, pick a sample, check a task's oracle and null, read the app's
database, digest its template."""

from __future__ import annotations

import hashlib
import sqlite3


def play(env, task_id: str, actions: list[str]):
    """Reset to `task_id`, step the actions until the episode ends: (obs, reward, info)."""
    env.reset(options={"task_id": task_id})
    for a in actions:
        obs, reward, terminated, truncated, info = env.step(a)
        if terminated or truncated:
            return obs, reward, info
    raise AssertionError(f"{task_id}: the actions did not end the episode")


def level_sample(env) -> list[str]:
    """One task per level and kind (state or answer): the first id of each."""
    chosen: dict[tuple, str] = {}
    for tid in sorted(env.task_set.ids):
        t = env.task_set.get(tid)
        chosen.setdefault((t.visible.level, t.hidden.answer is None), tid)
    return sorted(chosen.values())


def check_oracle_and_null(env, task_id: str) -> None:
    """The task's oracle passes with reward 1; its null actions fail with a valid reward 0."""
    obs, reward, info = play(env, task_id, list(env.task_set.get(task_id).hidden.oracle))
    assert info["outcome"] == "passed" and reward == 1.0, (task_id, env.last_verdict.detail, obs["feedback"][-1500:])
    _, reward, info = play(env, task_id, env.null_actions())
    assert info["outcome"] == "failed" and reward == 0.0 and info["reward_valid"], task_id


def db_state(env, sql: str, *args):
    """Rows of `sql` over the episode's database, opened read-only."""
    con = sqlite3.connect(f"file:{env.session.state_dir / 'app.sqlite'}?mode=ro", uri=True)
    try:
        return con.execute(sql, args).fetchall()
    finally:
        con.close()


def template_digest(env, app: str) -> str:
    """SHA-256 of the env's one database template of `app` (shop, tracker)."""
    snaps = list(env._snapshots.glob(f"{app}-*.sqlite"))
    assert len(snaps) == 1, snaps
    return hashlib.sha256(snaps[0].read_bytes()).hexdigest()
