"""The browser sandbox as a pod of the k8s runtimes (runc, or gVisor through its RuntimeClass).

One pod per browser sandbox, hardened as the runtime's pods are (pods.py; the
restricted Pod Security profile: non-root, read-only root, every
capability dropped, no privilege escalation, seccomp RuntimeDefault, no
service-account token; the owner/run/expiry labels `sandgym gc` reads; the
runtime's RuntimeClass and node), of the `chromium` image recipe. Two
containers share the pod's loopback and nothing else:

- `app` (uid 1001): the launcher in `app` mode serves the web app on
  127.0.0.1; it alone mounts the state volume (its SQLite database).
- `browser` (uid 1000): an idle first process; Chromium is an exec'd
  process in it. The state volume is not mounted there, and without
  shareProcessNamespace the app's process is not in its view.

Pods mount no host folders: the launcher, the app's source and its
site-packages are copied in by the init container stager (as runtime.py
does a spec's mounts) into volumes mounted read-only. The state folder is not
shared with the host either: `push_state` copies a database in (one exec,
an atomic rename in the pod) and `pull_state` copies a consistent one out
(SQLite's backup API run in the app container) before the verifier reads it.

Playwright's pipes: the wrapper Playwright runs as the browser execs
`exec_relay` (on the host, with this interpreter), which opens an exec
stream into the browser container and relays fds 3 and 4 over it; the host
needs no network into the pod. The relay carries MARKER_ENV, so
`process_ids()`, `kill()` and `sandgym gc` find it; a thread watches the
pod and kills the relay when the pod stops (so Playwright sees the browser gone).

Warm browser pods: with the runtime's pool on (SANDGYM_K8S_POOL), pods of
an app whose browser sandbox repeats are made ahead (staged, app and
browser containers running) by the shared stock (runtimes/stock.py), one
stock per runtime keyed by the pod's manifest and staged folders; each
pod is handed out once, deleted after use, and dropped if the watch sees
it end while it waits.

Chromium's own sandbox is off (the RuntimeDefault seccomp profile refuses
its user namespaces); the pod (under gVisor, its kernel) is the boundary,
and the app is another user in another container.
"""

from __future__ import annotations

import copy
import json
import os
import shlex
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..base import Runtime, SandboxError, SandboxSpec
from ..browser import LAUNCHER_DIR, MARKER_ENV, STATE_IN_SANDBOX, AppSpec, BrowserLimits, BrowserSandbox
from ..host_processes import environs
from .api import container_running, init_done, pod_problem, pod_statuses
from .pods import POOL_LABEL, REQUESTS, hardened_pod, mounts_tar, pod_labels, secure_context, stager_container
from .watch import PodWatcher

if TYPE_CHECKING:
    from .runtime import KubernetesRuntime

APP_UID = 1001
BROWSER_UID = 1000
HOME = "/home/sandbox"
# The app's share of BrowserLimits.memory_mb (its own container's limit);
# the browser's container has the rest.
APP_MEMORY_MB = 128
# A browser worker lives as long as its env; the expiry label still lets
# `sandgym gc` delete a pod a crash left.
LIFETIME_S = 7 * 24 * 3600
WATCH_INTERVAL_S = 1.0
# How long a failure report waits for the kubelet to see a container's end: a
# little while the browser's container still answers an exec, longer once it does
# not (under gVisor an OOM ends the whole pod, and the kubelet took 6 s and more
# here to report it after the browser's pipes had closed).
EXIT_SETTLE_S = 5.0
GONE_SETTLE_S = 30.0
STATE_IO_TIMEOUT_S = 60.0
PYTHON = ["python3", "-I", "-S"]
LAUNCHER = [*PYTHON, f"{LAUNCHER_DIR}/launcher.py"]

# Runs in the app container: reads a file (8-byte length, then the bytes) and
# puts it in place of STATE/NAME by a rename, the old database's journals deleted.
PUSH = """\
import os, sys
def read(n):
    b = bytearray()
    while len(b) < n:
        c = os.read(0, min(n - len(b), 1 << 20))
        if not c:
            raise SystemExit("push: stdin closed early")
        b += c
    return bytes(b)
folder, name = sys.argv[1], sys.argv[2]
data = read(int.from_bytes(read(8), "big"))
tmp = os.path.join(folder, "." + name + ".in")
fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
view = memoryview(data)
while view:
    view = view[os.write(fd, view):]
os.close(fd)
for f in os.listdir(folder):
    if f.startswith(name + "-"):
        os.unlink(os.path.join(folder, f))
os.replace(tmp, os.path.join(folder, name))
"""

