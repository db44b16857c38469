"""Gymnasium habits: vector envs (async with defaults, and sync), TimeLimit
truncation that is verified, action spaces that hold every valid action,
spec kwargs that show the defaults, and gymnasium's own env checker.

Every episode here is real: local bubblewrap sandboxes, Chromium for the
browser family, the Docker Engine for the docker test.
"""

from __future__ import annotations

import copy
import inspect
import socket
import warnings
from typing import Any, cast

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.vector.utils import batch_space, create_shared_memory, read_from_shared_memory, write_to_shared_memory

import sandgym  # noqa: F401  (registers the envs)
from sandgym.envs.base import EnvOptionError
from sandgym.envs.swe_repo.actions import chat_tools, parse_action
from sandgym.families import FAMILIES, load
from sandgym.runtimes.host_processes import environs
from sandgym.spaces import SAMPLE_LENGTH, SharedTexts, TextOrToolCall, UnicodeText
from sandgym.specs import TaskSet, bundled_task_set
from sandgym.specs.browser_form import BrowserTaskPair
from tests.browser_form.test_miniwob import solve
from tests.helpers import unwrapped
from tests.swe_repo.test_env import descendants

CODE = "sandgym/CodeFunction-v0"
SWE = "sandgym/SWERepo-v0"
BROWSER = "sandgym/BrowserForm-v0"
MINIWOB = "sandgym/MiniWoB-click-button-v0"
SWE_TASK = "billing/round-half-even"
FORM_TASK = "forms/login-alice"


def owned_by(pids: set[int]) -> list[int]:
    """Live processes that a sandbox of one of `pids` started (local and
    browser sandboxes carry their owner's pid in their environment)."""
    marks = [f"{k}={p}-".encode() for p in pids for k in ("SANDGYM_OWNER", "SANDGYM_BROWSER_ID")]
    return [pid for pid, env in environs() if any(item.startswith(m) for item in env for m in marks)]


def containers_of(pids: set[int]) -> list[str | None]:
    import docker

    client = docker.from_env()
    try:
        owners = {f"{socket.gethostname()}:{p}" for p in pids}
        listed = client.containers.list(all=True, filters={"label": "sandgym.owner"}, ignore_removed=True)
        return [c.name for c in listed if c.labels.get("sandgym.owner") in owners]
    finally:
        client.close()


def make_vec(env_id: str, vectorization: str, **kwargs):
    """A vector env of two sub-envs, and the pids of its worker processes (none for sync)."""
    venv = gym.make_vec(env_id, num_envs=2, vectorization_mode=vectorization, **kwargs)
    return venv, {p.pid for p in getattr(venv, "processes", ())}


def close_and_check(venv, workers: set[int], before: set[int]) -> None:
    """Close the vector env; then no worker, and no sandbox or browser a
    worker (or this process, for sync) started, is left."""
    venv.close()
    assert all(not p.is_alive() for p in getattr(venv, "processes", ()))
    assert descendants() <= before  # sandboxes of a sync env are this process's descendants
    assert owned_by(workers) == []  # those of a worker would be left to init if it leaked them


def lockstep(venv, plans: list[list]) -> tuple[np.ndarray, dict]:
    """Step every sub-env through its plan (equal lengths); the last step's rewards and infos."""
    assert len({len(p) for p in plans}) == 1
    for t in range(len(plans[0])):
        obs, rewards, term, trunc, infos = venv.step([p[t] for p in plans])
        done = term | trunc
        assert done.all() if t == len(plans[0]) - 1 else not done.any(), (t, infos)
    assert venv.observation_space.contains(obs)
    return rewards, infos


# -- the spaces themselves ---------------------------------------------------------------------------


