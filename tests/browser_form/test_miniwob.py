"""sandgym/MiniWoB-<task>-v0: real pages of the miniwob wheel, solved by scripts that read the snapshot."""

from __future__ import annotations

import re

import gymnasium as gym
import pytest

import sandgym  # noqa: F401
from sandgym.envs.browser_form.miniwob import MiniWoBEnv, miniwob_tasks
from tests.helpers import unwrapped


def ref_of(snapshot: str, role: str, name: str | None = None) -> str:
    for line in snapshot.splitlines():
        m = re.search(rf'- {role}(?: "([^"]*)")?.*\[ref=(\w+)\]', line)
        if m and (name is None or m.group(1) == name):
            return m.group(2)
    raise AssertionError(f"no {role} {name!r} in\n{snapshot}")


def found(pattern: str, goal: str) -> str:
    """The first group of `pattern` in the goal."""
    m = re.search(pattern, goal)
    assert m, f"{pattern!r} not in {goal!r}"
    return m.group(1)


def solve(task: str, goal: str, snap: str) -> list[str]:
    if task == "click-button":
        label = found(r'Click on the "(.*)" button', goal)
        return [f"click({ref_of(snap, 'button', label)})"]
    if task == "enter-text":
        word = found(r'Enter "(.*)" into', goal)
        return [f'fill({ref_of(snap, "textbox")}, "{word}")', f"click({ref_of(snap, 'button', 'Submit')})"]
    if task == "focus-text":
        return [f"click({ref_of(snap, 'textbox')})"]
    if task == "click-checkboxes":
        names = found(r"Select (.*) and click Submit", goal)
        wanted = [] if names == "nothing" else re.split(r", | and ", names)
        return [f"click({ref_of(snap, 'checkbox', n)})" for n in wanted] + [
            f"click({ref_of(snap, 'button', 'Submit')})"
        ]
    raise AssertionError(task)


def scripted_passes_and_null_fails(env, task: str, obs: dict) -> None:
    """From a reset's observation: the scripted solution scores; a wrong (empty) answer on another seed does not."""
    goal = obs["task"].split("\n")[0]
    for action in solve(task, goal, obs["feedback"]):
        obs, reward, term, trunc, info = env.step(action)
    assert term and reward == 1.0 and info["outcome"] == "passed", obs
    env.reset(seed=6)
    _, reward, term, _, info = env.step("done()")
    assert term and reward <= 0 and info["outcome"] == "failed"


def test_every_page_of_the_wheel_is_registered():
    tasks = miniwob_tasks()
    assert len(tasks) > 100
    assert all(f"sandgym/MiniWoB-{t}-v0" in gym.registry for t in tasks)


@pytest.mark.chromium
@pytest.mark.parametrize("task", ["click-button", "enter-text", "focus-text", "click-checkboxes"])
def test_scripted_solution_scores(task):
    env = gym.make(f"sandgym/MiniWoB-{task}-v0")
    try:
        obs, _ = env.reset(seed=5)
        again, _ = env.reset(seed=5)
        assert again["task"] == obs["task"]  # seeded: the same problem
        scripted_passes_and_null_fails(env, task, obs)
    finally:
        env.close()


@pytest.mark.chromium
def test_each_episode_gets_a_page_loaded_ahead_in_a_context_no_page_used():
    env = gym.make("sandgym/MiniWoB-click-button-v0")
    base = env.unwrapped
    assert isinstance(base, MiniWoBEnv)
    session = base.session
    try:
        env.reset(seed=1)
        first = session.context
        assert session._spare is not None
        spare_context, spare_page = session._spare.result(timeout=60)  # loaded while the agent acts
        assert spare_context is not first and spare_context.pages == [spare_page]
        assert session.run(spare_page.evaluate("core.ept0 === null"))  # loaded, no episode started
        obs, _ = env.reset(seed=2)
        assert session.context is spare_context and session.page is spare_page
        assert session.run(spare_page.evaluate("history.length")) == 2  # its blank page, then the task page
        assert "button" in obs["feedback"] and base.utterance
    finally:
        env.close()
    assert session._spare is None and session.sandbox is None


@pytest.mark.chromium
def test_time_limit_is_lifted_and_goto_refused():
    env = gym.make("sandgym/MiniWoB-click-button-v0")
    try:
        obs, _ = env.reset(seed=1)
        assert "86400" in obs["feedback"]
        obs, _, term, _, info = env.step('goto("/miniwob/click-link.html")')
        assert not term and info["tool"] == "refused"
    finally:
        env.close()


@pytest.mark.chromium
def test_check_env_passes_on_a_miniwob_env():
    import warnings

    from gymnasium.utils.env_checker import check_env

    env = gym.make("sandgym/MiniWoB-click-button-v0")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the checker's warnings fail the test too
            check_env(env.unwrapped, skip_render_check=True)
    finally:
        env.close()


@pytest.mark.chromium
def test_null_actions_score_nothing_and_there_is_no_oracle():
    from sandgym.envs.base import NoReference

    env = gym.make("sandgym/MiniWoB-click-button-v0")
    try:
        env.reset(seed=1)
        with pytest.raises(NoReference, match="click-button"):
            unwrapped(env).oracle_actions()
        for action in unwrapped(env).null_actions():
            _, reward, terminated, _, info = env.step(action)
        assert terminated and float(reward) <= 0.0 and info["outcome"] != "passed"
    finally:
        env.close()
