"""The `docker` backends: the Docker Engine with runc, gVisor (runsc) or Kata.

Every sandbox is one container: network none, read-only root filesystem
with tmpfs for the workspace and /tmp, every capability dropped,
no-new-privileges, pids/memory/CPU limits, a non-root user, and labels
(owner, run, expiry) by which `sandgym gc` finds leaks after a crash. The
same in-sandbox agent as the local backend runs as the container's
command (PID 1), reached over the container's attach stream: a warm exec
is one message and a fork, not a `docker exec`.

With `prestart` (argument or SANDGYM_DOCKER_PRESTART), container start
and removal leave the caller's critical path: a bounded stock of fresh,
never-used containers is started ahead for each spec that repeats (see
runtimes/stock.py), and closed containers are removed by a background thread
(`BackgroundRemover`, runtimes/remover.py). A container is handed out once and removed after use.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import socket
import threading
import time
import uuid
import weakref
from collections.abc import Callable
from dataclasses import dataclass

from ..agent_client import AGENT_DIR, AGENT_FILES, AgentChannel, AgentSandbox, agent_config
from ..base import (
    Runtime,
    RuntimeUnavailable,
    SandboxError,
    SandboxInfo,
    SandboxSpec,
    refuse_egress,
)
from ..gvisor import RUNSC_MAX_PIDS, runsc_host_tasks
from ..images import default_image, docker_client, image_exists, image_for
from ..remover import BackgroundRemover
from ..staging import BOUNDARY_DIR, stage_dir
from ..stock import STOCK_MAX_IDLE_S, Stock, waiting
from ..stock import prestart_setting as stock_setting

READY_TIMEOUT_S = 60.0
OWNER_LABEL = "sandgym.owner"  # host:pid of the process that made it
RUN_LABEL = "sandgym.run"
EXPIRES_LABEL = "sandgym.expires"  # unix time after which gc may remove it
STOCK_LABEL = "sandgym.stock"  # "1": started ahead, before any caller asked for it
PRESTART_ENV = "SANDGYM_DOCKER_PRESTART"
ISOLATION = {"runc": "runc", "runsc": "runsc", "kata": "kata"}
# Registered names tried for each isolation, in order.
OCI_NAMES = {"runc": ("runc",), "runsc": ("runsc",), "kata": ("kata", "kata-runtime", "kata-qemu")}
RUN_ID = uuid.uuid4().hex[:12]


def runsc_platform(runtime: dict) -> str:
    """The platform of a registered runsc (docker info's Runtimes entry)."""
    args = runtime.get("runtimeArgs") or []
    return next((a.split("=", 1)[1] for a in args if a.startswith("--platform=")), "")


def owner_label() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class DockerRuntime(Runtime):
    """Sandboxes as containers. `oci`: runc, runsc (gVisor) or kata."""

    name = "docker"

    def __init__(self, oci: str = "runc", image: str | None = None, prestart: int | None = None):
        if oci not in ISOLATION:
            raise ValueError(f"unknown OCI runtime {oci!r}; choices: {', '.join(ISOLATION)}")
        self.client = docker_client()
        registered = set(self.client.info().get("Runtimes", {}))
        names = [n for n in OCI_NAMES[oci] if n in registered]
        if not names:
            hint = (
                "run scripts/setup.sh (it builds runsc and registers it with the Docker Engine), or register "
                'a runsc in /etc/docker/daemon.json, e.g. {"runtimes": {"runsc": {"path": '
                '"/usr/local/lib/sandgym/runsc", "runtimeArgs": ["--network=none", "--platform=systrap"]}}}, '
                "and restart dockerd"
                if oci == "runsc"
                else "install and register a Kata runtime with the Docker Engine"
            )
            raise RuntimeUnavailable(
                f"runtime 'docker:{oci}': the Docker Engine has no {oci} runtime "
                f"(registered: {', '.join(sorted(registered))}); {hint}"
            )
        self.oci = names[0]
        self.isolation = ISOLATION[oci]
        # Docker's default seccomp profile refuses user namespaces under
        # runc; gVisor implements them in its own kernel.
        self.nested_namespaces = oci != "runc"
        self.image = image or default_image()
        if not image_exists(self.client, self.image):
            raise RuntimeUnavailable(
                f"image {self.image} is missing: run `sandgym images build` (debootstrap, no registry)"
            )
        self._present = {self.image}  # images known to exist
        self.agent_dir = stage_dir(BOUNDARY_DIR, AGENT_FILES)
        # Containers outlive their maker unless removed: whatever is still
        # open at close() or at interpreter exit is removed then (after a
        # SIGKILL, `sandgym gc` finds them by label).
        self._open: weakref.WeakSet[AgentSandbox] = weakref.WeakSet()
        self.prestart = prestart_setting(prestart)
        self._remover = (
            BackgroundRemover(lambda cid: self.client.api.remove_container(cid, force=True), "sandgym-docker-remover")
            if self.prestart
            else None
        )
        self._stock: Stock[_Started] | None = None
        if self.prestart:
            self._stock = Stock(self._start_ahead, self._discard, self.prestart, "docker", count_in_use=True)
        atexit.register(self.close)

    def close(self) -> None:
        """Remove every container this runtime holds (stocked, open, and those
        still being removed) and return when they are gone."""
        if self._stock is not None:
            self._stock.close()
        for sb in list(self._open):
            sb.close()
        if self._remover is not None:
            self._remover.drain()

    def settle(self) -> None:
        """Wait until every closed sandbox's container is removed (the stock stays)."""
        if self._remover is not None:
            self._remover.drain()

    def stocked(self) -> int:
        """Containers started ahead and not handed out yet."""
        return self._stock.count() if self._stock is not None else 0

    def _sandbox_pids(self, spec: SandboxSpec) -> int:
        """The tasks the sandbox may hold (the agent's RLIMIT_NPROC). Without
        process limits (Chromium's threads) a runsc sandbox may hold all of
        spec.pids: past its memory the sentry dies, and the whole sandbox
        with it, which its user (the browser) takes as an infrastructure
        failure and replaces."""
        if self.isolation != "runsc" or not spec.process_limits:
            return spec.pids
        return min(spec.pids, RUNSC_MAX_PIDS)

    @functools.cached_property
    def _runsc_platform(self) -> str:
        return runsc_platform(self.client.info().get("Runtimes", {}).get(self.oci, {}))

    def _host_pids(self, spec: SandboxSpec) -> int:
        """The container's pids cgroup limit: the host tasks the sandbox costs."""
        if self.isolation != "runsc":
            return spec.pids
        return runsc_host_tasks(self._sandbox_pids(spec), self._runsc_platform)

    def create(self, spec: SandboxSpec | None = None) -> AgentSandbox:
        spec = spec or SandboxSpec()
        refuse_egress(spec, "docker")
        if spec.isolation not in (None, self.isolation):
            raise SandboxError(f"this runtime isolates with {self.isolation}, not {spec.isolation!r}")
        image = image_for(spec.image, self.image)
        if image not in self._present:
            if not image_exists(self.client, image):
                name = spec.image.split(":", 1)[1] if spec.image.startswith("recipe:") else None
                fix = f"sandgym images build {name}" if name else "build or load it"
                raise RuntimeUnavailable(f"image {image} is missing: run `{fix}` (debootstrap, no registry)")
            self._present.add(image)
        for m in spec.mounts:
            if not os.path.exists(m.source):
                raise SandboxError(f"mount source does not exist: {m.source}")
        if self._stock is not None:
            start = time.perf_counter()
            ready = self._stock.take(spec, image)
            if ready is not None:
                return self._hand_out(ready, spec, time.perf_counter() - start, self._stock.returned)
        started = self._start(spec, image, stocked=False)
        return self._hand_out(started, spec, started.start_s)

    def _hand_out(
        self, started: _Started, spec: SandboxSpec, create_s: float, on_close: Callable[[str], None] | None = None
    ) -> AgentSandbox:
        """The sandbox object over a started container (its one and only user)."""
        info = SandboxInfo(
            backend="docker", isolation=self.isolation, id=started.sid, create_s=create_s, labels=dict(spec.labels)
        )
        channel, sock, container_id = started.channel, started.sock, started.container_id
        timer = None
        if started.stocked:
            # Its agent's lifetime runs STOCK_MAX_IDLE_S longer than the
            # spec's: the host ends it at the spec's lifetime from now.
            timer = threading.Timer(spec.wall_timeout_s, self._expire, (channel, container_id))
            timer.daemon = True
            timer.start()

        def closer(clean: bool) -> None:
            if timer is not None:
                timer.cancel()
            sock.close()
            self._remove(container_id)
            if on_close is not None:
                on_close(started.key)

        sandbox = AgentSandbox(
            channel, spec, info, closer, lambda: channel.stderr_tail.decode("utf-8", "replace")[-800:]
        )
        self._open.add(sandbox)
        return sandbox

    def _expire(self, channel: AgentChannel, container_id: str) -> None:
        channel.abort()
        self._remove(container_id)

    def _remove(self, container_id: str) -> None:
        if self._remover is not None:
            self._remover.submit(container_id)
            return
        try:
            self.client.api.remove_container(container_id, force=True)
        except Exception:  # already gone; gc catches anything left
            pass

    def _start_ahead(self, spec: SandboxSpec, image: str) -> _Started:
        return self._start(spec, image, stocked=True)

    def _discard(self, started: _Started) -> None:
        started.sock.close()
        self._remove(started.container_id)

    def _start(self, spec: SandboxSpec, image: str, stocked: bool) -> _Started:
        """Create and start a container for `spec` and wait for its agent."""
        sid = f"sg-docker-{uuid.uuid4().hex[:10]}"
        mb = spec.disk_mb
        volumes = {str(self.agent_dir): {"bind": AGENT_DIR, "mode": "ro"}}
        for m in spec.mounts:
            if not os.path.exists(m.source):  # the engine would make an empty one
                raise SandboxError(f"mount source does not exist: {m.source}")
            volumes[m.source] = {"bind": m.target, "mode": "ro" if m.read_only else "rw"}
        extra_s = STOCK_MAX_IDLE_S if stocked else 0.0
        labels = {
            OWNER_LABEL: owner_label(),
            RUN_LABEL: RUN_ID,
            EXPIRES_LABEL: str(int(time.time() + extra_s + spec.wall_timeout_s + 60)),
        }
        if stocked:
            # Made before anyone asked: the caller's labels are in its SandboxInfo only.
            labels[STOCK_LABEL] = "1"
        else:
            labels.update({f"sandgym.label.{k}": v for k, v in spec.labels.items()})
        config = agent_config(spec)
        if spec.process_limits and self.isolation == "runsc":
            config["limits"]["pids"] = self._sandbox_pids(spec)
        else:
            # Under runc every container's uid 1000 is the host's one uid, and
            # RLIMIT_NPROC counts all of that uid's tasks: one sandbox's fork
            # bomb would leave the others unable to fork. The container's pids
            # cgroup (pids_limit below) bounds this sandbox alone.
            config["limits"].pop("pids", None)
        config["lifetime_s"] = spec.wall_timeout_s + extra_s
        # Docker mounts a tmpfs noexec unless told otherwise.
        x = ",exec" if spec.exec_workspace else ""
        start = time.perf_counter()
        try:
            api = self.client.api
            host_config = api.create_host_config(
                binds={src: v for src, v in volumes.items()},
                network_mode="none",
                read_only=True,
                tmpfs={spec.workdir: f"size={mb}m,uid=1000,gid=1000,mode=0755{x}", "/tmp": f"size={mb}m,mode=1777{x}"},
                # No docker-init: the agent is PID 1, which processes inside
                # cannot kill; it reaps what it starts.
                cap_drop=["ALL"],
                security_opt=["no-new-privileges"],
                init=False,
                pids_limit=self._host_pids(spec),
                mem_limit=f"{spec.memory_mb + 64}m",
                nano_cpus=int(spec.cpus * 1e9),
                runtime=self.oci,
            )
            # The low-level call with detach=False sets StdinOnce: the agent's
            # stdin closes when the attach stream ends (death with the host).
            created = api.create_container(
                image,
                name=sid,
                command=["python3", "-I", "-S", f"{AGENT_DIR}/agent.py", json.dumps(config)],
                stdin_open=True,
                detach=False,
                tty=False,
                user="1000:1000",
                working_dir=spec.workdir,
                labels=labels,
                host_config=host_config,
            )
            container = self.client.containers.get(created["Id"])
        except Exception as e:
            raise SandboxError(f"could not create sandbox {sid}: {e}") from e
        try:
            attach = self.client.api.attach_socket(
                container.id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
            )
            sock = attach._sock  # the hijacked HTTP connection: raw bytes both ways
            sock.setblocking(True)
            container.start()
            channel = AgentChannel(sock, f"sandbox {sid}", demux=True)
            ready, _ = channel.read_reply(READY_TIMEOUT_S)
            if not ready.get("ready"):
                raise SandboxError(f"unexpected first message {ready!r}")
        except Exception as e:
            logs = ""
            try:
                logs = container.logs(tail=20).decode("utf-8", "replace")
                container.remove(force=True)
            except Exception:
                pass
            raise SandboxError(f"could not start sandbox {sid}: {e} {logs}".strip()) from e
        took, mounts = time.perf_counter() - start, source_ids([m.source for m in spec.mounts])
        return _Started(sid, container.id, sock, channel, stocked, took, time.monotonic(), mounts)


def prestart_setting(value: int | None) -> int:
    """Containers to keep started ahead per repeating spec (0: none, removal in the foreground)."""
    return stock_setting(value, PRESTART_ENV)


def source_ids(paths: list[str]) -> tuple:
    """(path, device, inode) of each mount source: a bind mount holds the folder it found."""
    out = []
    for path in paths:
        try:
            st = os.stat(path)
            out.append((path, st.st_dev, st.st_ino))
        except OSError:
            out.append((path, -1, -1))
    return tuple(out)


@dataclass
class _Started:
    """A started container whose agent has answered, not yet handed to anyone."""

    sid: str
    container_id: str
    sock: socket.socket
    channel: AgentChannel
    stocked: bool
    start_s: float
    ready_at: float  # time.monotonic()
    mounts: tuple  # source_ids of its mounts when it started
    key: str = ""  # the stock's key, for stocked ones

    def fresh(self) -> bool:
        if source_ids([m[0] for m in self.mounts]) != self.mounts:
            return False  # a mount source was replaced since: the container holds the old one
        return waiting(self.ready_at, bool(self.channel.broken), self.sock)
