"""The local runtime against real bubblewrap: semantics, limits, isolation, cleanup.

Every test runs twice: sandboxes forked from the zygote (the default) and
one bubblewrap process per sandbox.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import pytest

from sandgym.runtimes import RuntimeUnavailable, SandboxError, SandboxSpec, get_runtime
from sandgym.runtimes.local.runtime import LocalRuntime
from sandgym.runtimes.rootfs import ALWAYS, rootfs
from tests.helpers import agent_host_pid


@pytest.fixture(params=["zygote", "bwrap"])
def rt(request, runtime, bwrap_runtime):
    return runtime if request.param == "zygote" else bwrap_runtime


@pytest.fixture
def box(rt):
    with rt.create() as sb:
        yield sb


def host_pids_with(marker: str) -> list[int]:
    pids = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        pids.append(int(p))
            except OSError:
                pass
    return pids


def sandbox_pids(sb) -> list[int]:
    out = sb.exec(["sh", "-c", "ls /proc"]).text().split()
    return sorted(int(p) for p in out if p.isdigit())


def test_exec_basics(box):
    r = box.exec(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (r.exit_code, r.stdout, r.stderr, r.timed_out) == (3, b"out\n", b"err\n", False)
    assert box.exec("echo $((6*7))").stdout == b"42\n"
    assert box.exec(["cat"], stdin=b"x" * 500_000).stdout == b"x" * 500_000
    assert box.exec(["pwd"]).stdout == b"/workspace\n"
    assert box.exec(["pwd"], cwd="/tmp").stdout == b"/tmp\n"
    assert box.exec(["sh", "-c", "echo $FOO"], env={"FOO": "bar"}).stdout == b"bar\n"
    missing = box.exec(["/no/such/program"])
    assert missing.exit_code == 127 and b"cannot run" in missing.stderr


def test_runs_unprivileged_with_a_clean_environment(box):
    os.environ["SANDGYM_TEST_HOST_SECRET"] = "host-secret-value"
    try:
        env = box.exec(["env"]).text()
    finally:
        del os.environ["SANDGYM_TEST_HOST_SECRET"]
    assert "host-secret-value" not in env
    assert "HOME=/workspace" in env
    assert box.exec(["id", "-u"]).stdout == b"1000\n"
    caps = box.exec(["grep", "CapEff", "/proc/self/status"]).text()
    assert caps.split()[1] == "0000000000000000"


def test_timeout_kills_the_whole_tree(box):
    before = sandbox_pids(box)
    r = box.exec(["sh", "-c", "sleep 100 & setsid sleep 100 & (sleep 100 &) ; sleep 100"], timeout=0.5)
    assert r.timed_out and r.exit_code == 137
    assert r.duration_s < 5
    assert len(sandbox_pids(box)) == len(before)


def test_background_child_does_not_hold_exec(box):
    t0 = time.monotonic()
    r = box.exec(["sh", "-c", "sleep 30 & echo started"], timeout=20)
    assert r.stdout == b"started\n" and not r.timed_out
    assert time.monotonic() - t0 < 5


def test_output_is_capped(box):
    r = box.exec(["sh", "-c", "yes | head -c 5000000; yes no | head -c 300000 >&2"], max_output=1000)
    assert r.truncated and len(r.stdout) == 1000 and len(r.stderr) == 1000
    assert r.exit_code == 0


def test_rlimits(rt):
    spec = SandboxSpec(memory_mb=256, file_size_mb=1, pids=32, disk_mb=8, cpu_seconds=1)
    with rt.create(spec) as sb:
        mem = sb.exec(["python3", "-c", "x = bytearray(600 * 1024 * 1024)"])
        assert mem.exit_code != 0 and b"MemoryError" in mem.stderr
        big = sb.exec(["sh", "-c", "head -c 3000000 /dev/zero > f"])
        assert big.exit_code != 0
        assert int(sb.exec("stat -c %s f").text()) <= 1024 * 1024
        disk = sb.exec(
            ["sh", "-c", "for i in 1 2 3 4 5 6 7 8 9 10; do head -c 1000000 /dev/zero > f$i || exit 1; done"]
        )
        assert disk.exit_code != 0 and b"No space left" in disk.stderr
        forks = sb.exec(
            [
                "python3",
                "-c",
                textwrap.dedent("""
            import os, time
            n = 0
            try:
                for _ in range(200):
                    if os.fork() == 0:
                        time.sleep(5); os._exit(0)
                    n += 1
            except OSError:
                print("limited at", n)
            """),
            ],
            timeout=20,
        )
        assert b"limited at" in forks.stdout
        cpu = sb.exec(["python3", "-c", "while True: pass"], timeout=30)
        assert not cpu.timed_out and cpu.exit_code != 0  # SIGXCPU/SIGKILL after 1 CPU second
        assert cpu.duration_s < 10


def test_files_in_and_out(box):
    box.put_files({"a/b/c.txt": "hello", "top.py": b"print(1)\n"})
    assert box.exec(["cat", "a/b/c.txt"]).stdout == b"hello"
    got = box.get_files(["/workspace/a", "/workspace/top.py"])
    assert got == {"workspace/a/b/c.txt": b"hello", "workspace/top.py": b"print(1)\n"}
    with pytest.raises(SandboxError, match="escapes"):
        box.put_files({"../../etc/evil": "x"})
    with pytest.raises(SandboxError, match="no such file"):
        box.get_files(["/workspace/nope"])


def test_put_rejects_links(box):
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        link = tarfile.TarInfo("link")
        link.type = tarfile.SYMTYPE
        link.linkname = "/etc/passwd"
        tar.addfile(link)
    with pytest.raises(SandboxError, match="only regular files"):
        box.put_archive(buf.getvalue())


def test_host_is_read_only_and_mostly_invisible(box, tmp_path):
    canary = tmp_path / "canary"
    canary.write_text("untouched")
    for target in ("/usr/evil", "/etc/evil", "/evil", "/opt/sandgym/agent/evil", str(canary)):
        r = box.exec(["sh", "-c", f"echo x > {target}"])
        assert r.exit_code != 0, target
    assert canary.read_text() == "untouched"
    assert not os.path.exists("/usr/evil") and not os.path.exists("/evil")
    # The root is the image's (runtimes/rootfs.py, test_local_rootfs.py): the
    # host's own folders are not there, and the image's /home, /srv, /mnt are empty.
    listing = box.exec(["ls", "/"]).text().split()
    assert set(listing) <= set(os.listdir(rootfs("host"))) | set(ALWAYS)
    assert "work" not in listing
    assert box.exec(["ls", "-A", "/home", "/srv", "/mnt"]).text().split() == ["/home:", "/mnt:", "/srv:"]
    assert box.exec(["cat", "/etc/shadow"]).exit_code != 0


def test_no_network_but_loopback(box):
    names = (
        box.exec(["sh", "-c", "ls /sys/class/net 2>/dev/null || cut -d: -f1 /proc/net/dev | tail -n +3"]).text().split()
    )
    assert names == ["lo"]
    # A server on the host's loopback is not the sandbox's loopback.
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.5)
    port = server.getsockname()[1]
    try:
        probe = (
            f"import socket\ns = socket.socket(); s.settimeout(2)\n"
            f"try:\n    s.connect(('127.0.0.1', {port})); print('connected')\n"
            f"except OSError as e:\n    print('refused', e)\n"
        )
        assert b"refused" in box.exec(["python3", "-c", probe]).stdout
        with pytest.raises(socket.timeout):
            server.accept()
        # Loopback inside the sandbox works.
        inner = (
            "import socket\nsrv = socket.socket(); srv.bind(('127.0.0.1', 0)); srv.listen(1)\n"
            "c = socket.create_connection(srv.getsockname()); print('inner ok')\n"
        )
        assert box.exec(["python3", "-c", inner]).stdout == b"inner ok\n"
    finally:
        server.close()


# Every socket the kernel lists in the reader's network namespace.
SOCKET_TABLES = (
    "print(sorted(line for t in ('tcp', 'tcp6', 'udp', 'udp6', 'raw', 'unix', 'packet', 'netlink')\n"
    "             for line in open('/proc/net/' + t).read().splitlines()[1:]))\n"
)


def test_sandboxes_without_sockets_share_the_zygotes_network_namespace(runtime):
    """A sandbox that can make no socket makes no network namespace (the
    costliest part of a clone): it stays in the zygote's, with the others
    of its kind, where its attempts leave nothing; any other sandbox has
    its own."""
    from tests.runtimes.test_conformance import SOCKET_PROBE

    sealed = SandboxSpec(network="no-sockets")
    with runtime.create(sealed) as a, runtime.create(sealed) as b, runtime.create() as c:
        ns = [sb.exec(["readlink", "/proc/self/ns/net"]).stdout for sb in (a, b, c)]
        assert ns[0] == ns[1] != ns[2]
        before = b.exec(["python3", "-c", SOCKET_TABLES]).stdout
        assert b"[" in before
        assert b"made" not in a.exec(["python3", "-c", SOCKET_PROBE]).stdout
        assert b.exec(["python3", "-c", SOCKET_TABLES]).stdout == before


def test_sandboxes_are_isolated_from_each_other(rt):
    with rt.create() as a, rt.create() as b:
        a.put_files({"mine.txt": "a"})
        a.exec(["sh", "-c", "echo shm > /dev/shm/x; echo tmp > /tmp/x"])
        assert b.exec(["ls", "/workspace"]).stdout == b""
        assert b.exec(["sh", "-c", "cat /dev/shm/x /tmp/x"]).exit_code != 0
        a.exec(["sh", "-c", "sleep 60 &"])
        assert b"sleep" not in b.exec(["sh", "-c", "cat /proc/[0-9]*/cmdline"]).stdout


def test_close_is_final_and_idempotent(rt):
    sb = rt.create()
    marker = f"{int(uuid.uuid4().int % 10**6) + 10**6}.5"
    sb.exec(["sh", "-c", f"sleep {marker} &"])
    assert host_pids_with(f"sleep\0{marker}")
    sb.close()
    sb.close()
    deadline = time.monotonic() + 5
    while host_pids_with(f"sleep\0{marker}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not host_pids_with(f"sleep\0{marker}")
    with pytest.raises(SandboxError, match="closed"):
        sb.exec(["true"])


@pytest.mark.parametrize("zygote", [True, False])
def test_sandbox_dies_with_its_parent(zygote, tmp_path):
    marker = f"{int(uuid.uuid4().int % 10**6) + 10**6}.25"
    script = textwrap.dedent(f"""
        import sys, time
        from sandgym.runtimes.local.runtime import LocalRuntime
        sb = LocalRuntime(zygote={zygote}).create()
        sb.exec(["sh", "-c", "sleep {marker} &"])
        print("ready", flush=True)
        time.sleep(600)
    """)
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        assert host_pids_with(f"sleep\0{marker}")
    finally:
        child.kill()
        child.wait()
    deadline = time.monotonic() + 10
    while host_pids_with(f"sleep\0{marker}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not host_pids_with(f"sleep\0{marker}")


def test_lifetime_ends_the_sandbox(rt):
    sb = rt.create(SandboxSpec(wall_timeout_s=1))
    time.sleep(1.5)
    with pytest.raises(SandboxError):
        sb.exec(["true"])
    sb.close()


def test_missing_bubblewrap_names_the_fix(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(RuntimeUnavailable, match="apt-get install bubblewrap"):
        LocalRuntime()


def test_runtime_names():
    with pytest.raises(ValueError, match="choices: local"):
        get_runtime("nope")
    with pytest.raises(ValueError, match="choices: local, docker, docker:runsc, docker:kata, k8s, k8s:gvisor"):
        get_runtime("kubernetes")
    with pytest.raises(SandboxError, match="namespaces"):
        LocalRuntime().create(SandboxSpec(isolation="runsc"))


def test_a_forked_child_gets_its_own_zygote(runtime):
    """A process pool that forks after the parent used the runtime (verl's
    reward managers do) must not share the parent's zygote channel."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    global _FORKED_RUNTIME
    runtime.create().close()
    _FORKED_RUNTIME = runtime  # inherited by the forked workers, as verl's would be
    ctx = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(2, mp_context=ctx) as pool:
        outs = list(pool.map(_echo_in_sandbox, range(4)))
    assert outs == [b"0\n", b"1\n", b"2\n", b"3\n"]
    with runtime.create() as sb:  # the parent's zygote still answers
        assert sb.exec(["echo", "parent"]).stdout == b"parent\n"


