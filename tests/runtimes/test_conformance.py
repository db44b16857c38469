"""One suite over every backend: local (namespaces), docker (runc), docker:runsc
(gVisor), k8s (pods, runc) and k8s:gvisor (pods under the RuntimeClass gvisor).

Real Docker Engine and gVisor, started by scripts/setup.sh; a real
single-node Kubernetes cluster, started by scripts/k8s-cluster.sh. The same
semantics, limits, isolation and cleanup are asserted for each, and the
code family's verdicts must agree with the local backend's.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from sandgym.runtimes import RuntimeUnavailable, SandboxError, SandboxSpec, get_runtime
from sandgym.runtimes.docker import OWNER_LABEL, DockerRuntime, reap
from sandgym.runtimes.k8s import NODE_ENV as K8S_NODE_ENV
from sandgym.runtimes.k8s import OWNER_LABEL as K8S_OWNER_LABEL
from sandgym.specs import TaskSet, bundled_task_set
from sandgym.verifiers.code_function.host import payload_for, run_in_sandbox, verifier_spec, verify
from tests.code_function.test_security import ADD, SEARCH, secret_task
from tests.helpers import agent_host_pid, i386_syscall_source, make_task

BACKENDS = [
    "local",
    pytest.param("docker", marks=pytest.mark.docker),
    pytest.param("docker:runsc", marks=pytest.mark.docker),
    pytest.param("k8s", marks=pytest.mark.k8s),
    pytest.param("k8s:gvisor", marks=pytest.mark.k8s),
]


@pytest.fixture(scope="module", params=BACKENDS)
def rt(request):
    if request.param.startswith("k8s"):
        request.getfixturevalue("k8s_cluster")
    runtime = get_runtime(request.param)
    yield runtime
    runtime.close()


def sandgym_containers() -> list:
    import docker

    return docker.from_env().containers.list(all=True, filters={"label": f"{OWNER_LABEL}"}, ignore_removed=True)


def sandgym_sandboxes() -> set[str]:
    """Every sandgym container and, when the test cluster is in use, pod."""
    found = {c.id for c in sandgym_containers()}
    if os.environ.get(K8S_NODE_ENV):
        from kubernetes import client

        from sandgym.runtimes.k8s import DEFAULT_NAMESPACE, load_client

        core = client.CoreV1Api(load_client())
        pods = core.list_namespaced_pod(DEFAULT_NAMESPACE, label_selector=K8S_OWNER_LABEL).items
        found |= {f"pod/{p.metadata.name}" for p in pods}
    return found


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
    sandboxes_before = sandgym_sandboxes()
    processes_before = descendants()
    v = verify(task, code, rt)
    assert v.outcome in ("failed", "timeout"), (attack, v.outcome, v.detail)
    if attack == "write outside the workspace":
        assert v.tests[0].detail.endswith("got ''"), v.tests[0].detail  # not one write succeeded
    # Nothing of the attack outlives its sandbox, on the host or in the engine.
    assert settled(lambda: sandgym_sandboxes() <= sandboxes_before, timeout_s=30)
    assert settled(lambda: not descendants() - processes_before), descendants() - processes_before
    assert not os.path.exists("/pwned")


def test_a_fork_bomb_leaves_the_sandbox_usable(rt):
    """The timeout kills the bomb, never the agent, and the sandbox serves on
    (under gVisor the host threads a bomb costs must fit the pids cgroup, or
    the whole sandbox dies: runtimes/docker.py)."""
    with rt.create() as sb:
        bomb = "import os\nwhile True:\n    try: os.fork()\n    except OSError: pass\n"
        assert sb.exec(["python3", "-c", bomb], timeout=5).timed_out
        assert sb.exec(["echo", "alive"]).stdout == b"alive\n"
        # Left: the agent, and the shell that lists them.
        assert sorted(sb.exec(["sh", "-c", "cat /proc/[0-9]*/comm"]).stdout.split()) == [b"python3", b"sh"]


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
    # The judge runs in the fresh sandbox's agent, PID 1 of its PID namespace
    # (run_python(last=True)): no signal from inside reaches it, even where
    # the candidate shares that namespace (docker with runc, whose seccomp
    # profile refuses user namespaces).
    assert v.outcome in ("failed", "timeout")
    assert v.reward() == 0.0
    if not rt.nested_namespaces:
        # Forked off the agent instead (the multi-turn `run` tool's way), the
        # judge shares the candidate's PID namespace and uid, and can be
        # killed: the agent (PID 1) survives and reports it as tampering.
        with rt.create(verifier_spec(task)) as sb:
            record, problem = run_in_sandbox(sb, payload_for(task, code, None, "n" * 32), "process")
        assert record is None and problem.startswith("violation: the verifier's judge was killed"), problem


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
    from sandgym.runtimes.local import pid_alive

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
    from sandgym.runtimes.local import pid_alive

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


# The victim: a run_python job (a fork of the agent, as a verifier's runner
# is) that takes a secret on stdin, keeps it and runs the attacker: another
# process of the same uid, which reads every process it can. Its positive
# control: a dumpable decoy of its own holding a token of the same shape.
VICTIM = r"""
import subprocess, sys
secret = sys.stdin.read()
attack = subprocess.run(
    ["python3", "-c", sys.argv[1], str(__import__("os").getppid())],
    capture_output=True, text=True, close_fds=True, timeout=60,
)
print(attack.stdout.strip()[:-1] + ', "holds_secret": %s}' % ("true" if secret.startswith("sgsecret-") else "false"))
"""

ATTACKER = r"""
import json, os, re, secrets, subprocess, sys
agent = int(sys.argv[1])
decoy_token = "sgsecret-" + secrets.token_hex(16)
decoy = subprocess.Popen(
    ["python3", "-c", "import sys, time; t = sys.stdin.readline(); print('ready', flush=True); time.sleep(60)"],
    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
)
decoy.stdin.write(decoy_token + "\n")
decoy.stdin.flush()
assert decoy.stdout.readline() == "ready\n"
shape = re.compile(rb"sgsecret-[0-9a-f]{32}")
found, report = set(), {"agent_mem": "read", "agent_fds": [], "decoy_token": decoy_token}

