"""The OpenEnv server image: built here from sandgym's local images (no
registry, no network during the build), run with the real Docker Engine,
and played over a whole episode by openenv's own client."""

from __future__ import annotations

import socket
import subprocess
import time

import httpx
import pytest

from sandgym.serve_image import build, constraints_from_lock, run_command
from sandgym.specs import TaskSet, bundled_task_set

pytestmark = pytest.mark.docker

TASK = "basic/edit-distance"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def served():
    tag = build(log=lambda m: None)
    port = free_port()
    name = f"sandgym-serve-test-{port}"
    cmd = run_command(tag, port)
    cmd[2:2] = ["--name", name]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"the server container did not come up:\n{proc.stdout.read()[-3000:]}")
        time.sleep(0.2)
    yield url, name
    subprocess.run(["docker", "rm", "-f", name], capture_output=True)
    proc.wait(timeout=30)


def test_the_image_is_tagged_by_content_and_built_once(served):
    # A second build finds the same tag (nothing changed), instantly.
    messages = []
    tag = build(log=messages.append)
    assert tag.startswith("sandgym/serve:") and messages[-1] == f"{tag}: up to date"


def test_a_whole_episode_in_the_container(served):
    from openenv import GenericEnvClient

    url, _ = served
    reference = TaskSet.load(bundled_task_set()).get(TASK).hidden.reference_solution
    with GenericEnvClient(base_url=url).sync() as env:
        r = env.reset(task_id=TASK)
        assert "edit_distance" in r.observation["task"]
        r = env.step({"text": f"```python\n{reference}\n```"})
        assert r.done and r.reward == 1.0 and r.observation["outcome"] == "passed"
        r = env.reset(task_id=TASK)
        r = env.step({"text": "```python\ndef edit_distance(a, b):\n    return 0\n```"})
        assert r.done and r.reward == 0.0 and r.observation["outcome"] == "failed"


def test_sessions_sandboxes_live_inside_the_container(served):
    # The server's sandboxes are namespaces of the container's own processes:
    # nothing of them runs as a host child of this test.
    _, name = served
    top = subprocess.run(["docker", "top", name, "-eo", "pid,user,args"], capture_output=True, text=True)
    assert top.returncode == 0, top.stderr
    assert "sandgym serve" in top.stdout or "-m sandgym" in top.stdout


def test_constraints_drop_hashes():
    lock = (
        "# comment\nfoo==1.0 \\\n    --hash=sha256:abc\nbar==2.0 ; python_version < '3.12' \\\n    --hash=sha256:def\n"
    )
    assert constraints_from_lock(lock) == "foo==1.0\nbar==2.0 ; python_version < '3.12'\n"