_FORKED_RUNTIME: LocalRuntime | None = None


def _echo_in_sandbox(i):
    assert _FORKED_RUNTIME is not None  # set before the workers fork
    with _FORKED_RUNTIME.create() as sb:
        return sb.exec(["echo", str(i)]).stdout


def test_concurrent_creates_each_get_a_fresh_sandbox(runtime):
    # Eight at once from one zygote: each its own PID 1, workspace and
    # hostname state, none holding what another wrote.
    from concurrent.futures import ThreadPoolExecutor

    def one(i: int) -> tuple[str, str]:
        with runtime.create() as sb:
            out = sb.exec(["sh", "-c", f"ls /workspace /tmp; echo {i} > /tmp/mine; cat /proc/1/cmdline"]).text()
            return out, sb.exec(["cat", "/tmp/mine"]).text().strip()

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, range(32)))
    for i, (out, mine) in enumerate(results):
        assert "mine" not in out.split("/proc")[0], out  # nothing left by another sandbox
        assert "agent.py" in out  # the agent is PID 1 of its own namespace
        assert mine == str(i)


def test_ended_zygote_sandboxes_leave_no_zombies(runtime):
    # A zygote's sandboxes are reaped as they end (by bubblewrap's init,
    # their parent), not left as zombies until the next request.
    for _ in range(5):
        runtime.create().close()
    zygote = runtime._get_zygote().proc.pid

    def tree_zombies() -> list[int]:
        out, frontier = [], [zygote]
        while frontier:
            pid = frontier.pop()
            try:
                with open(f"/proc/{pid}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                        out.append(pid)
            except (OSError, IndexError):
                continue
            for task in os.listdir(f"/proc/{pid}/task") if os.path.isdir(f"/proc/{pid}/task") else []:
                try:
                    with open(f"/proc/{pid}/task/{task}/children") as f:
                        frontier += [int(c) for c in f.read().split()]
                except OSError:
                    pass
        return out

    deadline = time.monotonic() + 5
    while tree_zombies() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not tree_zombies()


# -- sandboxes made ahead (LocalRuntime(prestart=N), runtimes/stock.py) ---------


def _wait_stocked(rt: LocalRuntime, n: int = 1) -> None:
    deadline = time.monotonic() + 60  # a generous bound, only so a broken stock cannot hang the suite
    while rt.stocked() < n:
        assert time.monotonic() < deadline, "no sandbox was made ahead"
        time.sleep(0.02)


def _sandbox_agents() -> set[int]:
    """Host pids of the sandbox agents running now (any runtime's)."""
    return set(host_pids_with("/opt/sandgym/agent/agent.py")) - set(host_pids_with('"role": "zygote"'))


def test_the_stock_hands_each_sandbox_out_once_and_close_leaves_nothing():
    rt = LocalRuntime(prestart=1)
    spec = SandboxSpec(labels={"role": "stock-test"})
    before = _sandbox_agents()
    try:
        for i in range(6):
            if i >= 2:  # the spec has repeated: wait until one is ready for it
                _wait_stocked(rt)
            sb = rt.create(spec)
            assert sb.info.labels == {"role": "stock-test"}
            # Fresh, never handed out before: nothing of an earlier sandbox's
            # workspace or /tmp.
            assert sb.exec(["sh", "-c", "ls -A /workspace /tmp | grep -c mark || true"]).stdout == b"0\n"
            assert sb.exec(["sh", "-c", f"echo {i} > /workspace/mark && echo {i} > /tmp/mark"]).exit_code == 0
            sb.close()
        assert rt.stock_hits() == 4
    finally:
        rt.close()
    assert rt.stocked() == 0
    assert _sandbox_agents() <= before  # the stock's sandboxes are gone with the runtime


def test_a_stocked_sandbox_keeps_the_specs_lifetime():
    """A stocked sandbox's agent lives STOCK_MAX_IDLE_S longer; the host ends
    it at the spec's lifetime after hand-out."""
    rt = LocalRuntime(prestart=1)
    spec = SandboxSpec(wall_timeout_s=2)
    try:
        rt.create(spec).close()
        rt.create(spec).close()
        _wait_stocked(rt)
        sb = rt.create(spec)
        assert rt.stock_hits() == 1
        assert sb.exec(["true"]).exit_code == 0
        time.sleep(4)
        with pytest.raises(SandboxError):
            sb.exec(["true"])
        sb.close()
    finally:
        rt.close()


def test_bad_local_prestart_values(monkeypatch):
    from sandgym.runtimes.local.runtime import PRESTART_ENV

    monkeypatch.setenv(PRESTART_ENV, "many")
    with pytest.raises(ValueError, match=f"{PRESTART_ENV}='many'"):
        LocalRuntime()
    with pytest.raises(ValueError, match="prestart=-1"):
        LocalRuntime(prestart=-1)
    monkeypatch.setenv(PRESTART_ENV, "2")
    assert LocalRuntime().prestart == 2 and LocalRuntime(prestart=0).prestart == 0


def test_a_forked_child_never_takes_its_parents_stock():
    """The parent's stocked sandboxes talk over the parent's channels: a
    forked worker makes (and stocks) its own."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    global _FORKED_RUNTIME
    rt = LocalRuntime(prestart=1)
    try:
        rt.create().close()
        rt.create().close()
        _wait_stocked(rt)
        _FORKED_RUNTIME = rt
        with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("fork")) as pool:
            outs = list(pool.map(_echo_in_sandbox, range(6)))
        assert outs == [f"{i}\n".encode() for i in range(6)]
        with rt.create() as sb:  # the parent's stocked sandbox still answers the parent
            assert sb.exec(["echo", "parent"]).stdout == b"parent\n"
        assert rt.stock_hits() == 1
    finally:
        rt.close()


PROBE = """\
import json, sys
preloaded = "pmod" in sys.modules
sys.path.insert(0, "/opt/pre")
try:
    import pmod
except Exception as e:
    print(json.dumps({"preloaded": preloaded, "error": type(e).__name__}))
else:
    print(json.dumps({"preloaded": preloaded, "version": getattr(pmod, "VERSION", None), "file": pmod.__file__}))
"""


def staged_folder(tmp_path, files: dict[str, str], preload: tuple[str, ...]):
    """A staged folder holding `files`, as a mount at /opt/pre."""
    from sandgym.runtimes.base import Mount
    from sandgym.runtimes.staging import stage_dir

    src = tmp_path / f"pre-{uuid.uuid4().hex[:8]}"
    src.mkdir()
    for name, text in files.items():
        (src / name).write_text(text)
    return Mount(source=str(stage_dir(src)), target="/opt/pre", preload=preload)


def staged_module(tmp_path, body: str, preload: bool = True):
    """A staged folder holding pmod.py (`body`), as a mount at /opt/pre."""
    return staged_folder(tmp_path, {"pmod.py": body}, ("pmod",) if preload else ())


def probe(rt, *mounts) -> dict:
    """What the probe script, run in the warm interpreter of a new sandbox, finds."""
    import json

    with rt.create(SandboxSpec(mounts=mounts)) as sb:
        sb.put_files({"probe.py": PROBE})
        res = sb.run_python("/workspace/probe.py")
        assert res.exit_code == 0, res.text("stderr")
        return json.loads(res.stdout)


def test_a_mounts_preloaded_modules_are_found_imported_in_its_version(rt, tmp_path):
    v1 = staged_module(tmp_path, "VERSION = 1\n")
    v2 = staged_module(tmp_path, "VERSION = 2\n")
    zygote = rt.use_zygote
    # Each sandbox gets the version its own mount holds, whichever the
    # zygote imported last; the zygote imports it ahead (a fresh
    # bubblewrap sandbox has nothing to import it into).
    for mount, version in [(v1, 1), (v2, 2), (v1, 1), (v2, 2)]:
        seen = probe(rt, mount)
        assert seen == {"preloaded": zygote, "version": version, "file": "/opt/pre/pmod.py"}


def test_a_sandbox_that_does_not_mount_the_folder_has_none_of_its_modules(rt, tmp_path):
    mount = staged_module(tmp_path, "VERSION = 1\n")
    assert probe(rt, mount)["version"] == 1
    # A pmod.py of its own, not preloaded: the sandbox imports that one.
    other = staged_module(tmp_path, "OTHER = 1\n", preload=False)
    assert probe(rt, other) == {"preloaded": False, "version": None, "file": "/opt/pre/pmod.py"}
    assert probe(rt) == {"preloaded": False, "error": "ModuleNotFoundError"}


def test_a_folders_preloaded_modules_import_that_folders_copies(rt, tmp_path):
    a = staged_folder(tmp_path, {"first.py": "import common\n", "common.py": "V = 'a'\n"}, ("first",))
    b = staged_folder(tmp_path, {"second.py": "import common\n", "common.py": "V = 'b'\n"}, ("second",))
    script = "import sys; sys.path.insert(0, '/opt/pre'); import second; print(second.common.V, second.common.__file__)"
    for mount in (a, b):
        with rt.create(SandboxSpec(mounts=(mount,))) as sb:
            sb.put_files({"probe.py": script if mount is b else "import sys"})
            res = sb.run_python("/workspace/probe.py")
            assert res.exit_code == 0, res.text("stderr")
    # b's `second` imported b's `common`, not the one a's `first` left loaded.
    assert res.text().split() == ["b", "/opt/pre/common.py"]


def test_a_module_that_fails_to_preload_is_imported_by_the_sandbox_itself(rt, tmp_path):
    broken = staged_module(tmp_path, "raise RuntimeError('not today')\n")
    assert probe(rt, broken) == {"preloaded": False, "error": "RuntimeError"}
    good = staged_module(tmp_path, "VERSION = 3\n")
    assert probe(rt, good)["version"] == 3


def test_preload_takes_module_names():
    from pydantic import ValidationError

    from sandgym.runtimes.base import Mount

    with pytest.raises(ValidationError, match="'boundary/judge'"):
        Mount(source="/x", target="/opt/x", preload=("boundary/judge",))
    assert Mount(source="/x", target="/opt/x", preload=("pkg.mod",)).preload == ("pkg.mod",)


def test_a_zygote_sandbox_that_cannot_start_fails_its_first_request(runtime):
    # The first request goes out before the agent's `ready` is read: a
    # start that fails (here the agent cannot dup its channel under a
    # one-file limit) fails that request, naming why, and leaves nothing.
    runtime.create().close()  # the zygote runs
    before = set(host_pids_with("/opt/sandgym/agent/agent.py"))  # (sandboxes are its clones)
    sb = runtime.create(SandboxSpec(open_files=1))
    with pytest.raises(SandboxError, match="(?s)could not start sandbox .*Too many open files"):
        sb.exec(["true"])
    assert not sb.alive
    sb.close()
    assert set(host_pids_with("/opt/sandgym/agent/agent.py")) <= before
    with runtime.create() as ok:
        assert ok.exec(["true"]).exit_code == 0


def test_close_ends_a_sandbox_that_does_not_shut_down_when_asked(runtime, monkeypatch):
    # An agent that cannot act on `shutdown` (stopped here; a start stuck
    # before `ready` would be the same): close() has the zygote end it.
    import signal

    import sandgym.runtimes.local.runtime as local
    from sandgym.runtimes.host_processes import pid_alive

    monkeypatch.setattr(local, "CLOSE_WAIT_S", 0.5)
    sb = runtime.create()
    agent = agent_host_pid(runtime, sb)
    os.kill(agent, signal.SIGSTOP)
    sb.close()
    deadline = time.monotonic() + 5
    while pid_alive(agent) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(agent)


def _zygote_marks() -> set[bytes]:
    """The marks (SANDGYM_OWNER=...) of the local zygotes this process runs."""
    from sandgym.runtimes.host_processes import environs
    from sandgym.runtimes.local.runtime import OWNER_ENV

    mine = f"{OWNER_ENV}={os.getpid()}-".encode()
    zygotes = set(host_pids_with('"role": "zygote"'))
    return {e for pid, env in environs() if pid in zygotes for e in env if e.startswith(mine)}


@pytest.mark.sandbox
def test_warm_up_starts_the_zygote_the_first_sandbox_is_forked_from():
    rt = LocalRuntime()
    try:
        rt.warm_up()
        assert len(rt._zygotes) == 1
        (z,) = rt._zygotes.values()
        assert z.proc.poll() is None
        with rt.create() as sb:
            assert sb.exec(["true"]).exit_code == 0
        assert list(rt._zygotes.values()) == [z]
    finally:
        rt.close()
    assert z.proc.poll() is not None  # closed with the runtime
    rt.warm_up()  # after close(), nothing is started
    assert rt._zygotes == {}


@pytest.mark.sandbox
def test_a_warm_up_on_a_thread_and_a_create_share_one_zygote():
    rt = LocalRuntime()
    before = _zygote_marks()
    try:
        warming = threading.Thread(target=rt.warm_up)
        warming.start()
        with rt.create() as sb:
            assert sb.exec(["true"]).exit_code == 0
        warming.join()
        assert len(_zygote_marks() - before) == 1
    finally:
        rt.close()
    assert _zygote_marks() <= before


def test_a_failed_warm_up_is_left_to_create_which_reports_it():
    rt = LocalRuntime()
    rt.bwrap = "/bin/false"  # a "bubblewrap" that exits at once
    try:
        rt.warm_up()  # never raises
        assert rt._zygotes == {}
        with pytest.raises(SandboxError, match="could not start"):
            rt.create()
    finally:
        rt.close()
