"""One worker's browser: the sandbox, a fresh BrowserContext per episode, actions on its page.

Shared by the form env and the MiniWoB envs. Playwright's async objects
live on the process's driver loop (`PlaywrightHost`); the env calls this
session from its own thread and each call waits for its result there. So
the next episode's context and page (`prepare_spare`) are made on that loop
while the agent acts, and a reset only takes a context no page has used.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast
from urllib.parse import urlsplit

from sandgym.errors import SandgymError
from sandgym.runtimes import Runtime, SandboxError, get_runtime
from sandgym.runtimes.browser import BROWSER_RUNTIMES, AppSpec, BrowserLimits, BrowserSandbox, open_browser_sandbox

from .actions import GRAMMAR, NOOP_MAX_MS, Action, ActionError, Target

if TYPE_CHECKING:  # playwright is an optional dependency (the browser extra)
    from playwright._impl._api_structures import SetCookieParam
    from playwright.async_api import BrowserContext, FilePayload, Locator, Page, ViewportSize

T = TypeVar("T")
# What a page does before its episode (MiniWoB: load the task page); a spare runs it ahead.
Setup = Callable[["Page"], Awaitable[None]]
ACTION_TIMEOUT_MS = 5_000
LOAD_TIMEOUT_MS = 15_000
VIEWPORT: ViewportSize = {"width": 1024, "height": 768}
MAX_SNAPSHOT_CHARS = 30_000
LAUNCH_ATTEMPTS = 3
# URL schemes an agent may only use to escape the app: refused and recorded as a violation.
ESCAPE_SCHEMES = (
    "file",
    "javascript",
    "data",
    "chrome",
    "chrome-extension",
    "about",
    "view-source",
    "blob",
    "filesystem",
    "devtools",
    "ws",
    "wss",
    "ftp",
)


class SessionBroken(SandgymError, RuntimeError):
    """The browser or its page died: infrastructure, not the agent."""


class ActionRefused(SandgymError, ValueError):
    """The action is well-formed but not allowed; `violation` when it tried to escape."""

    def __init__(self, message: str, violation: bool = False):
        super().__init__(message)
        self.violation = violation


def failure_text(e: Exception) -> str:
    """The observation's error for an action that could not be done: a
    malformed action (with the grammar), a refused one, a missing element,
    or Playwright's own refusal (its first line)."""
    from playwright.async_api import Error as PlaywrightError

    if isinstance(e, ActionError):
        return f"not an action: {e}. {GRAMMAR}"
    if isinstance(e, PlaywrightError):
        return f"the action failed: {str(e).splitlines()[0][:300]}"
    return str(e.args[0]) if e.args else str(e)


def browser_runtime(runtime: str | Runtime) -> tuple[str | Runtime, bool]:
    """The runtime browser sandboxes are made on, and whether this env made it
    (a name other than 'local' is opened here and closed with the env)."""
    if not isinstance(runtime, str):
        return runtime, False
    if runtime not in BROWSER_RUNTIMES:
        raise ValueError(
            f"runtime {runtime!r} cannot run the browser envs; supported: {', '.join(BROWSER_RUNTIMES)} "
            "(Chromium and the app in one sandbox with a loopback-only network)"
        )
    if runtime == "local":
        return runtime, False
    return get_runtime(runtime), True


