"""The browser envs on every backend that runs them: local (bubblewrap), docker (runc),
docker:runsc (gVisor), k8s (pods, runc) and k8s:gvisor.

The same tasks, policies, isolation checks and limits on each; Chromium, the
app and the page run inside the sandbox every time. On k8s (a pod per
sandbox, a few seconds to launch) a representative handful of the form tasks
and two MiniWoB pages run, to keep the suite's time reasonable; the k8s cases
take the `k8s_cluster` fixture (the real test cluster).
"""

from __future__ import annotations

import os
import subprocess

import pytest

import sandgym  # noqa: F401  (registers the envs)
from sandgym.envs.browser_form import session as session_module
from sandgym.envs.browser_form.env import BrowserFormEnv
from sandgym.envs.browser_form.miniwob import MiniWoBEnv
from sandgym.runtimes.browser import BrowserLimits
from sandgym.runtimes.docker.browser import ContainerBrowserSandbox
from sandgym.runtimes.k8s.browser import PodBrowserSandbox

from . import test_env as on_local
from .apps import check_oracle_and_null, first_of_each_app
from .test_miniwob import scripted_passes_and_null_fails

BACKEND_IDS = {"local": "local", "docker": "docker", "docker:runsc": "runsc", "k8s": "k8s", "k8s:gvisor": "k8s-gvisor"}


def _marks(backend: str) -> list:
    kind = backend.split(":")[0]
    return [pytest.mark.chromium, *([getattr(pytest.mark, kind)] if kind != "local" else [])]


BACKENDS = [pytest.param(b, marks=_marks(b), id=i) for b, i in BACKEND_IDS.items()]
MINIWOB = ["click-button", "enter-text", "focus-text", "click-checkboxes"]
# Unless SANDGYM_SLOW=1 (CI time): one task of each form of the app (sign-in, booking,
# checkout, messages, profile, settings), the first three on k8s (its pods are the
# slowest: 7 s an episode on gVisor). The whole set on local is test_env.py's `slow`
# test_oracle_passes_and_null_fails_on_every_task.
FORM_SAMPLE = [
    "forms/login-alice",
    "forms/booking-garden",
    "forms/checkout-pen-and-mug",
    "forms/message-carol-report",
    "forms/profile-fix-invalid-email",
    "forms/settings-unsubscribe-light",
]
K8S_MINIWOB = MINIWOB[:2]
MINIWOB_CASES = [
    pytest.param(b, task, marks=_marks(b), id=f"{task}-{i}")
    for b, i in BACKEND_IDS.items()
    for task in (K8S_MINIWOB if b.startswith("k8s") else MINIWOB)
]


def running(pid: int) -> bool:
    """The process exists and has not exited (a zombie waits only for its parent to reap it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def comm(pid: int) -> str:
    with open(f"/proc/{pid}/comm") as f:
        return f.read().strip()


def chromium_browser_process(pids: list[int]) -> int:
    """Chromium's browser process among `pids` (not a renderer of the last episode's
    context, which may be exiting): the chromium whose parent is not one."""

    def parent(pid: int) -> int:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])

    return next(p for p in pids if comm(p) == "chromium" and comm(parent(p)) != "chromium")


def on_k8s(backend: str) -> bool:
    return backend.startswith("k8s")


def needs_cluster(request, backend: str) -> None:
    """The k8s backends run on the test cluster: up (and its env set) before the env is made."""
    if on_k8s(backend):
        request.getfixturevalue("k8s_cluster")


# Pages as hostile as the agent could make them (the test puts them there,
# through the env's own page access): memory without bound, and workers
# without bound, each holding memory.
MEMORY_BOMB = """() => {
  setTimeout(() => { const keep = []; for (;;) keep.push(new Uint8Array(32 << 20).fill(7)); }, 0);
}"""
WORKER_BOMB = """() => {
  const src = URL.createObjectURL(new Blob(['self.keep = new Uint8Array(4 << 20).fill(1);']));
  const workers = [];
  setInterval(() => { for (let i = 0; i < 16; i++) workers.push(new Worker(src)); }, 1);
}"""
SMALL = BrowserLimits(memory_mb=768, pids=384)
# Run in a container of a k8s browser pod: its uid, the state folder, the
# Chromium and app processes in its sight (the probe itself left out).
K8S_PROBE = """import os
print("uid", os.getuid())
print("state", os.listdir("/state") if os.path.exists("/state") else "absent")
cmds = []
for p in os.listdir("/proc"):
    if p.isdigit() and int(p) != os.getpid():
        try:
            cmds.append(open(f"/proc/{p}/cmdline", "rb").read())
        except OSError:  # it exited meanwhile
            pass
