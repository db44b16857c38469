"""The `/run_code` attack catalogue (sandgym/fusion/attacks.py) played
through SandboxFusion's real client against a served app: on the local
runtime each attack in every language it is written in; on Docker with
runc and with gVisor the kinds whose defence is the runtime's own
(filesystem, network, limits, privileges, files read back, what the next
request finds), in a few languages. Every test
checks the answer the client got and then that nothing outside the
sandboxes changed (`Host.check`): no file on the host, the host's secret
unread and untouched, a host process of the sandboxes' own uid alive, a
loopback listener never reached, the hostname the same, no process left
behind (no container, on Docker), the server still serving."""

from __future__ import annotations

import base64
import glob
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from sandgym.fusion.api import build_run_code_app
from sandgym.fusion.attacks import BY_KIND, FILL_MB, RunCodeAttack
from sandgym.runtimes import get_runtime
from sandgym.runtimes.host_processes import descendants

from .sandbox_fusion_client import run_client, serving

pytestmark = pytest.mark.sandbox

SECRET_ENV = "SANDGYM_FUSION_ATTACK_SECRET"
COMPILE_S = 60.0
KEPT = 1 << 20  # bytes of output kept per stream (sandgym/fusion/run_code.py)

BACKENDS = [
    "local",
    pytest.param("docker", marks=pytest.mark.docker),
    pytest.param("docker:runsc", marks=pytest.mark.docker),
]
# What runs on the Docker backends (every kind and language runs on local).
RUNTIME_KINDS = {
    "host-write",
    "host-read",
    "network",
    "fork-bomb",
    "memory-bomb",
    "disk-fill",
    "signals",
    "pooled-state",
    "escape",
    "fetch-symlink",
}
RUNTIME_LANGUAGES = ("python", "bash", "cpp")


@dataclass
class Host:
    backend: str
    url: str
    token: str
    secret_path: str
    secret_stat: tuple[int, int]
    listener: socket.socket
    udp: socket.socket
    canary: subprocess.Popen
    hostname: str
    baseline: set[int]

    def values(self, mark: str) -> dict[str, str | int]:
        return {
            "mark": mark,
            "secret": self.secret_path,
            "port": int(self.url.rsplit(":", 1)[1]),
            "listen": self.listener.getsockname()[1],
            "pid": self.canary.pid,
        }

    def check(self, mark: str) -> None:
        """Nothing outside the sandboxes changed."""
        left = [p for d in ("/tmp", "/var/tmp", "/dev/shm", "/root", "") for p in glob.glob(f"{d}/{mark}*")]
        assert not left, f"a sandboxed program wrote on the host: {left}"
        st = os.stat(self.secret_path)
        assert (st.st_size, st.st_mtime_ns) == self.secret_stat, "the host's secret file changed"
        with open(self.secret_path) as f:
            assert f.read() == self.token
        assert self.canary.poll() is None, "a host process of the sandboxes' uid was killed"
        with pytest.raises(BlockingIOError):
            self.listener.accept()  # nobody connected to the host's loopback listener
        with pytest.raises(BlockingIOError):
            self.udp.recvfrom(16)
        assert socket.gethostname() == self.hostname
        # Every sandbox of the attack is gone (closing one waits for its processes).
        deadline = time.monotonic() + 30
        while (left_procs := set(descendants(os.getpid())) - self.baseline) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not left_procs, f"processes left behind: {[_comm(p) for p in left_procs]}"
        if self.backend != "local":
            while (left_boxes := _my_containers()) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert not left_boxes, f"containers left behind: {left_boxes}"
        with urllib.request.urlopen(f"{self.url}/v1/ping", timeout=60) as resp:
            assert json.loads(resp.read()) == "pong"


def _my_containers() -> list[str]:
    """This process's sandbox containers (other processes share the engine)."""
    import docker

    from sandgym.runtimes.docker.runtime import OWNER_LABEL, owner_label

    found = docker.from_env().containers.list(
        all=True, filters={"label": f"{OWNER_LABEL}={owner_label()}"}, ignore_removed=True
    )
    return [str(c.name) for c in found]


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        return f"{pid}: {cmdline}"
    except OSError:
        return f"{pid}: gone"