class BrowserSession:
    def __init__(self, app: AppSpec, runtime: str | Runtime = "local", limits: BrowserLimits | None = None):
        self.app = app
        self.limits = BrowserLimits.of(limits)
        self.runtime, self._owns_runtime = browser_runtime(runtime)
        self.sandbox: BrowserSandbox | None = None
        self.context: BrowserContext | None = None
        self.page: Page | None = None
        self.broken: str | None = None
        self.launch_s = 0.0
        self._launching: BrowserSandbox | None = None
        self._aborted = False
        # The next episode's (context, page), being made on the driver's loop, and the sandbox and setup it is for.
        self._spare: concurrent.futures.Future[tuple[BrowserContext, Page]] | None = None
        self._spare_for: tuple[BrowserSandbox, Setup | None] | None = None
        self._retiring: list[concurrent.futures.Future[None]] = []
        self._warming: concurrent.futures.Future[None] | None = None
        self._inflight: set[concurrent.futures.Future[Any]] = set()
        # The episode's files upload_file may put in a file input: name -> (MIME type, bytes).
        self.files: dict[str, tuple[str, bytes]] = {}

    @property
    def origin(self) -> str:
        assert self.sandbox is not None
        return self.sandbox.origin

    @property
    def state_dir(self) -> Path:
        assert self.sandbox is not None
        return self.sandbox.state_dir

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on this session's Playwright objects (on the driver's loop) and wait for it.
        An abort() cancels it: SessionBroken."""
        sandbox = self.sandbox
        if sandbox is None or sandbox.host is None:
            coro.close()
            raise SessionBroken("the browser is not running")
        fut = sandbox.host.submit(coro)
        self._inflight.add(fut)
        try:
            return fut.result()
        except concurrent.futures.CancelledError as e:
            raise SessionBroken(self.broken or "the call was cancelled") from e
        finally:
            self._inflight.discard(fut)

    def ensure_browser(self) -> None:
        """A live browser, relaunched (with retries) after a crash."""
        if self.sandbox is not None and self.sandbox.alive:
            return
        self.close()
        self._aborted = False
        t0 = time.perf_counter()
        last: Exception | None = None
        for _ in range(LAUNCH_ATTEMPTS):
            if self._aborted:
                raise SessionBroken("aborted while the browser was starting")
            sandbox = self._launching = open_browser_sandbox(self.runtime, self.app, self.limits)
            try:
                browser = sandbox.start()
            except SandboxError as e:
                last = e
                continue
            finally:
                self._launching = None
            browser.on("disconnected", lambda _b: self._mark_broken("the browser disconnected"))
            self.sandbox = sandbox
            self.launch_s = time.perf_counter() - t0
            return
        raise SandboxError(f"the browser would not start after {LAUNCH_ATTEMPTS} attempts: {last}")

    def _mark_broken(self, why: str) -> None:
        if self.broken is None:
            self.broken = why

    def _broken_text(self, why: str) -> str:
        """`why`, and the limit the sandbox ran into if it did (a page that ate the memory)."""
        limit = self.sandbox.exhausted() if self.sandbox is not None else None
        return f"{why}: {limit}" if limit else why

    async def _make_page(self, setup: Setup | None) -> tuple[BrowserContext, Page]:
        """A new BrowserContext (no cookies, storage, cache or service workers of any
        earlier episode) with one page, set up for an episode; closed if that fails."""
        assert self.sandbox is not None and self.sandbox.browser is not None
        context = await self.sandbox.browser.new_context(
            viewport=VIEWPORT, service_workers="block", accept_downloads=False
        )
        try:
            context.set_default_timeout(ACTION_TIMEOUT_MS)
            context.set_default_navigation_timeout(LOAD_TIMEOUT_MS)
            page = await context.new_page()
            if setup is not None:
                await setup(page)
            else:
                # A snapshot of the blank page: Playwright's page script is compiled in the page's
                # renderer now, not in the reset's first snapshot (its start page, same process).
                # Read-only: nothing loads, the page stays about:blank.
                await page.aria_snapshot(mode="ai", timeout=LOAD_TIMEOUT_MS)
        except BaseException:
            await _close_quietly(context)
            raise
        return context, page

    def prepare_spare(self, setup: Setup | None = None) -> None:
        """Start making the next episode's context and page (`setup` run on it) on the
        driver's loop, and return at once: it is made while the agent acts."""
        if self._spare is not None or self.sandbox is None or not self.sandbox.alive:
            return
        assert self.sandbox.host is not None
        self._spare_for = (self.sandbox, setup)
        self._spare = self.sandbox.host.submit(self._make_page(setup))

    def _take_spare(self, setup: Setup | None) -> tuple[BrowserContext, Page] | None:
        spare, made_for = self._spare, self._spare_for
        self._spare = self._spare_for = None
        if spare is None:
            return None
        try:
            context, page = spare.result()
        except Exception:  # e.g. the browser died meanwhile: make one afresh
            return None
        if made_for == (self.sandbox, setup) and not page.is_closed():
            return context, page
        self._discard(context)
        return None

    def _discard(self, context: BrowserContext) -> None:
        if self.sandbox is not None and self.sandbox.host is not None:
            self.sandbox.host.submit(_close_quietly(context))

    def new_page(self, cookies: list[SetCookieParam] | None = None, setup: Setup | None = None) -> Page:
        """The episode's page, in a context no page has used before: the spare made
        ahead (with the same `setup`) if there is one, else a new one. The last
        episode's context is closed in the background (its cookies are set meanwhile):
        a caller with server state at stake waits for that (wait_closed()) before
        anything loads in the new page."""
        self.close_context(wait=False)
        assert self.sandbox is not None and self.sandbox.browser is not None
        self.broken = None
        made = self._take_spare(setup) or self.run(self._make_page(setup))
        self.context, page = made
        self.page = page
        if cookies:
            self.run(self.context.add_cookies(cookies))
        page.on("crash", lambda p: self._mark_broken("the page crashed") if p is self.page else None)
        return page

    def close_context(self, wait: bool = True) -> bool:
        """Close the episode's context. `wait=False` closes it in the background (only
        where no server state is at stake); a close_context() that waits waits for those too.
        False: a browser that could not close them in time was killed (relaunch it)."""
        context, self.context, self.page = self.context, None, None
        if context is not None and self.sandbox is not None and self.sandbox.host is not None:
            self._retiring.append(self.sandbox.host.submit(_close_quietly(context)))
        if wait:
            return self.wait_closed()
        self._retiring = [f for f in self._retiring if not f.done()]
        return True

    def wait_closed(self) -> bool:
        """Wait until the contexts closing in the background are closed (the current one
        stays open). False: a browser that could not close them in time was killed."""
        closed = True
        for fut in self._retiring:
            try:
                fut.result(timeout=LOAD_TIMEOUT_MS / 1000)
            except concurrent.futures.TimeoutError:
                # A browser that cannot close a context is wedged: it must not
                # serve another episode (and its state must not be swapped under it).
                fut.cancel()
                self._mark_broken("the browser did not close the last episode's context")
                if self.sandbox is not None:
                    self.sandbox.kill()
                closed = False
            except Exception:
                pass
        self._retiring = []
        return closed

    def warm_actions(self) -> None:
        """Start setting up Playwright's script in the page's utility world, where element
        actions (clicks, fills, checks) run, and return at once: Playwright sets it up on
        first use in each document (tens of ms), so this does it while the agent acts
        rather than in its next step. Read-only; a page that navigates meanwhile is skipped."""
        if self.page is None or self.sandbox is None or self.sandbox.host is None:
            return
        self._warming = self.sandbox.host.submit(warm_utility_world(self.page))

    def close(self) -> None:
        warming, self._warming = self._warming, None
        if warming is not None:
            warming.cancel()
        self.close_context()
        spare, self._spare, self._spare_for = self._spare, None, None
        if spare is not None:
            spare.cancel()
            try:
                self._discard(spare.result(timeout=LOAD_TIMEOUT_MS / 1000)[0])
            except Exception:  # cancelled, or failed: it closed its own context
                pass
        if self.sandbox is not None:
            self.sandbox.close()
            self.sandbox = None

    def close_runtime(self) -> None:
        """Close the session, and the runtime if the session opened it."""
        self.close()
        if self._owns_runtime and not isinstance(self.runtime, str):
            self.runtime.close()

    def abort(self) -> None:
        """From any thread: kill the browser (or the one starting) and its app, and
        cancel the calls waiting on it, so that a call blocked in Playwright returns."""
        self._aborted = True
        self._mark_broken("the browser was killed: the episode's deadline passed, or the run was interrupted")
        for sandbox in (self._launching, self.sandbox):
            if sandbox is not None:
                sandbox.kill()
        for fut in list(self._inflight):
            fut.cancel()

    # -- observation -------------------------------------------------------------------------

    def check_alive(self) -> Page:
        """The page, or SessionBroken if it or the browser died."""
        if self.broken:
            raise SessionBroken(self._broken_text(self.broken))
        if self.sandbox is None or not self.sandbox.alive:
            raise SessionBroken(self._broken_text("the browser is not running"))
        if self.page is None or self.page.is_closed():
            raise SessionBroken("the page was closed")
        return self.page

    def current_page(self) -> Page:
        """The episode's page (new_page() made it), alive or not."""
        assert self.page is not None, "new_page() first"
        return self.page

    def path(self) -> str:
        url = self.current_page().url
        if url.startswith(self.origin):
            return url[len(self.origin) :] or "/"
        return url

    def url(self) -> str:
        """The page's absolute URL (what BrowserGym's observation shows)."""
        return self.current_page().url

    def evaluate(self, expression: str, arg: Any = None) -> Any:
        """The page's script result (the env's, never the agent's)."""
        return self.run(self.current_page().evaluate(expression, arg))

    def snapshot(self) -> str:
        return self._snapshot(None)

    def load(self, path: str) -> str:
        """Load a page of the app (the env's own navigation) and return its snapshot, in one
        call on the driver's loop: the snapshot starts as soon as the page has loaded, not
        after a round trip through this thread."""
        return self._snapshot(self.origin + path)

    def _snapshot(self, url: str | None) -> str:
        """The page's accessibility snapshot (cut at MAX_SNAPSHOT_CHARS), after loading `url`
        if given. A failed load raises as page.goto does; a failed snapshot is SessionBroken."""
        from playwright.async_api import Error as PlaywrightError

        page = self.check_alive()

        async def load_and_snapshot() -> str:
            if url is not None:
                await _goto_warming(page, url)
            try:
                return await page.aria_snapshot(mode="ai", timeout=LOAD_TIMEOUT_MS)
            except PlaywrightError as e:
                raise _SnapshotFailed(str(e)) from e

        try:
            text = self.run(load_and_snapshot())
        except _SnapshotFailed as e:
            self.check_alive()
            raise SessionBroken(self._broken_text(f"the accessibility snapshot failed: {e}")) from e
        if len(text) > MAX_SNAPSHOT_CHARS:
            text = text[:MAX_SNAPSHOT_CHARS] + f"\n... (snapshot cut at {MAX_SNAPSHOT_CHARS} characters)"
        return text

    def screenshot(self) -> bytes:
        page = self.check_alive()
        return self.run(page.screenshot(type="png"))

    # -- actions -----------------------------------------------------------------------------

    def app_url(self, text: str) -> str:
        """The absolute URL of a goto argument, or ActionRefused if it leaves the app."""
        raw = text.strip()
        parts = urlsplit(raw)
        scheme = parts.scheme.lower()
        if scheme in ESCAPE_SCHEMES or (scheme and scheme not in ("http", "https")):
            raise ActionRefused(f'goto({raw!r}) refused: only paths inside the app, like "/profile"', violation=True)
        if scheme or raw.startswith("//"):
            if f"{parts.scheme}://{parts.netloc}" != self.origin:
                raise ActionRefused(f'goto({raw!r}) refused: it leaves the app; give a path like "/profile"')
            return raw
        if not raw.startswith("/") or "\\" in raw:
            raise ActionRefused(f"goto({raw!r}) refused: a path inside the app starts with '/', like \"/profile\"")
        return self.origin + raw

    async def _locate(self, target: Target) -> Locator:
        page = self.current_page()
        if target.ref is not None:
            loc = page.locator(f"aria-ref={target.ref}")
            what = target.ref
        else:
            # The agent's role text, as given: Playwright refuses a role it does not know.
            loc = page.get_by_role(cast(Any, target.role), name=target.name, exact=True)
            what = f'"{target.role}:{target.name}"'
        n = await loc.count()
        if n == 0:
            raise LookupError(
                f"no element {what} on this page (refs change when the page changes: use one from the latest snapshot)"
            )
        if n > 1:
            raise LookupError(f"{what} matches {n} elements; use a ref from the snapshot")
        return loc

    def locate(self, target: Target) -> Locator:
        return self.run(self._locate(target))

    def perform(self, action: Action) -> None:
        """Run one action and wait until the page has loaded. Raises ActionRefused,
        LookupError or playwright's Error for the agent's mistakes, SessionBroken
        when the browser died. The episode-ending actions (done, send_msg_to_user,
        report_infeasible) are the env's, not run here."""
        from playwright.async_api import Error as PlaywrightError

        page = self.check_alive()
        try:
            self.run(self._perform(page, action))
        except PlaywrightError:
            self.check_alive()  # a dead browser is the infrastructure's failure, not the agent's
            raise
        self.check_alive()
        url = page.url
        if not url.startswith(self.origin + "/") and url != self.origin:
            # Nothing in the app links out; should a page end up elsewhere, bring it back.
            self.run(_goto(page, self.origin + "/"))
            raise ActionRefused(f"the page left the app (to {url[:100]!r}) and was brought back")

    async def _perform(self, page: Page, action: Action) -> None:
        await self._run(page, action)
        # Readiness: whatever navigation the action started has loaded.
        await page.wait_for_load_state("load")

    async def _run(self, page: Page, action: Action) -> None:
        kind, args = action.kind, action.args
        if kind == "goto":
            await _goto(page, self.app_url(action.text or ""))
        elif kind == "go_back":
            await page.go_back(wait_until="load")
        elif kind == "go_forward":
            await page.go_forward(wait_until="load")
        elif kind == "noop":
            await page.wait_for_timeout(min(float(args.get("wait_ms", 0)), NOOP_MAX_MS))
        elif kind == "scroll":
            await page.mouse.wheel(float(args["delta_x"]), float(args["delta_y"]))
        elif kind in ("keyboard_press", "press") and action.target is None:
            await page.keyboard.press(action.text or "")  # press("Key") of the first grammar: the focused element
        elif kind == "keyboard_type":
            await page.keyboard.type(action.text or "")
        elif kind == "keyboard_insert_text":
            await page.keyboard.insert_text(action.text or "")
        elif action.target is not None:
            await self._on_element(await self._locate(action.target), action)
        else:
            raise ActionRefused(f"{kind}() is not something to do on the page here")

    async def _on_element(self, loc: Locator, action: Action) -> None:
        kind, args = action.kind, action.args
        mods = cast(Any, list(args.get("modifiers", [])))
        if kind == "click":
            await loc.click(button=args.get("button", "left"), modifiers=mods)
        elif kind == "dblclick":
            await loc.dblclick(button=args.get("button", "left"), modifiers=mods)
        elif kind == "fill":
            value = str(args.get("value", ""))
            if args.get("enable_autocomplete_menu") and value:
                await loc.fill(value[:-1])  # the last key typed, so a suggestion list opens as for a person
                await loc.press_sequentially(value[-1])
            else:
                await loc.fill(value)
        elif kind in ("select", "select_option"):
            await loc.select_option(args["option"] if kind == "select" else args["options"])
        elif kind == "press":
            await loc.press(str(args["key_comb"]))
        elif kind == "check":
            await loc.check()
        elif kind == "uncheck":
            await loc.uncheck()
        elif kind == "hover":
            await loc.hover()
        elif kind == "focus":
            await loc.focus()
        elif kind == "clear":
            await loc.clear()
        elif kind == "upload_file":
            await loc.set_input_files(self._payloads(args["file"]))
        elif kind == "drag_and_drop":
            assert action.to is not None
            await loc.drag_to(await self._locate(action.to))
        else:
            raise ActionRefused(f"{kind}() is not something to do on the page here")

    def _payloads(self, names: str | list[str]) -> list[FilePayload]:
        """The episode's files by name, as Playwright payloads: bytes, never a host path."""
        wanted = [names] if isinstance(names, str) else list(names)
        missing = [n for n in wanted if n not in self.files]
        if missing:
            have = ", ".join(repr(n) for n in self.files) or "none"
            raise ActionRefused(f"upload_file: no file {missing[0]!r} in this episode (its files: {have})")
        return [{"name": n, "mimeType": self.files[n][0], "buffer": self.files[n][1]} for n in wanted]


