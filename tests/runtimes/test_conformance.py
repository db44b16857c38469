"""One suite over every backend: local (namespaces), docker (runc), docker:runsc (gVisor).

Real Docker Engine and gVisor, started by scripts/setup.sh. The same
semantics, limits, isolation and cleanup are asserted for each, and the
code family's verdicts must agree with the local backend's.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from sandgym.runtimes import RuntimeUnavailable, SandboxSpec, get_runtime
from sandgym.runtimes.docker import OWNER_LABEL, DockerRuntime, reap
from sandgym.specs import TaskSet, bundled_task_set
from sandgym.verifiers.code_function.host import verify
from tests.code_function.test_security import ADD, SEARCH, secret_task
from tests.helpers import make_task

BACKENDS = ["local", "docker", "docker:runsc"]


@pytest.fixture(scope="module", params=BACKENDS)
def rt(request):
    runtime = get_runtime(request.param)
    yield runtime
    runtime.close()


def sandgym_containers() -> list:
    import docker

    return docker.from_env().containers.list(all=True, filters={"label": f"{OWNER_LABEL}"})


def test_exec_semantics(rt):
    with rt.create() as sb:
        r = sb.exec(["sh", "-c", "echo out; echo err >&2; exit 3"])
        assert (r.exit_code, r.stdout, r.stderr) == (3, b"out\n", b"err\n")
        assert sb.exec(["cat"], stdin=b"y" * 300_000).stdout == b"y" * 300_000
        assert sb.exec(["id", "-u"]).stdout == b"1000\n"
        assert sb.exec(["pwd"]).stdout == b"/workspace\n"
        assert sb.exec(["grep", "CapEff", "/proc/self/status"]).text().split()[1] == "0000000000000000"
        assert sb.exec(["sh", "-c", "echo x > /usr/evil"]).exit_code != 0
        assert sb.exec(["sh", "-c", "echo x > /workspace/ok && echo x > /tmp/ok"]).exit_code == 0


def test_timeout_kills_the_tree_and_output_is_capped(rt):
    with rt.create() as sb:
        r = sb.exec(["sh", "-c", "sleep 100 & setsid sleep 100 & sleep 100"], timeout=0.5)
        assert r.timed_out
        left = sb.exec(["sh", "-c", "ps -eo comm 2>/dev/null || cat /proc/[0-9]*/comm"]).text()
        assert "sleep" not in left
        big = sb.exec(["sh", "-c", "head -c 3000000 /dev/zero"], max_output=1000)
        assert big.truncated and len(big.stdout) == 1000


def test_limits(rt):
    with rt.create(SandboxSpec(memory_mb=256, file_size_mb=1, disk_mb=8)) as sb:
        mem = sb.exec(["python3", "-c", "x = bytearray(600 * 1024 * 1024)"])
        assert mem.exit_code != 0
        assert sb.exec(["sh", "-c", "head -c 3000000 /dev/zero > f"]).exit_code != 0
        disk = sb.exec(
            ["sh", "-c", "for i in 1 2 3 4 5 6 7 8 9 10; do head -c 1000000 /dev/zero > /tmp/f$i || exit 1; done"]
        )
        assert disk.exit_code != 0


def test_files_in_and_out(rt):
    with rt.create() as sb:
        sb.put_files({"d/e.txt": "hello"})
        assert sb.get_files(["/workspace/d"]) == {"workspace/d/e.txt": b"hello"}


def test_network_is_isolated(rt):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.3)
    port = server.getsockname()[1]
    try:
        with rt.create() as sb:
            probe = (
                f"import socket\ns = socket.socket(); s.settimeout(2)\n"
                f"try:\n    s.connect(('127.0.0.1', {port})); print('connected')\n"
                f"except OSError as e:\n    print('refused')\n"
            )
            assert sb.exec(["python3", "-c", probe]).stdout == b"refused\n"
        with pytest.raises(socket.timeout):
            server.accept()
    finally:
        server.close()


def test_closed_sandboxes_leave_nothing(rt):
    before = {c.id for c in sandgym_containers()}
    sb = rt.create()
    sb.exec(["sh", "-c", "sleep 60 &"])
    sb.close()
    assert {c.id for c in sandgym_containers()} <= before


def test_verdicts_agree_with_local(rt):
    tasks = TaskSet.load(bundled_task_set()).tasks[:6]
    for task in tasks:
        ep = task.visible.entry_point
        assert verify(task, task.hidden.reference_solution, rt).outcome == "passed", task.id
        assert verify(task, f"def {ep}(*a, **k):\n    return None\n", rt).outcome == "failed", task.id
    slow = make_task(tests=[{"args": [1], "expected": 1}], timeout_s=1)
    assert verify(slow, "def solve(x):\n    while True: pass\n", rt).outcome == "timeout"


ATTACKS = {
    "exit before asserts": (ADD, "import os\ndef add(a, b):\n    os._exit(0)\n"),
    "always-equal": (ADD, "class E:\n    def __eq__(s, o): return True\ndef add(a, b):\n    return E()\n"),
    "fork bomb": (
        None,
        "import os\ndef solve(x):\n    while True:\n        try: os.fork()\n        except OSError: pass\n",
    ),
    "memory bomb": (None, "def solve(x):\n    b = []\n    while True: b.append(bytearray(64 << 20))\n"),
    "disk fill": (
        None,
        "def solve(x):\n    f = open('/workspace/f', 'wb')\n    while True: f.write(b'0' * (1 << 20))\n",
    ),
    "network": (
        None,
        "import socket\ndef solve(x):\n    return socket.create_connection(('127.0.0.1', 1), timeout=1).recv(9)\n",
    ),
    "SkipTest": (ADD, "import unittest\ndef add(a, b):\n    raise unittest.SkipTest('skip me')\n"),
    "flood and fake PASS lines": (
        ADD,
        "import sys\ndef add(a, b):\n"
        "    for _ in range(20000): print('PASSED all tests ok', flush=True)\n"
        "    sys.stderr.write('x' * (8 << 20))\n    return 0\n",
    ),
    "write outside the workspace": (
        None,
        "def solve(x):\n    ok = []\n"
        "    for t in ['/etc/passwd', '/usr/bin/python3', '/opt/sandgym/agent/agent.py', '/pwned']:\n"
        "        try:\n            open(t, 'w').write('pwned'); ok.append(t)\n"
        "        except OSError: pass\n    return ','.join(ok)\n",
    ),
}


def descendants() -> set[int]:
    """This test process's descendants (local sandboxes are among them;
    containers are the engine's, and are checked by label instead)."""
    parent = {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/stat") as f:
                    parent[int(p)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    found, frontier = set(), {os.getpid()}
    while frontier:
        frontier = {pid for pid, ppid in parent.items() if ppid in frontier} - found
        found |= frontier
    return found


def settled(check, timeout_s=10.0) -> bool:
    """Teardown is asynchronous: wait for it, without a fixed sleep."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_attacks_fail_on_every_backend(rt, attack):
    task, code = ATTACKS[attack]
    if task is None:
        task, _ = secret_task(timeout_s=3)
    rt.create().close()  # the zygote (local) is up before the baseline
    containers_before = {c.id for c in sandgym_containers()}
    processes_before = descendants()
    v = verify(task, code, rt)
    assert v.outcome in ("failed", "timeout"), (attack, v.outcome, v.detail)
    if attack == "write outside the workspace":
        assert v.tests[0].detail.endswith("got ''"), v.tests[0].detail  # not one write succeeded
    # Nothing of the attack outlives its sandbox, on the host or in the engine.
    assert settled(lambda: {c.id for c in sandgym_containers()} <= containers_before)
    assert settled(lambda: not descendants() - processes_before), descendants() - processes_before
    assert not os.path.exists("/pwned")


def test_reading_hidden_tests_fails_on_every_backend(rt):
    task, token = secret_task(timeout_s=30)
    v = verify(task, SEARCH, rt)
    assert v.outcome == "failed"
    assert v.tests[0].detail.endswith("got 'nothing found'")


def test_signalling_the_verifier(rt):
    task, _ = secret_task(timeout_s=3)
    code = (
        "import os, signal\ndef solve(x):\n"
        "    for pid in range(1, 2000):\n"
        "        if pid != os.getpid():\n"
        "            try: os.kill(pid, signal.SIGKILL)\n"
        "            except OSError: pass\n"
        "    return 'x'\n"
    )
    v = verify(task, code, rt)
    if rt.nested_namespaces:
        assert v.outcome in ("failed", "timeout")
    else:
        # docker (runc): Docker's seccomp profile refuses user namespaces, so
        # the candidate shares the judge's PID namespace and uid and can kill
        # it; the agent (PID 1) survives and reports it as tampering.
        assert v.outcome == "violation" and v.violations == ["killed the verifier"]
    assert v.reward() == 0.0


def test_bad_input_messages():
    with pytest.raises(ValueError, match="choices: local, docker, docker:runsc"):
        get_runtime("docker:nope")
    with pytest.raises(RuntimeUnavailable, match="sandgym images build"):
        DockerRuntime(image="sandgym/base:missing")
    with pytest.raises(RuntimeUnavailable, match="no kata runtime"):
        DockerRuntime("kata")


def test_missing_daemon(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(RuntimeUnavailable, match="dockerd"):
        DockerRuntime()


def test_sigkill_then_gc_leaves_no_container(tmp_path):
    script = textwrap.dedent("""
        import time
        from sandgym.runtimes import get_runtime
        rt = get_runtime("docker")
        boxes = [rt.create() for _ in range(2)]
        print("ready", flush=True)
        time.sleep(600)
    """)
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    try:
        assert child.stdout.readline() == b"ready\n"
        mine = [c for c in sandgym_containers() if c.labels[OWNER_LABEL].endswith(f":{child.pid}")]
        assert len(mine) == 2
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    # The agents saw their stream close and exited; gc removes the containers.
    removed = reap()
    assert {c.name for c in mine} <= set(removed)
    assert not [c for c in sandgym_containers() if c.labels[OWNER_LABEL].endswith(f":{child.pid}")]
    out = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "sandgym"), "gc"], capture_output=True, text=True
    )
    assert out.returncode == 0 and "removed" in out.stdout


def test_the_agent_survives_signals_from_inside(rt):
    if rt.isolation == "runsc":
        # gVisor does not shield PID 1 from signals sent inside its PID
        # namespace. The verifier does not rely on it there: the candidate
        # runs in a PID namespace of its own (test_signalling_the_verifier).
        pytest.skip("gVisor does not shield PID 1 from its own namespace's signals")
    with rt.create() as sb:
        r = sb.exec(["sh", "-c", "for s in ALRM INT TERM HUP USR1 KILL; do kill -$s 1; done; echo sent"])
        assert r.stdout == b"sent\n"
        assert sb.exec(["echo", "alive"]).stdout == b"alive\n"


def test_sandboxes_left_open_are_removed_at_exit():
    script = textwrap.dedent("""
        from sandgym.runtimes import get_runtime
        rt = get_runtime("docker")
        boxes = [rt.create() for _ in range(2)]
        print(",".join(b.info.id for b in boxes), flush=True)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    names = out.stdout.strip().split(",")
    assert len(names) == 2
    assert not {c.name for c in sandgym_containers()} & set(names)


def test_swe_family_on_every_backend(rt):
    """The SWE family's agent sandbox (git, persistent shell) and verifier
    (git apply, pytest through the verifier's runner) on each backend."""
    import gymnasium

    from sandgym.specs import bundled_dir
    from sandgym.verifiers.swe_repo.host import verify as verify_swe

    tasks = TaskSet.load(bundled_dir() / "swe_repo" / "billing-v1")
    task = tasks.tasks[0]
    null = verify_swe(task, "", rt)
    assert (null.status, null.outcome) == ("NO", "failed"), null.detail
    env = gymnasium.make("sandgym/SWERepo-v0", tasks=tasks, runtime=rt)
    try:
        env.reset(options={"task_id": task.id})
        obs, *_ = env.step({"tool": "bash", "command": "cd billing && export MARK=kept && git log --oneline | wc -l"})
        assert obs["feedback"].splitlines()[0].strip() == "1"  # one squashed commit
        obs, *_ = env.step({"tool": "bash", "command": "pwd; echo $MARK"})
        assert obs["feedback"].splitlines()[:2] == ["/workspace/repo/billing", "kept"]
        for action in env.unwrapped.oracle_actions():
            obs, reward, terminated, truncated, info = env.step(action)
        assert terminated and reward == 1.0 and env.unwrapped.last_verdict.status == "FULL"
    finally:
        env.close()


def test_sandboxes_cannot_leave_files_for_each_other(rt):
    """Concurrent sandboxes (other episodes, a verifier) share nothing
    writable: not /dev (the zygote's tmpfs on the local runtime), /dev/shm,
    /tmp or the workspace."""
    a, b = rt.create(), rt.create()
    try:
        plant = (
            "import os\nmade = []\n"
            "for p in ['/dev/planted', '/dev/shm/planted', '/tmp/planted', '/workspace/planted']:\n"
            "    try:\n        open(p, 'w').write('x'); made.append(p)\n    except OSError:\n        pass\n"
            "print(made)\n"
        )
        made = a.exec(["python3", "-c", plant])
        assert b"/tmp/planted" in made.stdout  # the attempt itself ran
        look = (
            "import os\nprint([p for p in ['/dev/planted', '/dev/shm/planted', '/tmp/planted', "
            "'/workspace/planted'] if os.path.exists(p)])\n"
        )
        assert b.exec(["python3", "-c", look]).stdout == b"[]\n"
    finally:
        a.close()
        b.close()