@pytest.fixture(scope="module", params=BACKENDS)
def host(request) -> Iterator[Host]:
    token = f"tok-{uuid.uuid4().hex[:24]}"
    # Set before the runtime starts its sandboxes: none may inherit it.
    os.environ[SECRET_ENV] = token
    secret_dir = tempfile.mkdtemp(prefix="sandgym-fusion-secret-")
    os.chmod(secret_dir, 0o755)  # readable by anyone on the host: only the sandbox keeps it out of reach
    secret_path = os.path.join(secret_dir, "secret.txt")
    with open(secret_path, "w") as f:
        f.write(token)
    os.chmod(secret_path, 0o644)
    st = os.stat(secret_path)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", listener.getsockname()[1]))
    udp.setblocking(False)
    # A host process of the uid the sandboxes run as (nobody, when root):
    # only the pid namespace keeps their signals off it.
    drop = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if os.geteuid() == 0 else []
    canary = subprocess.Popen([*drop, "sleep", "3600"])
    rt = get_runtime(request.param)
    try:
        with serving(build_run_code_app(rt, concurrency=2)) as url:
            # The zygote is up before the baseline of processes is taken.
            warm = run_client(url, [{"language": "python", "code": "print(1)"}])
            assert warm[0]["summary"] == "Success", warm
            yield Host(
                backend=request.param,
                url=url,
                token=token,
                secret_path=secret_path,
                secret_stat=(st.st_size, st.st_mtime_ns),
                listener=listener,
                udp=udp,
                canary=canary,
                hostname=socket.gethostname(),
                baseline=set(descendants(os.getpid())),
            )
    finally:
        canary.kill()
        canary.wait()
        listener.close()
        udp.close()
        shutil.rmtree(secret_dir)
        del os.environ[SECRET_ENV]


def request(attack: RunCodeAttack, language: str, host: Host, mark: str) -> dict[str, Any]:
    r: dict[str, Any] = {
        "language": language,
        "code": attack.program(language, **host.values(mark)),
        "compile_timeout": COMPILE_S,
        "run_timeout": attack.run_timeout,
        "fetch_files": list(attack.fetch_files),
    }
    if attack.memory_limit_mb:
        r["memory_limit_MB"] = attack.memory_limit_mb
    return r


def languages(host: Host, kind: str) -> list[str]:
    """The languages `kind` is played in on `host`'s backend (skipped where
    it is not played)."""
    attack = BY_KIND[f"run_code.{kind}"]
    if host.backend == "local":
        return list(attack.programs)
    if kind not in RUNTIME_KINDS:
        pytest.skip(f"{kind} is played on the local runtime only")
    return [lang for lang in attack.programs if lang in RUNTIME_LANGUAGES]


# How sandbox-fusion 0.3.7's `run_code` words the exception it raises on a
# SandboxError answer (its status is not in the text).
CLIENT_SANDBOX_ERROR = "Exception: Sandbox responded with error: "


def play(host: Host, kind: str, sandbox_errors: bool = False) -> tuple[str, dict[str, dict[str, Any]]]:
    """Every language's program of `kind` through the client; results by
    language. The client raises on a SandboxError answer: allowed only
    with `sandbox_errors`."""
    attack = BY_KIND[f"run_code.{kind}"]
    mark = f"sandgym-attack-{uuid.uuid4().hex[:12]}"
    langs = languages(host, kind)
    assert langs, kind
    got = run_client(host.url, [request(attack, lang, host, mark) for lang in langs])
    for lang, r in zip(langs, got, strict=True):
        assert "error" not in r or (sandbox_errors and CLIENT_SANDBOX_ERROR in r["error"]), (kind, lang, r)
    return mark, dict(zip(langs, got, strict=True))


def everything_said(r: dict[str, Any]) -> str:
    """All a response carries back: output of both commands and fetched files."""
    resp = r.get("response") or {}
    parts = [r.get("error", ""), resp.get("message", "")]
    for key in ("compile_result", "run_result"):
        res = resp.get(key) or {}
        parts += [res.get("stdout") or "", res.get("stderr") or ""]
    parts += [base64.b64decode(v).decode("latin-1") for v in (resp.get("files") or {}).values()]
    return "\n".join(parts)


def run_out(r: dict[str, Any]) -> str:
    return r["response"]["run_result"]["stdout"]


def test_host_writes_land_in_the_sandbox_only(host):
    mark, got = play(host, "host-write")
    for lang, r in got.items():
        assert r["summary"] == "Success", (lang, r)
        assert "wrote /tmp/" + mark in run_out(r), (lang, run_out(r))  # the sandbox's own /tmp took it
    host.check(mark)


def test_host_secrets_are_out_of_reach(host):
    mark, got = play(host, "host-read")
    for lang, r in got.items():
        assert r["summary"] in ("Success", "RunFailed"), (lang, r)
        assert host.token not in everything_said(r), f"{lang} read the host's secret"
        assert "refused" in run_out(r) or lang == "bash", (lang, run_out(r))
    host.check(mark)


def test_the_hosts_loopback_is_out_of_reach(host):
    mark, got = play(host, "network")
    for lang, r in got.items():
        assert r["summary"] == "Success", (lang, r)
        out = run_out(r)
        assert "REACHED" not in out and out.count("no route") == 2, (lang, out)
    host.check(mark)


