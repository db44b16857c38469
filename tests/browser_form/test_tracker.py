"""The issue tracker (tracker-v1) in the real Chromium in a real bubblewrap sandbox.

As test_shop.py: one env shared by the module, a second for the isolation
test; a sample (one task per level and kind) by default, the whole set's
oracle and null with the `slow` marker.
"""

from __future__ import annotations

import re

import pytest

from sandgym.envs.browser_form.app.trackerapp import RESOLUTIONS
from sandgym.envs.browser_form.env import BrowserFormEnv
from sandgym.specs.browser_form import BrowserTaskPair

from .apps import (
    bid_of,
    check_database_out_of_reach,
    check_oracle_and_null,
    check_red_team,
    db_state,
    level_sample,
    step_at_once,
    template_digest,
)

pytestmark = pytest.mark.chromium

TASKS = "tracker-v1"


@pytest.fixture(scope="module")
def env():
    e = BrowserFormEnv(tasks=TASKS)
    yield e
    e.close()


def ids_like(env, prefix: str) -> list[str]:
    return [t for t in env.task_set.ids if t.startswith(f"tracker/{prefix}")]


def kind(task_id: str) -> str:
    """The template of a task: its id without the issue, project or person it is about."""
    return re.sub(r"-([A-Z]{3}-[0-9]+|[A-Z]{3}(-[0-9]+)?|[a-z]{3}[0-9])$", "", task_id.split("/", 1)[1])


def test_oracle_passes_and_null_fails_on_a_sample(env):
    chosen = level_sample(env)
    assert len(chosen) == 6, chosen  # 3 levels x 2 kinds
    for task_id in chosen:
        check_oracle_and_null(env, task_id)


@pytest.mark.slow
def test_oracle_passes_and_null_fails_on_one_task_of_each_template(env):
    kinds: dict[str, str] = {}
    for tid in env.task_set.ids:
        kinds.setdefault(kind(tid), tid)
    assert len(kinds) == 17, sorted(kinds)
    for task_id in sorted(kinds.values()):
        check_oracle_and_null(env, task_id)


@pytest.mark.slow
def test_oracle_passes_and_null_fails_on_every_task(env):
    for task_id in env.task_set.ids:
        check_oracle_and_null(env, task_id)


def test_concurrent_rollouts_writing_the_same_issue_are_isolated(env):
    """Two envs (two sandboxes) set the same issue's priority at once, to different values;
    each database and verdict sees its own write only, and a reset brings the template back."""
    task_id = ids_like(env, "prioritise-")[0]
    key, number = task_id.rsplit("prioritise-", 1)[1].split("-")
    sql = "SELECT i.priority FROM issues i JOIN projects p ON p.id = i.project_id WHERE p.key = ? AND i.number = ?"
    other = BrowserFormEnv(tasks=TASKS)
    try:
        envs = {"Low": env, "Critical": other}
        for e in envs.values():
            e.reset(options={"task_id": task_id})
        (original,) = db_state(env, sql, key, int(number))
        step_at_once(
            envs, lambda value: f'select("combobox:Priority", "{value}")', ['click("button:Save changes")', "done()"]
        )
        for value, e in envs.items():
            assert db_state(e, sql, key, int(number)) == [(value.lower(),)]
        for e in envs.values():  # the next episode starts from the template again
            e.reset(options={"task_id": task_id})
            assert db_state(e, sql, key, int(number)) == [original]
    finally:
        other.close()


