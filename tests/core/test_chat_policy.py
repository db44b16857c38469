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
from tests.helpers import swe_tasks, unwrapped

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


def completion(message: dict, model: str, usage: tuple[int, int] = (10, 5)) -> bytes:
    body = {
        "id": "x",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)},
    }
    return json.dumps(body).encode()


class Endpoint:
    """A scripted OpenAI-compatible endpoint on loopback (a real HTTP server):
    GET /v1/models and POST /v1/chat/completions; `mode` picks the reply.
    Every request is kept (`requests`: bodies; `headers`, lower-cased names;
    `paths`: method and path, in order)."""

    def __init__(self):
        self.mode = "text"
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self.paths: list[str] = []
        self.delay = 0.0
        self.fail_first = 0
        self.script: list[dict] = []  # mode "script": these assistant messages, in order
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                endpoint.paths.append(f"GET {self.path}")
                endpoint.headers.append({k.lower(): v for k, v in self.headers.items()})
                if endpoint.mode == "401":
                    return self._send(401, b'{"error": {"message": "invalid api key"}}')
                if self.path != "/v1/models":
                    return self._send(404, b'{"error": {"message": "not found"}}')
                self._send(200, b'{"object": "list", "data": [{"id": "scripted", "object": "model"}]}')

            def do_POST(self):
                endpoint.paths.append(f"POST {self.path}")
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                endpoint.requests.append(body)
                endpoint.headers.append({k.lower(): v for k, v in self.headers.items()})
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
                    return self._send(200, completion(endpoint.script.pop(0), body["model"]))
                task = next(m["content"] for m in body["messages"] if m["role"] == "user")
                name = next(n for n in REFS if f"`{n}`" in task)
                code = REFS[name]
                turn = sum(m["role"] == "assistant" for m in body["messages"])
                if endpoint.mode == "text":
                    message = {"role": "assistant", "content": f"Here:\n```python\n{code}```"}
                elif endpoint.mode == "tools" or (endpoint.mode == "multi" and turn > 0):
                    message = call("submit_code", "c1", code=code)
                else:  # multi, first turn: run a wrong version first
                    message = call("run_code", "c0", code=f"def {name}(*a):\n    return 0\n")
                self._send(200, completion(message, body["model"]))

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


def call(name: str, call_id: str = "c", content: str | None = None, **args) -> dict:
    """An assistant message with one tool call."""
    return calls(content, (name, call_id, args))


def calls(content: str | None, *made: tuple[str, str, dict]) -> dict:
    """An assistant message with these (name, id, arguments) tool calls."""
    return {
        "role": "assistant",
        "content": content,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}} for n, i, a in made
        ],
    }


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
    assert all(h.get("authorization") == "Bearer sk-test-secret-123" for h in endpoint.headers)
    assert all(b["seed"] == 7 and b["model"] == "scripted" for b in endpoint.requests)
    if mode == "multi":
        assert all([s["tool"] for s in rec["steps"]] == ["run", "submit"] for rec in recs)
        assert all("FAILED" in rec["steps"][0]["observation"] for rec in recs)
        # The run's feedback went back to the model as a tool message answering the call.
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


# -- the message sequence, family by family -----------------------------------------------------------


