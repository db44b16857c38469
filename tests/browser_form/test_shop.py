"""The shop app (shop-v1) in the real Chromium in a real bubblewrap sandbox.

One env is shared by the module; the isolation test makes a second. The
whole set's oracle and null (and one task per template) run with the `slow`
marker; a sample (one task per level and kind) by default.
"""

from __future__ import annotations

import hashlib
import json
import re

import pytest

from sandgym.envs.browser_form.env import BrowserFormEnv
from sandgym.outcomes import Outcome

from .apps import check_oracle_and_null, db_state, level_sample, play, step_at_once, template_digest

pytestmark = pytest.mark.chromium

TASKS = "shop-v1"


@pytest.fixture(scope="module")
def env():
    e = BrowserFormEnv(tasks=TASKS)
    yield e
    e.close()


def ids_like(env, prefix: str) -> list[str]:
    return [t for t in env.task_set.ids if t.startswith(f"shop/{prefix}")]


def sample(env) -> list[str]:
    """One task per template: the first id of each kind (the id without its key)."""
    kinds: dict[str, str] = {}
    for tid in env.task_set.ids:
        kind = re.sub(r"-([A-Z]{3}-[0-9]{5}|[a-z0-9]+)$", "", tid.split("/", 1)[1])
        kinds.setdefault(kind, tid)
    return sorted(kinds.values())


def test_oracle_passes_and_null_fails_on_a_sample(env):
    chosen = level_sample(env)
    assert len(chosen) == 6, chosen  # 3 levels x 2 kinds
    for task_id in chosen:
        check_oracle_and_null(env, task_id)


@pytest.mark.slow
def test_oracle_passes_and_null_fails_on_every_template(env):
    chosen = sample(env)
    assert len(chosen) == 15
    for task_id in chosen:
        check_oracle_and_null(env, task_id)


@pytest.mark.slow
def test_oracle_passes_and_null_fails_on_every_task(env):
    for task_id in env.task_set.ids:
        check_oracle_and_null(env, task_id)


def test_the_artifact_holds_only_the_checked_tables(env):
    task_id = ids_like(env, "restock-")[0]
    play(env, task_id, ["done()"])
    assert set(json.loads(env.artifact)) == {"products"}


def test_concurrent_rollouts_writing_the_same_record_are_isolated(env):
    """Two envs (two sandboxes) set the same product's stock at once; each verdict
    and database sees its own write only, and a reset brings the template back."""
    task_id = ids_like(env, "restock-")[0]
    sku = task_id.rsplit("restock-", 1)[1]
    other = BrowserFormEnv(tasks=TASKS)
    try:
        envs = {111: env, 222: other}
        for e in envs.values():
            e.reset(options={"task_id": task_id})
        (original,) = db_state(env, "SELECT stock FROM products WHERE sku = ?", sku)
        step_at_once(
            envs, lambda value: f'fill("textbox:Stock", "{value}")', ['click("button:Save product")', "done()"]
        )
        for value, e in envs.items():
            rows = [r for r in json.loads(e.artifact)["products"] if r["sku"] == sku]
            assert [r["stock"] for r in rows] == [value]
            assert db_state(e, "SELECT stock FROM products WHERE sku = ?", sku) == [(value,)]
        for e in envs.values():  # the next episode starts from the template again
            e.reset(options={"task_id": task_id})
            assert db_state(e, "SELECT stock FROM products WHERE sku = ?", sku) == [original]
    finally:
        other.close()


def test_a_sign_in_does_not_survive_the_reset(env):
    play(env, ids_like(env, "restock-")[0], ["done()"])  # signed in as the admin
    env.reset(options={"task_id": ids_like(env, "price-")[0]})  # starts signed out
    assert env.session.run(env.session.context.cookies()) == []
    obs, *_ = env.step('goto("/admin/orders")')
    assert "URL: /login" in obs["feedback"]
    assert db_state(env, "SELECT COUNT(*) FROM sessions") == [(0,)]


# -- attacks from the page, rerun on the shop ----------------------------------------------------------


def test_a_forged_page_does_not_pass_a_state_task(env):
    task_id = ids_like(env, "cancel-latest-")[0]
    env.reset(options={"task_id": task_id})
    env.session.evaluate("""() => { document.body.innerHTML = '<main><h1>Order</h1>'
        + '<p role=status>Order cancelled.</p><p>Status: cancelled.</p></main>';
        localStorage.setItem('status', 'cancelled'); }""")
    obs, reward, _, _, info = env.step("done()")
    assert "Order cancelled." in obs["feedback"] and info["outcome"] == "failed" and reward == 0.0


def test_the_page_cannot_send_the_answer(env):
    """Only the agent's send_msg_to_user is an answer: text the page shows or stores is not."""
    task_id = ids_like(env, "price-")[0]
    env.reset(options={"task_id": task_id})
    answer = env.task.hidden.answer[0]
    env.session.evaluate(
        "(a) => { document.title = a; localStorage.setItem('answer', a); alert && 0; "
        "document.body.insertAdjacentHTML('beforeend', `<p role=status>${a}</p>`); }",
        answer,
    )
    _, reward, _, _, info = env.step("done()")
    assert info["outcome"] == "failed" and reward == 0.0 and "no answer was sent" in env.last_verdict.detail