print("chromium", sum(b"chromium" in c for c in cmds))
print("app", sum(b'"mode": "app"' in c for c in cmds))
"""


class OnBackend(BrowserFormEnv):
    """The env fixture's env: a BrowserFormEnv that notes the backend it runs on."""

    def __init__(self, backend: str):
        super().__init__(runtime=backend)
        self.backend = backend


@pytest.fixture(scope="module", params=BACKENDS)
def env(request):
    needs_cluster(request, request.param)
    e = OnBackend(request.param)
    yield e
    e.close()


def test_every_form_task_oracle_passes_and_null_fails(env):
    assert len(env.task_set.tasks) >= 23
    whole = os.environ.get("SANDGYM_SLOW") == "1"
    sample = FORM_SAMPLE[:3] if env.backend.startswith("k8s") else FORM_SAMPLE
    ids = [task.id for task in env.task_set.tasks] if whole else sample
    for task_id in ids:
        env.reset(options={"task_id": task_id})
        _, reward, info = on_local.run(env, task_id, env.oracle_actions())
        assert info["outcome"] == "passed" and reward == 1.0, (task_id, env.last_verdict.detail)
        _, reward, info = on_local.run(env, task_id, env.null_actions())
        assert info["outcome"] == "failed" and reward == 0.0 and info["reward_valid"], task_id


@pytest.mark.parametrize(("backend", "task"), MINIWOB_CASES)
def test_miniwob_pages_score_their_scripted_policy_and_not_the_null_one(request, backend, task):
    needs_cluster(request, backend)
    env = MiniWoBEnv(task, runtime=backend)
    try:
        obs, _ = env.reset(seed=5)
        scripted_passes_and_null_fails(env, task, obs)
    finally:
        env.close()


# The three apps (apps-v1) off local and docker (runc), whose own tests play samples there
# (test_apps.py, test_shop.py, test_tracker.py, test_wiki.py). Each app is a sandbox of its own (a
# pod on k8s, 10-20 s to launch): by default one app per backend, each app somewhere (CI time);
# with SANDGYM_SLOW=1 every app on every one. One task per app, oracle and null.
APP_BACKENDS = [
    pytest.param(b, app, marks=_marks(b), id=BACKEND_IDS[b])
    for b, app in (("docker:runsc", "shop"), ("k8s", "wiki"), ("k8s:gvisor", "tracker"))
]


@pytest.mark.parametrize(("backend", "app"), APP_BACKENDS)
def test_the_apps_pass_their_oracle_and_fail_their_null(request, backend, app):
    needs_cluster(request, backend)
    env = BrowserFormEnv(tasks="apps-v1", runtime=backend)
    try:
        every = os.environ.get("SANDGYM_SLOW") == "1"
        for task_id in first_of_each_app(env):  # each app a new sandbox
            if every or task_id.startswith(f"{app}/"):
                check_oracle_and_null(env, task_id)
    finally:
        env.close()


# The isolation tests of the local env, on every backend.
def test_reset_clears_cookies_storage_and_server_data(env):
    on_local.test_reset_clears_cookies_storage_and_server_data(env)


def test_the_next_context_is_made_ahead_and_no_page_used_it_before(env):
    on_local.test_the_next_context_is_made_ahead_and_no_page_used_it_before(env)


def test_page_reaches_only_the_app_not_the_host_loopback(env):
    on_local.test_page_reaches_only_the_app_not_the_host_loopback(env)


