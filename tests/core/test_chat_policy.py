"""The openai:MODEL@BASE_URL policy against a scripted endpoint on loopback,
and runs that are interrupted and resumed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from sandgym.chat_policy import ChatPolicy
from sandgym.harness import EvalRun
from sandgym.policies import NullPolicy, OraclePolicy, make_policy
from sandgym.specs import TaskSet

REFS = {
    "add": "def add(a, b):\n    return a + b\n",
    "neg": "def neg(a):\n    return -a\n",
    "sq": "def sq(a):\n    return a * a\n",
}


ANSWERS = {"add": ([3, 4], 7), "neg": ([3], -3), "sq": ([3], 9)}


def write_set(root: Path) -> Path:
    (root / "tasks").mkdir(parents=True)
    (root / "hidden").mkdir()
    (root / "taskset.yaml").write_text(yaml.safe_dump({"name": "chat-mini", "family": "code_function"}))
    for name, ref in REFS.items():
        args, expected = ANSWERS[name]
        (root / "tasks" / f"{name}.yaml").write_text(
            yaml.safe_dump(
                {
                    "id": f"m/{name}",
                    "prompt": f"Write `{name}`.",
                    "entry_point": name,
                    "examples": [{"args": args, "expected": expected}],
                }
            )
        )
        (root / "hidden" / f"{name}.yaml").write_text(
            yaml.safe_dump(
                {"id": f"m/{name}", "reference_solution": ref, "tests": [{"args": args, "expected": expected}]}
            )
        )
    return root


class Endpoint:
    """A scripted OpenAI-compatible chat endpoint. `mode` picks the reply."""

    def __init__(self):
        self.mode = "text"
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self.delay = 0.0
        self.fail_first = 0
        self.script: list[dict] = []  # mode "script": these assistant messages, in order
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                endpoint.requests.append(body)
                endpoint.headers.append(dict(self.headers))
                time.sleep(endpoint.delay)
                if endpoint.fail_first > 0:
                    endpoint.fail_first -= 1
                    return self._send(503, b'{"error": "busy"}')
                if endpoint.mode == "401":
                    return self._send(401, b'{"error": {"message": "invalid api key"}}')
                if endpoint.mode == "garbage":
                    return self._send(200, b"<html>not json</html>")
                if endpoint.mode == "nochoices":
                    return self._send(200, b'{"object": "error"}')
                if endpoint.mode == "script":
                    message = endpoint.script.pop(0)
                    return self._send(
                        200,
                        json.dumps(
                            {
                                "id": "x",
                                "object": "chat.completion",
                                "model": body["model"],
                                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                            }
                        ).encode(),
                    )
                task = body["messages"][1]["content"]
                name = next(n for n in REFS if f"`{n}`" in task)
                code = REFS[name]
                turn = sum(m["role"] == "assistant" for m in body["messages"])
                if endpoint.mode == "text":
                    message = {"role": "assistant", "content": f"Here:\n```python\n{code}```"}
                elif endpoint.mode == "tools" or (endpoint.mode == "multi" and turn > 0):
                    message = {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": "c1",
                                "type": "function",
                                "function": {"name": "submit_code", "arguments": json.dumps({"code": code})},
                            }
                        ],
                    }
                else:  # multi, first turn: run a wrong version first
                    message = {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": "c0",
                                "type": "function",
                                "function": {
                                    "name": "run_code",
                                    "arguments": json.dumps({"code": f"def {name}(*a):\n    return 0\n"}),
                                },
                            }
                        ],
                    }
                self._send(
                    200,
                    json.dumps(
                        {
                            "id": "x",
                            "object": "chat.completion",
                            "model": body["model"],
                            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                        }
                    ).encode(),
                )

            def _send(self, status, data):
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def endpoint():
    e = Endpoint()
    yield e
    e.close()


@pytest.fixture(scope="module")
def task_set(tmp_path_factory):
    return TaskSet.load(write_set(tmp_path_factory.mktemp("chat") / "ts"))


def records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("mode,env_mode", [("text", "single"), ("tools", "single"), ("multi", "multi")])
def test_scripted_endpoint_solves_every_task(task_set, runtime, endpoint, tmp_path, monkeypatch, mode, env_mode):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret-123")
    endpoint.mode = mode
    policy = make_policy(f"openai:scripted@{endpoint.url}", seed=7)
    r = EvalRun(
        "sandgym/CodeFunction-v0",
        task_set,
        policy,
        runtime,
        "local",
        tmp_path / "out",
        env_kwargs={"mode": env_mode, "max_turns": 3, "reward": "binary"},
        seed=7,
    )
    summary = r.run()
    assert summary.outcomes["passed"] == 3 and summary.reward_mean == 1.0
    recs = records(tmp_path / "out")
    assert all(rec["policy"]["model"] == "scripted" and rec["policy"]["seed"] == 7 for rec in recs)
    assert "sk-test-secret-123" not in (tmp_path / "out" / "trajectories.jsonl").read_text()
    assert all(h.get("Authorization") == "Bearer sk-test-secret-123" for h in endpoint.headers)
    assert all(b["seed"] == 7 and b["model"] == "scripted" for b in endpoint.requests)
    if mode == "multi":
        assert all([s["tool"] for s in rec["steps"]] == ["run", "submit"] for rec in recs)
        assert all("FAILED" in rec["steps"][0]["observation"] for rec in recs)
        # The feedback went back to the model as the next user turn.
        assert any(len(b["messages"]) == 4 for b in endpoint.requests)


@pytest.mark.parametrize(
    "mode,message", [("401", "refused the API key"), ("garbage", "not JSON"), ("nochoices", "not a chat completion")]
)
def test_endpoint_failures_are_recorded_not_crashes(task_set, runtime, endpoint, tmp_path, mode, message):
    endpoint.mode = mode
    policy = ChatPolicy("scripted", endpoint.url, retries=0)
    summary = EvalRun("sandgym/CodeFunction-v0", task_set, policy, runtime, "local", tmp_path / "o").run()
    assert summary.outcomes["env_error"] == 3 and summary.reward_mean is None
    for rec in records(tmp_path / "o"):
        assert rec["reward"] is None and message in rec["error"]
        # Played again once (the default), and the first try is kept.
        assert len(rec["retries"]) == 1 and message in rec["retries"][0]["error"]


def tool_call(name: str, **args) -> dict:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}],
    }


def test_tool_calls_drive_a_swe_episode(runtime, endpoint, tmp_path):
    from sandgym.envs.swe_repo.actions import TOOLS
    from sandgym.specs import bundled_dir

    swe_set = TaskSet.load(bundled_dir() / "swe_repo" / "billing-v1")
    task = swe_set.tasks[0]
    endpoint.mode = "script"
    endpoint.script = [
        tool_call("bash", command="git status --short && ls"),
        tool_call("bash", command=f"git apply <<'EOF'\n{task.hidden.patch}EOF\n"),
        tool_call("submit"),
    ]
    policy = make_policy(f"openai:scripted@{endpoint.url}")
    summary = EvalRun("sandgym/SWERepo-v0", swe_set, policy, runtime, "local", tmp_path / "o").run(task_ids=[task.id])
    assert summary.outcomes["passed"] == 1, records(tmp_path / "o")[0]
    rec = records(tmp_path / "o")[0]
    assert [s["tool"] for s in rec["steps"]] == ["bash", "bash", "submit"] and rec["status"] == "FULL"
    assert {t["function"]["name"] for t in endpoint.requests[0]["tools"]} == set(TOOLS)
    # The first command's output went back to the model as the next user turn.
    assert "billing" in endpoint.requests[1]["messages"][-1]["content"]


def test_unreachable_endpoint_and_retries(task_set, runtime, endpoint, tmp_path):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    s.close()
    summary = EvalRun(
        "sandgym/CodeFunction-v0", task_set, ChatPolicy("m", dead, retries=1), runtime, "local", tmp_path / "dead"
    ).run()
    assert summary.outcomes["env_error"] == 3
    assert all("cannot reach" in r["error"] for r in records(tmp_path / "dead"))
    # A busy endpoint (503) is retried and then answers.
    endpoint.fail_first = 2
    summary = EvalRun(
        "sandgym/CodeFunction-v0",
        task_set,
        ChatPolicy("m", endpoint.url, retries=3),
        runtime,
        "local",
        tmp_path / "busy",
        concurrency=1,
    ).run()
    assert summary.outcomes["passed"] == 3


def test_bad_policy_spec():
    with pytest.raises(ValueError, match="openai:MODEL@BASE_URL"):
        make_policy("openai:no-url")
    with pytest.raises(ValueError, match="choices: .*openai:MODEL@BASE_URL"):
        make_policy("gpt")


def test_resume_runs_only_what_is_missing(task_set, runtime, tmp_path):
    out = tmp_path / "r"
    first = EvalRun("sandgym/CodeFunction-v0", task_set, OraclePolicy(), runtime, "local", out)
    first.run(task_ids=["m/add"])
    with pytest.raises(FileExistsError, match="--resume"):
        EvalRun("sandgym/CodeFunction-v0", task_set, OraclePolicy(), runtime, "local", out).run()
    with pytest.raises(ValueError, match="policy"):
        EvalRun("sandgym/CodeFunction-v0", task_set, NullPolicy(), runtime, "local", out).run(resume=True)
    again = EvalRun("sandgym/CodeFunction-v0", task_set, OraclePolicy(), runtime, "local", out)
    summary = again.run(resume=True)
    recs = records(out)
    assert sorted(r["task_id"] for r in recs) == ["m/add", "m/neg", "m/sq"]
    assert len({r["run_id"] for r in recs}) == 1 and summary.n_episodes == 3
    assert summary.outcomes["passed"] == 3


def test_ctrl_c_keeps_finished_records_and_resume_finishes(task_set, endpoint, tmp_path):
    endpoint.delay = 0.7  # slow model: the run is interrupted mid-way
    out = tmp_path / "int"
    cmd = [
        str(Path(sys.executable).parent / "sandgym"),
        "eval",
        "--tasks",
        str(task_set.root),
        "--policy",
        f"openai:scripted@{endpoint.url}",
        "--out",
        str(out),
        "--concurrency",
        "1",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    traj = out / "trajectories.jsonl"
    while time.monotonic() < deadline and not (traj.exists() and traj.read_text().count("\n") >= 1):
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    assert proc.returncode != 0
    kept = records(out)
    assert 1 <= len(kept) < 3 and all(r["outcome"] == "passed" for r in kept)
    endpoint.delay = 0.0
    done = subprocess.run(cmd + ["--resume"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    recs = records(out)
    assert sorted(r["task_id"] for r in recs) == ["m/add", "m/neg", "m/sq"]
    assert json.loads((out / "summary.json").read_text())["outcomes"]["passed"] == 3
    assert os.path.exists(out / "summary.json")


def test_epochs_ask_the_endpoint_for_one_seed_per_epoch(task_set, runtime, endpoint, tmp_path):
    """--epochs N: epoch e resets and samples with seed + e, so samples of a task differ."""
    policy = make_policy(f"openai:scripted@{endpoint.url}", seed=3)
    r = EvalRun("sandgym/CodeFunction-v0", task_set, policy, runtime, "local", tmp_path / "out", seed=3, epochs=3)
    summary = r.run()
    assert summary.n_episodes == 9 and summary.samples_per_task == 3 and summary.pass_at_k == {"1": 1.0}
    assert sorted(b["seed"] for b in endpoint.requests) == [3, 3, 3, 4, 4, 4, 5, 5, 5]
    recs = records(tmp_path / "out")
    assert sorted((rec["epoch"], rec["seed"]) for rec in recs) == [(e, 3 + e) for e in range(3) for _ in range(3)]
    assert all(rec["policy"]["seed"] == 3 for rec in recs)  # the run's config; each record holds its own seed