def test_unicode_text_round_trips_through_shared_memory():
    space = gym.spaces.Dict({"task": UnicodeText(50), "feedback": UnicodeText(50)})
    texts = ["naïve 𝔘nicode\0 and NUL", "", "\ud800 lone surrogate", "x" * 50]
    shm = create_shared_memory(space, n=len(texts))
    view = read_from_shared_memory(space, shm, n=len(texts))
    assert isinstance(view, dict)  # a Dict space reads back as a dict

    def write(i: int, value: dict[str, str]) -> None:
        # gymnasium dispatches on the space (a Dict space takes a dict); its annotation says ndarray.
        write_to_shared_memory(space, i, cast(Any, value), shm)

    for i, text in enumerate(texts):
        write(i, {"task": text, "feedback": text[::-1]})
    assert isinstance(view["task"], SharedTexts)
    assert view["task"] == tuple(texts) and view["feedback"] == tuple(t[::-1] for t in texts)
    snapshot = copy.deepcopy(view)  # what AsyncVectorEnv(copy=True) hands out
    assert type(snapshot["task"]) is tuple and batch_space(space, len(texts)).contains(snapshot)
    write(0, {"task": "changed", "feedback": ""})
    assert view["task"][0] == "changed" and snapshot["task"][0] == texts[0]  # a live view; the copy is not
    with pytest.raises(ValueError, match=r"51 characters long.*at most 50.*shared_memory"):
        write(1, {"task": "y" * 51, "feedback": ""})


def test_text_samples_are_short_and_contained():
    space = UnicodeText(seed=3)
    samples = [space.sample() for _ in range(50)]
    assert all(space.contains(s) and len(s) <= SAMPLE_LENGTH for s in samples)
    assert space.sample(mask=(200, None)).__len__() == 200


def test_tool_call_space_samples_valid_calls_and_batches():
    space = TextOrToolCall(chat_tools(), parse_action, seed=1)
    calls = [space.sample() for _ in range(100)]
    for call in calls:
        assert isinstance(call, dict) and space.contains(call), call
        parse_action(call)  # the env takes it
    assert {c["tool"] for c in calls if isinstance(c, dict)} == {t["function"]["name"] for t in chat_tools()}
    batched = batch_space(space, 3)
    assert batched.contains(("```submit```", {"tool": "submit"}, {"tool": "bash", "command": "ls"}))
    assert not batched.contains(("ok", {"tool": "nope"}, "ok"))
    assert batched.sample() is not None and copy.deepcopy(space) == space


# -- action_space.contains for every family ---------------------------------------------------------

VALID_TEXT = ["", "```python\ndef f():\n    return 'ü'\n```", "reasoning first\n```bash\nls\n```", "done()"]
INVALID_ANY: list[object] = [None, 3, b"bytes", ["a list"], "x" * 1_000_001]
SWE_DICTS: list[dict[str, Any]] = [
    {"tool": "bash", "command": "grep -rn total billing/"},
    {"tool": "view", "path": "billing/money.py"},
    {"tool": "view", "path": "billing/money.py", "start": 10, "end": 40},
    {"tool": "view", "path": "billing/money.py", "view_range": [1, 5]},
    {"tool": "str_replace", "path": "billing/money.py", "old": "a", "new": "b"},
    {"tool": "create", "path": "billing/util.py", "content": "X = 1\n"},
    {"tool": "run_tests"},
    {"tool": "run_tests", "tests": ["tests/test_money.py"]},
    {"tool": "submit"},
    {"tool": "sh", "command": "ls"},  # an alias the parser takes
]
SWE_BAD_DICTS = [
    {"tool": "rm"},
    {"tool": "bash"},
    {"tool": "bash", "command": 3},
    {"tool": "submit", "extra": 1},
    {"tool": "view", "path": "x", "start": "10"},
    {"command": "ls"},
]


