"""Known attacks on code-function verification, each tried for real.

The hostile programs come from the family's attack catalogue
(envs/code_function/redteam/attacks.py, which `sandgym redteam` plays too).
Every test submits hostile code to the real verifier in real bubblewrap
sandboxes and asserts both the outcome (never `passed`, never an
`env_error` the attacker could force) and that nothing outside the sandbox
changed: no stray processes, no files, the host process alive.
"""

from __future__ import annotations

import os
import secrets
import socket
import threading
import time
from pathlib import Path

import pytest

from sandgym.envs.code_function.redteam.attacks import ALWAYS_EQUALS, EXITS, KILLS, program
from sandgym.runtimes.host_processes import pid_alive
from sandgym.runtimes.staging import staging_root
from sandgym.verifiers.code_function.host import verify
from tests.helpers import make_task

SANDBOX_UID = 65534 if os.geteuid() == 0 else os.geteuid()


def _foreign(pid: int) -> bool:
    """Whether `pid` runs under a sandbox another process started (other
    test sessions share this machine): an ancestor carries an owner mark
    that names another pid. An escaped process of ours, left to init,
    carries none and still counts."""
    from sandgym.runtimes.browser import MARKER_ENV
    from sandgym.runtimes.host_processes import environ_of, mark_owner
    from sandgym.runtimes.local.runtime import OWNER_ENV

    seen = 0
    while pid > 1 and seen < 64:
        env = environ_of(pid)
        for name in (OWNER_ENV, MARKER_ENV):
            owner = mark_owner(env, name)
            if owner is not None:
                return owner != os.getpid()
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
        seen += 1
    return False


def sandbox_user_processes() -> set[int]:
    pids = set()
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                if os.stat(f"/proc/{p}").st_uid == SANDBOX_UID and pid_alive(int(p)) and not _foreign(int(p)):
                    pids.add(int(p))
            except OSError:
                pass
    return pids


def describe(pids: set[int]) -> list[str]:
    out = []
    for pid in sorted(pids):
        try:
            with open(f"/proc/{pid}/stat") as f:
                out.append(f.read()[:60])
        except OSError:
            out.append(f"{pid} (gone)")
    return out


@pytest.fixture
def host_guard(runtime, tmp_path):
    """Checks after the attack that the host is as it was."""
    runtime.create().close()  # the zygote is up before the baseline
    before = sandbox_user_processes()
    canary = tmp_path / "canary.txt"
    canary.write_text("untouched")
    tmp_before = set(os.listdir("/tmp"))
    yield canary
    deadline = time.monotonic() + 10
    while sandbox_user_processes() - before and time.monotonic() < deadline:
        time.sleep(0.05)
    left = sandbox_user_processes() - before
    assert not left, f"processes outlived the sandbox: {describe(left)}"
    assert canary.read_text() == "untouched"
    assert sorted(canary.parent.iterdir()) == [canary]
    new_tmp = {n for n in set(os.listdir("/tmp")) - tmp_before if "pwned" in n}
    assert not new_tmp


def secret_task(**kw):
    """A task whose answer cannot be computed: only reading it would pass."""
    token = "tok-" + secrets.token_hex(12)
    task = make_task(tests=[{"args": [1], "expected": token}], **kw)
    return task, token


def returned(v) -> str:
    """What the candidate returned, from a failed case's detail."""
    detail = v.tests[0].detail
    return detail.split(", got ", 1)[1] if ", got " in detail else detail


def judge(runtime, task, code):
    v = verify(task, code, runtime)
    assert v.outcome != "passed", v
    assert v.outcome != "env_error", f"the attack forced an infrastructure error: {v.detail}"
    return v


ADD = make_task(
    entry_point="add",
    tests=[
        {"args": [1, 2], "expected": 3},
        {"args": [2, 2], "expected": 4},
        {"args": [-5, 5], "expected": 0},
        {"args": [10, 5], "expected": 15},
        {"args": [1, 2], "expected": 3},
    ],
    examples=[{"args": [1, 2], "expected": 3}],
    reference="def add(a, b):\n    return a + b\n",
)

CHECK_ADD = make_task(
    entry_point="add",
    check_code=("def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(5, 5) == 10\n"),
    reference="def add(a, b):\n    return a + b\n",
)


