"""One suite over every backend: local (namespaces), docker (runc), docker:runsc
(gVisor), k8s (pods, runc) and k8s:gvisor (pods under the RuntimeClass gvisor).

Real Docker Engine and gVisor, started by scripts/setup.sh; a real
single-node Kubernetes cluster, started by scripts/k8s-cluster.sh. This file: the
same semantics, limits, network, cleanup and last jobs on each, and the
code and SWE families' verdicts agree with the local backend's. Attacks:
test_conformance_security.py; docker's stock: test_conformance_stock.py.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap

import pytest

from sandgym.runtimes import RuntimeUnavailable, SandboxError, SandboxSpec, get_runtime
from sandgym.runtimes.docker.leaks import reap
from sandgym.runtimes.docker.runtime import OWNER_LABEL, DockerRuntime
from sandgym.runtimes.k8s.pods import POD_UID_BASE
from sandgym.specs import TaskSet, bundled_task_set
from sandgym.specs.code_function import CodeTaskPair
from sandgym.verifiers.code_function.host import verify
from tests.helpers import agent_host_pid, i386_syscall_source, make_task, swe_tasks, unwrapped
from tests.runtimes.conformance import sandgym_containers, sandgym_sandboxes, settled


def test_exec_semantics(rt, request):
    with rt.create() as sb:
        r = sb.exec(["sh", "-c", "echo out; echo err >&2; exit 3"])
        assert (r.exit_code, r.stdout, r.stderr) == (3, b"out\n", b"err\n")
        assert sb.exec(["cat"], stdin=b"y" * 300_000).stdout == b"y" * 300_000
        uid = int(sb.exec(["id", "-u"]).stdout)
        if request.node.callspec.params["rt"].startswith("k8s"):
            # A uid of its own per pod (runtimes/k8s/pods.py), so its process budget is its own.
            assert uid >= POD_UID_BASE, uid
        else:
            assert uid == 1000
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


# Every way to a socket that a process has: each family, socketpair,
# io_uring (whose requests make sockets unseen by a syscall filter) and, on
# x86-64, the 32-bit gate (int 0x80 with i386's socket, 359, in a child of
# its own, in case the backend kills a process for trying).
SOCKET_PROBE = f"GATE = {i386_syscall_source(359, 1, 1, 0)!r}\n" + (
    r"""
import ctypes, errno, json, platform, socket, subprocess, sys
out = {}
kinds = {
    "inet": (socket.AF_INET, socket.SOCK_STREAM), "inet6": (socket.AF_INET6, socket.SOCK_DGRAM),
    "unix": (socket.AF_UNIX, socket.SOCK_STREAM), "netlink": (socket.AF_NETLINK, socket.SOCK_RAW),
    "packet": (socket.AF_PACKET, socket.SOCK_RAW),
}
for name, (family, kind) in kinds.items():
    try:
        socket.socket(family, kind).close()
        out[name] = "made"
    except OSError as e:
        out[name] = e.errno
try:
    [s.close() for s in socket.socketpair()]
    out["pair"] = "made"
except OSError as e:
    out["pair"] = e.errno
libc = ctypes.CDLL(None, use_errno=True)
params = ctypes.create_string_buffer(120)
fd = libc.syscall(425, 8, params)
out["io_uring"] = "made" if fd >= 0 else ctypes.get_errno()
if platform.machine() == "x86_64":
    r = subprocess.run([sys.executable, "-c", GATE], capture_output=True, text=True)
    ret = int(r.stdout) if r.returncode == 0 and r.stdout.strip() else None
    out["i386"] = "made" if ret is not None and ret >= 0 else (-ret if ret is not None else "died")