def test_action_space_of_code_and_swe_holds_their_actions():
    code = gym.make(CODE, mode="multi")
    swe = gym.make(SWE)
    try:
        tasks = TaskSet.load(bundled_task_set("code_function")).tasks
        code.reset(options={"task_id": tasks[0].id})
        for action in [*VALID_TEXT, *unwrapped(code).oracle_actions(), *unwrapped(code).null_actions()]:
            assert code.action_space.contains(action), action
        for bad in [*INVALID_ANY, {"tool": "submit_code", "code": "x"}]:
            assert not code.action_space.contains(bad), repr(bad)[:80]
        swe.reset(options={"task_id": SWE_TASK})
        for action in [*VALID_TEXT, *SWE_DICTS, *unwrapped(swe).oracle_actions(), *unwrapped(swe).null_actions()]:
            assert swe.action_space.contains(action), action
        tools = unwrapped(swe).chat_tools()
        assert tools is not None
        for tool in tools:  # what a chat model's call turns into
            params = tool["function"]["parameters"]
            args = {k: "x" for k in params["required"]}
            assert swe.action_space.contains(unwrapped(swe).tool_action(tool["function"]["name"], args)), tool
        for bad in [*INVALID_ANY, *SWE_BAD_DICTS]:
            assert not swe.action_space.contains(bad), repr(bad)[:80]
        # Every bad dict is one the env refuses too (the space follows the parser).
        obs, _, term, _, info = swe.step(SWE_BAD_DICTS[0])
        assert not term and info["tool"] == "invalid"
    finally:
        code.close()
        swe.close()


@pytest.mark.chromium
def test_action_space_of_the_browser_envs_holds_their_actions():
    for env_id in (BROWSER, MINIWOB):
        env = gym.make(env_id)
        try:
            tasks = TaskSet.load(bundled_task_set("browser_form")).tasks
            oracle = [a for t in tasks for a in BrowserTaskPair.of(t).hidden.oracle]
            for action in [*VALID_TEXT, *oracle, *unwrapped(env).null_actions()]:
                assert env.action_space.contains(action), action
            for bad in [*INVALID_ANY, {"tool": "click"}]:
                assert not env.action_space.contains(bad), repr(bad)[:80]
        finally:
            env.close()


# -- spec kwargs ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("env_id", [CODE, SWE, BROWSER, MINIWOB])
def test_spec_kwargs_show_the_defaults_and_overrides_are_still_checked(env_id):
    spec = gym.spec(env_id)
    params = inspect.signature(load(str(spec.entry_point))).parameters
    defaults = {n: p.default for n, p in params.items() if p.default is not inspect.Parameter.empty}
    assert set(spec.kwargs) == set(defaults) | ({"task"} if env_id == MINIWOB else set())
    for name, value in defaults.items():
        if name == "tasks" and env_id != MINIWOB:
            family = next(f for f in FAMILIES.values() if f.env_id == env_id)
            assert spec.kwargs["tasks"] == f"{family.name}/{family.default_task_set}"
        else:
            assert spec.kwargs[name] == value, name
    limit = "max_turns" if env_id == CODE else "max_steps"
    assert isinstance(spec.kwargs[limit], int) and spec.max_episode_steps is None  # the env owns its limit
    too_low: dict[str, Any] = {limit: 0}
    with pytest.raises((EnvOptionError, ValueError), match=limit):
        gym.make(env_id, **too_low)
    with pytest.raises(TypeError, match="no_such_option"):
        gym.make(env_id, no_such_option=1)


def test_make_shows_the_kwargs_it_used():
    env = gym.make(CODE, mode="multi", max_turns=3)
    try:
        assert env.spec is not None
        assert env.spec.kwargs["mode"] == "multi" and env.spec.kwargs["max_turns"] == 3
        assert env.spec.kwargs["reward"] == "binary"  # the defaults, alongside
    finally:
        env.close()


# -- TimeLimit: the step it truncates is verified -------------------------------------------------------


def test_time_limit_on_code_verifies_the_last_turn():
    tasks = TaskSet.load(bundled_task_set("code_function")).tasks
    env = gym.make(CODE, mode="multi", max_turns=5, max_episode_steps=2)
    try:
        obs, info = env.reset(options={"task_id": tasks[0].id})
        assert info["max_turns"] == 2 and "You have 2 turns" in obs["task"]
        submit = unwrapped(env).oracle_actions()[0]
        assert isinstance(submit, str)  # the code env's actions are text
        code = submit.removeprefix("SUBMIT\n")  # run, not submitted
        _, reward, term, trunc, info = env.step(code)
        assert (reward, term, trunc, info["tool"]) == (0.0, False, False, "run")
        _, reward, term, trunc, info = env.step(code)  # the TimeLimit's last step
        assert trunc and info["outcome"] == "passed" and reward == 1.0
        verdict = unwrapped(env).last_verdict
        assert verdict is not None and verdict.outcome.value == "passed"
        # Without a wrapper the env's own limit rules.
        env2 = gym.make(CODE, mode="multi", max_turns=3)
        try:
            assert env2.reset(options={"task_id": tasks[0].id})[1]["max_turns"] == 3
        finally:
            env2.close()
    finally:
        env.close()


