"""`sandgym serve`: real servers in subprocesses, driven by openenv's own client.

Two servers run for the whole module: one single-turn (sessions time out
after 60 s, at most 3 at once) and one multi-turn (sessions time out after
2 s). Sandboxes are real; a sandbox shows up as processes of the sandbox
user under the server process, which is how the tests see one close.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium
import httpx
import pytest
from pydantic import ValidationError

from sandgym.envs.base import Action
from sandgym.specs import TaskSet, bundled_task_set
from tests.helpers import unwrapped

SANDBOX_UID = 65534 if os.geteuid() == 0 else os.geteuid()
TASK = "basic/second-largest"
VENV_BIN = Path(sys.executable).parent
STARTUP_S = 90.0


def _client_class(typed: bool = False):
    # openenv imports its Gradio web UI eagerly (seconds on a busy machine);
    # the client never uses it. Blocked only while openenv is imported.
    blocked = "gradio" not in sys.modules
    if blocked:
        sys.modules["gradio"] = None  # type: ignore[assignment]
    try:
        from openenv import GenericEnvClient

        from sandgym.client import SandgymClient
    finally:
        if blocked and sys.modules.get("gradio", 0) is None:
            del sys.modules["gradio"]
    return SandgymClient if typed else GenericEnvClient


def fence(code: str) -> str:
    return f"```python\n{code}```"


def sandbox_processes(root: int) -> set[int]:
    """Processes of the sandbox user that descend from `root`."""
    children: dict[int, list[tuple[int, int]]] = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append((int(p), os.stat(f"/proc/{p}").st_uid))
        except (OSError, ValueError, IndexError):
            pass
    found, todo = set(), [root]
    while todo:
        for pid, uid in children.get(todo.pop(), []):
            todo.append(pid)
            if uid == SANDBOX_UID:
                found.add(pid)
    return found


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_until(check, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One `sandgym serve` subprocess."""

    validate: subprocess.Popen[str]  # `openenv validate` against it, if the servers fixture started one

    def __init__(self, log: Path, *args: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log
        self._log = open(log, "wb")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "sandgym.cli",
                "serve",
                "--env",
                "sandgym/CodeFunction-v0",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                *args,
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self.seen: set[int] = set()  # every sandbox process ever seen under this server

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def wait_healthy(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    self.baseline = self.procs()  # the runtime's zygote, started with the app
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"server not healthy after {STARTUP_S} s:\n{self.log()}")

    def procs(self) -> set[int]:
        now = sandbox_processes(self.proc.pid)
        self.seen |= now
        return now

    def extra(self) -> set[int]:
        """Sandbox processes beyond the zygote's."""
        return self.procs() - self.baseline

    def client(self, typed: bool = False, **kw):
        return _client_class(typed)(base_url=self.url, **kw).sync()

    def stop(self) -> None:
        """SIGTERM; the server must exit cleanly and leave no sandbox behind."""
        if self.proc.poll() is None:
            self.procs()
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError(f"server ignored SIGTERM:\n{self.log()}") from None
        self._log.close()
        wait_until(lambda: not any(alive(p) for p in self.seen), 10, "sandboxes to end with the server")
        # uvicorn shuts down, then re-raises the signal it caught: -SIGTERM is a clean exit.
        assert self.proc.returncode in (0, -signal.SIGTERM), f"exit {self.proc.returncode}:\n{self.log()}"
        assert "Application shutdown complete" in self.log(), self.log()


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    logs = tmp_path_factory.mktemp("serve")
    single = Server(logs / "single.log", "--max-sessions", "3", "--session-timeout", "60")
    multi = Server(logs / "multi.log", "--mode", "multi", "--max-turns", "4", "--session-timeout", "2")
    try:
        deadline = time.monotonic() + STARTUP_S
        single.wait_healthy(deadline)
        multi.wait_healthy(deadline)
        # `openenv validate` spends seconds importing; it runs while the other tests do.
        single.validate = subprocess.Popen(
            [str(VENV_BIN / "openenv"), "validate", "--url", single.url, "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        yield single, multi
    finally:
        errors = []
        for s in (single, multi):
            try:
                s.stop()
            except AssertionError as e:
                errors.append(str(e))
        validate = getattr(single, "validate", None)
        if validate is not None and validate.poll() is None:
            validate.kill()
            validate.wait()
        assert not errors, "\n".join(errors)


@pytest.fixture(scope="module")
def task():
    return TaskSet.load(bundled_task_set("code_function")).get(TASK)


def test_http_endpoints(servers):
    single, _ = servers
    assert httpx.get(f"{single.url}/health").json() == {"status": "healthy"}
    schema = httpx.get(f"{single.url}/schema").json()
    assert {"text", "call"} <= set(schema["action"]["properties"])
    assert schema["action"]["required"] == ["text"], "a raw model reply alone is a valid action"
    assert schema["action"]["additionalProperties"] is False
    for field in ("task", "feedback", "task_id", "outcome", "reward_valid", "tests", "done", "reward"):
        assert field in schema["observation"]["properties"], field
    # A family's own info keys are no fields of the shared observation: they come in metadata["info"].
    assert not {"mode", "turn", "max_turns", "tool"} & set(schema["observation"]["properties"])
    for field in ("episode_id", "step_count", "task_id", "env_id"):
        assert field in schema["state"]["properties"], field
    meta = httpx.get(f"{single.url}/metadata").json()
    assert meta["name"] == "sandgym/CodeFunction-v0" and "hidden tests" in meta["description"]
    # OpenEnv's stateless HTTP reset: a fresh env for the request, task_id honoured.
    reset = httpx.post(f"{single.url}/reset", json={"task_id": TASK}, timeout=30).json()
    assert reset["done"] is False and "second_largest" in reset["observation"]["task"]


def test_single_turn_episode(servers, task):
    single, _ = servers
    with single.client() as env:
        r = env.reset(task_id=TASK, episode_id="ep-1")
        assert r.done is False and r.reward is None
        assert "second_largest" in r.observation["task"] and r.observation["task_id"] == TASK
        assert env.state() == {
            "episode_id": "ep-1",
            "step_count": 0,
            "env_id": "sandgym/CodeFunction-v0",
            "task_id": TASK,
            "done": False,
        }

        r = env.step({"text": "Here it is:\n" + fence(task.hidden.reference_solution)})
        assert r.done is True and r.reward == 1.0
        obs = r.observation
        assert obs["outcome"] == "passed" and obs["reward_valid"] is True and obs["pass_rate"] == 1.0
        assert obs["tests"] and all(t["status"] == "passed" for t in obs["tests"])
        info = obs["metadata"]["info"]
        assert info["turn"] == info["max_turns"] == 1 and "Verdict: passed" in obs["feedback"]
        state = env.state()
        assert state["episode_id"] == "ep-1" and state["step_count"] == 1 and state["done"] is True
        with pytest.raises(RuntimeError, match="episode is over"):
            env.step({"text": fence(task.hidden.reference_solution)})

        r = env.reset(task_id=TASK)  # a new episode in the same session
        state = env.state()
        assert state["step_count"] == 0 and state["episode_id"] not in (None, "ep-1")
        r = env.step({"text": fence("def second_largest(nums):\n    return max(nums)\n")})
        assert r.done is True and r.reward == 0.0
        assert r.observation["outcome"] == "failed" and r.observation["reward_valid"] is True

        with pytest.raises(RuntimeError, match="unknown task id 'nope'.*choices"):
            env.reset(task_id="nope")
        with pytest.raises(RuntimeError, match="unknown reset argument"):
            env.reset(task="x")
        env.reset(task_id=TASK)
        with pytest.raises(RuntimeError, match="VALIDATION_ERROR"):
            env.step({"text": "x", "code": "y"})  # extra fields are refused
        with pytest.raises(RuntimeError, match="VALIDATION_ERROR"):  # text and call at once
            env.step({"text": "x", "call": {"tool": "bash"}})


def test_typed_client(servers, task):
    from sandgym.client import SandgymAction, SandgymObservation, SandgymServerError, SandgymState

    single, _ = servers
    with single.client(typed=True) as env:
        ids = env.task_ids()
        assert TASK in ids and len(ids) == len(TaskSet.load(bundled_task_set("code_function")))
        listed = {t["task_id"]: t for t in env.list_tasks()}
        assert "second_largest" in listed[TASK]["visible"]["prompt"] and "hidden" not in listed[TASK]
        r = env.reset(task_id=TASK)
        assert isinstance(r.observation, SandgymObservation) and r.observation.task_id == TASK and not r.done
        r = env.step("Sure:\n" + fence(task.hidden.reference_solution))  # a raw model reply
        assert r.done and r.reward == 1.0 and r.observation.outcome == "passed"
        assert r.observation.metadata["info"]["turn"] == 1
        state = env.state()
        assert isinstance(state, SandgymState) and state.done and state.step_count == 1
        env.reset(task_id=TASK)
        r = env.step(SandgymAction(text=fence("def second_largest(nums):\n    return max(nums)\n")))
        assert r.reward == 0.0 and r.observation.outcome == "failed"
        with pytest.raises(SandgymServerError, match="unknown task id 'nope'") as err:
            env.reset(task_id="nope")
        assert err.value.code == "EXECUTION_ERROR"
        # A bad action never leaves the client: the model names the field.
        with pytest.raises(ValidationError, match="text"):
            env.step({"text": 3})
        with pytest.raises(ValidationError, match="not both"):
            env.step({"text": "x", "call": {"tool": "bash"}})


def test_http_protocol_misuse_is_a_clear_4xx(servers):
    """The stateless HTTP routes: every misuse is a 4xx with a one-line
    detail, never a 500."""
    single, _ = servers
    url = single.url

    def post(path, **kw):
        r = httpx.post(f"{url}{path}", timeout=60, **kw)
        assert 400 <= r.status_code < 500 and "Traceback" not in r.text, (path, r.status_code, r.text)
        return r.status_code, r.json()["detail"]

    status, detail = post("/step", json={"action": {"text": "hello"}})
    assert status == 409 and "reset first" in detail and "/ws" in detail
    status, detail = post("/step", json={"action": {"text": 5}})
    assert status == 422 and detail[0]["loc"] == ["text"]
    status, detail = post("/step", json={"action": {"txt": "x"}})
    assert status == 422 and {"text", "txt"} <= {e["loc"][-1] for e in detail}
    status, detail = post("/step", json={})
    assert status == 422 and detail[0]["loc"] == ["body", "action"]
    status, _ = post("/step", content=b"{not json", headers={"content-type": "application/json"})
    assert status == 422
    status, detail = post("/reset", json={"task_id": "nope"})
    assert status == 404 and "unknown task id 'nope'" in detail and TASK.split("/")[0] in detail
    status, detail = post("/reset", json={"task_id": 3})
    assert status == 400 and "task_id must be a string" in detail
    status, detail = post("/reset", json={"task": TASK})
    assert status == 400 and "unknown reset argument(s) ['task']" in detail
    status, detail = post("/CodeFunction-v0/tasks", json={"split": "train"})
    assert status == 404 and "unknown split 'train'" in detail
    status, _ = post("/CodeFunction-v0/task", json={"split": "test", "index": 10_000})
    assert status == 400
    # The Task API itself.
    r = httpx.post(f"{url}/CodeFunction-v0/num_tasks", json={"split": "test"})
    assert r.status_code == 200 and r.json()["num_tasks"] == len(TaskSet.load(bundled_task_set("code_function")))


def test_websocket_protocol_misuse_is_a_clear_error(servers):
    """The WebSocket path: an error frame with a clear message for each
    misuse, and the session stays usable."""
    from websockets.sync.client import connect

    single, _ = servers
    with connect(f"ws://127.0.0.1:{single.port}/ws") as ws:

        def ask(message):
            ws.send(message if isinstance(message, str) else json.dumps(message))
            return json.loads(ws.recv(timeout=60))

        reply = ask({"type": "step", "data": {"text": "x"}})
        assert reply["type"] == "error" and "reset first" in reply["data"]["message"]
        reply = ask({"type": "step", "data": {"txt": "x"}})
        assert reply["data"]["code"] == "VALIDATION_ERROR"
        assert {"text", "txt"} <= {e["loc"][-1] for e in reply["data"]["errors"]}
        reply = ask({"type": "reset", "data": {"task_id": "nope"}})
        assert reply["type"] == "error" and "unknown task id 'nope'" in reply["data"]["message"]
        assert ask("{not json")["data"]["code"] == "INVALID_JSON"
        assert ask({"type": "jump"})["data"]["code"] == "UNKNOWN_TYPE"
        reply = ask({"type": "reset", "data": {"task_id": TASK}})
        assert reply["type"] == "observation" and reply["data"]["observation"]["task_id"] == TASK
        reply = ask({"type": "step", "data": {"text": fence("def second_largest(nums):\n    return 0\n")}})
        assert reply["type"] == "observation" and reply["data"]["done"] is True


def test_multi_turn_episode(servers, task):
    _, multi = servers
    with multi.client() as env:
        r = env.reset(task_id=TASK)
        info = r.observation["metadata"]["info"]
        assert info["mode"] == "multi" and info["max_turns"] == 4
        r = env.step({"text": fence("def second_largest(nums):\n    return max(nums)\n")})
        assert r.done is False and r.reward == 0.0
        assert "FAILED" in r.observation["feedback"] and r.observation["metadata"]["info"]["tool"] == "run"
        assert r.observation["outcome"] is None
        r = env.step({"text": fence(task.hidden.reference_solution)})
        assert r.done is False and "PASSED" in r.observation["feedback"]
        assert "FAILED" not in r.observation["feedback"]
        r = env.step({"text": "SUBMIT"})  # submits the code run last
        assert r.done is True and r.reward == 1.0 and r.observation["outcome"] == "passed"
        assert r.observation["metadata"]["info"]["tool"] == "submit" and r.observation["metadata"]["info"]["turn"] == 3
        assert env.state()["step_count"] == 3


def test_concurrent_sessions_are_apart(servers, task):
    single, _ = servers
    good = fence(task.hidden.reference_solution)
    with single.client() as a, single.client() as b:
        a.reset(task_id=TASK)
        b.reset(task_id="basic/edit-distance")
        sa, sb = a.state(), b.state()
        assert sa["episode_id"] != sb["episode_id"]
        assert (sa["task_id"], sb["task_id"]) == (TASK, "basic/edit-distance")
        results: dict[str, Any] = {}
        threads = [
            threading.Thread(target=lambda: results.__setitem__("a", a.step({"text": good}))),
            threading.Thread(
                target=lambda: results.__setitem__(
                    "b", b.step({"text": fence("def edit_distance(a, b):\n    return 0\n")})
                )
            ),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results["a"].reward == 1.0 and results["a"].observation["task_id"] == TASK
        assert results["b"].reward == 0.0 and results["b"].observation["task_id"] == "basic/edit-distance"
        b.reset(task_id="basic/edit-distance")  # b's new episode leaves a's finished one alone
        assert a.state() == {**sa, "step_count": 1, "done": True}
        assert b.state()["step_count"] == 0


def test_capacity_is_bounded_and_released_on_close(servers):
    single, _ = servers
    clients = [single.client() for _ in range(3)]
    try:
        for c in clients:
            c.reset(task_id=TASK)
        extra = single.client()
        with pytest.raises((RuntimeError, ConnectionError), match="CAPACITY_REACHED|capacity"):
            extra.reset(task_id=TASK)
        extra.close()
        clients.pop().close()  # a closed session frees its slot at once
        with single.client() as again:
            assert again.reset(task_id=TASK).observation["task_id"] == TASK
    finally:
        for c in clients:
            c.close()


def test_closed_session_leaves_no_sandbox(servers):
    _, multi = servers
    with multi.client() as env:
        env.reset(task_id=TASK)
        env.step({"text": fence("def second_largest(nums):\n    return None\n")})
        assert multi.extra(), "a run step keeps the agent's sandbox up"
    wait_until(lambda: not multi.extra(), 10, "the closed session's sandbox to go")


def test_dropped_connection_closes_the_session(servers):
    """A client that vanishes (killed, network gone) without a close message."""
    from websockets.sync.client import connect

    _, multi = servers
    with connect(f"ws://127.0.0.1:{multi.port}/ws") as ws:
        ws.send(json.dumps({"type": "reset", "data": {"task_id": TASK}}))
        assert json.loads(ws.recv(timeout=30))["type"] == "observation"
        ws.send(json.dumps({"type": "step", "data": {"text": fence("def second_largest(nums):\n    return 0\n")}}))
        reply = json.loads(ws.recv(timeout=30))
        assert reply["type"] == "observation" and reply["data"]["done"] is False
        assert multi.extra()
        ws.socket.shutdown(socket.SHUT_RDWR)  # no close message, no close handshake
    wait_until(lambda: not multi.extra(), 10, "the dropped session's sandbox to go")


def test_abandoned_session_is_reaped(servers):
    """A client that keeps its connection but stops acting: openenv's idle
    timeout (2 s here; its reaper looks every 5 s) closes the session."""
    _, multi = servers
    env = multi.client()
    try:
        env.reset(task_id=TASK)
        env.step({"text": fence("def second_largest(nums):\n    return 0\n")})
        assert multi.extra()
        wait_until(lambda: not multi.extra(), 2 + 5 + 8, "the idle session to be reaped")
        with pytest.raises(RuntimeError, match="session is closed"):
            env.step({"text": "SUBMIT"})
    finally:
        env.close()


def test_openenv_validate(servers):
    single, _ = servers
    out, err = single.validate.communicate(timeout=120)
    assert single.validate.returncode == 0, out + err
    report = json.loads(out)
    assert report["passed"] is True
    assert {c["id"] for c in report["criteria"]} >= {
        "health_endpoint",
        "schema_endpoint",
        "metadata_endpoint",
        "mcp_endpoint",
        "openapi_version_available",
    }


def test_shutdown_closes_open_sessions(servers):
    """SIGTERM with a session and its sandbox still open: the server exits 0
    and the sandbox goes with it."""
    _, multi = servers
    env = multi.client()
    try:
        env.reset(task_id=TASK)
        env.step({"text": fence("def second_largest(nums):\n    return 0\n")})
        assert multi.extra()
        multi.stop()
    finally:
        env.close()


def oracle_and_null(env_id: str) -> tuple[str, Sequence[Action], Sequence[Action]]:
    """A task of the env's bundled set, with its oracle and null actions."""
    env = gymnasium.make(env_id)
    try:
        task_id = unwrapped(env).task_set.tasks[0].id
        env.reset(options={"task_id": task_id})
        return task_id, unwrapped(env).oracle_actions(), unwrapped(env).null_actions()
    finally:
        env.close()


def as_openenv_action(action) -> dict:
    return {"text": "", "call": action} if isinstance(action, dict) else {"text": action}


def test_action_model():
    from sandgym.client import SandgymAction, as_action

    assert as_action("a raw reply").value == "a raw reply"
    assert SandgymAction.model_validate({"text": ""}).value == ""
    call = {"tool": "bash", "command": "ls"}
    assert SandgymAction.model_validate({"text": "", "call": call}).value == call
    assert SandgymAction.model_validate({"call": call}).value == call  # the earlier form, still accepted
    with pytest.raises(ValidationError, match="not both"):
        SandgymAction.model_validate({"text": "ls", "call": call})
    with pytest.raises(ValidationError, match="text"):
        SandgymAction.model_validate({})
    not_an_action: Any = 3
    with pytest.raises(TypeError, match="SandgymAction, a str"):
        as_action(not_an_action)


@pytest.mark.parametrize(
    "env_id", ["sandgym/SWERepo-v0", pytest.param("sandgym/BrowserForm-v0", marks=pytest.mark.chromium)]
)
def test_every_family_plays_whole_episodes(tmp_path, env_id):
    task_id, oracle, null = oracle_and_null(env_id)
    server = Server(tmp_path / "serve.log", "--env", env_id, "--session-timeout", "120")
    try:
        server.wait_healthy(time.monotonic() + STARTUP_S)
        with server.client() as env:
            for actions, reward, outcome in ((oracle, 1.0, "passed"), (null, 0.0, "failed")):
                r = env.reset(task_id=task_id)
                assert r.observation["task"] and not r.done
                for action in actions:
                    assert not r.done
                    r = env.step(as_openenv_action(action))
                assert r.done and r.reward == reward and r.observation["outcome"] == outcome, r.observation
            assert env.state()["task_id"] == task_id
    finally:
        server.stop()


def test_one_manifest_per_family():
    """manifests/<family>/openenv.yaml for every family of the table, read by
    openenv's own manifest parser, naming the family's app, env and task count."""
    import yaml
    from openenv.validation.parsers.openenv_yaml import OpenEnvYamlParser

    import sandgym.server
    from sandgym.families import FAMILIES

    root = Path(__file__).resolve().parents[2] / "manifests"
    assert {p.name for p in root.iterdir() if p.is_dir()} == set(FAMILIES)
    for name, family in FAMILIES.items():
        raw = yaml.safe_load((root / name / "openenv.yaml").read_text())
        manifest = OpenEnvYamlParser().parse(root / name)
        assert manifest.name == f"sandgym_{name}" and raw["env_id"] == family.env_id
        assert raw["app"] == f"sandgym.server:app_{name}" and raw["client"] == "sandgym.client:SandgymClient"
        assert manifest.capabilities.task_api
        size = len(TaskSet.load(bundled_task_set(name)))
        assert manifest.capabilities.declared_task_count == {"test": size}
    with pytest.raises(AttributeError):
        sandgym.server.app_no_such_family  # noqa: B018 - only family apps resolve


def test_env_options_come_from_sandgym_option_variables():
    """SANDGYM_<OPTION> for any option of the served env's spec, read as the
    type of its default; the server names no family's options itself."""
    from sandgym.server import options_from_environment

    code = {"SANDGYM_MODE": "multi", "SANDGYM_MAX_TURNS": "4", "SANDGYM_REWARD": "pass_rate", "SANDGYM_MAX_STEPS": "9"}
    assert options_from_environment("sandgym/CodeFunction-v0", code) == {
        "mode": "multi",
        "max_turns": 4,
        "reward": "pass_rate",
    }
    browser = {"SANDGYM_MAX_STEPS": "9", "SANDGYM_SCREENSHOT": "true", "SANDGYM_TASKS": "x", "SANDGYM_RUNTIME": "y"}
    assert options_from_environment("sandgym/BrowserForm-v0", browser) == {"max_steps": 9, "screenshot": True}
    assert options_from_environment("sandgym/SWERepo-v0", {"SANDGYM_COMMAND_TIMEOUT_S": "10"}) == {
        "command_timeout_s": 10.0
    }
    with pytest.raises(ValueError, match="SANDGYM_SCREENSHOT='maybe'"):
        options_from_environment("sandgym/BrowserForm-v0", {"SANDGYM_SCREENSHOT": "maybe"})
