"""The conformance suite's attacks, on every backend (see test_conformance.py):
tampering with the verifier, fork bombs, hidden tests, signals, files left
for other sandboxes, secrets on a job's stdin, the agent's descriptors and
memory.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time

import pytest

from sandgym.runtimes import SandboxSpec
from sandgym.verifiers.code_function.host import payload_for, run_in_sandbox, verifier_spec, verify
from tests.code_function.test_security import ADD, SEARCH, secret_task
from tests.helpers import agent_host_pid
from tests.runtimes.conformance import sandgym_sandboxes, settled

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
    found: set[int] = set()
    frontier = {os.getpid()}
    while frontier:
        frontier = {pid for pid, ppid in parent.items() if ppid in frontier} - found
        found |= frontier
    return found


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
    the whole sandbox dies: runtimes/gvisor.py)."""
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
    found: set[bytes] = set()
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


def test_a_fork_bomb_leaves_other_sandboxes_able_to_fork(rt):
    """Two sandboxes at once: one runs a fork bomb to its limit, the other
    still starts processes (a per-uid process limit shared by sandboxes
    would let one starve the other)."""
    bomb = "import os, time\nwhile True:\n    try: os.fork()\n    except OSError: time.sleep(0.01)\n"
    with rt.create() as bombed, rt.create() as other:
        result: dict = {}
        runner = threading.Thread(
            target=lambda: result.update(r=bombed.exec(["python3", "-c", bomb], timeout=20)), daemon=True
        )
        runner.start()
        # The bomb fills its sandbox's limit within seconds; meanwhile the other forks 32 children.
        time.sleep(5)
        forks = (
            "import os\nfor _ in range(32):\n    pid = os.fork()\n"
            "    if pid == 0: os._exit(0)\n    os.waitpid(pid, 0)\nprint('forked')\n"
        )
        r = other.exec(["python3", "-c", forks], timeout=30)
        runner.join(60)
        assert r.exit_code == 0 and r.stdout == b"forked\n", r.stderr
        assert result["r"].timed_out
        assert bombed.exec(["echo", "alive"]).stdout == b"alive\n"