def test_time_limit_on_swe_submits_the_work():
    env = gym.make(SWE, max_episode_steps=2)
    try:
        obs, info = env.reset(options={"task_id": SWE_TASK})
        assert info["max_steps"] == 2 and "You have 2 steps" in obs["task"]
        patch = unwrapped(env).oracle_actions()[0]
        _, reward, term, trunc, info = env.step(patch)
        assert not (term or trunc)
        _, reward, term, trunc, info = env.step({"tool": "bash", "command": "git status --short"})
        assert trunc and info["outcome"] == "passed" and reward == 1.0, info
    finally:
        env.close()


@pytest.mark.chromium
def test_time_limit_on_browser_verifies_the_form():
    oracle = BrowserTaskPair.of(TaskSet.load(bundled_task_set("browser_form")).get(FORM_TASK)).hidden.oracle
    assert oracle[-1] == "done()"
    work = oracle[:-1]
    env = gym.make(BROWSER, max_episode_steps=len(work))
    try:
        env.reset(options={"task_id": FORM_TASK})
        for action in work:
            _, reward, term, trunc, info = env.step(action)
        assert trunc and not term and info["outcome"] == "passed" and reward == 1.0, info
        # Cut off before the form is sent: scored as failed, not left unscored.
        env.reset(options={"task_id": FORM_TASK})
        for action in work[:-1]:
            _, reward, term, trunc, info = env.step(action)
        assert not trunc
        _, reward, term, trunc, info = env.step(work[0])  # the limit's step, the form not sent
        assert trunc and info["outcome"] == "failed" and reward == 0.0, info
    finally:
        env.close()


@pytest.mark.chromium
def test_time_limit_on_miniwob_reads_the_page():
    env = gym.make(MINIWOB, max_episode_steps=2)
    try:
        obs, _ = env.reset(seed=5)
        assert "Step 0 of 2" in obs["feedback"]
        _, _, term, trunc, info = env.step("not an action")
        assert not (term or trunc) and info["error"]
        _, reward, term, trunc, info = env.step("not an action")
        assert trunc and info["outcome"] == "failed" and info["raw_reward"] == 0.0 and reward == 0.0, info
    finally:
        env.close()


# -- vector envs --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_vector_code_episodes(mode):
    before = descendants()
    venv, owners = make_vec(CODE, mode)
    try:
        assert isinstance(venv.single_action_space, UnicodeText)
        obs, infos = venv.reset(seed=[1, 2])
        assert all(obs["task"]) and obs["feedback"] == ("", "")
        rewards, infos = lockstep(venv, [list(a) for a in venv.call("oracle_actions")])
        assert rewards.tolist() == [1.0, 1.0] and infos["outcome"].tolist() == ["passed", "passed"]
        # NEXT_STEP autoreset: the step after an episode ends resets (the action is ignored).
        obs, rewards, term, trunc, infos = venv.step(["ignored", "ignored"])
        assert rewards.tolist() == [0.0, 0.0] and not (term | trunc).any() and all(obs["task"])
        assert "outcome" not in infos
        rewards, infos = lockstep(venv, [list(a) for a in venv.call("null_actions")])
        assert rewards.tolist() == [0.0, 0.0] and infos["outcome"].tolist() == ["failed", "failed"]
    finally:
        close_and_check(venv, owners, before)


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_vector_swe_episodes(mode):
    before = descendants()
    venv, owners = make_vec(SWE, mode)
    try:
        assert isinstance(venv.single_action_space, TextOrToolCall)
        venv.reset(seed=[1, 2], options={"task_id": SWE_TASK})
        rewards, infos = lockstep(venv, [list(a) for a in venv.call("oracle_actions")])
        assert rewards.tolist() == [1.0, 1.0] and infos["outcome"].tolist() == ["passed", "passed"]
        venv.step([{"tool": "submit"}] * 2)  # the autoreset step
        rewards, infos = lockstep(venv, [["```bash\necho hi\n```", {"tool": "submit"}]] * 2)
        assert rewards.tolist() == [0.0, 0.0] and infos["outcome"].tolist() == ["failed", "failed"]
        assert len(owned_by(owners)) >= 2 * (mode == "async")  # the workers' warm sandboxes: the check sees them
    finally:
        close_and_check(venv, owners, before)


