"""The browser sandbox as a container of the docker runtimes (runc or gVisor).

The container is made by the runtime like any sandbox (the `chromium`
image recipe, no network at all but loopback, read-only root, every
capability dropped, the memory, CPU, pids and disk limits of
`BrowserLimits`), with the launcher, the app and the state folder mounted.
Two users inside: the app runs as APP_UID, started first through the
Engine's exec API, and alone can open the state folder (mode 0700); the
browser runs as the sandbox's user (1000). Playwright's wrapper is
`docker exec -i` of the launcher in `browser` mode, its pipes carried as
the exec's stdin and stdout: the host needs no network into the sandbox.

Chromium's own sandbox is off here: Docker's seccomp profile refuses the
user namespaces it needs. The container (under runsc, gVisor's kernel) is
the boundary, and the app is another user.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import threading
from typing import TYPE_CHECKING

from ..base import Mount, Runtime, RuntimeUnavailable, Sandbox, SandboxError, SandboxSpec
from ..browser import (
    LAUNCHER_DIR,
    MARKER_ENV,
    AppSpec,
    BrowserLimits,
    BrowserSandbox,
)
from ..cgroups import oom_kills_of
from ..host_processes import environs

if TYPE_CHECKING:
    from .runtime import DockerRuntime

APP_UID = 1001
BROWSER_UID = 1000
HOME = "/workspace"
# A browser worker lives as long as its env; the runtime's expiry and
# owner labels still let `sandgym gc` find a container a crash left.
LIFETIME_S = 7 * 24 * 3600
# How long a failure report waits for the Engine to see a sandbox's exit.
EXIT_SETTLE_S = 3.0
PYTHON = ["python3", "-I", "-S", f"{LAUNCHER_DIR}/launcher.py"]


class ContainerBrowserSandbox(BrowserSandbox):
    chromium_sandbox = False
    # Docker's /dev/shm is 64 MB; Chromium's shared memory goes to /tmp (the limit's tmpfs).
    extra_args = ("--disable-dev-shm-usage",)

    def __init__(self, app: AppSpec, runtime: Runtime | None, limits: BrowserLimits | None = None):
        if runtime is None or runtime.name != "docker":
            raise ValueError(f"ContainerBrowserSandbox needs a docker Runtime object (get_runtime), not {runtime!r}")
        docker_cli = shutil.which("docker")
        if not docker_cli:
            raise RuntimeUnavailable("the browser on docker needs the docker CLI: run scripts/setup.sh")
        self.docker_cli = docker_cli
        self.runtime: DockerRuntime = runtime  # type: ignore[assignment]
        super().__init__(app, (APP_UID, APP_UID), limits)
        self.sandbox: Sandbox | None = None
        self.container = ""

    def _spec(self) -> SandboxSpec:
        lim = self.limits
        return SandboxSpec(
            image="recipe:chromium",
            memory_mb=lim.memory_mb,
            cpus=min(lim.cpus, os.cpu_count() or 1),  # the Engine refuses more than the host has
            pids=lim.pids,
            disk_mb=lim.disk_mb,
            process_limits=False,
            cpu_seconds=LIFETIME_S,
            wall_timeout_s=LIFETIME_S,
            mounts=tuple(Mount(source=s, target=t, read_only=ro) for s, t, ro in self._app_mounts()),
            labels={"role": "browser", MARKER_ENV: self.id},
        )

    def _env(self) -> dict[str, str]:
        return {"HOME": HOME, "LANG": "C.UTF-8", "TMPDIR": "/tmp", "PATH": "/usr/bin:/bin", MARKER_ENV: self.id}

    def _prepare(self) -> None:
        sandbox = self.sandbox = self.runtime.create(self._spec())
        self.container = sandbox.info.id
        api = self.runtime.client.api
        try:
            job = api.exec_create(
                self.container,
                [*PYTHON, json.dumps(self._launcher_cfg("app"))],
                user=f"{APP_UID}:{APP_UID}",
                environment=self._env(),
                workdir="/",
            )
            api.exec_start(job["Id"], detach=True)
        except Exception as e:  # the SDK raises several kinds
            raise SandboxError(f"could not start the app in {self.container}: {e}") from e
        threading.Thread(target=self._watch, args=(self.container,), name="sandgym-browser-watch", daemon=True).start()

    def _watch(self, container: str) -> None:
        """When the container ends (under runsc an OOM kills the whole sandbox), end
        the `docker exec` that stands for Chromium too: its stream does not always
        close then, and Playwright learns that the browser is gone only from its pipes."""
        try:
            self.runtime.client.api.wait(container)
        except Exception:  # removed meanwhile; the client's socket closed
            pass
        if self.container == container:
            self._kill_host_processes()

    def process_ids(self) -> list[int]:
        """Host processes of this sandbox: the `docker exec` clients that carry its marker
        (what runs in the container is the container's)."""
        needle = f"{MARKER_ENV}={self.id}".encode()
        return [pid for pid, env in environs() if needle in env]

    def _wrapper_script(self) -> str:
        env = [x for k, v in self._env().items() for x in ("-e", f"{k}={v}")]
        cfg = self._launcher_cfg("browser", stdio=True)
        argv = [
            self.docker_cli,
            "exec",
            "-i",
            "-u",
            f"{BROWSER_UID}:{BROWSER_UID}",
            "-w",
            HOME,
            *env,
            self.container,
            *PYTHON,
            json.dumps(cfg),
        ]
        # Playwright's pipes (fds 3 and 4) become the exec's stdin and stdout.
        # The marker in the client's environment: kill() and `sandgym gc` find it.
        return (
            f"#!/bin/sh\nexport {MARKER_ENV}={shlex.quote(self.id)}\nexec "
            + " ".join(shlex.quote(x) for x in argv)
            + ' "$@" <&3 >&4 3<&- 4>&-\n'
        )

    def exhausted(self) -> str | None:
        if not self.container:
            return None
        api = self.runtime.client.api
        try:
            state = api.inspect_container(self.container)["State"]
            # The Engine flags only a kill of the container's first process; a
            # renderer the kernel killed shows in the container's memory cgroup.
            if state.get("Pid") and oom_kills_of(int(state["Pid"])):
                return self._out_of_memory()
            if state.get("Running"):
                # Under runsc an OOM kills the whole sandbox; the browser's pipes may
                # close before the Engine has seen the exit. Give it a moment.
                try:
                    api.wait(self.container, timeout=EXIT_SETTLE_S)
                except Exception:  # still running: not a limit this can name
                    return None
                state = api.inspect_container(self.container)["State"]
        except Exception:  # removed already
            return None
        return self._out_of_memory() if state.get("OOMKilled") else None

    def _out_of_memory(self) -> str:
        return f"the sandbox ran out of memory (limit {self.limits.memory_mb} MB)"

    def memory_bytes(self) -> int:
        """The container's memory use as its cgroup counts it (page cache included)."""
        if not self.container:
            return 0
        try:
            stats = self.runtime.client.api.stats(self.container, stream=False, one_shot=True)
            return int(stats.get("memory_stats", {}).get("usage", 0))
        except Exception:
            return 0

    def kill(self) -> None:
        self._kill_host_processes()
        container = self.container
        if not container:
            return
        api = self.runtime.client.api

        def _kill() -> None:
            try:
                api.kill(container)
            except Exception:  # gone already
                pass

        threading.Thread(target=_kill, name="sandgym-browser-kill", daemon=True).start()

    def _teardown(self) -> None:
        if self.sandbox is not None:
            sandbox, self.sandbox = self.sandbox, None
            sandbox.close()
        self.container = ""
        self._kill_host_processes()
