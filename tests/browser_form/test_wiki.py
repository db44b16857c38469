"""The wiki (wiki-v1) in the real Chromium in a real bubblewrap sandbox.

As test_tracker.py: one env shared by the module, a second for the isolation
test; a sample (one task per level and kind) by default, every template's
and the whole set's oracle and null with the `slow` marker.
"""

from __future__ import annotations

import re

import pytest

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

TASKS = "wiki-v1"


@pytest.fixture(scope="module")
def env():
    e = BrowserFormEnv(tasks=TASKS)
    yield e
    e.close()


@pytest.fixture(scope="module")
def bg_env():
    """A second env, with BrowserGym's observation: the BrowserGym test's and the concurrency test's other rollout."""
    e = BrowserFormEnv(tasks=TASKS, observation="browsergym")
    yield e
    e.close()


def ids_like(env, prefix: str) -> list[str]:
    return [t for t in env.task_set.ids if t.startswith(f"wiki/{prefix}")]


def kind(task_id: str) -> str:
    """The template of a task: its id without the page, space or person it is about."""
    return re.sub(r"-([0-9]+|[A-Z]{3}(-[0-9]+)?|[a-z]{3}[0-9])$", "", task_id.split("/", 1)[1])


def test_oracle_passes_and_null_fails_on_a_sample(env):
    chosen = level_sample(env, shortest=True)
    assert len(chosen) == 6, chosen  # 3 levels x 2 kinds
    for task_id in chosen:
        check_oracle_and_null(env, task_id)


@pytest.mark.slow
def test_oracle_passes_and_null_fails_on_one_task_of_each_template(env):
    kinds: dict[str, str] = {}
    for tid in env.task_set.ids:
        kinds.setdefault(kind(tid), tid)
    assert len(kinds) == 24, sorted(kinds)
    for task_id in sorted(kinds.values()):
        check_oracle_and_null(env, task_id)


@pytest.mark.slow
def test_oracle_passes_and_null_fails_on_every_task(env):
    for task_id in env.task_set.ids:
        check_oracle_and_null(env, task_id)


def test_concurrent_rollouts_writing_the_same_page_are_isolated(env, bg_env):
    """Two envs (two sandboxes) comment on the same page at once, with different texts;
    each database and verdict sees its own write only, and a reset brings the template back."""
    task_id = ids_like(env, "comment-")[0]
    page_id = int(task_id.rsplit("-", 1)[1])
    sql = "SELECT body FROM comments WHERE page_id = ? ORDER BY id"
    envs = {"Written by the first rollout.": env, "Written by the second rollout.": bg_env}
    for e in envs.values():
        e.reset(options={"task_id": task_id})
    original = db_state(env, sql, page_id)
    step_at_once(envs, lambda text: f'fill("textbox:Comment", "{text}")', ['click("button:Add comment")', "done()"])
    for text, e in envs.items():
        assert db_state(e, sql, page_id) == [*original, (text,)]
    for e in envs.values():  # the next episode starts from the template again
        e.reset(options={"task_id": task_id})
        assert db_state(e, sql, page_id) == original


def test_a_browsergym_agent_deletes_a_page_through_the_dialog(bg_env):
    """BrowserGym's observation (axtree with bids) and actions on the wiki: search the page,
    open it, open the modal dialog, give the reason in it, confirm."""
    e = bg_env
    task_id = ids_like(e, "delete-")[0]
    pair = BrowserTaskPair.of(e.task_set.get(task_id))
    found = re.search(r'the page "([^"]+)" in the (\w+) space', pair.visible.goal)
    assert found, pair.visible.goal
    title, space = found.groups()
    reason = pair.hidden.checks[0].expect["delete_reason"]
    obs, _ = e.reset(options={"task_id": task_id})
    plan = [
        ("link", "Search", "click('{}')"),
        ("searchbox", "Search pages", "fill('{}', " + repr(title) + ")"),
        ("combobox", "Space", "select_option('{}', " + repr(space) + ")"),
        ("button", "Apply filters", "click('{}')"),
        ("link", title, "click('{}')"),
        ("button", "Delete page", "click('{}')"),
        ("textbox", "Reason for deletion", "fill('{}', " + repr(reason) + ")"),
        ("button", "Confirm delete", "click('{}')"),
    ]
    for role, name, template in plan:
        action = template.format(bid_of(obs["axtree_txt"], role, name))
        obs, _, terminated, _, info = e.step(action)
        assert not terminated and obs["last_action_error"] == "", (action, obs["last_action_error"])
    assert "to the trash" in obs["axtree_txt"]
    _, reward, terminated, _, info = e.step("send_msg_to_user('Deleted.')")
    assert terminated and info["outcome"] == "passed" and reward == 1.0, getattr(e.last_verdict, "detail", "")


