"""A failed reset (an unknown task id) leaves every family's env usable:
through `gymnasium.make` (whose env checker sandgym replaces: gymnasium's
own breaks for good after a first reset that raises) and through
`sandgym serve` (the session answers an error and plays on)."""

from __future__ import annotations

import time

import gymnasium
import pytest

import sandgym  # noqa: F401 - registers the env ids
from sandgym.envs.base import EnvChecker
from sandgym.specs import TaskSet, bundled_task_set
from sandgym.specs.code_function import CodeTaskPair

from .test_server import Server, fence


def bad_then_good(env, task_id: str, action) -> dict:
    """reset(unknown id) raises a clear error; reset(task_id) then a step works."""
    with pytest.raises(KeyError, match="unknown task id 'nope'"):
        env.reset(options={"task_id": "nope"})
    with pytest.raises(RuntimeError, match="reset"):
        env.step(action)
    env.reset(seed=0, options={"task_id": task_id})
    return env.step(action)[4]


def test_registered_envs_carry_sandgyms_checker():
    env = gymnasium.make("sandgym/CodeFunction-v0")
    try:
        assert isinstance(env, EnvChecker)
        assert env.spec is not None and env.spec.disable_env_checker
        again = env.spec.make()  # the spec records the checker: re-made the same way
        assert isinstance(again, EnvChecker)
        again.close()
    finally:
        env.close()


def test_code_env_survives_a_failed_reset(runtime):
    task = CodeTaskPair.of(TaskSet.load(bundled_task_set("code_function")).tasks[0])
    env = gymnasium.make("sandgym/CodeFunction-v0", runtime=runtime)
    try:
        info = bad_then_good(env, task.id, fence(task.hidden.reference_solution))
        assert info["outcome"] == "passed"
    finally:
        env.close()


@pytest.mark.chromium
def test_browser_env_survives_a_failed_reset(runtime):
    task = TaskSet.load(bundled_task_set("browser_form")).tasks[0]
    env = gymnasium.make("sandgym/BrowserForm-v0", runtime=runtime)
    try:
        info = bad_then_good(env, task.id, "done()")
        assert info["outcome"] == "failed"  # nothing was filled in: judged, not broken
    finally:
        env.close()


def test_swe_env_survives_a_failed_reset(runtime):
    ts = TaskSet.load(bundled_task_set("swe_repo"))
    env = gymnasium.make("sandgym/SWERepo-v0", tasks=ts, runtime=runtime)
    try:
        info = bad_then_good(env, ts.tasks[0].id, {"tool": "bash", "command": "true"})
        assert "outcome" not in info  # a command ran: the episode goes on
    finally:
        env.close()


def test_a_served_session_survives_a_failed_reset(tmp_path):
    server = Server(tmp_path / "serve.log", "--max-sessions", "2", "--session-timeout", "60")
    try:
        server.wait_healthy(time.monotonic() + 120)
        task = CodeTaskPair.of(TaskSet.load(bundled_task_set("code_function")).tasks[0])
        with server.client() as client:
            with pytest.raises(RuntimeError, match="unknown task id 'nope'"):
                client.reset(task_id="nope")
            with pytest.raises(RuntimeError, match="reset"):
                client.step({"text": fence(task.hidden.reference_solution)})
            assert client.state()["done"] is True
            client.reset(task_id=task.id)
            result = client.step({"text": fence(task.hidden.reference_solution)})
            assert result.done and result.observation["outcome"] == "passed"
    finally:
        server.stop()
