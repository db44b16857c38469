"""The OpenEnv server image: built here from sandgym's local images (no
registry, no network during the build), run with a plain `docker run -p`
(Docker's default seccomp profile and capabilities, no socket mount), and
played over whole episodes by sandgym's typed OpenEnv client, directly and
through openenv's `from_docker_image`.

This machine's engine runs with `--bridge=none`, so it has no default
bridge network and `-p` alone publishes nothing; each test container joins
a user-defined bridge network the module creates (what a stock engine's
default network is). Nothing else is added to the run.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import httpx
import pytest

from sandgym.serve_image import build, constraints_from_lock, run_command
from sandgym.specs import TaskSet, bundled_task_set
from sandgym.specs.code_function import CodeTaskPair

pytestmark = pytest.mark.docker

TASK = "basic/edit-distance"
STARTUP_S = 240.0  # openenv's import and the first jail (overlayfs copies /usr up once) on a busy 2-core host


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _client_class():
    # openenv imports its Gradio web UI eagerly; the client never uses it.
    blocked = "gradio" not in sys.modules
    if blocked:
        sys.modules["gradio"] = None  # type: ignore[assignment]
    try:
        from sandgym.client import SandgymClient
    finally:
        if blocked and sys.modules.get("gradio", 0) is None:
            del sys.modules["gradio"]
    return SandgymClient


def wait_healthy(url: str, container: str, deadline: float) -> None:
    while True:
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            logs = subprocess.run(["docker", "logs", container], capture_output=True, text=True)
            pytest.fail(f"the server container did not come up:\n{(logs.stdout + logs.stderr)[-3000:]}")
        time.sleep(0.5)


@pytest.fixture(scope="module")
def tag():
    return build(log=lambda m: None)


@pytest.fixture(scope="module")
def network():
    name = f"sandgym-serve-test-{os.getpid()}"
    subprocess.run(["docker", "network", "create", name], check=True, capture_output=True)
    yield name
    subprocess.run(["docker", "network", "rm", name], capture_output=True)


@pytest.fixture(scope="module")
def served(tag, network):
    port = free_port()
    name = f"sandgym-serve-test-{port}"
    cmd = run_command(tag, port, network=network)
    cmd[2:2] = ["-d", "--name", name]
    subprocess.run(cmd, check=True, capture_output=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, name, time.monotonic() + STARTUP_S)
        yield url, name
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)


def test_the_run_is_plain(tag, served):
    cmd = run_command(tag, 8000)
    assert cmd == [
        "docker",
        "run",
        "--rm",
        "-p",
        "127.0.0.1:8000:8000",
        "-e",
        "SANDGYM_ENV=sandgym/CodeFunction-v0",
        tag,
    ]
    _, name = served
    host = json.loads(subprocess.run(["docker", "inspect", name], capture_output=True, text=True).stdout)[0]
    hc = host["HostConfig"]
    assert not hc.get("SecurityOpt") and not hc["Privileged"] and not hc.get("CapAdd"), hc
    assert not hc.get("Binds") and not host.get("Mounts"), "no engine socket, no host folder"
    assert hc["Runtime"] == "runc"


def test_the_image_is_tagged_by_content_and_built_once(tag):
    # Built again with nothing changed: the same tag, found at once. (The
    # first call rebuilds if someone edited the sources since the fixture.)
    build(log=lambda m: None)
    messages: list[str] = []
    again = build(log=messages.append)
    assert again.startswith("sandgym/serve:") and messages[-1] == f"{again}: up to date"


def test_typed_client_plays_whole_episodes(served):
    url, _ = served
    reference = CodeTaskPair.of(TaskSet.load(bundled_task_set("code_function")).get(TASK)).hidden.reference_solution
    client_class = _client_class()
    from sandgym.client import SandgymAction, SandgymObservation, SandgymState

    with client_class(base_url=url).sync() as env:
        assert TASK in env.task_ids()
        r = env.reset(task_id=TASK)
        assert isinstance(r.observation, SandgymObservation) and "edit_distance" in r.observation.task
        r = env.step(SandgymAction(text=f"Here:\n```python\n{reference}\n```"))
        assert r.done and r.reward == 1.0 and r.observation.outcome == "passed" and r.observation.reward_valid
        state = env.state()
        assert isinstance(state, SandgymState) and state.task_id == TASK and state.step_count == 1
        env.reset(task_id=TASK)
        r = env.step("```python\ndef edit_distance(a, b):\n    return 0\n```")  # a raw reply is an action
        assert r.done and r.reward == 0.0 and r.observation.outcome == "failed"


def test_from_docker_image_plays_an_episode(tag, network):
    from openenv.core.containers.runtime.providers import LocalDockerProvider

    class BridgedDockerProvider(LocalDockerProvider):
        """openenv's own provider, on the module's bridge network (this
        engine has no default bridge) and with a startup allowance for this
        busy host; the run is otherwise openenv's: `-d --name -p PORT:8000`."""

        def start_container(self, image, port=None, env_vars=None, **kwargs):
            port = port or self._find_available_port()
            self._container_name = self._generate_container_name(image)
            cmd = ["docker", "run", "-d", "--name", self._container_name, "--network", network]
            cmd += ["-p", f"127.0.0.1:{port}:8000", image]
            self._container_id = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip()
            return f"http://127.0.0.1:{port}"

        def wait_for_ready(self, base_url, timeout_s=STARTUP_S):
            super().wait_for_ready(base_url, timeout_s)

    reference = CodeTaskPair.of(TaskSet.load(bundled_task_set("code_function")).get(TASK)).hidden.reference_solution
    provider = BridgedDockerProvider()
    env = _client_class().from_docker_image(tag, provider=provider).sync()
    container = provider._container_id
    try:
        r = env.reset(task_id=TASK)
        assert r.observation.task_id == TASK and not r.done
        r = env.step(f"```python\n{reference}\n```")
        assert r.done and r.reward == 1.0 and r.observation.outcome == "passed"
    finally:
        env.close()
    # Closing the client stops and removes its container.
    left = subprocess.run(["docker", "ps", "-aq", "--filter", f"id={container}"], capture_output=True, text=True)
    assert left.stdout.strip() == ""


