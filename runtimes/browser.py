"""Chromium and one web app in one sandbox, with a loopback-only network.

Playwright launches a small wrapper script as if it were the browser; the
wrapper starts Chromium inside the sandbox and Playwright's pipe fds 3 and
4 pass through, so the host needs no network into the sandbox. This module
holds what every backend shares: the limits (`BrowserLimits`), the app
(`AppSpec`), the base class `BrowserSandbox`, and the Playwright driver
(`PlaywrightHost`). Each backend's side is in its folder: the local
runtime's bubblewrap sandbox in a cgroup (local/browser.py), a container of
the `chromium` image recipe on docker (docker/browser.py), a pod of an app
and a browser container on k8s, reached through a host-side exec relay
(k8s/browser.py, k8s/exec_relay.py).

The state folder (`state_dir`, host side) is the app's: its SQLite
database lives there, and the host reads it directly (the verifier's side
channel). The browser cannot open it. Where the sandbox cannot share a
host folder (k8s), `push_state` and `pull_state` copy the database in and out.

Playwright itself (its node driver and async API) runs once per process on
one event-loop thread (`PlaywrightHost`), shared by every sandbox.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import os
import shutil
import signal
import tempfile
import threading
import uuid
import zipfile
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from .backends import BACKENDS, backend_of, load
from .base import Runtime, SandboxError
from .host_processes import kill_marked
from .staging import BOUNDARY_DIR, stage_bytes, stage_dir, staging_root
from .tempdirs import owned_tempdir

if TYPE_CHECKING:  # playwright is an optional dependency (the browser extra)
    from playwright.async_api import Browser
    from playwright.async_api import Playwright as AsyncPlaywright

T = TypeVar("T")

STATE_IN_SANDBOX = "/state"
LAUNCHER_DIR = "/opt/sandgym/browser"
APP_DIR = "/opt/sandgym/app"
SITE_ZIP = "/opt/sandgym/site/site.zip"
MARKER_ENV = "SANDGYM_BROWSER_ID"
# Pure-Python packages the app needs, staged as one zip the sandbox imports from.
APP_PACKAGES = ("starlette", "uvicorn", "anyio", "h11", "sniffio", "idna", "click", "typing_extensions")
LAUNCH_TIMEOUT_MS = 30_000
# How long the Playwright driver outlives its last browser (PlaywrightHost).
LINGER_S = float(os.environ.get("SANDGYM_PLAYWRIGHT_LINGER_S", "30"))
EXIT_GRACE_S = 5.0
# Features off in Chromium. It keeps only the last --disable-features switch and
# Playwright passes its own, so this list repeats Playwright's (1.65) before ours
# (a test checks that it still covers the one Playwright passes). Ours: no
# translation, and no omnibox popup pages, which each new context's window
# otherwise opens and tears down (about 20 ms of CPU per reset).
PLAYWRIGHT_DISABLED_FEATURES = (
    "AvoidUnnecessaryBeforeUnloadCheckSync",
    "DestroyProfileOnBrowserClose",
    "HttpsUpgrades",
    "HttpsFirstBalancedModeAutoEnable",
    "LensOverlay",
    "MediaRouter",
    "PaintHolding",
    "ThirdPartyStoragePartitioning",
    "AvoidCorsURLLoaderRestartOnRedirect",
    "TcpPortRandomizationWin",
    "OptimizationHints",
    "NetworkTimeServiceQuerying",
    "AimEnabled",
    "PreconnectToSearch",
    "msForceBrowserSignIn",
    "msEdgeUpdateLaunchServicesPreferredVersion",
)
DISABLED_FEATURES = (
    *PLAYWRIGHT_DISABLED_FEATURES,
    "Translate",
    "WebUIOmniboxPopup",
    "WebUIOmniboxAimPopup",
    "WebUIOmniboxFullPopup",
)
# Chromium's switches on every backend (no GPU, nothing fetched on its own).
CHROMIUM_ARGS = (
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-default-browser-check",
    "--disable-features=" + ",".join(DISABLED_FEATURES),
)


@dataclass(frozen=True)
class BrowserLimits:
    """What one browser sandbox (Chromium, its renderers and the app) may
    use, on every backend: a page that exhausts one ends its episode as
    `env_error`, and the worker relaunches the sandbox. Sized for Chromium:
    a form page runs in about 400 MB and 60-120 tasks (threads included)."""

    memory_mb: int = 1536
    # Chromium's browser, renderer and the app work in parallel: one core
    # made a form reset about 35 % slower than two (benchmarks/).
    cpus: float = 2.0
    pids: int = 512
    disk_mb: int = 256  # each of /tmp (Chromium's profile), HOME and /dev/shm

    @classmethod
    def of(cls, value: BrowserLimits | Mapping[str, Any] | None) -> BrowserLimits:
        """From an env's `limits=` argument: None (the defaults), a BrowserLimits or a dict of its fields."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if not isinstance(value, Mapping):
            raise ValueError(f"limits must be a dict of {', '.join(cls.__dataclass_fields__)}, not {value!r}")
        unknown = set(value) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(
                f"limits: unknown field(s) {', '.join(sorted(unknown))}; fields: {', '.join(cls.__dataclass_fields__)}"
            )
        for key, v in value.items():
            if isinstance(v, bool) or not isinstance(v, int | float) or v <= 0:
                raise ValueError(f"limits.{key} must be a positive number, got {v!r}")
        return cls(**value)