def test_code_multi_turn_message_sequence(task_set, runtime, endpoint, tmp_path):
    """Tool calls are kept on the assistant turn and answered by tool messages
    (a second call of one reply answered as not run); a text reply's feedback
    is a user turn; usage and messages land in the record."""
    from sandgym.chat_policy import DEFAULT_SYSTEM_PROMPT, ONE_CALL_PER_TURN

    wrong = "def add(a, b):\n    return 0\n"
    endpoint.mode = "script"
    endpoint.script = [
        calls(None, ("run_code", "c0", {"code": wrong}), ("submit_code", "c1", {"code": REFS["add"]})),
        {"role": "assistant", "content": "It returned 0.\nSUBMIT\n```python\n" + wrong + "```"},
        {"role": "assistant", "content": "Wrong again; I will fix it.\n```python\n" + REFS["add"] + "```"},
    ]
    policy = make_policy(f"openai:scripted@{endpoint.url}", max_tokens=300)
    kwargs = {"mode": "multi", "max_turns": 3}
    EvalRun("sandgym/CodeFunction-v0", task_set, policy, runtime, "local", tmp_path / "o", env_kwargs=kwargs).run(
        task_ids=["m/add"]
    )
    rec = records(tmp_path / "o")[0]
    # Turn 2 submitted the wrong code: the episode ends there, failed (the third reply is never asked for).
    assert [s["tool"] for s in rec["steps"]] == ["run", "submit"] and rec["outcome"] == "failed"
    assert len(endpoint.requests) == 2 and endpoint.script[0]["content"].startswith("Wrong again")
    task = endpoint.requests[0]["messages"][1]["content"]
    first, second = endpoint.requests
    assert first["messages"] == [
        {"role": "system", "content": DEFAULT_SYSTEM_PROMPT},
        {"role": "user", "content": task},
    ]
    assert {t["function"]["name"] for t in first["tools"]} == {"run_code", "submit_code"}
    assert first["max_tokens"] == 300
    assert second["messages"] == [
        *first["messages"],
        calls(None, ("run_code", "c0", {"code": wrong}), ("submit_code", "c1", {"code": REFS["add"]})),
        {"role": "tool", "tool_call_id": "c0", "content": rec["steps"][0]["observation"]},
        {"role": "tool", "tool_call_id": "c1", "content": ONE_CALL_PER_TURN},
    ]
    assert "FAILED" in rec["steps"][0]["observation"]
    data = rec["policy_data"]
    assert data["messages"] == [
        *second["messages"],
        {"role": "assistant", "content": "It returned 0.\nSUBMIT\n```python\n" + wrong + "```"},
    ]
    assert data["usage"] == {"prompt_tokens": 20, "completion_tokens": 10, "total_tokens": 30, "requests": 2}
    assert rec["policy"]["max_tokens"] == 300


def test_text_reply_feedback_is_a_user_turn(task_set, runtime, endpoint, tmp_path):
    endpoint.mode = "script"
    endpoint.script = [
        {"role": "assistant", "content": "First a try.\n```python\ndef add(a, b):\n    return a - b\n```"},
        call("submit_code", "s", code=REFS["add"]),
    ]
    policy = make_policy(f"openai:scripted@{endpoint.url}", system_prompt="")
    kwargs = {"mode": "multi", "max_turns": 3}
    EvalRun("sandgym/CodeFunction-v0", task_set, policy, runtime, "local", tmp_path / "o", env_kwargs=kwargs).run(
        task_ids=["m/add"]
    )
    rec = records(tmp_path / "o")[0]
    assert rec["outcome"] == "passed" and [s["tool"] for s in rec["steps"]] == ["run", "submit"]
    # No system prompt (""); the run's feedback after a text reply is the next user turn.
    assert [m["role"] for m in endpoint.requests[1]["messages"]] == ["user", "assistant", "user"]
    assert endpoint.requests[1]["messages"][-1]["content"] == rec["steps"][0]["observation"]
    assert rec["policy"]["system_prompt"] == ""


def test_a_bad_tool_call_is_told_to_the_model_and_asked_again(task_set, runtime, endpoint, tmp_path):
    endpoint.mode = "script"
    endpoint.script = [
        call("run_code", "a", code=REFS["add"]),  # single mode has no run_code
        call("submit_code", "b", code=5),
        call("submit_code", "c", code=REFS["add"]),
    ]
    policy = make_policy(f"openai:scripted@{endpoint.url}")
    EvalRun("sandgym/CodeFunction-v0", task_set, policy, runtime, "local", tmp_path / "o").run(task_ids=["m/add"])
    rec = records(tmp_path / "o")[0]
    assert rec["outcome"] == "passed" and len(rec["steps"]) == 1
    last = endpoint.requests[2]["messages"]
    assert [m["role"] for m in last[-4:]] == ["assistant", "tool", "assistant", "tool"]
    assert last[-3]["tool_call_id"] == "a" and "unknown tool 'run_code'" in last[-3]["content"]
    assert last[-1]["tool_call_id"] == "b" and "argument `code`" in last[-1]["content"]
    assert rec["policy_data"]["usage"]["requests"] == 3


