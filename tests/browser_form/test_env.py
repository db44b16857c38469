"""sandgym/BrowserForm-v0 with the real Chromium in a real bubblewrap sandbox.

One env (one browser) is shared by the module; tests that break or close
their browser make their own.
"""

from __future__ import annotations

import http.server
import json
import os
import threading

import gymnasium as gym
import pytest

import sandgym  # noqa: F401  (registers the envs)
from sandgym.envs.browser_form.env import BrowserFormEnv
from sandgym.outcomes import Outcome
from sandgym.runtimes.browser import BrowserSandbox
from tests.helpers import unwrapped

pytestmark = pytest.mark.chromium

# One task per workflow; the whole set runs with SANDGYM_SLOW=1.
SAMPLE = ["forms/login-alice", "forms/checkout-mug", "forms/booking-garden", "forms/message-bob"]


@pytest.fixture(scope="module")
def env():
    e = BrowserFormEnv()
    yield e
    e.close()


def sandbox_of(env: BrowserFormEnv) -> BrowserSandbox:
    """The env's browser sandbox, which its first reset started."""
    sandbox = env.session.sandbox
    assert sandbox is not None, "no browser yet: reset the env first"
    return sandbox


def run(env, task_id, actions):
    obs, info = env.reset(options={"task_id": task_id})
    for a in actions:
        obs, reward, terminated, truncated, info = env.step(a)
        if terminated or truncated:
            return obs, reward, info
    raise AssertionError(f"{task_id}: the actions did not end the episode")


@pytest.mark.parametrize("task_id", SAMPLE)
def test_oracle_passes_and_null_fails(env, task_id):
    env.reset(options={"task_id": task_id})
    _, reward, info = run(env, task_id, env.oracle_actions())
    assert info["outcome"] == "passed" and reward == 1.0, env.last_verdict.detail
    assert json.loads(env.artifact)["users"]
    assert set(env.timings) >= {"create_s", "exec_s", "verify_s"}
    _, reward, info = run(env, task_id, env.null_actions())
    assert info["outcome"] == "failed" and reward == 0.0 and info["reward_valid"]


@pytest.mark.slow
def test_oracle_passes_and_null_fails_on_every_task(env):
    for task in env.task_set.tasks:
        env.reset(options={"task_id": task.id})
        assert run(env, task.id, env.oracle_actions())[2]["outcome"] == "passed", task.id
        assert run(env, task.id, ["done()"])[2]["outcome"] == "failed", task.id


def test_reset_clears_cookies_storage_and_server_data(env):
    # Episode 1 signs in (a cookie), writes localStorage and sends a message (a server row).
    env.reset(options={"task_id": "forms/message-bob"})
    run_in = env.session.run  # the page's calls run on the Playwright driver's loop
    page = env.session.page
    run_in(page.evaluate("localStorage.setItem('left', 'behind'); sessionStorage.setItem('s', '1')"))
    old_context = env.session.context
    for a in env.oracle_actions()[:-1]:
        env.step(a)
    assert run_in(old_context.cookies())
    # Episode 2 of another task (its context made ahead, while episode 1 ran): nothing of episode 1 is there.
    obs, _ = env.reset(options={"task_id": "forms/login-alice"})
    assert env.session.context is not old_context
    assert run_in(env.session.context.cookies()) == []
    assert run_in(env.session.page.evaluate("localStorage.getItem('left') === null && sessionStorage.length === 0"))
    assert old_context not in env.session.sandbox.browser.contexts  # closed before the database swap
    assert "Signed in as" not in obs["feedback"]
    env.step("done()")
    assert json.loads(env.artifact)["outbox"] == []
    assert json.loads(env.artifact)["sessions"] == []


def test_the_next_context_is_made_ahead_and_no_page_used_it_before(env):
    run_in = env.session.run
    env.reset(options={"task_id": "forms/message-bob"})  # starts signed in: a cookie
    first = env.session.context
    spare_context, spare_page = env.session._spare.result(timeout=60)  # made while the agent acts
    assert spare_context is not first and spare_page.url == "about:blank"
    assert run_in(spare_context.cookies()) == [] and spare_context.pages == [spare_page]
    run_in(env.session.page.evaluate("localStorage.setItem('left', 'behind')"))
    env.reset(options={"task_id": "forms/login-alice"})
    assert env.session.context is spare_context and env.session.page is spare_page
    assert first not in env.session.sandbox.browser.contexts  # closed before the database swap
    assert run_in(spare_page.evaluate("history.length")) == 2  # the blank page it opened on, then the start page
    assert run_in(spare_context.cookies()) == []
    assert run_in(spare_page.evaluate("localStorage.length")) == 0