# Runs in the app container: a consistent copy of STATE/NAME (SQLite's backup
# API, which waits out a writer) to stdout.
PULL = """\
import sqlite3, sys
src = sqlite3.connect("file:" + sys.argv[1] + "?mode=rw", uri=True, timeout=10)
dst = sqlite3.connect(":memory:")
src.backup(dst)
sys.stdout.buffer.write(dst.serialize())
"""


# Runs in the browser container: the OOM kills its memory cgroup counted
# (cgroup v2, then v1), or -1 where there is no such file.
OOM_KILLS = """\
for path in ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"):
    try:
        for line in open(path):
            if line.split()[0] == "oom_kill":
                print(int(line.split()[1]))
                raise SystemExit(0)
    except OSError:
        pass
print(-1)
"""


class PodBrowserSandbox(BrowserSandbox):
    chromium_sandbox = False

    def __init__(self, app: AppSpec, runtime: Runtime | None, limits: BrowserLimits | None = None):
        if runtime is None or runtime.name != "k8s":
            raise ValueError(f"PodBrowserSandbox needs a k8s Runtime object (get_runtime), not {runtime!r}")
        self.runtime: KubernetesRuntime = runtime  # type: ignore[assignment]
        # The state folder on the host is a staging area owned by this process:
        # what is in it reaches the pod by push_state().
        super().__init__(app, None, limits)
        if self.limits.memory_mb <= APP_MEMORY_MB + 128:
            raise ValueError(
                f"limits.memory_mb must exceed {APP_MEMORY_MB + 128} on k8s (the app takes {APP_MEMORY_MB})"
            )
        self.pod = ""
        self._stop = threading.Event()

    # -- the pod ------------------------------------------------------------------------

    def _staged(self) -> tuple[list[str], list[str]]:
        """(host folders, sandbox paths) of what is copied into the pod: the first is the launcher's."""
        mounts = [(src, dst) for src, dst, read_only in self._app_mounts() if read_only]
        assert mounts[0][1] == LAUNCHER_DIR
        return [s for s, _ in mounts], [d for _, d in mounts]

    def _env(self) -> list[dict[str, str]]:
        env = {"HOME": HOME, "LANG": "C.UTF-8", "TMPDIR": "/tmp", "PATH": "/usr/bin:/bin"}
        return [{"name": k, "value": v} for k, v in env.items()]

    def manifest(self, name: str, maps: list | None = None) -> dict[str, Any]:
        """The pod; `maps`: per staged folder, the ConfigMap holding it (mounts.py), or None: copied in."""
        lim = self.limits
        disk = f"{lim.disk_mb}Mi"
        _, targets = self._staged()

        def memory_dir(vol: str, size: str) -> dict[str, Any]:
            # Memory-backed: a tmpfs's size is a hard limit (a disk emptyDir's is checked after the fact).
            return {"name": vol, "emptyDir": {"medium": "Memory", "sizeLimit": size}}

        maps = maps or [None] * len(targets)
        volumes = [
            maps[i].volume(f"mount-{i}") if maps[i] is not None else {"name": f"mount-{i}", "emptyDir": {}}
            for i in range(len(targets))
        ]
        volumes += [
            memory_dir("state", disk),
            memory_dir("app-tmp", "64Mi"),
            memory_dir("tmp", disk),
            memory_dir("home", disk),
            memory_dir("shm", disk),
        ]
        staged = [{"name": f"mount-{i}", "mountPath": t, "readOnly": True} for i, t in enumerate(targets)]
        cpu = f"{int(lim.cpus * 1000)}m"
        app = {
            "name": "app",
            "image": self._image(),
            "imagePullPolicy": "IfNotPresent",
            "command": [*LAUNCHER, json.dumps(self._launcher_cfg("app", log_stdio=True))],
            "workingDir": "/tmp",
            "env": self._env(),
            "securityContext": secure_context(APP_UID),
            "resources": {
                "limits": {"cpu": cpu, "memory": f"{APP_MEMORY_MB}Mi", "ephemeral-storage": "512Mi"},
                "requests": REQUESTS,
            },
            "volumeMounts": [
                *staged,
                {"name": "state", "mountPath": STATE_IN_SANDBOX},
                {"name": "app-tmp", "mountPath": "/tmp"},
            ],
        }
        browser = {
            "name": "browser",
            "image": self._image(),
            "imagePullPolicy": "IfNotPresent",
            # Idle, and free of rlimits: under gVisor an exec'd process (Chromium) inherits the first one's.
            "command": ["sleep", "infinity"],
            "workingDir": HOME,
            "env": self._env(),
            "securityContext": secure_context(BROWSER_UID),
            "resources": {
                "limits": {"cpu": cpu, "memory": f"{lim.memory_mb - APP_MEMORY_MB}Mi", "ephemeral-storage": "256Mi"},
                "requests": REQUESTS,
            },
            # The launcher only: not the state volume, not the app's source.
            "volumeMounts": [
                staged[0],
                {"name": "tmp", "mountPath": "/tmp"},
                {"name": "home", "mountPath": HOME},
                {"name": "shm", "mountPath": "/dev/shm"},
            ],
        }
        stage = [{"name": f"mount-{i}", "mountPath": f"/stage/{i}"} for i in range(len(targets)) if maps[i] is None]
        pod = hardened_pod(
            name,
            pod_labels(LIFETIME_S),
            volumes,
            [app, browser],
            [stager_container(self._image(), stage)] if stage else [],
            self.runtime.runtime_class,
            self.runtime.node,
            LIFETIME_S + 60,
        )
        pod["metadata"]["annotations"] = {"sandgym.labels": json.dumps({"role": "browser", MARKER_ENV: self.id})}
        return pod

    def _image(self) -> str:
        return self.runtime.image_of("recipe:chromium")

    def _prepare(self) -> None:
        rt = self.runtime
        sources, _ = self._staged()
        maps = [rt.mount_maps.get(src) for src in sources]
        template = self.manifest("", maps)
        template["metadata"]["annotations"] = {"sandgym.labels": json.dumps({"role": "browser"})}
        pods = rt.browser_pool()
        name = pods.claim(template, sources) if pods is not None else make_browser_pod(rt, template, sources)
        self.pod = name
        threading.Thread(target=self._watch, args=(name,), name="sandgym-browser-pod-watch", daemon=True).start()

    def _watch(self, name: str) -> None:
        """When the pod or one of its containers ends (an OOM kill), end the relay that
        stands for Chromium: Playwright learns that the browser is gone only from its pipes."""
        watcher = self.runtime.watcher
        while not self._stop.is_set():
            got = watcher.wait(name, lambda p: bool(p.metadata.deletion_timestamp) or _ended(p), WATCH_INTERVAL_S)
            if got is not None:
                if self.pod == name:
                    self._kill_host_processes()
                return

    def _relay_cfg(self) -> dict[str, Any]:
        return {
            "pod": self.pod,
            "namespace": self.runtime.namespace,
            "container": "browser",
            "command": [*LAUNCHER, json.dumps(self._launcher_cfg("browser", stdio=True))],
            # Resolved here: the relay is started by the Playwright driver,
            # which lingers between runs with the environment of its start.
            "kubeconfig": self.runtime.kubeconfig or os.environ.get("KUBECONFIG"),
        }

    def _wrapper_script(self) -> str:
        # Playwright's pipes (fds 3 and 4) pass to the relay as they are. The
        # marker in its environment: kill() and `sandgym gc` find it.
        argv = [sys.executable, "-m", "sandgym.runtimes.k8s.exec_relay", json.dumps(self._relay_cfg())]
        return f"#!/bin/sh\nexport {MARKER_ENV}={shlex.quote(self.id)}\nexec " + shlex.join(argv) + ' "$@"\n'

    # -- the state folder --------------------------------------------------------------

    def push_state(self, name: str) -> None:
        """Copy state_dir/NAME into the pod's state folder (a rename there; the old file's journals go)."""
        data = (self.state_dir / name).read_bytes()
        self._state_exec(["-c", PUSH, STATE_IN_SANDBOX, name], len(data).to_bytes(8, "big") + data)

    def pull_state(self, name: str) -> None:
        """A consistent copy of the pod's STATE/NAME (SQLite's backup API, run as the app's user) into state_dir."""
        out = self._state_exec(["-c", PULL, f"{STATE_IN_SANDBOX}/{name}"], b"")
        tmp = self.state_dir / f".{name}.out"
        tmp.write_bytes(out)
        os.replace(tmp, self.state_dir / name)

    def _state_exec(self, args: list[str], stdin: bytes) -> bytes:
        if not self.pod:
            raise SandboxError("the browser pod is not running")
        code, out, err = self.runtime.exec_call(self.pod, "app", [*PYTHON, *args], stdin, STATE_IO_TIMEOUT_S)
        if code != 0:
            raise SandboxError(
                f"copying state in pod {self.pod} failed (exit {code}): {err.decode('utf-8', 'replace')[-400:]}"
            )
        return out

    # -- what the base asks ------------------------------------------------------------

    def app_log(self) -> str:
        if not self.pod:
            return ""
        try:
            text = self.runtime.core.read_namespaced_pod_log(
                self.pod, self.runtime.namespace, container="app", tail_lines=40, _request_timeout=10
            )
        except Exception:
            return ""
        return str(text)[-2000:]

    def process_ids(self) -> list[int]:
        """Host processes of this sandbox: the relays that carry its marker (what runs in the pod is the pod's)."""
        needle = f"{MARKER_ENV}={self.id}".encode()
        return [pid for pid, env in environs() if needle in env]

    def exhausted(self) -> str | None:
        """Out of memory: a container the kubelet reports OOMKilled (under gVisor an
        OOM ends the whole pod), or, where the kernel killed only a renderer and the
        container lives on, an OOM kill its memory cgroup counted (read by an exec)."""
        if not self.pod:
            return None
        pod = self._read_pod()
        if pod is None:
            return None
        if _oom_killed(pod):
            return self._out_of_memory()
        settle = EXIT_SETTLE_S
        if not _ended(pod):
            kills = self._cgroup_oom_kills()
            if kills is None:  # no exec reaches the container: it ended, and the kubelet has not said so yet
                settle = GONE_SETTLE_S
            elif kills >= 0:
                return self._out_of_memory() if kills > 0 else None
        # The browser's pipes may close before the kubelet has seen the container end.
        deadline = time.monotonic() + settle
        while pod is not None and not _ended(pod) and time.monotonic() < deadline:
            time.sleep(0.25)
            pod = self._read_pod()
        return self._out_of_memory() if pod is not None and _oom_killed(pod) else None

    def _out_of_memory(self) -> str:
        return f"the sandbox ran out of memory (limit {self.limits.memory_mb} MB)"

    def _cgroup_oom_kills(self) -> int | None:
        """OOM kills in the browser container's memory cgroup; -1 where the container
        runs but has no such counter (gVisor); None where no exec reaches it."""
        try:
            code, out, _ = self.runtime.exec_call(self.pod, "browser", [*PYTHON, "-c", OOM_KILLS], timeout=10)
        except SandboxError:
            return None
        if code != 0:
            return None
        try:
            return max(-1, int(out.split()[0]))
        except (ValueError, IndexError):
            return -1

    def _read_pod(self):
        try:
            return self.runtime.core.read_namespaced_pod(self.pod, self.runtime.namespace, _request_timeout=10)
        except Exception:
            return None

    def memory_bytes(self) -> int:
        """The pod's working set as the kubelet's summary API reports it (cgroup
        memory less inactive file pages; tmpfs included; the sum of its
        containers' where the pod's is not reported), via the API server's node
        proxy; 0 where that is not allowed or not known yet (the kubelet's stats lag)."""
        pod = self._read_pod() if self.pod else None
        if pod is None or not pod.spec.node_name:
            return 0
        try:
            resp = self.runtime.core.connect_get_node_proxy_with_path(
                pod.spec.node_name, "stats/summary", _preload_content=False, _request_timeout=10
            )
            summary = json.loads(resp.data)
        except Exception:
            return 0
        for p in summary.get("pods", []):
            ref = p.get("podRef", {})
            if ref.get("name") == self.pod and ref.get("namespace") == self.runtime.namespace:
                whole = int((p.get("memory") or {}).get("workingSetBytes") or 0)
                # Some nodes (cgroup v1, cgroupfs) report only the containers'.
                parts = sum(int((c.get("memory") or {}).get("workingSetBytes") or 0) for c in p.get("containers", []))
                return whole or parts
        return 0

    def kill(self) -> None:
        self._kill_host_processes()
        pod = self.pod
        if pod:
            threading.Thread(
                target=self.runtime.delete_pod, args=(pod,), name="sandgym-browser-kill", daemon=True
            ).start()

    def _teardown(self) -> None:
        self._stop.set()
        pod, self.pod = self.pod, ""
        if pod:
            self.runtime.delete_pod(pod)
        self._kill_host_processes()