def look(data):
    found.update(m.decode() for m in shape.findall(data))

for name in os.listdir("/proc"):
    if not name.isdigit() or int(name) == os.getpid():
        continue
    pid = int(name)
    for part in ("environ", "cmdline"):
        try:
            look(open(f"/proc/{pid}/{part}", "rb").read())
        except OSError:
            pass
    try:
        with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
            for line in open(f"/proc/{pid}/maps").read().splitlines():
                lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
                try:
                    mem.seek(lo)
                    look(mem.read(min(hi - lo, 1 << 26)))
                except (OSError, OverflowError, ValueError):
                    pass
    except OSError as e:
        if pid == agent:
            report["agent_mem"] = type(e).__name__
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        fds = []
    for fd in fds:
        try:
            f = os.open(f"/proc/{pid}/fd/{fd}", os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            continue
        if pid == agent:
            report["agent_fds"].append(int(fd))
        try:
            look(os.read(f, 1 << 16))
        except OSError:
            pass
        os.close(f)
decoy.kill()
report["found"] = sorted(found)
print(json.dumps(report))
"""


def run_victim(sb, secret: str) -> dict:
    staged = sb.put_files({"victim.py": VICTIM}, dest="/tmp")
    assert staged is None
    r = sb.run_python("/tmp/victim.py", args=[ATTACKER], stdin=secret.encode(), timeout=120)
    assert r.exit_code == 0, r.stderr.decode()[-2000:]
    return json.loads(r.stdout)


def test_a_secret_on_a_jobs_stdin_is_out_of_reach(rt):
    """Another process of the sandbox's uid reads every process it can
    (memory, environment, command line, descriptors): it finds the dumpable
    decoy's token, never the secret the job got on stdin, and cannot read
    the agent's memory."""
    secret = "sgsecret-" + secrets.token_hex(16)
    with rt.create() as sb:
        report = run_victim(sb, secret)
        assert report["holds_secret"]  # the victim still has it in memory
        assert report["decoy_token"] in report["found"]  # the attacker reads what is readable
        assert secret not in report["found"]
        assert report["agent_mem"] == "PermissionError"
        # After the job: a fresh attacker finds no trace of it anywhere either.
        later = sb.exec(["python3", "-c", ATTACKER, "1"], timeout=120)
        assert secret not in json.loads(later.stdout)["found"]


def test_the_agents_descriptors_are_out_of_reach(rt):
    """/proc/<agent>/fd/N would hand out the pipes to and from every command
    and the host's channel itself: a non-dumpable agent's are closed to the
    processes it runs. (gVisor before its 2025-12 fix, 561ff6d 'proc: fix
    security checks on /proc/pid files', let any task open them: Debian's
    runsc 0.0~20221219 did; scripts/gvisor.sh builds a gVisor with it.)"""
    with rt.create() as sb:
        report = run_victim(sb, "sgsecret-" + secrets.token_hex(16))
        assert report["agent_fds"] == []


def _host_reads_memory(pid: int, needles: list[bytes]) -> set[bytes]:
    found = set()
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
        for line in maps:
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            try:
                mem.seek(lo)
                data = mem.read(hi - lo)
            except (OSError, OverflowError, ValueError):
                continue
            found.update(n for n in needles if n in data)
    return found


def test_the_agent_wipes_a_jobs_stdin(rt):
    """Defence in depth behind non-dumpable: once a job's stdin is written to
    its command, the agent keeps no copy. Read from the host, as root, where
    the agent's memory is a host process's (not gVisor's sentry)."""
    if rt.isolation == "runsc":
        pytest.skip("under gVisor the agent's memory is the sentry's, not a host process's")
    if os.geteuid() != 0:
        pytest.skip("reading another user's process memory needs root")
    canary = "sgcanary-" + secrets.token_hex(16)  # in the agent's configuration: must be found
    secret = "sgsecret-" + secrets.token_hex(16)
    with rt.create(SandboxSpec(env={"SANDGYM_TEST_CANARY": canary})) as sb:
        assert sb.exec(["sh", "-c", "cat > /dev/null"], stdin=secret.encode() * 1000).exit_code == 0
        sb.put_files({"read.py": "import sys\nsys.stdin.read()\n"}, dest="/tmp")
        assert sb.run_python("/tmp/read.py", stdin=secret.encode()).exit_code == 0
        found = _host_reads_memory(agent_host_pid(rt, sb), [canary.encode(), secret.encode()])
        assert found == {canary.encode()}


# -- containers started ahead (DockerRuntime(prestart=N)) and the SWE venv's bytecode ------------


def _wait_until(predicate, what: str, limit_s: float = 180.0) -> None:
    """Poll until `predicate()` holds; a generous bound, only so a broken stock cannot hang the suite."""
    deadline = time.monotonic() + limit_s
    while not predicate():
        assert time.monotonic() < deadline, f"gave up waiting: {what}"
        time.sleep(0.1)


def _listed(owner: str = "") -> dict[str, dict]:
    """sandgym containers (of one owner host:pid, if given): name -> labels, in one listing call."""
    import docker

    label = f"{OWNER_LABEL}={owner}" if owner else OWNER_LABEL
    listed = docker.from_env().api.containers(all=True, filters={"label": label})
    return {c["Names"][0].lstrip("/"): c["Labels"] for c in listed}


def _mine(**labels: str) -> dict[str, dict]:
    """This process's containers: name -> labels (one listing call, so none vanishes half-way)."""
    import docker

    from sandgym.runtimes.docker import owner_label

    filters = [f"{OWNER_LABEL}={owner_label()}", *(f"{k}={v}" for k, v in labels.items())]
    listed = docker.from_env().api.containers(all=True, filters={"label": filters})
    return {c["Names"][0].lstrip("/"): c["Labels"] for c in listed}


@pytest.mark.docker
def test_the_stock_hands_each_container_out_once_and_close_leaves_nothing():
    from sandgym.runtimes.docker import STOCK_LABEL

    rt = DockerRuntime(prestart=2)
    spec = SandboxSpec(labels={"role": "stock-test"})
    names, from_stock = [], 0
    try:
        for i in range(6):
            if i >= 2:  # the spec has repeated: wait until a container is ready for it
                _wait_until(lambda: rt.stocked() >= 1, "a stocked container")
            sb = rt.create(spec)
            assert sb.info.labels == {"role": "stock-test"}
            from_stock += _mine()[sb.info.id].get(STOCK_LABEL) == "1"
            # Fresh: nothing of an earlier sandbox's workspace or /tmp.
            assert sb.exec(["sh", "-c", "ls -A /workspace /tmp | grep -c mark || true"]).stdout == b"0\n"
            assert sb.exec(["sh", "-c", f"echo {i} > /workspace/mark && echo {i} > /tmp/mark"]).exit_code == 0
            names.append(sb.info.id)
            sb.close()
        assert len(set(names)) == len(names)  # never handed out twice
        assert from_stock >= 4
        rt.settle()  # background removal done: the used containers are gone
        assert not set(_mine()) & set(names)
    finally:
        rt.close()
    assert rt.stocked() == 0
    assert not _mine(**{STOCK_LABEL: "1"})
    assert not set(_mine()) & set(names)


@pytest.mark.docker
def test_a_stocked_sandbox_keeps_the_specs_lifetime():
    """A stocked container's agent lives STOCK_MAX_IDLE_S longer; the host ends
    the sandbox at the spec's lifetime after hand-out."""
    rt = DockerRuntime(prestart=1)
    spec = SandboxSpec(wall_timeout_s=3)
    try:
        rt.create(spec).close()
        rt.create(spec).close()
        _wait_until(lambda: rt.stocked() >= 1, "a stocked container")
        sb = rt.create(spec)
        from sandgym.runtimes.docker import STOCK_LABEL

        assert _mine()[sb.info.id].get(STOCK_LABEL) == "1"  # its agent would live 63 s
        assert sb.exec(["true"]).exit_code == 0
        time.sleep(8)
        with pytest.raises(SandboxError):
            sb.exec(["true"])
        sb.close()
    finally:
        rt.close()


@pytest.mark.docker
def test_a_stocked_container_never_holds_a_replaced_mount(tmp_path):
    """A bind mount holds the folder it found: a stocked container started
    before its mount source was replaced is not handed out."""
    import shutil

    from sandgym.runtimes import Mount

    def folder(name: str, text: str):
        d = tmp_path / name
        d.mkdir(mode=0o755)
        (d / "v").write_text(text)
        os.chmod(d / "v", 0o644)
        return d

    src = folder("m", "old")
    spec = SandboxSpec(mounts=(Mount(source=str(src), target="/mnt/m"),))
    rt = DockerRuntime(prestart=1)
    try:
        for _ in range(2):
            with rt.create(spec) as sb:
                assert sb.exec(["cat", "/mnt/m/v"]).stdout == b"old"
        _wait_until(lambda: rt.stocked() >= 1, "a stocked container")
        new = folder("new", "new")
        shutil.rmtree(src)
        os.rename(new, src)
        with rt.create(spec) as sb:
            assert sb.exec(["cat", "/mnt/m/v"]).stdout == b"new"
    finally:
        rt.close()


def test_bad_prestart_values(monkeypatch):
    from sandgym.runtimes.docker import PRESTART_ENV, prestart_setting

    monkeypatch.setenv(PRESTART_ENV, "many")
    with pytest.raises(ValueError, match=f"{PRESTART_ENV}='many'"):
        prestart_setting(None)
    with pytest.raises(ValueError, match="prestart=-1"):
        prestart_setting(-1)
    monkeypatch.setenv(PRESTART_ENV, "3")
    assert prestart_setting(None) == 3 and prestart_setting(0) == 0


@pytest.mark.docker
def test_sigkill_then_gc_removes_the_stock():
    script = textwrap.dedent("""
        import time
        from sandgym.runtimes import SandboxSpec
        from sandgym.runtimes.docker import DockerRuntime
        rt = DockerRuntime(prestart=2)
        for _ in range(2):
            rt.create(SandboxSpec()).close()
        while rt.stocked() < 2:
            time.sleep(0.1)
        print("ready", flush=True)
        time.sleep(600)
    """)
    from sandgym.runtimes.docker import STOCK_LABEL

    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    try:
        assert child.stdout.readline() == b"ready\n"
        owner = f"{socket.gethostname()}:{child.pid}"
        stocked = [name for name, labels in _listed(owner).items() if labels.get(STOCK_LABEL) == "1"]
        assert len(stocked) >= 2
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    removed = reap()
    assert set(stocked) <= set(removed)
    assert not _listed(owner)


@pytest.mark.docker
def test_the_stock_and_pending_removals_are_gone_at_exit():
    """A process that exits without closing its runtime leaves no container:
    not the stocked ones, not those closed and still being removed."""
    script = textwrap.dedent("""
        import time
        from sandgym.runtimes import SandboxSpec
        from sandgym.runtimes.docker import DockerRuntime
        rt = DockerRuntime(prestart=2)
        used = []
        for _ in range(2):
            sb = rt.create(SandboxSpec())
            used.append(sb.info.id)
            sb.close()
        while rt.stocked() < 2:
            time.sleep(0.1)
        last = rt.create(SandboxSpec())
        used.append(last.info.id)
        last.close()  # queued for removal; the process exits at once
        print(",".join(used), flush=True)
    """)
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = child.communicate(timeout=300)
    assert child.returncode == 0, err[-2000:]
    used = set(out.strip().split(","))
    assert len(used) == 3
    assert not set(_listed()) & used
    # Nothing of the child's is left, the stocked containers included.
    assert not _listed(f"{socket.gethostname()}:{child.pid}")


def test_the_swe_venv_is_byte_compiled_in_place(tmp_path, monkeypatch):
    """A venv cached before bytecode was made is compiled on first use."""
    import shutil

    from sandgym.specs import bundled_dir
    from sandgym.verifiers.swe_repo.sources import COMPILED_MARK, environment_key, test_venv

    env = TaskSet.load(bundled_dir() / "swe_repo" / "billing-v1").tasks[0].visible.environment
    cached = test_venv(env)
    monkeypatch.setenv("SANDGYM_CACHE", str(tmp_path))
    old = tmp_path / "venvs" / environment_key(env)
    shutil.copytree(cached, old, symlinks=True, ignore=shutil.ignore_patterns("__pycache__", COMPILED_MARK))
    assert not list(old.rglob("*.pyc"))
    assert test_venv(env) == old
    main_py = next(old.glob("lib/python3*/site-packages/_pytest/main.py"))
    assert (main_py.parent / "__pycache__" / f"main.cpython-{sys.version_info[0]}{sys.version_info[1]}.pyc").exists()
    assert (old / COMPILED_MARK).exists()


@pytest.mark.parametrize("backend", ["local", pytest.param("docker", marks=pytest.mark.docker)])
def test_swe_verdicts_hold_with_bytecode_and_the_stock(backend):
    """The sandboxed interpreter loads the venv's bytecode (not the source),
    and the verifier still scores the gold patch FULL and an empty diff NO,
    on docker through containers started ahead."""
    from sandgym.specs import bundled_dir
    from sandgym.verifiers.swe_repo.host import verify as verify_swe
    from sandgym.verifiers.swe_repo.sandbox import IMAGE, VENV_DIR, venv_mount

    task = TaskSet.load(bundled_dir() / "swe_repo" / "billing-v1").tasks[0]
    rt = DockerRuntime(prestart=1) if backend == "docker" else get_runtime(backend)
    try:
        spec = SandboxSpec(image=IMAGE, mounts=(venv_mount(task.visible.environment),))
        with rt.create(spec) as sb:
            r = sb.exec([f"{VENV_DIR}/bin/python", "-v", "-c", "import _pytest.main"])
            assert r.exit_code == 0, r.stderr[-2000:]
            assert b"_pytest/__pycache__/main.cpython-" in r.stderr  # "code object from ...pyc"
        for _ in range(3):  # the spec repeats: on docker, later runs take stocked containers
            gold = verify_swe(task, task.hidden.patch, rt)
            assert gold.status == "FULL", gold.detail
        empty = verify_swe(task, "", rt)
        assert empty.status == "NO", empty.detail
    finally:
        rt.close()