def test_the_first_snapshot_is_of_the_start_page_served_after_the_swap(env):
    # The reset loads the start page and snapshots it in one call on the driver's loop: the
    # observation must still be that page, served from this episode's database (the session
    # its cookie names exists only in the swapped-in copy), in a context no earlier page used.
    env.reset(options={"task_id": "forms/login-alice"})  # signed out: no session, no cookie
    old_context = env.session.context
    obs, _ = env.reset(options={"task_id": "forms/message-bob"})  # starts signed in as alice
    assert env.session.context is not old_context
    assert old_context not in env.session.sandbox.browser.contexts
    assert "URL: /\n" in obs["feedback"] and "Signed in as alice" in obs["feedback"]
    assert env.session.snapshot() in obs["feedback"]  # the page as it is now, nothing loaded since
    assert env.session.run(env.session.page.evaluate("history.length")) == 2  # its blank page, the start page
    [cookie] = env.session.run(env.session.context.cookies())
    assert cookie["name"] == "sid" and cookie["httpOnly"]
    env.step("done()")
    assert [s["token"] for s in json.loads(env.artifact)["sessions"]] == [cookie["value"]]


def test_actions_are_set_up_while_the_agent_reads_and_change_nothing(env):
    obs, _ = env.reset(options={"task_id": "forms/login-alice"})
    env.session._warming.result(timeout=60)  # started by the observation, read-only
    assert env.session.snapshot() in obs["feedback"]  # the page is as observed
    assert env.session.run(env.session.page.evaluate("document.activeElement === document.body"))
    obs, _, _, _, info = env.step('fill("textbox:Username", "alice")')
    assert info["error"] is None and 'textbox "Username"' in obs["feedback"]


def test_reset_is_deterministic_for_a_seed(env):
    a, info_a = env.reset(seed=11)
    b, info_b = env.reset(seed=11)
    assert a == b and info_a["task_id"] == info_b["task_id"]


def test_bad_actions_give_observations_not_crashes(env):
    env.reset(options={"task_id": "forms/login-alice"})
    obs, reward, term, _, info = env.step("please sign me in")
    assert not term and info["tool"] == "invalid" and "click(ref)" in obs["feedback"] and "done()" in obs["feedback"]
    obs, _, term, _, info = env.step("click(e9999)")
    assert not term and "no element e9999" in info["error"] and "e9999" in obs["feedback"]
    obs, _, _, _, info = env.step('click("button:No such button")')
    assert "no element" in info["error"]
    obs, _, _, _, info = env.step('click("link:Home")')
    assert info["error"] is None and "URL: /" in obs["feedback"]


@pytest.mark.parametrize(
    "target,violation",
    [
        ("https://example.com/", False),
        ("http://127.0.0.1:9/", False),
        ("//example.com/x", False),
        ("file:///state/app.sqlite", True),
        ("javascript:alert(1)", True),
        ("data:text/html,<h1>hi</h1>", True),
        ("chrome://version", True),
        ("profile", False),
    ],
)
def test_goto_outside_the_app_is_refused(env, target, violation):
    env.reset(options={"task_id": "forms/login-alice"})
    obs, _, term, _, info = env.step(f"goto({json.dumps(target)})")
    assert not term and info["tool"] == "refused" and "refused" in info["error"]
    assert env.session.page.url.startswith(env.session.origin)
    info = env.step("done()")[4]
    assert (info["outcome"] == Outcome.VIOLATION.value) is violation


def test_page_reaches_only_the_app_not_the_host_loopback(env):
    """A server on the host's loopback is out of the page's network namespace."""
    hits = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            hits.append(self.path)
            self.send_response(200)
            self.send_header("Access-Control-Allow-Origin", "*")
            self.end_headers()
            self.wfile.write(b"host secret")

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        env.reset(options={"task_id": "forms/login-alice"})
        # As if the page itself were hostile: script in the page tries the host.
        result = env.session.evaluate(
            """async (port) => { try { const r = await fetch(`http://127.0.0.1:${port}/`);
                 return 'reached: ' + await r.text(); } catch (e) { return 'blocked: ' + e; } }""",
            port,
        )
        assert result.startswith("blocked"), result
        same_app = env.session.evaluate("async () => (await fetch('/login')).status")
        assert same_app == 200
        obs, _, _, _, info = env.step(f'goto("http://127.0.0.1:{port}/")')
        assert info["tool"] == "refused"
        assert hits == []
    finally:
        server.shutdown()
        server.server_close()