class _SnapshotFailed(Exception):
    """Playwright's error from the snapshot (not from the load before it)."""


async def _goto(page: Page, url: str) -> None:
    await page.goto(url, wait_until="load")


async def _goto_warming(page: Page, url: str) -> None:
    """page.goto(url) until "load", with Playwright's page script set up in the new document
    while it loads: its first snapshot there (the env's next call) then only reads the page.
    Playwright sets that script up in each document on first use (the bulk of a fresh
    context's first snapshot); from the commit on, the document it goes into exists."""
    await page.goto(url, wait_until="commit")
    # A count of <html> in the main world (where snapshots run) is the cheapest call that sets it up.
    await asyncio.gather(page.wait_for_load_state("load", timeout=LOAD_TIMEOUT_MS), page.locator("html").count())


async def warm_utility_world(page: Page) -> None:
    """One element-state check on <body> (an ElementHandle runs it in the utility world)."""
    try:
        body = await page.query_selector("body")
        if body is not None:
            # "enabled" holds at once for <body>: nothing is waited for.
            await body.wait_for_element_state("enabled", timeout=ACTION_TIMEOUT_MS)
            await body.dispose()
    except Exception:  # navigated, closed or crashed meanwhile: the next action sets it up itself
        pass


async def _close_quietly(context: BrowserContext) -> None:
    try:
        await context.close()
    except Exception:  # the browser may be gone already
        pass