def test_reference_passes_and_wrong_fails(runtime):
    assert verify(ADD, ADD.hidden.reference_solution, runtime).outcome == "passed"
    assert verify(ADD, "def add(a, b):\n    return a - b\n", runtime).outcome == "failed"
    assert verify(CHECK_ADD, CHECK_ADD.hidden.reference_solution, runtime).outcome == "passed"


def test_the_code_under_test_can_make_no_socket(runtime, host_guard):
    """Not even a Unix socket pair: on the local runtime every verifier
    sandbox shares one network namespace (network "no-sockets"), so a
    socket is the one way a candidate could reach another's."""
    task, _ = secret_task()
    code = (
        "import socket\n"
        "def solve(x):\n"
        "    got = []\n"
        "    for make in (socket.socketpair, lambda: socket.socket(socket.AF_UNIX),\n"
        "                 lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM)):\n"
        "        try:\n"
        "            make()\n"
        "            got.append('made')\n"
        "        except PermissionError:\n"
        "            got.append('refused')\n"
        "    return ' '.join(got)\n"
    )
    v = judge(runtime, task, code)
    assert returned(v) == "'refused refused refused'"


@pytest.mark.parametrize("code", [program(f"code.exit.{k}", "add") for k in EXITS], ids=list(EXITS))
@pytest.mark.parametrize("task", [ADD, CHECK_ADD], ids=["cases", "check"])
def test_exit_before_asserts(runtime, host_guard, task, code):
    v = judge(runtime, task, code)
    assert v.outcome == "failed"


@pytest.mark.parametrize("code", [program(f"code.eq.{k}", "add") for k in ALWAYS_EQUALS], ids=list(ALWAYS_EQUALS))
@pytest.mark.parametrize("task", [ADD, CHECK_ADD], ids=["cases", "check"])
def test_always_equal_objects(runtime, host_guard, task, code):
    v = judge(runtime, task, code)
    assert v.outcome == "failed"
    assert any("not a plain built-in value" in t.detail for t in v.tests)


SEARCH = program("code.secret-search", "solve")


def test_reading_hidden_tests_fails(runtime, host_guard):
    task, token = secret_task(timeout_s=30)
    v = judge(runtime, task, SEARCH)
    assert v.outcome == "failed"
    assert returned(v) == "'nothing found'"


def test_the_search_attack_finds_what_is_reachable(runtime):
    # Control for the test above: the same search does find a secret that
    # the candidate's side can reach, so its failure above means something.
    token = "tok-" + secrets.token_hex(12)
    task = make_task(tests=[{"args": [1], "expected": token}], context_code=f"HINT = {token!r}\n", timeout_s=30)
    assert verify(task, SEARCH, runtime).outcome == "passed"


def test_stack_frame_inspection_fails(runtime, host_guard):
    task, token = secret_task()
    code = (
        "import inspect\n"
        "def solve(x):\n"
        "    for fr in inspect.stack():\n"
        "        for v in fr.frame.f_locals.values():\n"
        "            if 'tok-' in repr(v):\n"
        "                return repr(v)\n"
        "    return 'nothing found'\n"
    )
    v = judge(runtime, task, code)
    assert v.outcome == "failed" and token not in returned(v)


def test_host_environment_secrets_are_out_of_reach(runtime, host_guard, monkeypatch):
    task, token = secret_task()
    monkeypatch.setenv("SANDGYM_TEST_SECRET", token)
    code = (
        "import os\n"
        "def solve(x):\n"
        "    if os.environ.get('SANDGYM_TEST_SECRET'):\n"
        "        return os.environ['SANDGYM_TEST_SECRET']\n"
        "    for pid in os.listdir('/proc'):\n"
        "        try:\n"
        "            data = open(f'/proc/{pid}/environ', 'rb').read()\n"
        "        except Exception:\n"
        "            continue\n"
        "        if b'SANDGYM_TEST_SECRET=' in data:\n"
        "            return data.split(b'SANDGYM_TEST_SECRET=')[1].split(b'\\0')[0].decode()\n"
        "    return 'nothing found'\n"
    )
    v = judge(runtime, task, code)
    assert returned(v) == "'nothing found'"