@pytest.mark.chromium
@pytest.mark.parametrize("mode", ["async", "sync"])
def test_vector_browser_episodes(mode):
    before = descendants()
    venv, owners = make_vec(BROWSER, mode)
    try:
        venv.reset(seed=[1, 2], options={"task_id": FORM_TASK})
        rewards, infos = lockstep(venv, [list(a) for a in venv.call("oracle_actions")])
        assert rewards.tolist() == [1.0, 1.0] and infos["outcome"].tolist() == ["passed", "passed"]
        assert len(owned_by(owners)) >= 2 * (mode == "async")  # the workers' browser sandboxes
    finally:
        close_and_check(venv, owners, before)


@pytest.mark.chromium
@pytest.mark.parametrize("mode", ["async", "sync"])
def test_vector_miniwob_episodes(mode):
    before = descendants()
    venv, owners = make_vec(MINIWOB, mode)
    try:
        obs, _ = venv.reset(seed=[5, 6])
        plans = [solve("click-button", obs["task"][i].split("\n")[0], obs["feedback"][i]) for i in range(2)]
        rewards, infos = lockstep(venv, plans)
        assert rewards.tolist() == [1.0, 1.0] and infos["outcome"].tolist() == ["passed", "passed"]
    finally:
        close_and_check(venv, owners, before)


def test_vector_env_with_a_time_limit_scores_truncated_episodes():
    before = descendants()
    venv, owners = make_vec(SWE, "async", max_episode_steps=1)
    try:
        venv.reset(seed=[1, 2], options={"task_id": SWE_TASK})
        _, rewards, term, trunc, infos = venv.step(venv.call("oracle_actions")[0][:1] * 2)
        assert trunc.all() and infos["outcome"].tolist() == ["passed", "passed"] and rewards.tolist() == [1.0, 1.0]
    finally:
        close_and_check(venv, owners, before)


@pytest.mark.docker
def test_vector_code_episodes_on_docker_leave_no_container():
    venv, owners = make_vec(CODE, "async", runtime="docker", mode="multi")
    try:
        venv.reset(seed=[3, 4])
        submits = [a[0] for a in venv.call("oracle_actions")]
        runs = [a.removeprefix("SUBMIT\n") for a in submits]  # run first: each worker's agent container stays up
        _, rewards, term, _, infos = venv.step(runs)
        assert not term.any() and infos["tool"].tolist() == ["run", "run"]
        assert len(containers_of(owners)) == 2  # the check below sees the workers' containers
        rewards, infos = lockstep(venv, [[a] for a in submits])
        assert rewards.tolist() == [1.0, 1.0] and infos["outcome"].tolist() == ["passed", "passed"]
    finally:
        venv.close()
    assert containers_of(owners) == []


# -- gymnasium's own checker ------------------------------------------------------------------------------


BROWSERS = [pytest.param(i, marks=pytest.mark.chromium) for i in (BROWSER, MINIWOB)]


@pytest.mark.parametrize("env_id", [CODE, SWE, *BROWSERS])
def test_check_env_passes(env_id):
    env = gym.make(env_id)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the checker's warnings fail the test too
            check_env(env.unwrapped, skip_render_check=True)
    finally:
        env.close()
