"""sandgym's SWE env played end to end by Prime Intellect's `verifiers`
(0.4.0 from PyPI) with its own engine and its own OpenEnv integration.

Run:

    .venv/bin/python examples/verifiers_openenv.py --policy oracle --json runs/vf-oracle.json
    .venv/bin/python examples/verifiers_openenv.py --policy null --json runs/vf-null.json

What runs, all on loopback:

- `sandgym serve --env sandgym/SWERepo-v0 --runtime local`: the real server,
  every episode in sandboxes of its own, judged by the SWE verifier;
- a scripted OpenAI-compatible model server (this process): `oracle` sends
  the task's gold patch through the `bash` tool, then `submit`; `null` only
  submits (the repository unchanged);
- `vf-eval sandgym-openenv ...` in verifiers' own virtualenv: verifiers'
  OpenEnv env (`OpenEnvEnv`) steps the server with the model's replies, one
  JSON action per turn, the model reached through verifiers' `null` harness
  (its plain chat program) on its `subprocess` runtime. The taskset is
  `examples/sandgym_openenv/`: verifiers' OpenEnv taskset with one task per
  served task id (from the server's task list).

It reads verifiers' own records (`traces.jsonl`) and writes
`{"episodes": N, "reward_mean": R}` to `--json` (oracle 1.0, null 0.0), and
prints the outcomes sandgym's server counted (`passed`, `failed` ...). An
episode verifiers recorded as failed (an error, not a score), or one sandgym
could not judge (`env_error`, which verifiers' OpenEnv env scores 0.0),
makes it exit 1.

verifiers pins `openai<3` and `mcp==2.0.0`, which sandgym's lock does not
allow, so it lives in a virtualenv of its own:
`/var/cache/sandgym/verifiers-0.4.0` ($SANDGYM_VERIFIERS_VENV), made from
`examples/verifiers_openenv.requirements.txt` (every version pinned, wheels
only) by `--setup` (scripts/setup.sh runs it) or on first use. The chat
program's packages are kept there as wheels too (`wheelhouse/`), and uv
installs them from there alone: nothing is fetched while episodes run.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from sandgym.envs.swe_repo.actions import null_actions, oracle_actions
from sandgym.specs import TaskSet, bundled_task_set
from sandgym.specs.swe_repo import SWETaskPair

VERSION = "0.4.0"
HERE = Path(__file__).resolve().parent
REQUIREMENTS = HERE / "verifiers_openenv.requirements.txt"
VENV = Path(os.environ.get("SANDGYM_VERIFIERS_VENV", f"/var/cache/sandgym/verifiers-{VERSION}"))
READY = ".sandgym-ready"  # holds the hash of the requirements the venv was made from
ENV_ID = "sandgym/SWERepo-v0"
KEY_VAR = "SANDGYM_SCRIPTED_MODEL_KEY"  # the scripted model's "API key", for verifiers' client
STARTUP_S = 120.0

Action = dict[str, Any]


# -- verifiers' virtualenv ------------------------------------------------------------------


def requirements_hash() -> str:
    return hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()


def venv_ready(venv: Path = VENV) -> bool:
    """Whether `venv` was made, whole, from the current requirements."""
    try:
        return (venv / READY).read_text() == requirements_hash()
    except OSError:
        return False


def make_venv(venv: Path = VENV) -> Path:
    """verifiers' virtualenv, made (once, under a lock) when absent or made from
    other requirements: the pinned wheels, then the wheels of the packages
    verifiers' chat program declares (its PEP 723 header), for uv to install
    from offline."""
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f".{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if venv_ready(venv):
            return venv
        py = str(venv / "bin" / "python")
        pip = [py, "-m", "pip", "--disable-pip-version-check", "--quiet"]
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run([*pip, "install", "--only-binary", ":all:", "-r", str(REQUIREMENTS)], check=True)
        program = subprocess.run(
            [py, "-c", "from verifiers.v1.harnesses.utils.launch import CHAT_PROGRAM; print(CHAT_PROGRAM)"],
            check=True,
            capture_output=True,
            text=True,
            cwd=venv,  # not a folder with a `verifiers/` of its own (sandgym's checkout has one)
        ).stdout
        found = re.search(r"^# dependencies = (\[.*\])$", program, re.M)
        if not found:
            raise RuntimeError(f"no dependencies in verifiers' chat program header:\n{program}")
        wheels = ["download", "--only-binary", ":all:", "-c", str(REQUIREMENTS), "-d", str(venv / "wheelhouse")]
        subprocess.run([*pip, *wheels, *json.loads(found.group(1))], check=True)
        (venv / READY).write_text(requirements_hash())
    return venv


def vf_environ(venv: Path) -> dict[str, str]:
    """The environment `vf-eval` runs in: verifiers' venv first on PATH (its
    `uv`), this folder on PYTHONPATH (the `sandgym-openenv` taskset), and uv
    held to the venv's wheelhouse with no index and no Python downloads."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env.update(
        PATH=f"{venv / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}",
        PYTHONPATH=str(HERE),
        UV_NO_INDEX="1",
        UV_FIND_LINKS=str(venv / "wheelhouse"),
        UV_PYTHON_DOWNLOADS="never",
        UV_PYTHON=str(venv / "bin" / "python"),  # the wheelhouse's interpreter
        UV_CACHE_DIR=str(venv / "uv-cache"),
        HF_HUB_OFFLINE="1",
        NO_COLOR="1",
    )
    env[KEY_VAR] = "scripted"
    return env