# -- attacks from the page, rerun on the wiki --------------------------------------------------------


def test_a_readers_page_cannot_use_editor_or_admin_routes(env):
    """Signed in as a reader, the page posts what only editors and admins may: every request
    is refused and no row changes; signed out (no cookie sent), it is sent to sign in."""
    task_id = ids_like(env, "comment-")[0]  # rae, a reader in every space
    env.reset(options={"task_id": task_id})
    digest = template_digest(env, "wiki")
    target = env.task.visible.start_path
    key = target.split("/")[2]
    tables = ("pages", "revisions", "page_tags", "members", "drafts")
    before = [db_state(env, f"SELECT * FROM {t} ORDER BY rowid") for t in tables]
    result = env.session.evaluate(
        """async ([path, key]) => {
            const post = (url, data, credentials) => fetch(url, {method: 'POST', credentials,
                body: new URLSearchParams(data)}).then(r => [url, r.status, new URL(r.url).pathname]);
            return Promise.all([
                post(path, {action: 'delete', delete_reason: 'vandal'}),
                post(path, {action: 'protect', protect_reason: 'vandal'}),
                post(path, {action: 'add_tag', tag: '1'}),
                post(path + '/edit', {title: 'Defaced', category: '1', body: 'x', summary: 'x'}),
                post(path + '/history', {revision: '1'}),
                post('/spaces/' + key + '/new', {title: 'Planted page', category: '1', body: 'x'}),
                post('/spaces/' + key + '/members', {person: '3', role: 'admin'}),
                post('/spaces/' + key + '/trash', {page: '1'}),
                post(path, {action: 'delete', delete_reason: 'vandal'}, 'omit'),
                post('/spaces/' + key + '/members', {person: '3', role: 'admin'}, 'omit'),
            ]); }""",
        [target, key],
    )
    assert [r[1] for r in result[:8]] == [403] * 8, result
    assert all(r[1] == 200 and r[2] == "/login" for r in result[8:]), result
    assert [db_state(env, f"SELECT * FROM {t} ORDER BY rowid") for t in tables] == before
    assert template_digest(env, "wiki") == digest  # the template outside the sandbox is untouched


def test_the_database_is_out_of_the_pages_reach(env):
    check_database_out_of_reach(env, ids_like(env, "category-")[0])


@pytest.mark.parametrize(
    "prefix", ["undelete-", pytest.param("latest-tag-", marks=pytest.mark.slow)], ids=["state", "answer"]
)
def test_the_family_red_team_gets_nothing_through_on_the_wiki(env, prefix):
    """The browser family's attack catalogue (forged message, forged page, file:// reads,
    state carried over from a solved episode) on a state task; on an answer task when slow."""
    check_red_team(TASKS, "wiki", ids_like(env, prefix)[0])


@pytest.mark.docker
def test_a_sample_passes_on_docker():
    """The wiki in a Docker (runc) browser sandbox; one task of each level and kind."""
    e = BrowserFormEnv(tasks=TASKS, runtime="docker")
    try:
        for task_id in level_sample(e, shortest=True):
            check_oracle_and_null(e, task_id)
    finally:
        e.close()


@pytest.mark.slow
@pytest.mark.docker
def test_oracle_passes_and_null_fails_on_every_task_on_docker():
    e = BrowserFormEnv(tasks=TASKS, runtime="docker")
    try:
        for task_id in e.task_set.ids:
            check_oracle_and_null(e, task_id)
    finally:
        e.close()