_site_lock = threading.Lock()
_site_dir: Path | None = None


def staged_site_packages() -> Path:
    """A world-readable folder with site.zip: the app's dependencies, compiled."""
    global _site_dir
    with _site_lock:
        if _site_dir is None:
            import importlib

            buf_path = owned_tempdir("site") / "site.zip"
            try:
                with zipfile.PyZipFile(str(buf_path), "w", optimize=0) as z:
                    for name in APP_PACKAGES:
                        mod = importlib.import_module(name)
                        assert mod.__file__ is not None, f"{name} is not a file-based package"
                        path = Path(mod.__file__)
                        z.writepy(str(path.parent if path.name == "__init__.py" else path))
                _site_dir = stage_bytes("browser-site", {"site.zip": buf_path.read_bytes()})
            finally:
                shutil.rmtree(buf_path.parent, ignore_errors=True)
        return _site_dir


def stage_tree(src: Path, key: str) -> Path:
    """A world-readable copy of a whole folder (e.g. static pages), staged once per `key`."""
    dest = staging_root() / key
    if dest.is_dir():
        return dest
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{os.getpid()}-", dir=staging_root()))
    shutil.copytree(src, tmp / "tree")
    for dirpath, _dirnames, filenames in os.walk(tmp):
        os.chmod(dirpath, 0o755)
        for name in filenames:
            os.chmod(os.path.join(dirpath, name), 0o644)
    try:
        os.rename(tmp / "tree", dest)
    except OSError:  # staged by another process first
        pass
    shutil.rmtree(tmp, ignore_errors=True)
    return dest


@dataclass(frozen=True)
class AppSpec:
    """The web app to serve: `module:attribute` of an ASGI app found in `source_dir`.

    `mounts`: extra (host folder, sandbox path) pairs bound read-only, e.g. static pages."""

    app: str
    source_dir: Path
    env: dict[str, str] = field(default_factory=dict)
    port: int = 8000
    mounts: tuple[tuple[str, str], ...] = ()


class PlaywrightHost:
    """One Playwright driver (its async API) on one event-loop thread, shared by
    every browser sandbox of this process.

    Calls of many sessions run concurrently on the one loop, so a session can
    make its next episode's page while its agent acts; and a process runs one
    node driver however many workers it has (the sync API needs one per thread).
    Started by the first sandbox, stopped LINGER_S after the last one closes
    (or at exit): a driver started and stopped per sandbox (a server's
    stateless resets, one fresh env each) costs a second each time and left
    ~170 KB of native memory behind each time (175 -> 332 MB over 900)."""

    _lock = threading.Lock()
    _shared: PlaywrightHost | None = None

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.users = 0
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="sandgym-playwright", daemon=True)
        self.thread.start()
        self.playwright: AsyncPlaywright | None = None
        self._manager: Any = None  # Playwright's context manager: it holds the driver process
        self._linger: threading.Timer | None = None  # stops the unused driver when it fires

    @classmethod
    def acquire(cls) -> PlaywrightHost:
        stale: PlaywrightHost | None = None
        try:
            with cls._lock:
                host = cls._shared
                if host is not None and host._linger is not None:
                    host._linger.cancel()
                    host._linger = None
                # A forked child inherits the object but not the thread; a dead driver serves no one.
                if host is None or host.pid != os.getpid() or not host.driver_alive():
                    if host is not None and host.pid == os.getpid() and host.users == 0:
                        stale = host  # a lingering driver that died: its loop thread ends below
                    host = PlaywrightHost()
                    try:
                        host.playwright, host._manager = host.run(_start_playwright(), timeout=LAUNCH_TIMEOUT_MS / 1000)
                    except BaseException:
                        host._stop_loop()
                        raise
                    cls._shared = host
                host.users += 1
                return host
        finally:
            if stale is not None:
                stale._stop()

    def release(self) -> None:
        """One sandbox less; the last one's leaves the driver running LINGER_S for the next."""
        with PlaywrightHost._lock:
            self.users -= 1
            if self.users > 0:
                return
            if PlaywrightHost._shared is self and self.pid == os.getpid() and LINGER_S > 0:
                self._linger = threading.Timer(LINGER_S, self._stop_if_unused)
                self._linger.daemon = True
                self._linger.start()
                return
        self._stop()

    def _stop_if_unused(self) -> None:
        with PlaywrightHost._lock:
            if self.users > 0:
                return
            self._linger = None
            if PlaywrightHost._shared is self:
                PlaywrightHost._shared = None
        self._stop()

    @classmethod
    def stop_lingering(cls) -> None:
        """Stop the driver now if no sandbox uses it (at exit)."""
        with cls._lock:
            host = cls._shared
            if host is None or host.users > 0 or host.pid != os.getpid():
                return
            if host._linger is not None:
                host._linger.cancel()
                host._linger = None
            cls._shared = None
        host._stop()

    def _stop(self) -> None:
        with PlaywrightHost._lock:
            if PlaywrightHost._shared is self:
                PlaywrightHost._shared = None
        if self.playwright is not None:
            try:
                self.run(self.playwright.stop(), timeout=EXIT_GRACE_S)
            except Exception:  # the driver may have died with a crash
                pass
            self.playwright = None
        self._stop_loop()

    def _stop_loop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(EXIT_GRACE_S)
        if not self.thread.is_alive():
            self.loop.close()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Start `coro` on the loop; the future is its result (cancelling it cancels the coroutine)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return self.submit(coro).result(timeout)

    @property
    def driver_pid(self) -> int | None:
        """The pid of the node driver (private API; None if not found)."""
        try:
            return int(self._manager._client._transport._proc.pid)
        except (AttributeError, TypeError, ValueError):
            return None

    def driver_alive(self) -> bool:
        pid = self.driver_pid
        if pid is None:
            return self.playwright is not None
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] != "Z"
        except (OSError, IndexError):
            return False