def test_the_state_channel_is_out_of_the_agents_reach(env):
    env.reset(options={"task_id": "forms/login-alice"})
    assert (env.session.state_dir / "app.sqlite").is_file()  # the host side reads it
    obs, _, _, _, info = env.step('goto("/app.sqlite")')
    assert "Not found" in obs["feedback"]
    obs, _, _, _, info = env.step('goto("/state/app.sqlite")')
    assert "Not found" in obs["feedback"]
    # Even the browser itself (driven directly, not through the grammar) sees an empty folder there.
    page = env.session.page
    env.session.run(page.goto("file:///state/"))
    assert "app.sqlite" not in env.session.run(page.content())
    from playwright.async_api import Error as PlaywrightError

    with pytest.raises(PlaywrightError):
        env.session.run(page.goto("file:///state/app.sqlite"))


def test_forged_client_side_success_does_not_pass(env):
    env.reset(options={"task_id": "forms/message-bob"})
    env.session.evaluate("""() => { localStorage.setItem('outbox', JSON.stringify([{to: 'bob@example.test'}]));
        document.cookie = 'sent=1';
        document.body.innerHTML = '<main><h1>Messages</h1><p role=status>Message sent.</p>'
          + '<ul><li>To bob@example.test: Lunch</li></ul></main>'; }""")
    obs, reward, term, _, info = env.step("done()")
    assert "Message sent." in obs["feedback"]  # the page says so ...
    assert info["outcome"] == "failed" and reward == 0.0  # ... the server does not


def test_an_effect_twice_is_not_exactly_once(env):
    env.reset(options={"task_id": "forms/message-bob"})
    oracle = env.oracle_actions()[:-1]
    for a in oracle + oracle[1:]:
        env.step(a)
    _, reward, _, _, info = env.step("done()")
    assert info["outcome"] == "failed" and "found 2" in env.last_verdict.detail


def test_step_limit_ends_and_verifies(env):
    env.max_steps = 3
    try:
        env.reset(options={"task_id": "forms/login-alice"})
    finally:
        env.max_steps = 30
    for _ in range(3):
        obs, reward, term, trunc, info = env.step('click("link:Home")')
    assert "step limit (3)" in obs["feedback"]
    assert trunc and not term and info["outcome"] == "failed" and env.last_verdict is not None


def test_check_env_and_make(env):
    from gymnasium.utils.env_checker import check_env

    check_env(env, skip_render_check=True)
    made = gym.make("sandgym/BrowserForm-v0", max_steps=7)
    try:
        assert unwrapped(made).config == {
            "max_steps": 7,
            "verifier_retries": 2,
            "screenshot": False,
            "max_action_chars": 1 << 20,
            "observation": "text",
        }
        assert unwrapped(made).reward_scheme == "binary"
        with pytest.raises(ValueError, match="task_id"):
            made.reset(options={"task": "x"})
    finally:
        made.close()  # never started a browser


def test_unsupported_runtime_is_a_clear_error():
    with pytest.raises(ValueError, match="supported: local, docker, docker:runsc, k8s, k8s:gvisor"):
        BrowserFormEnv(runtime="k8s:kata")


def test_screenshot_on_request(env):
    env.reset(options={"task_id": "forms/login-alice"})
    assert env.screenshot().startswith(b"\x89PNG")


def test_browser_crash_is_env_error_then_relaunch():
    e = BrowserFormEnv()
    try:
        e.reset(options={"task_id": "forms/login-alice"})
        pids = sandbox_of(e).process_ids()
        for pid in pids:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        obs, reward, term, _, info = e.step('fill("textbox:Username", "alice")')
        assert term and info["outcome"] == "env_error" and not info["reward_valid"]
        assert e.last_verdict is not None and e.last_verdict.reward() is None
        obs, info = e.reset(options={"task_id": "forms/login-alice"})  # a new browser
        assert "Sign in" in obs["feedback"]
        assert run(e, "forms/login-alice", e.oracle_actions())[2]["outcome"] == "passed"
    finally:
        e.close()


def test_close_leaves_no_process():
    e = BrowserFormEnv()
    try:
        e.reset(options={"task_id": "forms/login-alice"})
        sandbox = sandbox_of(e)
        pids = sandbox.process_ids()
        names = {open(f"/proc/{p}/comm").read().strip() for p in pids}
        assert {"chromium", "python3", "bwrap"} <= names  # the browser, the app, the sandbox
        assert e.session._spare is not None  # being made: close() ends it too
    finally:
        e.close()
    assert [p for p in pids if os.path.exists(f"/proc/{p}")] == []
    assert sandbox.process_ids() == []
    assert not sandbox.state_dir.exists()
    assert e.session._spare is None and sandbox.browser is None