def test_forged_client_side_success_does_not_pass(env):
    on_local.test_forged_client_side_success_does_not_pass(env)


def test_the_browser_cannot_open_the_state_folder(env):
    from playwright.async_api import Error as PlaywrightError

    env.reset(options={"task_id": "forms/login-alice"})
    assert (env.session.state_dir / "app.sqlite").is_file()  # the host side reads it
    page = env.session.page
    for url in ("file:///state/", "file:///state/app.sqlite"):
        try:
            env.session.run(page.goto(url))
        except PlaywrightError:
            continue  # refused outright
        shown = env.session.run(page.content())
        assert "app.sqlite" not in shown and "SQLite format" not in shown, shown[:500]
    env.step("done()")


def inner_id(pid: int, kind: str) -> str:
    """The uid (gid) process `pid` has in its own user namespace."""
    return open(f"/proc/{pid}/{kind}_map").read().split()[0]


def _container_exec(env, uid: int, cmd: str) -> subprocess.CompletedProcess:
    sandbox = env.session.sandbox
    return subprocess.run(
        ["docker", "exec", "-u", f"{uid}:{uid}", sandbox.container, "sh", "-c", cmd],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_app_is_out_of_the_browsers_reach_but_over_http(env):
    """Chromium's user (or namespaces) can neither read the app's files nor signal or trace the app."""
    env.reset(options={"task_id": "forms/login-alice"})
    sandbox = env.session.sandbox
    if env.backend == "local":
        pids = sandbox.process_ids()
        chromium = chromium_browser_process(pids)
        ns = {p: os.readlink(f"/proc/{p}/ns/pid") for p in pids}
        app = next(p for p in pids if comm(p) == "python3" and ns[p] != ns[chromium])
        # In Chromium's own PID namespace (as its uid), the app does not exist.
        probe = subprocess.run(
            [
                "nsenter",
                f"--target={chromium}",
                "--user",
                "--mount",
                "--pid",
                f"--setuid={inner_id(chromium, 'uid')}",
                f"--setgid={inner_id(chromium, 'gid')}",
                "--",
                "/usr/bin/python3",
                "-c",
                "import os, sys\n"
                "pids = [p for p in os.listdir('/proc') if p.isdigit() and int(p) != os.getpid()]\n"
                "names = [open(f'/proc/{p}/cmdline', 'rb').read() for p in pids]\n"
                "print(sum(b'uvicorn' in n or b'\"app\"' in n for n in names))\n"
                "try:\n    os.listdir('/state'); print('state', os.listdir('/state'))\nexcept OSError as e:\n"
                "    print('state refused', e.errno)\n",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert probe.returncode == 0, probe.stderr
        assert probe.stdout.splitlines()[0] == "0", probe.stdout  # no app process in sight
        assert "app.sqlite" not in probe.stdout
        assert app in sandbox.process_ids()  # and it is alive
    elif on_k8s(env.backend):
        # In the browser's container (as its user, 1000): no state folder at all,
        # and of the pod's processes only its own (no shared process namespace);
        # in the app's container (the positive control), the app and its database.
        def probe_in(container: str) -> dict[str, str]:
            code, out, err = sandbox.runtime.exec_call(sandbox.pod, container, ["python3", "-c", K8S_PROBE])
            assert code == 0, err
            return dict(line.split(" ", 1) for line in out.decode().splitlines())

        browser, app = probe_in("browser"), probe_in("app")
        assert browser["uid"] == "1000" and browser["state"] == "absent", browser
        assert int(browser["chromium"]) > 0 and browser["app"] == "0", browser
        assert app["uid"] == "1001" and "app.sqlite" in app["state"] and app["app"] == "1", app
    else:
        app_pid = _container_exec(env, 1001, "pgrep -u 1001 -o python3 || ps -o pid= -u 1001 | head -1")
        pid = app_pid.stdout.split()[0] if app_pid.stdout.split() else ""
        if not pid:  # no procps in the image: find it in /proc
            pid = _container_exec(
                env, 1000, "for d in /proc/[0-9]*; do grep -q '\"app\"' $d/cmdline 2>/dev/null && basename $d; done"
            ).stdout.split()[0]
        as_browser = _container_exec(
            env,
            1000,
            f"ls /state; cat /state/app.sqlite >/dev/null; kill -0 {pid} && echo signalled; cat /proc/{pid}/environ",
        )
        assert "Permission denied" in as_browser.stderr and "app.sqlite" not in as_browser.stdout
        assert "signalled" not in as_browser.stdout and "Operation not permitted" in as_browser.stderr
        assert "SANDGYM_APP_STATE" not in as_browser.stdout
    # And over HTTP, the app still answers.
    assert env.session.evaluate("async () => (await fetch('/login')).status") == 200
    env.step("done()")


@pytest.mark.chromium
def test_chromium_keeps_every_feature_playwright_turns_off():
    # Chromium keeps only the last --disable-features switch, and ours comes after
    # Playwright's: it must list Playwright's too (runtimes/browser.py DISABLED_FEATURES).
    env = BrowserFormEnv(runtime="local")
    try:
        env.reset(options={"task_id": "forms/login-alice"})
        pids = on_local.sandbox_of(env).process_ids()
        chromium = chromium_browser_process(pids)
        with open(f"/proc/{chromium}/cmdline", "rb") as f:
            args = f.read().decode().split("\0")
        lists = [a.split("=", 1)[1].split(",") for a in args if a.startswith("--disable-features=")]
        assert len(lists) >= 2, args  # Playwright's, then ours
        missing = set().union(*lists[:-1]) - set(lists[-1])
        assert not missing, f"Playwright turns off {sorted(missing)}: add them to DISABLED_FEATURES"
        assert {"Translate", "WebUIOmniboxPopup"} <= set(lists[-1])
        env.step("done()")
    finally:
        env.close()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("bomb", ["memory", "workers"])
def test_a_page_that_exhausts_its_limits_is_env_error_and_the_next_episode_is_healthy(
    request, monkeypatch, backend, bomb
):
    needs_cluster(request, backend)
    env = BrowserFormEnv(runtime=backend, limits=SMALL)
    try:
        env.reset(options={"task_id": "forms/login-alice"})
        # A page the bomb hangs (rather than crashes) ends at the snapshot's timeout:
        # 5 s rather than 15 while the bomb runs (CI time; the outcome is under test).
        monkeypatch.setattr(session_module, "LOAD_TIMEOUT_MS", 5_000)
        env.session.evaluate(MEMORY_BOMB if bomb == "memory" else WORKER_BOMB)
        for _ in range(env.max_steps):
            _, reward, term, trunc, info = env.step("noop(1000)")
            if term or trunc:
                break
        monkeypatch.undo()
        assert env.last_verdict is not None
        assert info["outcome"] == "env_error" and not info["reward_valid"] and reward == 0.0, env.last_verdict.detail
        if bomb == "memory":
            assert "ran out of memory (limit 768 MB)" in env.last_verdict.detail
        # The same env (worker) goes on: a new sandbox, a passing episode.
        env.reset(options={"task_id": "forms/login-alice"})
        _, reward, info = on_local.run(env, "forms/login-alice", env.oracle_actions())
        assert info["outcome"] == "passed" and reward == 1.0
    finally:
        env.close()


@pytest.mark.chromium
@pytest.mark.docker
@pytest.mark.parametrize("backend", ["docker", "docker:runsc"])
def test_close_leaves_no_container_and_no_state(backend):
    import docker

    env = BrowserFormEnv(runtime=backend)
    try:
        env.reset(options={"task_id": "forms/login-alice"})
        sandbox = env.session.sandbox
        assert isinstance(sandbox, ContainerBrowserSandbox)
        client = docker.from_env()
        name = sandbox.container
        container = client.containers.get(name)
        assert container.status == "running"
        # The limits are the container's.
        host = container.attrs["HostConfig"]
        assert host["Memory"] >= sandbox.limits.memory_mb * 2**20 and host["NetworkMode"] == "none"
        assert host["ReadonlyRootfs"] and host["CapDrop"] == ["ALL"]
    finally:
        env.close()
    with pytest.raises(docker.errors.NotFound):
        client.containers.get(name)
    assert sandbox.process_ids() == []  # no `docker exec` client left either
    assert not sandbox.state_dir.exists()


@pytest.mark.chromium
@pytest.mark.k8s
@pytest.mark.parametrize("backend", ["k8s", "k8s:gvisor"])
def test_close_leaves_no_pod_and_no_relay(k8s_cluster, backend):
    from kubernetes.client.rest import ApiException

    env = BrowserFormEnv(runtime=backend)
    try:
        env.reset(options={"task_id": "forms/login-alice"})
        sandbox = env.session.sandbox
        assert isinstance(sandbox, PodBrowserSandbox)
        rt = sandbox.runtime
        pod = rt.core.read_namespaced_pod(sandbox.pod, rt.namespace)
        assert pod.status.phase == "Running"
        relays = sandbox.process_ids()
        assert relays and all(
            b"sandgym.runtimes.k8s.exec_relay" in open(f"/proc/{p}/cmdline", "rb").read() for p in relays
        )
        # Hardened as the runtime's pods are, two users, the state volume in the app's container only.
        spec = pod.spec
        assert spec.runtime_class_name == rt.runtime_class and not spec.share_process_namespace
        assert spec.automount_service_account_token is False and not spec.host_network and not spec.host_pid
        containers = {c.name: c for c in spec.containers}
        assert {c: containers[c].security_context.run_as_user for c in containers} == {"app": 1001, "browser": 1000}
        for c in containers.values():
            sc = c.security_context
            assert sc.read_only_root_filesystem and sc.capabilities.drop == ["ALL"]
            assert sc.allow_privilege_escalation is False and sc.seccomp_profile.type == "RuntimeDefault"
        assert "state" in {m.name for m in containers["app"].volume_mounts}
        assert "state" not in {m.name for m in containers["browser"].volume_mounts}
        limit = sum(int(c.resources.limits["memory"].removesuffix("Mi")) for c in containers.values())
        assert limit == sandbox.limits.memory_mb
        labels = pod.metadata.labels
        assert {"sandgym.owner", "sandgym.run", "sandgym.expires"} <= set(labels)
    finally:
        env.close()
    with pytest.raises(ApiException) as gone:
        rt.core.read_namespaced_pod(sandbox.pod or pod.metadata.name, rt.namespace)
    assert gone.value.status == 404
    assert sandbox.process_ids() == []  # no relay left
    assert [p for p in relays if running(p)] == []
    assert not sandbox.state_dir.exists()


@pytest.mark.chromium
@pytest.mark.k8s
def test_when_the_pod_dies_the_relay_exits_and_the_episode_is_env_error(k8s_cluster):
    """Playwright learns that the browser is gone only from its pipes: the relay must end with the pod."""
    import time

    env = BrowserFormEnv(runtime="k8s")
    try:
        env.reset(options={"task_id": "forms/login-alice"})
        sandbox = env.session.sandbox
        assert isinstance(sandbox, PodBrowserSandbox)
        relays = sandbox.process_ids()
        assert relays
        sandbox.runtime.core.delete_namespaced_pod(sandbox.pod, sandbox.runtime.namespace, grace_period_seconds=0)
        deadline = time.monotonic() + 120  # a bound on the wait, not a measured figure
        while sandbox.alive and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not sandbox.alive  # the driver saw the browser's pipes close
        assert [p for p in relays if running(p)] == []
        _, reward, term, _, info = env.step("noop(100)")
        assert term and info["outcome"] == "env_error" and not info["reward_valid"] and reward == 0.0
        env.reset(options={"task_id": "forms/login-alice"})  # a new pod
        assert env.session.sandbox is not sandbox
        _, reward, info = on_local.run(env, "forms/login-alice", env.oracle_actions())
        assert info["outcome"] == "passed" and reward == 1.0
    finally:
        env.close()