def test_swe_episode_message_sequence(runtime, endpoint, tmp_path):
    from sandgym.envs.swe_repo.actions import TOOLS
    from sandgym.specs import bundled_dir

    swe_set = TaskSet.load(bundled_dir() / "swe_repo" / "billing-v1")
    task = swe_tasks(swe_set)[0]
    apply = f"I will apply the fix.\n```bash\ngit apply <<'EOF'\n{task.hidden.patch}EOF\n```"
    endpoint.mode = "script"
    endpoint.script = [
        call("bash", "c0", content="Let me look.", command="git status --short && ls"),
        {"role": "assistant", "content": apply},
        call("view", "c2", path="README.md", start=1, end=3),
        call("submit", "c3"),
    ]
    policy = make_policy(f"openai:scripted@{endpoint.url}")
    summary = EvalRun("sandgym/SWERepo-v0", swe_set, policy, runtime, "local", tmp_path / "o").run(task_ids=[task.id])
    rec = records(tmp_path / "o")[0]
    assert summary.outcomes["passed"] == 1, rec
    assert [s["tool"] for s in rec["steps"]] == ["bash", "bash", "view", "submit"] and rec["status"] == "FULL"
    assert {t["function"]["name"] for t in endpoint.requests[0]["tools"]} == set(TOOLS)
    obs = [s["observation"] for s in rec["steps"]]
    assert "billing" in obs[0]
    messages = rec["policy_data"]["messages"]
    assert [(m["role"], m.get("tool_call_id")) for m in messages] == [
        ("system", None),
        ("user", None),
        ("assistant", None),
        ("tool", "c0"),
        ("assistant", None),
        ("user", None),
        ("assistant", None),
        ("tool", "c2"),
        ("assistant", None),
    ]
    assert [m["content"] for m in messages if m["role"] in ("tool", "user")][1:] == obs[:3]
    assert messages[2] == call("bash", "c0", content="Let me look.", command="git status --short && ls")
    assert endpoint.requests[3]["messages"] == messages[:-1]
    assert rec["policy_data"]["usage"]["total_tokens"] == 4 * 15


# -- tools made from the action models -----------------------------------------------------------


def example_arguments(schema: dict, everything: bool) -> dict:
    """Arguments for a tool schema: the required ones, or every one."""
    values = {"string": "x = 1\nprint('a b')\n", "integer": 3, "array": ["tests/test_a.py::test_b"]}
    names = schema["properties"] if everything else schema["required"]
    return {n: values[schema["properties"][n]["type"]] for n in names}


def test_code_tools_round_trip_through_the_parser(task_set, runtime):
    import gymnasium
    import jsonschema

    from sandgym.envs.code_function.actions import TOOL_MODELS, parse_action

    for mode in ("single", "multi"):
        env = gymnasium.make("sandgym/CodeFunction-v0", tasks=task_set, runtime=runtime, mode=mode)
        try:
            tools = unwrapped(env).chat_tools()
            assert tools is not None
            assert [t["function"]["name"] for t in tools] == (["run_code"] if mode == "multi" else []) + ["submit_code"]
            for tool in tools:
                fn = tool["function"]
                jsonschema.Draft202012Validator.check_schema(fn["parameters"])
                assert fn["description"] and set(fn["parameters"]["properties"]) == set(
                    TOOL_MODELS[fn["name"]].model_fields
                )
                args = {"code": REFS["add"]}
                jsonschema.validate(args, fn["parameters"])
                text = unwrapped(env).tool_action(fn["name"], args)
                assert isinstance(text, str)  # the code env's actions are text
                parsed = parse_action(text, "add", multi_turn=mode == "multi")
                assert parsed.code == REFS["add"]
                assert parsed.submit == (fn["name"] == "submit_code" or mode == "single")
            with pytest.raises(ValueError, match="argument `code`"):
                unwrapped(env).tool_action("submit_code", {})
            with pytest.raises(ValueError, match="argument `extra`"):
                unwrapped(env).tool_action("submit_code", {"code": "x", "extra": 1})
        finally:
            env.close()


