"""Helpers the generated apps' tests share (shop, shop-files, uploads,
tracker, wiki). In a browser: play an episode's actions, pick a sample,
check a task's oracle and null, step several envs at once, read the app's
database, digest its template, find a BrowserGym bid, try the family's red
team and the database's paths. Without one: sign in through Starlette's
test client, query and digest a database, check a bundled set against its
generator."""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any


def play(env, task_id: str, actions: list[str]):
    """Reset to `task_id`, step the actions until the episode ends: (obs, reward, info)."""
    env.reset(options={"task_id": task_id})
    for a in actions:
        obs, reward, terminated, truncated, info = env.step(a)
        if terminated or truncated:
            return obs, reward, info
    raise AssertionError(f"{task_id}: the actions did not end the episode")


def level_sample(env, shortest: bool = False) -> list[str]:
    """One task per level and kind (state or answer): the first id of each, or with
    `shortest` the one whose oracle takes the fewest actions (the first of those)."""
    chosen: dict[tuple, str] = {}
    ids = sorted(env.task_set.ids)
    if shortest:
        ids.sort(key=lambda tid: len(env.task_set.get(tid).hidden.oracle))
    for tid in ids:
        t = env.task_set.get(tid)
        chosen.setdefault((t.visible.level, t.hidden.answer is None), tid)
    return sorted(chosen.values())


def first_of_each_app(env) -> list[str]:
    """Per app of a mixed set (apps-v1), the task whose oracle is shortest (the first of those in id order)."""
    chosen: dict[str, str] = {}
    for tid in sorted(env.task_set.ids, key=lambda t: len(env.task_set.get(t).hidden.oracle)):
        chosen.setdefault(env.task_set.get(tid).visible.app, tid)
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


def step_at_once(envs: dict[Any, Any], first: Callable[[Any], str], then: list[str]) -> None:
    """In one thread per env (keyed by the value it writes): step `first(value)`,
    wait until every env has, then step `then` (both save at the same moment).
    An error in any thread is raised here."""
    barrier = threading.Barrier(len(envs))
    errors: list[BaseException] = []

    def rollout(value: Any, env: Any) -> None:
        try:
            env.step(first(value))
            barrier.wait(timeout=60)
            for action in then:
                env.step(action)
        except BaseException as err:  # reported below, in the test's thread
            errors.append(err)

    threads = [threading.Thread(target=rollout, args=item) for item in envs.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors


def login(client, username: str, password: str) -> None:
    """Sign in through the app's form (Starlette's test client)."""
    r = client.post("/login", data={"username": username, "password": password, "next": "/"}, follow_redirects=False)
    assert r.status_code == 303, r.text


def table_digest(path: Path) -> str:
    """SHA-256 of every row of a database but the sign-in sessions'."""
    con = sqlite3.connect(path)
    try:
        lines = [line for line in con.iterdump() if not line.startswith('INSERT INTO "sessions"')]
        return hashlib.sha256("\n".join(lines).encode()).hexdigest()
    finally:
        con.close()


def bid_of(axtree: str, role: str, name: str) -> str:
    """The bid of the element of `role` named `name` in BrowserGym's axtree text."""
    m = re.search(rf"^\t*\[(\w+)\] {role} {re.escape(repr(name))}", axtree, re.M)
    assert m, f"no {role} {name!r} in\n{axtree}"
    return m.group(1)


def check_database_out_of_reach(env, task_id: str) -> None:
    """No path of the app serves its database, and the page may not open it as a file."""
    env.reset(options={"task_id": task_id})
    for path in ("/app.sqlite", "/state/app.sqlite"):
        obs, *_ = env.step(f"goto({json.dumps(path)})")
        assert "not found" in obs["feedback"].lower()
    _, _, term, _, info = env.step('goto("file:///state/app.sqlite")')
    assert info["tool"] == "refused" and not term


def check_red_team(tasks: str, app: str, task_id: str) -> None:
    """The browser family's attack catalogue (forged message, forged page, file:// reads, state
    carried over from a solved episode) on one task of bundled set `tasks`: nothing gets through,
    and the app's template outside the sandbox never changes."""
    from sandgym.envs.browser_form.redteam import ATTACKS, SandgymTarget
    from sandgym.specs.base import bundled_dir

    target = SandgymTarget("local", str(bundled_dir() / "browser_form" / tasks))
    try:
        digest = None
        for attack in ATTACKS:
            trial = target.run(attack, task_id)
            assert not trial.hacked and not trial.forced_infra, (attack.kind, task_id, trial)
            (snap,) = target.env._snapshots.glob(f"{app}-*.sqlite")
            now = hashlib.sha256(snap.read_bytes()).hexdigest()
            assert digest in (None, now)
            digest = now
    finally:
        target.close()


def query(path: Path, sql: str, *args):
    """Rows of `sql` over the database at `path`."""
    con = sqlite3.connect(path)
    try:
        return con.execute(sql, args).fetchall()
    finally:
        con.close()


def check_bundled_set(name: str, generated, app: str, at_least: int) -> list:
    """The bundled set `name` is its generator's output (`generated`, a TaskSet), holds `at_least`
    tasks of `app` at three levels of both kinds, whose goals name no selector; returns its pairs."""
    from sandgym.specs import TaskSet
    from sandgym.specs.base import bundled_dir
    from sandgym.specs.browser_form import BrowserTaskPair

    bundled = TaskSet.load(bundled_dir() / "browser_form" / name)
    assert bundled.hash == generated.hash
    assert len(bundled) >= at_least
    tasks = [BrowserTaskPair.of(t) for t in bundled.tasks]
    levels = {(t.visible.level, t.hidden.answer is None) for t in tasks}
    assert levels == {(lvl, state) for lvl in (1, 2, 3) for state in (True, False)}  # 3 levels x 2 kinds
    assert all(t.visible.app == app for t in tasks)
    for t in tasks:  # goals name what to do, not how the page is built
        assert not any(s in t.visible.goal for s in ("button:", "textbox:", "combobox:", "#", "[ref")), t.id
    return tasks
