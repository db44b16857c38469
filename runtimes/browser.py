"""Chromium and one web app in a bubblewrap sandbox with a loopback-only network.

Playwright launches a small wrapper script as if it were the browser. The
wrapper drops to an unprivileged host user (as root), enters bubblewrap
(new user, PID, network, IPC, UTS and mount namespaces; read-only /usr;
tmpfs /tmp and HOME) and runs the launcher, which binds the app's socket
on 127.0.0.1 inside that network namespace, forks the app, hides the state
folder from the browser and execs Chromium. Playwright's pipe fds 3 and 4
pass straight through. The page can reach the app and nothing else: the
namespace has only `lo`.

The state folder (`state_dir`, host side) is the app's: its SQLite
database lives there, and the host reads it directly (the verifier's side
channel). Chromium's mount namespace has an empty tmpfs over it.

Playwright itself (its node driver and async API) runs once per process on
one event-loop thread (`PlaywrightHost`), shared by every sandbox.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import select
import shlex
import shutil
import signal
import tempfile
import threading
import time
import uuid
import zipfile
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from .base import RuntimeUnavailable, SandboxError
from .bwrap import ETC_ALLOWED, host_root_args
from .local import children, environs, mark_owner, owned_tempdir, owner_gone
from .staging import _stage, stage_dir, staging_root

if TYPE_CHECKING:  # playwright is an optional dependency (the browser extra)
    from playwright.async_api import Browser
    from playwright.async_api import Playwright as AsyncPlaywright

T = TypeVar("T")

CHROMIUM = "/usr/lib/chromium/chromium"
SANDBOX_PYTHON = "/usr/bin/python3"
STATE_IN_SANDBOX = "/state"
LAUNCHER_DIR = "/opt/sandgym/browser"
APP_DIR = "/opt/sandgym/app"
SITE_ZIP = "/opt/sandgym/site/site.zip"
HOME = "/home/sandbox"
MARKER_ENV = "SANDGYM_BROWSER_ID"
# Pure-Python packages the app needs, staged as one zip the sandbox imports from.
APP_PACKAGES = ("starlette", "uvicorn", "anyio", "h11", "sniffio", "idna", "click", "typing_extensions")
# Extra /etc entries Chromium wants (fonts); nothing secret.
ETC_BROWSER = ("fonts",)
LAUNCH_TIMEOUT_MS = 30_000
EXIT_GRACE_S = 5.0

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
                _site_dir = _stage("browser-site", {"site.zip": buf_path.read_bytes()})
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


def default_drop_to() -> tuple[int, int] | None:
    if os.geteuid() != 0:
        return None
    uid = int(os.environ.get("SANDGYM_SANDBOX_UID", 65534))
    return uid, int(os.environ.get("SANDGYM_SANDBOX_GID", uid))


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


class PlaywrightHost:
    """One Playwright driver (its async API) on one event-loop thread, shared by
    every browser sandbox of this process.

    Calls of many sessions run concurrently on the one loop, so a session can
    make its next episode's page while its agent acts; and a process runs one
    node driver however many workers it has (the sync API needs one per thread).
    Started by the first sandbox, stopped when the last one closes."""

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

    @classmethod
    def acquire(cls) -> PlaywrightHost:
        with cls._lock:
            host = cls._shared
            # A forked child inherits the object but not the thread; a dead driver serves no one.
            if host is None or host.pid != os.getpid() or not host.driver_alive():
                host = PlaywrightHost()
                try:
                    host.playwright, host._manager = host.run(_start_playwright(), timeout=LAUNCH_TIMEOUT_MS / 1000)
                except BaseException:
                    host._stop_loop()
                    raise
                cls._shared = host
            host.users += 1
            return host

    def release(self) -> None:
        with PlaywrightHost._lock:
            self.users -= 1
            if self.users > 0:
                return
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


async def _start_playwright() -> tuple[AsyncPlaywright, Any]:
    from playwright.async_api import async_playwright

    manager = async_playwright()
    return await manager.start(), manager


def reap_orphans(include_live: bool = False, owner_pid: int | None = None) -> list[int]:
    """SIGKILL browser-sandbox processes whose owner (the pid in their
    SANDGYM_BROWSER_ID) is gone, or every one with include_live, or only
    `owner_pid`'s. Returns the pids killed. (Normally they die with their
    owner; this is for what a crash left behind.)"""
    killed = []
    for pid, env in environs():
        mark = mark_owner(env, MARKER_ENV)
        if mark is not None and owner_gone(mark, include_live, owner_pid):
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except (ProcessLookupError, PermissionError):
                pass
    return killed


def _pidfds(pids: list[int]) -> dict[int, int]:
    """pidfds (which name a process for good, unlike a pid that may be reused)."""
    fds = {}
    for pid in pids:
        try:
            fds[pid] = os.pidfd_open(pid)
        except ProcessLookupError:
            pass
    return fds


def _wait_exited(pidfds: dict[int, int], timeout_s: float) -> bool:
    """Wait until every process has exited (a pidfd turns readable then)."""
    poller = select.poll()
    for fd in pidfds.values():
        poller.register(fd, select.POLLIN)
    left = set(pidfds.values())
    deadline = time.monotonic() + timeout_s
    while left:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        for fd, _ in poller.poll(remaining * 1000):
            left.discard(fd)
            poller.unregister(fd)
    return True


def _wait_reaped(pids: list[int], timeout_s: float) -> None:
    """Processes that have exited linger as zombies until their parent reaps
    them, which the parent does on SIGCHLD: a brief, bounded wait."""
    deadline = time.monotonic() + timeout_s
    for pid in pids:
        while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
            time.sleep(0.002)


class BrowserSandbox:
    """One Chromium (driven by Playwright) and one app, in one sandbox.

    Playwright's objects (async API) live on the shared `PlaywrightHost`
    loop: run their calls with `host.run(...)`. `close()` ends Chromium and
    the app and lets go of the driver.
    """

    def __init__(self, app: AppSpec, drop_to: tuple[int, int] | None = None, headless: bool = True):
        bwrap = shutil.which("bwrap")
        if not bwrap:
            raise RuntimeUnavailable("the browser sandbox needs bubblewrap: run `apt-get install bubblewrap`")
        if not os.access(CHROMIUM, os.X_OK):
            raise RuntimeUnavailable(
                f"the browser sandbox needs Chromium at {CHROMIUM}: run `apt-get install chromium`"
            )
        if os.geteuid() == 0 and not shutil.which("setpriv"):
            raise RuntimeUnavailable("the browser sandbox as root needs setpriv: run `apt-get install util-linux`")
        self.bwrap = bwrap
        self.app = app
        self.drop_to = drop_to if drop_to is not None else default_drop_to()
        self.headless = headless
        # The owner's pid in the id (and so in every sandbox process's
        # environment) and in the folder's name: `sandgym gc` finds what a
        # killed owner left.
        self.id = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self.origin = f"http://127.0.0.1:{app.port}"
        self._tmp = owned_tempdir("browser")
        os.chmod(self._tmp, 0o711)  # the sandbox user passes through to state/ only
        self.state_dir = self._tmp / "state"
        self.state_dir.mkdir(mode=0o700)
        if self.drop_to:
            os.chown(self.state_dir, *self.drop_to)
        self._wrapper = self._tmp / "chromium-in-sandbox"
        self.host: PlaywrightHost | None = None
        self.browser: Browser | None = None

    # -- wrapper ---------------------------------------------------------------

    def _bwrap_argv(self) -> list[str]:
        etc = _stage(
            "browser-etc",
            {
                "passwd": b"root:x:0:0::/:/usr/sbin/nologin\nsandbox:x:1000:1000::/home/sandbox:/bin/sh\n",
                "group": b"root:x:0:\nsandbox:x:1000:\n",
                "hosts": b"127.0.0.1 localhost sandbox\n::1 localhost\n",
                "nsswitch.conf": b"passwd: files\ngroup: files\nhosts: files\n",
            },
        )
        a = host_root_args(self.bwrap, self.drop_to, (*ETC_ALLOWED, *ETC_BROWSER), etc)
        a += [
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--tmpfs",
            "/dev/shm",
            "--tmpfs",
            "/tmp",
            "--tmpfs",
            HOME,
            "--ro-bind",
            str(stage_dir(Path(__file__).parent / "browser_sandbox")),
            LAUNCHER_DIR,
            "--ro-bind",
            str(self.app.source_dir),
            APP_DIR,
            "--ro-bind",
            str(staged_site_packages()),
            str(Path(SITE_ZIP).parent),
            "--bind",
            str(self.state_dir),
            STATE_IN_SANDBOX,
            *[x for src, dst in self.app.mounts for x in ("--ro-bind", src, dst)],
            "--remount-ro",
            "/",
            "--chdir",
            HOME,
            "--clearenv",
            "--setenv",
            "PATH",
            "/usr/bin:/bin",
            "--setenv",
            "HOME",
            HOME,
            "--setenv",
            "LANG",
            "C.UTF-8",
            "--setenv",
            "TMPDIR",
            "/tmp",
            "--setenv",
            MARKER_ENV,
            self.id,
        ]
        cfg = {
            "port": self.app.port,
            "app": self.app.app,
            "python_path": [SITE_ZIP, APP_DIR],
            "state_dir": STATE_IN_SANDBOX,
            "hide": [STATE_IN_SANDBOX],
            "app_env": {"SANDGYM_APP_STATE": STATE_IN_SANDBOX, **self.app.env},
        }
        a += ["--", SANDBOX_PYTHON, "-I", "-S", f"{LAUNCHER_DIR}/launcher.py", json.dumps(cfg)]
        return a

    def _write_wrapper(self) -> None:
        # The marker in bubblewrap's own environment too: `sandgym gc` finds it if it outlives its owner.
        script = (
            f"#!/bin/sh\nexport {MARKER_ENV}={shlex.quote(self.id)}\nexec "
            + " ".join(shlex.quote(x) for x in self._bwrap_argv())
            + ' "$@"\n'
        )
        self._wrapper.write_text(script)
        os.chmod(self._wrapper, 0o700)

    # -- lifecycle -------------------------------------------------------------

    def start(self) -> Browser:
        """Launch Chromium (and with it the app); returns the Playwright Browser
        (async API: run its calls with `self.host.run(...)`)."""
        from playwright.async_api import Error as PlaywrightError

        self._write_wrapper()
        try:
            self.host = PlaywrightHost.acquire()
            self.browser = self.host.run(self._launch(), timeout=2 * LAUNCH_TIMEOUT_MS / 1000)
        except (PlaywrightError, concurrent.futures.TimeoutError) as e:
            self.close()
            raise SandboxError(f"could not start Chromium in its sandbox: {e}\napp log: {self.app_log()}") from e
        return self.browser

    async def _launch(self) -> Browser:
        assert self.host is not None and self.host.playwright is not None
        return await self.host.playwright.chromium.launch(
            executable_path=str(self._wrapper),
            headless=self.headless,
            # Inside the sandbox Chromium is an unprivileged user, so its own sandbox works too.
            chromium_sandbox=True,
            timeout=LAUNCH_TIMEOUT_MS,
            args=[
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-default-browser-check",
                "--disable-features=Translate,MediaRouter,OptimizationHints",
            ],
        )

    @property
    def alive(self) -> bool:
        return self.browser is not None and self.browser.is_connected()

    def app_log(self) -> str:
        try:
            return (self.state_dir / "app.log").read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def process_ids(self) -> list[int]:
        """Every process of this sandbox: those carrying its marker in their
        environment, their bubblewrap parents and all their descendants."""
        needle = f"{MARKER_ENV}={self.id}".encode()
        marked = [pid for pid, env in environs() if needle in env]
        found: set[int] = set()
        for pid in marked:
            parent = _parent(pid)
            while parent and _comm(parent) == "bwrap":
                found.add(parent)
                parent = _parent(parent)
        frontier = list(marked)
        while frontier:
            pid = frontier.pop()
            if pid in found and pid not in marked:
                continue
            found.add(pid)
            frontier.extend(children(pid))
        return sorted(found)

    def memory_bytes(self) -> int:
        """Proportional set size (PSS) of the sandbox's processes: shared pages split fairly."""
        total = 0
        for pid in self.process_ids():
            try:
                with open(f"/proc/{pid}/smaps_rollup") as f:
                    for line in f:
                        if line.startswith("Pss:"):
                            total += int(line.split()[1]) * 1024
                            break
            except OSError:
                continue
        return total

    def kill(self) -> None:
        """From any thread, without waiting: SIGKILL every process of the
        sandbox. The driver sees the browser's pipe close, so a call waiting
        on it fails at once. The owner still calls close() (which then finds
        little to do)."""
        for pid in self.process_ids():
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def close(self) -> None:
        """End the browser and the app, wait until every process of the
        sandbox is gone, and let go of the shared driver. Idempotent."""
        pidfds = _pidfds(self.process_ids())
        try:
            if self.browser is not None and self.host is not None:
                try:
                    self.host.run(self.browser.close(), timeout=EXIT_GRACE_S)
                except Exception:  # a crashed browser is closed already
                    pass
            self.browser = None
            # Chromium has gone; the driver reaps the wrapper it started.
            _wait_exited(pidfds, EXIT_GRACE_S)
            _wait_reaped(list(pidfds), EXIT_GRACE_S)
            pidfds.update(_pidfds(self.process_ids()))
            if not _wait_exited(pidfds, EXIT_GRACE_S):
                # Whatever outlives the browser (it should not) is killed.
                for fd in pidfds.values():
                    try:
                        signal.pidfd_send_signal(fd, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                _wait_exited(pidfds, EXIT_GRACE_S)
        finally:
            for fd in pidfds.values():
                os.close(fd)
            shutil.rmtree(self._tmp, ignore_errors=True)
            if self.host is not None:
                host, self.host = self.host, None
                host.release()

    def __enter__(self) -> BrowserSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