def test_swe_tools_round_trip_through_the_parser():
    import jsonschema

    from sandgym.envs.swe_repo.actions import KEYS, TOOLS, chat_tools, parse_action, tool_action

    tools = chat_tools()
    assert [t["function"]["name"] for t in tools] == list(TOOLS)
    for tool in tools:
        fn = tool["function"]
        params = fn["parameters"]
        jsonschema.Draft202012Validator.check_schema(params)
        accepted, required = KEYS[fn["name"]]
        assert fn["description"] and set(params["properties"]) == accepted and set(params["required"]) == required
        for everything in (False, True):
            args = example_arguments(params, everything)
            jsonschema.validate(args, params)
            call = parse_action(tool_action(fn["name"], args))
            assert (call.tool, call.args) == (fn["name"], args)
        extra = {**example_arguments(params, False), "colour": "red"}
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(extra, params)
        with pytest.raises(ValueError, match="argument `colour`"):
            tool_action(fn["name"], extra)
    with pytest.raises(ValueError, match="unknown tool 'rm'"):
        tool_action("rm", {})


def test_reasoning_before_the_fenced_action():
    from sandgym.envs.code_function.actions import parse_action as code_action
    from sandgym.envs.swe_repo.actions import parse_action as swe_action

    block = "```python\n" + REFS["add"] + "```"
    p = code_action("I will fix the sign.\n" + block, "add", multi_turn=False)
    assert p.submit and p.code == REFS["add"]
    p = code_action("The examples pass, so:\nSUBMIT\n" + block, "add", multi_turn=True)
    assert p.submit and p.code == REFS["add"]
    p = code_action("Trying it first.\n" + block, "add", multi_turn=True)
    assert not p.submit and p.code == REFS["add"]
    p = code_action("All examples pass.\nsubmit\n", "add", multi_turn=True)
    assert p.submit and p.code is None
    call = swe_action("Let me see the files.\n```bash\nls -la\n```\n")
    assert (call.tool, call.args) == ("bash", {"command": "ls -la"})
    # Code quoted in the reasoning, in a block that names no tool, is text.
    call = swe_action("The bug is here:\n```python\nreturn a - b\n```\nSo:\n```view billing/money.py 3 9\n```")
    assert (call.tool, call.args) == ("view", {"path": "billing/money.py", "start": 3, "end": 9})
    with pytest.raises(ValueError, match="none names a tool"):
        swe_action("```python\nx\n```\n```diff\n-y\n```")
    with pytest.raises(ValueError, match="exactly one"):
        swe_action("```python\nx\n```\n```bash\nls\n```\n```submit\n```")


# -- the CLI: options, and the preflight that fails a run fast -----------------------------------------


def cli_eval(task_set, out: Path, *extra: str):
    from typer.testing import CliRunner

    from sandgym.cli import app

    return CliRunner().invoke(app, ["eval", "--tasks", str(task_set.root), "--out", str(out), *extra])