PROBE = r"""
import json, os, subprocess
from sandgym.runtimes.base import SandboxSpec
from sandgym.runtimes.jail.runtime import JailRuntime

rt = JailRuntime()
a, b = rt.create(SandboxSpec(pids=32)), rt.create(SandboxSpec())
out = {}
def sh(sb, cmd):
    r = sb.exec(cmd, timeout=20)
    return [r.exit_code, r.text().strip(), r.text("stderr").strip()[-300:]]
out["uids"] = [sh(a, "id -u")[1], sh(b, "id -u")[1]]
a.put_files({"secret.txt": "a's"})
out["b_sees"] = sh(b, "ls -a /workspace /tmp; cat /workspace/secret.txt")
out["a_sees"] = sh(a, "cat /workspace/secret.txt")
out["socket"] = sh(a, ["python3", "-c", "import socket; socket.socket(socket.AF_INET)"])
out["unix"] = sh(a, ["python3", "-c", "import socket; socket.socket(socket.AF_UNIX)"])
out["proc"] = sh(a, "ls /proc")
out["kill_server"] = sh(a, ["python3", "-c", "import os; os.kill(1, 9)"])
out["kill_all"] = sh(a, ["python3", "-c", "import os; os.kill(-1, 9)"])
out["kill_agent"] = sh(a, ["python3", "-c", "import os; os.kill(os.getppid(), 9)"])
out["after_kills"] = sh(a, "echo alive")
out["chroot"] = sh(a, ["python3", "-c", "import os; os.chroot('/tmp')"])
out["server_files"] = sh(a, "ls /opt/sandgym; ls /opt/sandgym/site")
out["nproc"] = sh(a, ["python3", "-c", "import resource; print(resource.getrlimit(resource.RLIMIT_NPROC)[0])"])
def procs(uid):
    n = 0
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                n += os.stat(f"/proc/{p}").st_uid == uid
            except OSError:
                pass
    return n
uid_a = int(out["uids"][0])
r = a.exec("sleep 300 & (setsid sleep 300 &) ; sleep 5", timeout=1)
out["timeout"] = r.timed_out
out["after_timeout_procs"] = procs(uid_a)  # the agent alone
out["after_timeout"] = sh(a, "echo alive")
a.exec("(setsid sleep 300 &) ; sleep 300 &", timeout=5)
a.close(); b.close()
out["left"] = procs(uid_a)
out["jails_left"] = os.listdir(rt.root)
print(json.dumps(out))
"""


def test_sandboxes_are_isolated_in_a_plain_container(tag):
    """The jail runtime inside the image, under Docker's default seccomp
    profile and capabilities (`--network none` here: the probe needs none)."""
    r = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "--entrypoint", "python3", tag, "-c", PROBE],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    ua, ub = out["uids"]
    assert ua != ub and "0" not in (ua, ub), out["uids"]
    assert out["a_sees"][1] == "a's"
    assert "secret" not in out["b_sees"][1] and out["b_sees"][0] != 0, out["b_sees"]
    for key in ("socket", "unix", "kill_server", "kill_all", "kill_agent", "chroot"):
        assert out[key][0] != 0 and "PermissionError" in out[key][2], (key, out[key])
    assert out["after_kills"][1] == "alive", "the agent is out of its commands' reach"
    assert out["proc"][0] != 0, "no /proc in a jail"
    assert out["server_files"][0] != 0 and "site" not in out["server_files"][1], out["server_files"]
    assert out["nproc"][1] == "32"
    assert out["timeout"] is True and out["after_timeout"][1] == "alive"
    assert out["after_timeout_procs"] == 1, "a timed-out command's processes are killed, the agent stays"
    assert out["left"] == 0, "every process of a closed sandbox's uid is gone"
    assert out["jails_left"] == []


def test_constraints_drop_hashes():
    lock = (
        "# comment\nfoo==1.0 \\\n    --hash=sha256:abc\nbar==2.0 ; python_version < '3.12' \\\n    --hash=sha256:def\n"
    )
    assert constraints_from_lock(lock) == "foo==1.0\nbar==2.0 ; python_version < '3.12'\n"