def test_fork_bombs_end_as_failures(host):
    mark, got = play(host, "fork-bomb")
    for lang, r in got.items():
        assert r["summary"] in ("RunFailed", "RunTimeout"), (lang, r)
    host.check(mark)


def test_memory_bombs_end_as_failures(host):
    mark, got = play(host, "memory-bomb")
    for lang, r in got.items():
        assert r["summary"] in ("RunFailed", "RunTimeout"), (lang, r)
    host.check(mark)


def test_disk_fills_stop_at_the_sandboxs_bounds(host):
    mark, got = play(host, "disk-fill")
    bound = {".": 512, "/tmp": 512, "/dev/shm": 64}  # disk_mb and /dev/shm's size
    for lang, r in got.items():
        assert r["summary"] == "Success", (lang, r)
        filled = {
            line.split()[1]: int(line.split()[2]) for line in run_out(r).splitlines() if line.startswith("filled ")
        }
        assert set(filled) == set(bound), (lang, run_out(r))
        for path, mb in filled.items():
            assert mb <= bound[path] < FILL_MB, (lang, path, mb)
    host.check(mark)


def test_output_floods_are_cut_at_the_kept_size(host):
    mark, got = play(host, "output-flood")
    for lang, r in got.items():
        res = r["response"]["run_result"]
        assert res["status"] == "Finished", (lang, res["status"])
        assert 0 < len(res["stdout"]) <= KEPT and 0 < len(res["stderr"]) <= KEPT, lang
    host.check(mark)


def test_signals_reach_no_other_sandbox_and_no_host_process(host):
    """Victims run in another sandbox, one after another, while every
    language's signal attack runs: each must finish."""
    victims: list[dict[str, Any]] = []
    done = threading.Event()

    def victim() -> None:
        while not done.is_set():
            code = "import time\nfor _ in range(30):\n    time.sleep(0.1)\nprint('survived')\n"
            victims.extend(run_client(host.url, [{"language": "python", "code": code}]))

    thread = threading.Thread(target=victim)
    thread.start()
    try:
        mark, got = play(host, "signals", sandbox_errors=True)
    finally:
        done.set()
        thread.join()
    for lang, r in got.items():
        # The attacker kills its own sandbox's processes (its runner too, at
        # worst a SandboxError, which the client raises); it gets an answer.
        assert CLIENT_SANDBOX_ERROR in r.get("error", "") or r["response"]["status"] in ("Success", "Failed"), (
            lang,
            r,
        )
    assert victims
    for r in victims:
        assert r.get("summary") == "Success" and run_out(r) == "survived\n", r
    host.check(mark)


def test_nothing_is_left_for_the_next_request(host):
    attack = BY_KIND["run_code.pooled-state"]
    assert attack.follow_up
    mark = f"sandgym-attack-{uuid.uuid4().hex[:12]}"
    for lang in languages(host, "pooled-state"):
        planted, after = run_client(
            host.url,
            [request(attack, lang, host, mark), {"language": "python", "code": attack.follow_up}],
        )
        assert planted["summary"] == "Success" and "planted" in run_out(planted), (lang, planted)
        assert after["summary"] == "Success", (lang, after)
        assert run_out(after) == "checked\n", (lang, run_out(after))
    host.check(mark)


def test_privilege_and_namespace_moves_change_nothing_outside(host):
    mark, got = play(host, "escape")
    for lang, r in got.items():
        assert r["response"]["status"] in ("Success", "Failed"), (lang, r)
        assert r["response"]["run_result"]["status"] == "Finished", (lang, r)
    py = run_out(got["python"])
    # chroot itself is allowed on the local runtime (the sandbox's own mount
    # namespace: it leads back to the sandbox's root); the rest is refused.
    for name in ("setuid", "mount", "sethostname", "proc-hostname"):
        line = next(line for line in py.splitlines() if line.startswith(name + " "))
        assert "refused" in line or "returned -1" in line, line
    host.check(mark)


def test_fetched_symlinks_bring_back_no_host_file(host):
    mark, got = play(host, "fetch-symlink")
    for lang, r in got.items():
        assert r["summary"] == "Success", (lang, r)
        assert host.token not in everything_said(r), f"{lang}: a fetched symlink read the host's secret"
    host.check(mark)


def test_compilers_cannot_include_host_files(host):
    mark, got = play(host, "compile-include")
    for lang, r in got.items():
        assert r["summary"] == "CompileFailed", (lang, r)
        assert host.token not in everything_said(r), f"{lang}'s compiler read the host's secret"
    host.check(mark)


def test_no_sandbox_inherits_the_servers_environment(host):
    """The host-read programs printed every process's environment: the
    secret set in the server's environment appears in none (checked
    above); here, that the sandbox's own environment is the table's."""
    got = run_client(host.url, [{"language": "bash", "code": "env | sort"}])
    out = run_out(got[0])
    assert out and SECRET_ENV not in out and host.token not in out, out