def test_a_browsergym_agent_closes_an_issue_through_the_dialog():
    """BrowserGym's observation (axtree with bids) and actions on the tracker: search, open
    the issue, open the modal dialog, choose the resolution in it, confirm."""
    e = BrowserFormEnv(tasks=TASKS, observation="browsergym")
    try:
        task_id = next(t for t in ids_like(e, "close-") if "resolved" not in t)
        issue = task_id.split("close-", 1)[1]
        resolution = RESOLUTIONS[BrowserTaskPair.of(e.task_set.get(task_id)).hidden.checks[0].expect["resolution"]]
        obs, _ = e.reset(options={"task_id": task_id})
        plan = [
            ("searchbox", "Search issues", "fill('{}', '" + issue + "')"),
            ("button", "Search", "click('{}')"),
            ("link", issue, "click('{}')"),
            ("button", "Close issue", "click('{}')"),
            ("combobox", "Resolution", "select_option('{}', " + repr(resolution) + ")"),
            ("button", "Confirm close", "click('{}')"),
        ]
        for role, name, template in plan:
            action = template.format(bid_of(obs["axtree_txt"], role, name))
            obs, _, terminated, _, info = e.step(action)
            assert not terminated and obs["last_action_error"] == "", (action, obs["last_action_error"])
        assert "StaticText 'Closed'" in obs["axtree_txt"] or "'Closed'" in obs["axtree_txt"]
        _, reward, terminated, _, info = e.step("send_msg_to_user('Closed.')")
        assert terminated and info["outcome"] == "passed" and reward == 1.0, getattr(e.last_verdict, "detail", "")
    finally:
        e.close()


# -- attacks from the page, rerun on the tracker --------------------------------------------------------


def test_a_reporters_page_cannot_use_manager_or_developer_routes(env):
    """Signed in as a reporter, the page posts what only developers and managers may: every
    request is refused and no row changes; signed out (no cookie sent), it is sent to sign in."""
    task_id = ids_like(env, "comment-")[0]  # riley, a reporter in every project
    env.reset(options={"task_id": task_id})
    digest = template_digest(env, "tracker")
    target = env.task.visible.start_path
    before = db_state(env, "SELECT * FROM issues ORDER BY id")
    members = db_state(env, "SELECT * FROM members ORDER BY project_id, user_id")
    result = env.session.evaluate(
        """async (path) => {
            const post = (url, data, credentials) => fetch(url, {method: 'POST', credentials,
                body: new URLSearchParams(data)}).then(r => [url, r.status, new URL(r.url).pathname]);
            return Promise.all([
                post(path, {action: 'close', resolution: 'fixed'}),
                post(path, {action: 'edit', status: 'resolved', priority: 'low', assignee: ''}),
                post(path, {action: 'add_label', label: '1'}),
                post('/projects/WEB/members', {person: '3', role: 'manager'}),
                post(path, {action: 'close', resolution: 'fixed'}, 'omit'),
                post('/projects/WEB/members', {person: '3', role: 'manager'}, 'omit'),
            ]); }""",
        target,
    )
    assert [r[1] for r in result[:4]] == [403, 403, 403, 403], result
    assert all(r[1] == 200 and r[2] == "/login" for r in result[4:]), result
    assert db_state(env, "SELECT * FROM issues ORDER BY id") == before
    assert db_state(env, "SELECT * FROM members ORDER BY project_id, user_id") == members
    assert template_digest(env, "tracker") == digest  # the template outside the sandbox is untouched


def test_the_database_is_out_of_the_pages_reach(env):
    check_database_out_of_reach(env, ids_like(env, "priority-")[0])


@pytest.mark.parametrize(
    "prefix", ["close-resolved-", pytest.param("reporter-oldest-", marks=pytest.mark.slow)], ids=["state", "answer"]
)
def test_the_family_red_team_gets_nothing_through_on_the_tracker(env, prefix):
    """The browser family's attack catalogue (forged message, forged page, file:// reads,
    state carried over from a solved episode) on a state task; on an answer task when slow
    (the answer channel is the app's no more than the shop's, where both run)."""
    check_red_team(TASKS, "tracker", ids_like(env, prefix)[0])


@pytest.mark.docker
def test_a_sample_passes_on_docker():
    """The tracker in a Docker (runc) browser sandbox; one task of each level and kind."""
    e = BrowserFormEnv(tasks=TASKS, runtime="docker")
    try:
        for prefix in ("priority-", "comment-", "count-critical-", "file-", "reporter-oldest-", "take-oldest-"):
            check_oracle_and_null(e, ids_like(e, prefix)[0])
    finally:
        e.close()