def _oom_killed(pod) -> bool:
    for s in pod_statuses(pod):
        for state in (s.state, s.last_state):
            term = state.terminated if state else None
            if term and term.reason == "OOMKilled":
                return True
    return False


def _ended(pod) -> bool:
    """The pod ended, or a container of it did (nothing restarts in our pods)."""
    if pod.status.phase in ("Failed", "Succeeded") or pod_problem(pod):
        return True
    return any(s.state and s.state.terminated for s in pod_statuses(pod))


def make_browser_pod(rt: KubernetesRuntime, template: dict[str, Any], sources: list[str], idle_s: float = 0.0) -> str:
    """Create a browser pod from `template` (its manifest, nameless), copy `sources` in,
    and wait for its app and browser containers: its name."""
    name = f"sg-browser-{uuid.uuid4().hex[:10]}"
    pod = copy.deepcopy(template)
    pod["metadata"]["name"] = name
    pod["metadata"]["labels"] = pod_labels(LIFETIME_S + idle_s)
    if idle_s:
        pod["metadata"]["labels"][POOL_LABEL] = "1"
        rt.made_ahead(name, True)
    rt.create_pod(pod, "browser pod")
    # The folders no ConfigMap holds (their volumes are emptyDirs) are copied in.
    copied = [i for i, v in enumerate(volumes_of(pod)) if v.startswith("mount-")]
    try:
        if copied:
            rt.wait_pod(name, lambda p: container_running(p, "stage", init=True), "its init container to start")
            rt.stage_mounts_into(name, mounts_tar([sources[i] for i in copied], copied))
        rt.wait_pod(
            name,
            lambda p: (
                (not copied or init_done(p, "stage")) and all(container_running(p, c) for c in ("app", "browser"))
            ),
            "its app and browser containers to start",
        )
    except Exception:
        rt.delete_pod(name)
        raise
    return name