print(json.dumps(out))
"""
)


def test_a_sandbox_without_sockets_can_make_none(rt):
    """network="no-sockets" (the code verifier's): no socket of any kind, by
    any way, on every backend; a sandbox of the default network makes them."""
    import errno

    with rt.create(SandboxSpec(network="no-sockets")) as sealed, rt.create() as plain:
        got = json.loads(sealed.exec(["python3", "-c", SOCKET_PROBE]).stdout)
        control = json.loads(plain.exec(["python3", "-c", SOCKET_PROBE]).stdout)
    for name in ("inet", "inet6", "unix", "netlink", "packet", "pair"):
        assert got[name] == errno.EACCES, (name, got)
    assert got["io_uring"] == errno.ENOSYS
    assert got.get("i386", errno.ENOSYS) in (errno.ENOSYS, "died"), got
    # The probe can tell: the same attempts succeed in a plain sandbox.
    assert control["inet"] == control["unix"] == control["pair"] == "made", control


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the 32-bit gate (int 0x80) is x86-64's")
def test_32_bit_syscalls_fail_in_every_sandbox(rt):
    """i386's syscall numbers differ from x86-64's (its mq_open is 277, and
    it reaches sockets through socketcall), so the agent's filter, which
    refuses by number, refuses every 32-bit syscall there is."""
    getpid = i386_syscall_source(20)
    outside = subprocess.run([sys.executable, "-c", getpid], capture_output=True, text=True, check=True)
    assert int(outside.stdout) > 0  # the gate works out here: a process id
    with rt.create() as sb:
        inside = sb.exec(["python3", "-c", getpid])
    assert inside.stdout == b"-38\n", inside


def test_closed_sandboxes_leave_nothing(rt):
    before = sandgym_sandboxes()
    sb = rt.create()
    assert sandgym_sandboxes() - before or rt.name == "local"  # the listing sees it
    sb.exec(["sh", "-c", "sleep 60 &"])
    sb.close()
    # A pod's deletion completes once the kubelet has stopped it.
    assert settled(lambda: sandgym_sandboxes() <= before, timeout_s=1 if rt.name != "k8s" else 30)


def test_verdicts_agree_with_local(rt):
    tasks = [CodeTaskPair.of(t) for t in TaskSet.load(bundled_task_set("code_function")).tasks[:6]]
    for task in tasks:
        ep = task.visible.entry_point
        assert verify(task, task.hidden.reference_solution, rt).outcome == "passed", task.id
        assert verify(task, f"def {ep}(*a, **k):\n    return None\n", rt).outcome == "failed", task.id
    slow = make_task(tests=[{"args": [1], "expected": 1}], timeout_s=1)
    assert verify(slow, "def solve(x):\n    while True: pass\n", rt).outcome == "timeout"


JOB = """
import os, sys
print("before stdin", flush=True)
data = sys.stdin.read()
print(len(data), sys.argv[1:], os.environ.get("JOB_KEY"), os.getpid(), os.getcwd())
print("to stderr", file=sys.stderr)
if sys.argv[1] == "big":
    sys.stdout.write("z" * 5000)
if sys.argv[1] == "raise":
    raise RuntimeError("job failed")
if sys.argv[1] == "hang":
    import time
    time.sleep(120)
sys.exit(7)
"""


def test_a_last_job_runs_in_the_agent_and_ends_the_sandbox(rt):
    """run_python(last=True): the script runs in the agent's own process (no
    fork), with argv, env, cwd and stdin as for a fork, its sys.stdout and
    sys.stderr captured and capped; afterwards the sandbox takes no command.
    A local sandbox (a zygote's) ends as the job's reply goes out, before
    close()."""
    from sandgym.runtimes.host_processes import pid_alive

    with rt.create() as sb:
        agent = agent_host_pid(rt, sb) if rt.name == "local" else None
        agent_pid = sb.exec(["sh", "-c", "echo $PPID"]).text().strip()
        sb.put_files({"job.py": JOB}, dest="/tmp")
        r = sb.run_python("/tmp/job.py", args=["a"], stdin=b"x" * 300_000, env={"JOB_KEY": "v"}, last=True)
        assert (r.exit_code, r.timed_out, r.truncated) == (7, False, False)
        if agent is not None:
            assert settled(lambda: not pid_alive(agent), timeout_s=5)
        assert r.text().splitlines() == ["before stdin", f"300000 ['a'] v {agent_pid} /workspace"]
        assert r.text("stderr") == "to stderr\n"
        with pytest.raises(SandboxError, match="ran its last job"):
            sb.exec(["true"])
        with pytest.raises(SandboxError, match="ran its last job"):
            sb.put_files({"x": "y"})
    with rt.create() as sb:
        r = sb.run_python("/opt/none.py", last=True)
        assert r.exit_code == 1 and "FileNotFoundError" in r.text("stderr")
    with rt.create() as sb:
        sb.put_files({"job.py": JOB}, dest="/tmp")
        r = sb.run_python("/tmp/job.py", args=["raise"], last=True)
        assert r.exit_code == 1 and "RuntimeError: job failed" in r.text("stderr")
    with rt.create() as sb:
        sb.put_files({"job.py": JOB}, dest="/tmp")
        r = sb.run_python("/tmp/job.py", args=["big"], last=True, max_output=1000)
        assert r.truncated and len(r.stdout) == 1000


def test_a_last_job_out_of_time_ends_the_sandbox(rt):
    """The agent cannot time out a job it runs itself: the host stops waiting
    after the timeout (and a short grace), reports it timed out and ends the
    sandbox, leaving nothing behind."""
    from sandgym.runtimes.host_processes import pid_alive

    before = sandgym_sandboxes()
    sb = rt.create()
    agent = agent_host_pid(rt, sb) if rt.name == "local" else None
    sb.put_files({"job.py": JOB}, dest="/tmp")
    r = sb.run_python("/tmp/job.py", args=["hang"], last=True, timeout=1)
    assert r.timed_out and r.exit_code == 137
    assert not sb.alive
    assert settled(lambda: sandgym_sandboxes() <= before, timeout_s=1 if rt.name != "k8s" else 30)
    if agent is not None:
        assert settled(lambda: not pid_alive(agent), timeout_s=5)


@pytest.mark.docker
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


@pytest.mark.docker
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
        assert child.stdout is not None
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


@pytest.mark.docker
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
    task = swe_tasks(tasks)[0]
    null = verify_swe(task, "", rt)
    assert (null.status, null.outcome) == ("NO", "failed"), null.detail
    env = gymnasium.make("sandgym/SWERepo-v0", tasks=tasks, runtime=rt)
    try:
        env.reset(options={"task_id": task.id})
        obs, *_ = env.step({"tool": "bash", "command": "cd billing && export MARK=kept && git log --oneline | wc -l"})
        assert obs["feedback"].splitlines()[0].strip() == "1"  # one squashed commit
        obs, *_ = env.step({"tool": "bash", "command": "pwd; echo $MARK"})
        assert obs["feedback"].splitlines()[:2] == ["/workspace/repo/billing", "kept"]
        for action in unwrapped(env).oracle_actions():
            obs, reward, terminated, truncated, info = env.step(action)
        verdict = unwrapped(env).last_verdict
        assert terminated and reward == 1.0 and verdict is not None and verdict.status == "FULL"
    finally:
        env.close()