def test_fetching_the_answer_over_the_network_fails(runtime, host_guard):
    task, token = secret_task()
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    port = server.getsockname()[1]
    accepted: list[socket.socket] = []

    def serve():
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            accepted.append(conn)
            conn.sendall(token.encode())
            conn.close()

    stop = threading.Event()
    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    code = (
        "import socket\n"
        "def solve(x):\n"
        "    for host in ('127.0.0.1', '10.0.2.2', '172.17.0.1'):\n"
        "        try:\n"
        f"            s = socket.create_connection((host, {port}), timeout=0.5)\n"
        "            return s.recv(100).decode()\n"
        "        except OSError:\n"
        "            pass\n"
        "    return 'no network'\n"
    )
    try:
        v = judge(runtime, task, code)
    finally:
        stop.set()
        thread.join()
        server.close()
    assert returned(v) == "'no network'"
    assert not accepted


@pytest.mark.parametrize("code", [program(f"code.kill.{k}", "solve") for k in KILLS], ids=list(KILLS))
def test_signalling_the_verifier_fails(runtime, host_guard, code):
    task, _ = secret_task(timeout_s=3)
    v = judge(runtime, task, code)
    assert v.outcome in ("failed", "timeout")
    assert os.getpid() > 0  # still here


def test_fork_bomb(runtime, host_guard):
    task, _ = secret_task(timeout_s=3)
    v = judge(runtime, task, program("code.fork-bomb", "solve"))
    assert v.outcome in ("timeout", "failed")


def test_memory_bomb(runtime, host_guard):
    task, _ = secret_task()
    v = judge(runtime, task, program("code.memory-bomb", "solve"))
    assert v.outcome == "failed" and "MemoryError" in v.tests[0].detail


def test_infinite_loop_is_a_timeout_not_infrastructure(runtime, host_guard):
    task, _ = secret_task(timeout_s=1)
    t0 = time.monotonic()
    v = judge(runtime, task, "def solve(x):\n    while True:\n        pass\n")
    assert v.outcome == "timeout"
    assert len(v.attempts) == 1  # not retried as if infrastructure had failed
    assert time.monotonic() - t0 < 15
    v = judge(runtime, task, "while True:\n    pass\n")  # at import time too
    assert v.outcome == "timeout"


def test_output_flood_and_fake_pass_lines(runtime, host_guard):
    task, _ = secret_task(timeout_s=5)
    code = program("code.output-forgery", "solve")
    v = judge(runtime, task, code)
    assert v.outcome == "failed"
    assert len(v.attempts[-1].output) <= 4000


def test_disk_fill(runtime, host_guard):
    task, _ = secret_task()
    code = program("code.disk-fill", "solve")
    free_before = os.statvfs("/tmp").f_bavail
    v = judge(runtime, task, code)
    assert v.outcome == "failed"
    # Nothing of it landed on the host (allow for unrelated activity).
    assert os.statvfs("/tmp").f_bavail * os.statvfs("/tmp").f_frsize > free_before * os.statvfs("/tmp").f_frsize - (
        64 << 20
    )


def test_writing_outside_the_workspace(runtime, host_guard):
    canary = host_guard
    task, _ = secret_task()
    judge_file = next(Path(staging_root()).glob("boundary-*/judge.py"))
    original = judge_file.read_bytes()
    targets = [
        "/etc/passwd",
        "/usr/bin/python3",
        "/opt/sandgym/verifier/judge.py",
        "/opt/sandgym/agent/agent.py",
        str(canary),
        "/tmp/../pwned",
        "/pwned",
        str(judge_file),
    ]
    code = (
        "def solve(x):\n"
        "    ok = []\n"
        f"    for t in {targets!r}:\n"
        "        try:\n"
        "            with open(t, 'w') as f:\n"
        "                f.write('pwned')\n"
        "            ok.append(t)\n"
        "        except OSError:\n"
        "            pass\n"
        "    return ','.join(ok)\n"
    )
    v = judge(runtime, task, code)
    assert v.outcome == "failed"
    written = v.tests[0].detail
    for t in targets:
        if t != "/tmp/../pwned":  # /tmp inside the sandbox is its own tmpfs
            assert f"{t}," not in written + ",", written
    assert judge_file.read_bytes() == original
    assert not Path("/pwned").exists()


def test_different_answers_per_call(runtime, host_guard):
    code = "calls = []\ndef add(a, b):\n    calls.append(1)\n    return a + b if len(calls) == 1 else 0\n"
    assert judge(runtime, ADD, code).outcome == "failed"