def volumes_of(pod: dict[str, Any]) -> list[str]:
    """Per staged folder (`mount-<i>`, in order): "mount-<i>" when copied in, "" when a ConfigMap holds it."""
    out = []
    for v in pod["spec"]["volumes"]:
        if v["name"].startswith("mount-"):
            out.append(v["name"] if "emptyDir" in v else "")
    return out


@dataclass
class _WaitingPod:
    name: str
    ready_at: float
    watcher: PodWatcher
    max_idle_s: float
    key: str = ""

    def fresh(self) -> bool:
        return not self.watcher.gone(self.name) and time.monotonic() - self.ready_at < self.max_idle_s


class BrowserPods:
    """Browser pods made ahead, per template and staged folders (the stock's variant)."""

    def __init__(self, rt: KubernetesRuntime):
        from ..stock import Stock
        from .runtime import POOL_MAX_IDLE_S

        self.rt = rt
        self.max_idle_s = POOL_MAX_IDLE_S
        self.stock: Stock[_WaitingPod] = Stock(
            self._start,
            lambda w: rt.delete_pod(w.name),
            rt.pool,
            f"{rt.label}-browser",
            count_in_use=False,
            max_total=rt.pool_max,
            starters=rt.pool_starters,
            max_idle_s=POOL_MAX_IDLE_S,
            demand=True,
            rate_per_s=rt.pool_rate,
        )

    def _start(self, spec: SandboxSpec, variant: str) -> _WaitingPod:
        wanted = json.loads(variant)
        name = make_browser_pod(self.rt, wanted["pod"], wanted["sources"], self.max_idle_s)
        return _WaitingPod(name, time.monotonic(), self.rt.watcher, self.max_idle_s)

    def claim(self, template: dict[str, Any], sources: list[str]) -> str:
        variant = json.dumps({"pod": template, "sources": sources}, sort_keys=True)
        t0 = time.perf_counter()
        waiting_pod = self.stock.take(SandboxSpec(), variant)
        if waiting_pod is not None:
            self.stock.claimed(True, time.perf_counter() - t0)
            self.rt.made_ahead(waiting_pod.name, False)
            return waiting_pod.name
        name = make_browser_pod(self.rt, template, sources)
        self.stock.claimed(False, time.perf_counter() - t0)
        return name

    def close(self) -> None:
        self.stock.close()