# -- the scripted model -----------------------------------------------------------------------


def scripted_actions(policy: str) -> dict[str, list[Action]]:
    """Per task id of the SWE family's bundled set, the actions the model plays
    in order (as `sandgym.policies` does: the env's oracle and null actions)."""
    if policy not in ("oracle", "null"):
        raise ValueError(f"policy {policy!r}: oracle or null")
    plays: dict[str, list[Action]] = {}
    for task in TaskSet.load(bundled_task_set("swe_repo")).tasks:
        pair = SWETaskPair.of(task)
        plays[pair.visible.id] = oracle_actions(pair.hidden.patch) if policy == "oracle" else null_actions()
    return plays


def text_of(content: Any) -> str:
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def reply_for(plays: dict[str, list[Action]], messages: list[dict[str, Any]]) -> str:
    """The next action, as the JSON object verifiers' OpenEnv env sends to the
    server. Each user turn is that env's payload, `{"observation": ...,
    "action_schema": ...}`; the observation names the task; the number of
    assistant turns so far is the step."""
    task_id = None
    for m in messages:
        if m.get("role") == "user":
            with contextlib.suppress(ValueError, AttributeError):
                task_id = json.loads(text_of(m.get("content"))).get("observation", {}).get("task_id") or task_id
    if task_id not in plays:
        return json.dumps({"text": "I cannot tell which task this is."})
    script = plays[task_id]
    step = sum(m.get("role") == "assistant" for m in messages)
    return json.dumps({"text": "", "call": script[min(step, len(script) - 1)]})


@contextlib.contextmanager
def model_server(reply: Callable[[list[dict[str, Any]]], str]) -> Iterator[str]:
    """An OpenAI-compatible chat endpoint on loopback (streamed and plain
    replies); yields its base URL (`.../v1`)."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path.rstrip("/").endswith("/models"):
                return self.send(200, json.dumps({"object": "list", "data": [{"id": "scripted"}]}).encode())
            self.send(404, b'{"error": {"message": "not found"}}')

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            if not self.path.rstrip("/").endswith("/chat/completions"):
                return self.send(404, b'{"error": {"message": "not found"}}')
            text = reply(body.get("messages", []))
            prompt_tokens = sum(len(text_of(m.get("content"))) for m in body.get("messages", [])) // 4
            usage = {"prompt_tokens": prompt_tokens, "completion_tokens": len(text) // 4 + 1}
            usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
            head = {"id": f"scripted-{time.monotonic_ns()}", "created": int(time.time()), "model": body.get("model")}
            if not body.get("stream"):
                message = {"role": "assistant", "content": text}
                choice = {"index": 0, "message": message, "finish_reason": "stop"}
                done = {**head, "object": "chat.completion", "choices": [choice], "usage": usage}
                return self.send(200, json.dumps(done).encode())
            chunk = {**head, "object": "chat.completion.chunk"}
            events = [
                {**chunk, "choices": [{"index": 0, "delta": {"role": "assistant", "content": text}}]},
                {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
            ]
            if (body.get("stream_options") or {}).get("include_usage"):
                events.append({**chunk, "choices": [], "usage": usage})
            sse = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
            self.send(200, sse.encode(), "text/event-stream")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


# -- sandgym's server -----------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def sandgym_server(log: Path, sessions: int) -> Iterator[str]:
    """`sandgym serve` for the SWE env on loopback, local runtime; yields its URL
    once healthy and stops it (SIGTERM) after."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "sandgym.cli", "serve", "--env", ENV_ID, "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--runtime", "local", "--max-sessions", str(sessions)]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + STARTUP_S
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"sandgym serve exited with {proc.returncode}; see {log}")
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                        break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"sandgym serve not healthy after {STARTUP_S:g} s; see {log}")
                time.sleep(0.2)
            yield url
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


# -- the run ----------------------------------------------------------------------------------


def toml_str(value: str) -> str:
    return json.dumps(value)  # a TOML basic string: JSON's escapes are TOML's