atexit.register(PlaywrightHost.stop_lingering)


def reap_orphans(include_live: bool = False, owner_pid: int | None = None) -> list[int]:
    """SIGKILL browser-sandbox processes of any backend (a bubblewrap sandbox,
    a `docker exec` client, an exec relay) whose owner (the pid in their
    SANDGYM_BROWSER_ID) is gone, or every one with include_live, or only
    `owner_pid`'s. Returns the pids killed. (Normally they die with their
    owner; this is for what a crash left behind.)"""
    return kill_marked(MARKER_ENV, include_live, owner_pid)


async def _start_playwright() -> tuple[AsyncPlaywright, Any]:
    from playwright.async_api import async_playwright

    manager = async_playwright()
    return await manager.start(), manager


class BrowserSandbox:
    """One Chromium (driven by Playwright) and one app, in one sandbox.

    Playwright's objects (async API) live on the shared `PlaywrightHost`
    loop: run their calls with `host.run(...)`. `close()` ends Chromium and
    the app and lets go of the driver. Subclasses say where they run: the
    wrapper Playwright starts as the browser, how to kill and tear down.
    """

    # Chromium's own sandbox (its renderers in namespaces of their own);
    # off where the container's seccomp profile refuses user namespaces.
    chromium_sandbox = True
    extra_args: tuple[str, ...] = ()

    def __init__(self, app: AppSpec, app_owner: tuple[int, int] | None, limits: BrowserLimits | None = None):
        self.app = app
        self.limits = limits or BrowserLimits()
        # The owner of the state folder and its files: the app's user.
        self.app_owner = app_owner
        # The owner's pid in the id (and so in every sandbox process's
        # environment and in the folder's name): `sandgym gc` finds what a
        # killed owner left.
        self.id = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self.origin = f"http://127.0.0.1:{app.port}"
        self._tmp = owned_tempdir("browser")
        os.chmod(self._tmp, 0o711)  # the sandbox user passes through to state/ only
        self.state_dir = self._tmp / "state"
        self.state_dir.mkdir(mode=0o700)
        if self.app_owner:
            os.chown(self.state_dir, *self.app_owner)
        self._wrapper = self._tmp / "chromium-in-sandbox"
        self.host: PlaywrightHost | None = None
        self.browser: Browser | None = None

    def _launcher_cfg(self, mode: str, **extra: Any) -> dict[str, Any]:
        return {
            "mode": mode,
            "port": self.app.port,
            "app": self.app.app,
            "python_path": [SITE_ZIP, APP_DIR],
            "state_dir": STATE_IN_SANDBOX,
            "app_env": {"SANDGYM_APP_STATE": STATE_IN_SANDBOX, **self.app.env},
            **extra,
        }

    def _app_mounts(self) -> list[tuple[str, str, bool]]:
        """(host path, sandbox path, read-only) of what every backend mounts."""
        return [
            (str(stage_dir(BOUNDARY_DIR, ("launcher.py",))), LAUNCHER_DIR, True),
            (str(self.app.source_dir), APP_DIR, True),
            (str(staged_site_packages()), str(Path(SITE_ZIP).parent), True),
            (str(self.state_dir), STATE_IN_SANDBOX, False),
            *[(src, dst, True) for src, dst in self.app.mounts],
        ]

    # -- what a backend provides -------------------------------------------------

    def _wrapper_script(self) -> str:
        """The shell script Playwright runs as the browser (fds 3 and 4 are its pipes)."""
        raise NotImplementedError

    def _prepare(self) -> None:
        """Make the sandbox before Chromium starts (e.g. a container and its app)."""

    def process_ids(self) -> list[int]:
        """The host processes of the sandbox."""
        raise NotImplementedError

    def _kill_host_processes(self) -> None:
        for pid in self.process_ids():
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def kill(self) -> None:
        """From any thread, without waiting: end every process of the sandbox.
        The driver sees the browser's pipe close, so a call waiting on it
        fails at once. The owner still calls close()."""
        raise NotImplementedError

    def _before_close(self) -> None:
        """Before the browser is asked to close (e.g. note which processes to wait for)."""

    def _teardown(self) -> None:
        """After the browser closed: make sure nothing of the sandbox is left."""
        raise NotImplementedError

    def memory_bytes(self) -> int:
        raise NotImplementedError

    def exhausted(self) -> str | None:
        """Which limit the sandbox ran into, if it did (for the env_error's text)."""
        return None

    # The state folder: shared with the host on local and docker (these are
    # no-ops there); a backend that cannot share it copies in and out.

    def push_state(self, name: str) -> None:
        """After the host put a new `name` in `state_dir` (a rename, its old
        journals deleted): make it the sandbox's, the same way."""

    def pull_state(self, name: str) -> None:
        """Before the host reads `name` from `state_dir`: bring the sandbox's
        (a consistent copy) there. SandboxError if it cannot."""

    # -- lifecycle -------------------------------------------------------------

    def start(self) -> Browser:
        """Launch Chromium (and with it the app); returns the Playwright Browser
        (async API: run its calls with `self.host.run(...)`)."""
        from playwright.async_api import Error as PlaywrightError

        try:
            self._prepare()
            self._wrapper.write_text(self._wrapper_script())
            os.chmod(self._wrapper, 0o700)
            self.host = PlaywrightHost.acquire()
            self.browser = self.host.run(self._launch(), timeout=2 * LAUNCH_TIMEOUT_MS / 1000)
        except (PlaywrightError, concurrent.futures.TimeoutError, SandboxError) as e:
            self.close()
            raise SandboxError(f"could not start Chromium in its sandbox: {e}\napp log: {self.app_log()}") from e
        return self.browser

    async def _launch(self) -> Browser:
        assert self.host is not None and self.host.playwright is not None
        return await self.host.playwright.chromium.launch(
            executable_path=str(self._wrapper),
            headless=True,
            chromium_sandbox=self.chromium_sandbox,
            timeout=LAUNCH_TIMEOUT_MS,
            args=[*CHROMIUM_ARGS, *self.extra_args],
        )

    @property
    def alive(self) -> bool:
        return self.browser is not None and self.browser.is_connected()

    def app_log(self) -> str:
        try:
            return (self.state_dir / "app.log").read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def close(self) -> None:
        """End the browser and the app, make sure every process of the sandbox
        is gone, and let go of the shared driver. Idempotent."""
        try:
            self._before_close()
            if self.browser is not None and self.host is not None:
                try:
                    self.host.run(self.browser.close(), timeout=EXIT_GRACE_S)
                except Exception:  # a crashed browser is closed already
                    pass
            self.browser = None
            self._teardown()
        finally:
            shutil.rmtree(self._tmp, ignore_errors=True)
            if self.host is not None:
                host, self.host = self.host, None
                host.release()

    def __enter__(self) -> BrowserSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_browser_sandbox(runtime: str | Runtime, app: AppSpec, limits: BrowserLimits | None = None) -> BrowserSandbox:
    """A browser sandbox on `runtime`: a Runtime, or the name of one whose
    browser sandbox needs no Runtime object (local). Its limits default to
    BrowserLimits(). The backend table (backends.py) says which class."""
    name = runtime if isinstance(runtime, str) else runtime.name
    backend = backend_of(name) if isinstance(runtime, str) else BACKENDS.get(name)
    if (
        backend is None
        or backend.browser is None
        or (isinstance(runtime, str) and name not in backend.browser_variants)
    ):
        raise ValueError(
            f"runtime {name!r} cannot run the browser envs; supported: {', '.join(BROWSER_RUNTIMES)} "
            "(pass a Runtime object or one of these names)"
        )
    cls = load(backend.browser)
    return cls(app, None if isinstance(runtime, str) else runtime, limits)


# The runtime names whose sandboxes run the browser envs.
BROWSER_RUNTIMES: Sequence[str] = tuple(n for b in BACKENDS.values() for n in b.browser_variants)