def test_special_casing_visible_inputs(runtime, host_guard):
    code = "def add(a, b):\n    return 3 if (a, b) == (1, 2) else 0\n"
    v = judge(runtime, ADD, code)
    assert v.outcome == "failed" and v.pass_rate < 1


def test_raising_skiptest(runtime, host_guard):
    code = program("code.skiptest", "add")
    for task in (ADD, CHECK_ADD):
        v = judge(runtime, task, code)
        assert v.outcome == "failed"
        assert all(t.status != "passed" for t in v.tests)


def test_monkeypatching_the_candidate_side_does_not_help(runtime, host_guard):
    # The candidate owns its process and may rewrite anything there; only
    # plain values cross back, and the comparison happens elsewhere.
    code = program("code.serializer-patch", "add")
    assert judge(runtime, ADD, code).outcome == "failed"


@pytest.mark.parametrize(
    "junk",
    [
        b"[" * 200000 + b"\n",  # nested beyond any parser's recursion limit
        b"not json\n",
        b'{"loaded": true}\n{"value": {"d": [[[1], 2]]}}\n',  # an unhashable dict key
        b"x" * (70 << 20),  # larger than the judge reads
    ],
)
def test_forging_protocol_messages_cannot_force_an_infrastructure_error(runtime, host_guard, junk):
    # The candidate writes straight onto its reply pipe (fd 4) at import time.
    code = f"import os\nos.write(4, {junk!r})\ndef add(a, b):\n    return a + b\n"
    task = ADD.model_copy(update={"visible": ADD.visible.model_copy(update={"timeout_s": 10})})
    v = judge(runtime, task, code)
    assert v.outcome in ("failed", "timeout")


BACKENDS = [
    "local",
    pytest.param("docker", marks=pytest.mark.docker),
    pytest.param("docker:runsc", marks=pytest.mark.docker),
    pytest.param("k8s", marks=pytest.mark.k8s),
    pytest.param("k8s:gvisor", marks=pytest.mark.k8s),
]


@pytest.fixture(scope="module", params=BACKENDS)
def any_runtime(request):
    from sandgym.runtimes import get_runtime

    if request.param.startswith("k8s"):
        request.getfixturevalue("k8s_cluster")
    rt = get_runtime(request.param)
    yield rt
    rt.close()


# Every process the candidate can see: whose memory it can open, whose
# descriptors it can open, and any hidden-test token in what it could read.
READ_OTHER_PROCESSES = r"""
import os, re
def solve(x):
    me = os.readlink('/proc/self')  # its PID as this /proc numbers it (gVisor: the sandbox's)
    mem, fds, found = set(), set(), set()
    for name in os.listdir('/proc'):
        if not name.isdigit() or name == me:
            continue
        try:
            with open(f'/proc/{name}/mem', 'rb', buffering=0) as m:
                mem.add(int(name))
                for line in open(f'/proc/{name}/maps'):
                    lo, hi = (int(v, 16) for v in line.split()[0].split('-'))
                    try:
                        m.seek(lo)
                        found.update(re.findall(rb'tok-[0-9a-f]{24}', m.read(min(hi - lo, 1 << 26))))
                    except (OSError, OverflowError, ValueError):
                        pass
        except OSError:
            pass
        try:
            for fd in os.listdir(f'/proc/{name}/fd'):
                try:
                    os.close(os.open(f'/proc/{name}/fd/{fd}', os.O_RDONLY | os.O_NONBLOCK))
                    fds.add(int(name))
                except OSError:
                    pass
        except OSError:
            pass
    return ';'.join(f'{k}={sorted(v)}'.replace(' ', '') for k, v in [('mem', mem), ('fds', fds), ('found', found)])
"""


def test_the_judge_and_agent_are_out_of_the_candidates_reach(any_runtime):
    """The judge holds the hidden tests and the nonce, the agent the pipes to
    the judge: neither's memory nor descriptors open to the candidate,
    whichever isolation the backend gives it."""
    task, token = secret_task(timeout_s=30)
    v = verify(task, READ_OTHER_PROCESSES, any_runtime)
    assert v.outcome == "failed", v.detail
    seen = returned(v).strip("'")
    mem, fds, found = (part.split("=", 1)[1] for part in seen.split(";"))
    assert (mem, fds, found) == ("[]", "[]", "[]"), seen