def vf_eval(venv: Path, serve_url: str, model_url: str, policy: str, out: Path, tasks: int, concurrency: int) -> Path:
    """One `vf-eval` run; returns its run folder (verifiers' `traces.jsonl` in it).
    The run is described in a config file (`vf-eval @ FILE`): verifiers 0.4.0's
    command line cannot name an OpenEnv taskset, whose config it builds from
    the taskset id alone before reading `--env.taskset.base_url`."""
    run = f"sandgym-{policy}"
    config = out / "eval.toml"
    config.write_text(
        f"""model = {toml_str(f"scripted-{policy}")}
max_concurrent = {concurrency}
push = false
output_dir = {toml_str(str(out))}

[run]
name = {toml_str(run)}

[client]
base_url = {toml_str(model_url)}
api_key_var = {toml_str(KEY_VAR)}

[select]
limit = {tasks}

[env.taskset]
id = "sandgym-openenv"
base_url = {toml_str(serve_url)}

[env.player]
max_turns = 20

[env.player.harness]
id = "null"

[env.player.runtime]
type = "subprocess"
"""
    )
    cmd = [str(venv / "bin" / "vf-eval"), "@", str(config), "--no-rich"]
    with open(out / "vf-eval.log", "wb") as log:
        done = subprocess.run(cmd, env=vf_environ(venv), stdout=log, stderr=subprocess.STDOUT, cwd=out, timeout=1800)
    if done.returncode != 0:
        tail = (out / "vf-eval.log").read_text(errors="replace")[-3000:]
        raise RuntimeError(f"vf-eval exited with {done.returncode}:\n{tail}")
    return out / run


def summarize(run_dir: Path) -> tuple[dict[str, Any], list[str]]:
    """`{"episodes", "reward_mean"}` from verifiers' own records, and the
    episodes it recorded as failed (not scored)."""
    rewards: list[float] = []
    failed: list[str] = []
    for line in (run_dir / "traces.jsonl").read_text().splitlines():
        if not line.strip():
            continue
        episode = json.loads(line)
        name = episode.get("task", {}).get("data", {}).get("name") or episode.get("id")
        traces = episode.get("traces", [])
        if not episode.get("ok") or not traces or not all(t.get("ok") for t in traces):
            errors = episode.get("errors", []) + [e for t in traces for e in t.get("errors", [])]
            failed.append(f"{name}: {json.dumps(errors)[:2000]}")
            continue
        rewards.append(sum(r["score"] * r.get("weight", 1.0) for t in traces for r in t["rewards"].values() if r))
    mean = sum(rewards) / len(rewards) if rewards else 0.0
    return {"episodes": len(rewards), "reward_mean": mean}, failed


def served_outcomes(serve_url: str) -> dict[str, int]:
    """The outcomes of the episodes the server judged (its Prometheus
    `sandgym_episodes_total{outcome}`): verifiers' OpenEnv env reads only the
    reward, which is 0.0 for an `env_error` too, so this tells a failed
    answer from an episode sandgym could not judge."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"{serve_url}/metrics", timeout=30).raise_for_status().text
    counts: dict[str, int] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "sandgym_episodes_total" and sample.value:
                counts[sample.labels["outcome"]] = counts.get(sample.labels["outcome"], 0) + int(sample.value)
    return counts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--policy", choices=["oracle", "null"], default="oracle")
    ap.add_argument("--json", type=Path, help="write {episodes, reward_mean} here")
    ap.add_argument("--tasks", type=int, default=5, help="SWE tasks to play (the bundled set has 5)")
    ap.add_argument("--concurrency", type=int, default=2, help="episodes at once")
    ap.add_argument("--venv", type=Path, default=VENV, help="verifiers' virtualenv (made when absent)")
    ap.add_argument("--out", type=Path, help="folder for the logs and verifiers' records (default: a temp dir)")
    ap.add_argument("--setup", action="store_true", help="only make verifiers' virtualenv, then exit")
    args = ap.parse_args(argv)

    venv = make_venv(args.venv)
    if args.setup:
        print(f"verifiers {VERSION}: {venv}")
        return 0
    plays = scripted_actions(args.policy)
    with contextlib.ExitStack() as stack:
        out = args.out or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="sandgym-vf-")))
        out.mkdir(parents=True, exist_ok=True)
        serve_url = stack.enter_context(sandgym_server(out / "serve.log", sessions=max(args.concurrency, 1) + 1))
        model_url = stack.enter_context(model_server(lambda messages: reply_for(plays, messages)))
        run_dir = vf_eval(venv, serve_url, model_url, args.policy, out, args.tasks, args.concurrency)
        summary, failed = summarize(run_dir)
        outcomes = served_outcomes(serve_url)
    print(json.dumps(summary))
    print(f"outcomes (sandgym serve's /metrics): {json.dumps(outcomes, sort_keys=True)}")
    unjudged = {k: n for k, n in outcomes.items() if k in ("env_error", "not_executed")}
    if unjudged:
        failed.append(
            f"sandgym could not judge {sum(unjudged.values())} episode(s) {unjudged}, scored 0.0 by verifiers"
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(summary) + "\n")
    for f in failed:
        print(f"episode failed in verifiers (not scored): {f}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