def test_cli_options_reach_the_requests_and_the_records(task_set, endpoint, tmp_path):
    prompt = tmp_path / "system.txt"
    prompt.write_text("Be brief. Reply with code only.\n")
    result = cli_eval(
        task_set,
        tmp_path / "o",
        "--policy",
        f"openai:scripted@{endpoint.url}",
        "--max-tokens",
        "64",
        "--system-prompt",
        f"@{prompt}",
        "-j",
        "1",
    )
    assert result.exit_code == 0, result.output
    assert endpoint.paths[0] == "GET /v1/models" and endpoint.paths.count("GET /v1/models") == 1
    assert len(endpoint.requests) == 3
    assert all(b["max_tokens"] == 64 for b in endpoint.requests)
    assert all(
        b["messages"][0] == {"role": "system", "content": "Be brief. Reply with code only.\n"}
        for b in endpoint.requests
    )
    for rec in records(tmp_path / "o"):
        assert rec["policy"]["max_tokens"] == 64 and rec["policy"]["system_prompt"].startswith("Be brief.")
        assert rec["policy_data"]["usage"] == {
            "prompt_tokens": 10,
            "completion_tokens": 5,
            "total_tokens": 15,
            "requests": 1,
        }


def test_preflight_fails_the_run_fast(task_set, endpoint, tmp_path):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    s.close()
    result = cli_eval(task_set, tmp_path / "dead", "--policy", f"openai:m@{dead}")
    assert result.exit_code == 2
    assert "cannot reach" in result.output and dead in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert not (tmp_path / "dead" / "trajectories.jsonl").exists()

    endpoint.mode = "401"
    result = cli_eval(task_set, tmp_path / "key", "--policy", f"openai:m@{endpoint.url}")
    assert result.exit_code == 2 and "refused the API key (HTTP 401)" in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert endpoint.paths == ["GET /v1/models"]  # one request, no task played
    assert not (tmp_path / "key" / "trajectories.jsonl").exists()


def test_chat_options_need_the_openai_policy(task_set, tmp_path):
    result = cli_eval(task_set, tmp_path / "o", "--policy", "oracle", "--max-tokens", "10")
    assert result.exit_code == 2 and "--max-tokens and --system-prompt are for the openai" in result.output
    result = cli_eval(
        task_set, tmp_path / "o", "--policy", "openai:m@http://127.0.0.1:9/v1", "--system-prompt", "@/nonexistent/p.txt"
    )
    assert result.exit_code == 2 and "--system-prompt @/nonexistent/p.txt: cannot read it" in result.output


@pytest.mark.chromium
def test_browser_episode_message_sequence(runtime, endpoint, tmp_path):
    from sandgym.chat_policy import ONE_CALL_PER_TURN

    endpoint.mode = "script"
    endpoint.script = [
        call("fill", "b0", content="The username first.", bid="textbox:Username", value="alice"),
        {"role": "assistant", "content": 'Now the password.\n```\nfill("textbox:Password", "wonderland")\n```'},
        calls(None, ("click", "b2", {"bid": "button:Sign in"}), ("done", "b3", {})),
        call("done", "b4"),
    ]
    policy = make_policy(f"openai:scripted@{endpoint.url}")
    tasks = TaskSet.load("browser_form/basic-v1")
    summary = EvalRun("sandgym/BrowserForm-v0", tasks, policy, runtime, "local", tmp_path / "o").run(
        task_ids=["forms/login-alice"]
    )
    rec = records(tmp_path / "o")[0]
    assert summary.outcomes["passed"] == 1, rec
    assert len(rec["steps"]) == 4
    names = {t["function"]["name"] for t in endpoint.requests[0]["tools"]}
    assert {"fill", "click", "done", "select_option", "noop"} <= names
    messages = rec["policy_data"]["messages"]
    assert [(m["role"], m.get("tool_call_id")) for m in messages] == [
        ("system", None),
        ("user", None),
        ("assistant", None),
        ("tool", "b0"),
        ("assistant", None),
        ("user", None),
        ("assistant", None),
        ("tool", "b2"),
        ("tool", "b3"),
        ("assistant", None),
    ]
    obs = [s["observation"] for s in rec["steps"]]
    assert [m["content"] for m in messages if m["role"] in ("tool", "user")][1:] == [
        obs[0],
        obs[1],
        obs[2],
        ONE_CALL_PER_TURN,
    ]
    assert endpoint.requests[3]["messages"] == messages[:-1]
    assert rec["policy_data"]["usage"]["requests"] == 4