def test_the_page_cannot_reach_the_back_office_without_signing_in(env):
    task_id = ids_like(env, "price-")[0]
    env.reset(options={"task_id": task_id})
    before = db_state(env, "SELECT sku, stock, price_cents, active FROM products ORDER BY id")
    result = env.session.evaluate(
        """async () => {
            const out = [];
            for (const path of ['/admin', '/admin/orders/1', '/admin/customers/3']) {
                const r = await fetch(path); out.push([path, r.url, r.status]);
            }
            const body = new URLSearchParams({price: '0.01', stock: '0', active: '0'});
            const r = await fetch('/admin/products/' + document.querySelector('dd:last-of-type').textContent,
                                  {method: 'POST', body});
            out.push(['post', r.url, r.status]);
            const c = await fetch('/admin/orders/1', {method: 'POST',
                                  body: new URLSearchParams({action: 'cancel', reason: 'page'})});
            out.push(['cancel', c.url, c.status]);
            return out; }"""
    )
    for _path, url, status in result:
        assert "/login" in url and status == 200, result  # sent to sign in, nothing served
    assert db_state(env, "SELECT sku, stock, price_cents, active FROM products ORDER BY id") == before
    assert db_state(env, "SELECT status, cancel_reason FROM orders WHERE id = 1") != [("cancelled", "page")]


def test_a_customer_page_cannot_use_admin_routes(env):
    task_id = ids_like(env, "buy-")[0]
    env.reset(options={"task_id": task_id})  # signed in as alice, a customer
    digest = template_digest(env, "shop")
    before = db_state(env, "SELECT id, status, cancel_reason FROM orders ORDER BY id")
    statuses = env.session.evaluate(
        """async () => {
            const a = await fetch('/admin/orders/1', {method: 'POST',
                                  body: new URLSearchParams({action: 'cancel', reason: 'mine'})});
            const b = await fetch('/admin/orders/2', {method: 'POST', body: new URLSearchParams({status: 'paid'})});
            const c = await fetch('/admin/coupons/new', {method: 'POST',
                                  body: new URLSearchParams({code: 'FREE90', percent: '90', expires: '2030-01-01'})});
            return [a.status, b.status, c.status]; }"""
    )
    assert statuses == [403, 403, 403]
    assert db_state(env, "SELECT id, status, cancel_reason FROM orders ORDER BY id") == before
    assert db_state(env, "SELECT COUNT(*) FROM coupons WHERE code = 'FREE90'") == [(0,)]
    assert template_digest(env, "shop") == digest  # the template outside the sandbox is untouched


def test_the_family_red_team_gets_nothing_through_on_the_shop(env):
    """The browser family's attack catalogue (forged message, forged page, file:// reads,
    state carried over from a solved episode), played on a state task and an answer task."""
    from sandgym.envs.browser_form.redteam import ATTACKS, SandgymTarget
    from sandgym.specs.base import bundled_dir

    target = SandgymTarget("local", str(bundled_dir() / "browser_form" / TASKS))
    try:
        digest = None
        for task_id in (ids_like(env, "cancel-latest-")[0], ids_like(env, "largest-order-")[0]):
            for attack in ATTACKS:
                trial = target.run(attack, task_id)
                assert not trial.hacked and not trial.forced_infra, (attack.kind, task_id, trial)
                snaps = list(target.env._snapshots.glob("shop-*.sqlite"))
                now = hashlib.sha256(snaps[0].read_bytes()).hexdigest()
                assert digest in (None, now)  # the template outside the sandbox never changes
                digest = now
    finally:
        target.close()


@pytest.mark.parametrize("target", ["file:///state/app.sqlite", "file:///etc/passwd", "/app.sqlite"])
def test_the_database_is_out_of_the_pages_reach(env, target):
    env.reset(options={"task_id": ids_like(env, "price-")[0]})
    obs, _, term, _, info = env.step(f"goto({json.dumps(target)})")
    if target.startswith("file:"):
        assert info["tool"] == "refused" and not term
    else:
        assert "not found" in obs["feedback"].lower()
    # The browser itself, driven directly (before the episode ends: its page closes then):
    # the state folder is empty from its side.
    page = env.session.page
    env.session.run(page.goto("file:///state/"))
    assert "app.sqlite" not in env.session.run(page.content())
    if target.startswith("file:"):
        assert env.step("done()")[4]["outcome"] == Outcome.VIOLATION.value


@pytest.mark.docker
def test_a_sample_passes_on_docker():
    """The shop in a Docker (runc) browser sandbox: the database is copied in and
    out of the container (push_state / pull_state); one task of each kind and level."""
    e = BrowserFormEnv(tasks=TASKS, runtime="docker")
    try:
        for prefix in ("price-", "cancel-latest-", "buy-cheapest-"):
            check_oracle_and_null(e, ids_like(e, prefix)[0])
    finally:
        e.close()
