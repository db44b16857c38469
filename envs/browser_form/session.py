"""One worker's browser: the sandbox, a fresh BrowserContext per episode, actions on its page.

Shared by the form env and the MiniWoB envs. Everything here runs in the
thread that created it (Playwright's sync API is bound to that thread).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit

from sandgym.errors import SandgymError
from sandgym.runtimes import Runtime, SandboxError
from sandgym.runtimes.browser import AppSpec, BrowserSandbox

from .actions import GRAMMAR, NOOP_MAX_MS, Action, ActionError, Target

if TYPE_CHECKING:  # playwright is an optional dependency (the browser extra)
    from playwright._impl._api_structures import SetCookieParam
    from playwright.sync_api import BrowserContext, Locator, Page, ViewportSize

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
    from playwright.sync_api import Error as PlaywrightError

    if isinstance(e, ActionError):
        return f"not an action: {e}. {GRAMMAR}"
    if isinstance(e, PlaywrightError):
        return f"the action failed: {str(e).splitlines()[0][:300]}"
    return str(e.args[0]) if e.args else str(e)


def sandbox_owner(runtime: str | Runtime) -> tuple[int, int] | None:
    """The unprivileged uid/gid the browser runs as, from the runtime the env was given."""
    name = runtime if isinstance(runtime, str) else getattr(runtime, "name", type(runtime).__name__)
    if name != "local":
        raise ValueError(
            f"runtime {name!r} cannot run the browser envs; supported: 'local' "
            "(Chromium and the app in a bubblewrap sandbox with a loopback-only network)"
        )
    return None if isinstance(runtime, str) else getattr(runtime, "drop_to", None)


class BrowserSession:
    def __init__(self, app: AppSpec, drop_to: tuple[int, int] | None = None):
        self.app = app
        self.drop_to = drop_to
        self.sandbox: BrowserSandbox | None = None
        self.context: BrowserContext | None = None
        self.page: Page | None = None
        self.broken: str | None = None
        self.launch_s = 0.0
        self._launching: BrowserSandbox | None = None
        self._aborted = False

    @property
    def origin(self) -> str:
        assert self.sandbox is not None
        return self.sandbox.origin

    @property
    def state_dir(self) -> Path:
        assert self.sandbox is not None
        return self.sandbox.state_dir

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
            sandbox = self._launching = BrowserSandbox(self.app, drop_to=self.drop_to)
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

    def new_page(self, cookies: list[SetCookieParam] | None = None) -> Page:
        """A new BrowserContext (no cookies, storage, cache or service workers of any earlier episode)."""
        self.close_context()
        assert self.sandbox is not None and self.sandbox.browser is not None
        self.broken = None
        self.context = self.sandbox.browser.new_context(
            viewport=VIEWPORT, service_workers="block", accept_downloads=False
        )
        self.context.set_default_timeout(ACTION_TIMEOUT_MS)
        self.context.set_default_navigation_timeout(LOAD_TIMEOUT_MS)
        if cookies:
            self.context.add_cookies(cookies)
        page = self.page = self.context.new_page()
        page.on("crash", lambda _p: self._mark_broken("the page crashed"))
        return page

    def close_context(self) -> None:
        if self.context is not None:
            try:
                self.context.close()
            except Exception:  # the browser may be gone already
                pass
        self.context = self.page = None

    def close(self) -> None:
        self.close_context()
        if self.sandbox is not None:
            self.sandbox.close()
            self.sandbox = None

    def abort(self) -> None:
        """From any thread: kill the browser (or the one starting), its app and
        the Playwright driver, so that a call blocked in Playwright fails."""
        self._aborted = True
        self._mark_broken("the browser was killed: the episode's deadline passed, or the run was interrupted")
        for sandbox in (self._launching, self.sandbox):
            if sandbox is not None:
                sandbox.kill()

    # -- observation -------------------------------------------------------------------------

    def check_alive(self) -> Page:
        """The page, or SessionBroken if it or the browser died."""
        if self.broken:
            raise SessionBroken(self.broken)
        if self.sandbox is None or not self.sandbox.alive:
            raise SessionBroken("the browser is not running")
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

    def snapshot(self) -> str:
        from playwright.sync_api import Error as PlaywrightError

        page = self.check_alive()
        try:
            text = page.aria_snapshot(mode="ai", timeout=LOAD_TIMEOUT_MS)
        except PlaywrightError as e:
            self.check_alive()
            raise SessionBroken(f"the accessibility snapshot failed: {e}") from e
        if len(text) > MAX_SNAPSHOT_CHARS:
            text = text[:MAX_SNAPSHOT_CHARS] + f"\n... (snapshot cut at {MAX_SNAPSHOT_CHARS} characters)"
        return text

    def screenshot(self) -> bytes:
        return self.check_alive().screenshot(type="png")

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

    def locate(self, target: Target) -> Locator:
        page = self.current_page()
        if target.ref is not None:
            loc = page.locator(f"aria-ref={target.ref}")
            what = target.ref
        else:
            # The agent's role text, as given: Playwright refuses a role it does not know.
            loc = page.get_by_role(cast(Any, target.role), name=target.name, exact=True)
            what = f'"{target.role}:{target.name}"'
        n = loc.count()
        if n == 0:
            raise LookupError(
                f"no element {what} on this page (refs change when the page changes: use one from the latest snapshot)"
            )
        if n > 1:
            raise LookupError(f"{what} matches {n} elements; use a ref from the snapshot")
        return loc

    def perform(self, action: Action) -> None:
        """Run one action and wait until the page has loaded. Raises ActionRefused,
        LookupError or playwright's Error for the agent's mistakes, SessionBroken
        when the browser died. The episode-ending actions (done, send_msg_to_user,
        report_infeasible) are the env's, not run here."""
        from playwright.sync_api import Error as PlaywrightError

        page = self.check_alive()
        try:
            self._run(page, action)
            # Readiness: whatever navigation the action started has loaded.
            page.wait_for_load_state("load")
        except PlaywrightError:
            self.check_alive()  # a dead browser is the infrastructure's failure, not the agent's
            raise
        self.check_alive()
        url = page.url
        if not url.startswith(self.origin + "/") and url != self.origin:
            # Nothing in the app links out; should a page end up elsewhere, bring it back.
            page.goto(self.origin + "/", wait_until="load")
            raise ActionRefused(f"the page left the app (to {url[:100]!r}) and was brought back")

    def _run(self, page: Page, action: Action) -> None:
        kind, args = action.kind, action.args
        if kind == "goto":
            page.goto(self.app_url(action.text or ""), wait_until="load")
        elif kind == "go_back":
            page.go_back(wait_until="load")
        elif kind == "go_forward":
            page.go_forward(wait_until="load")
        elif kind == "noop":
            page.wait_for_timeout(min(float(args.get("wait_ms", 0)), NOOP_MAX_MS))
        elif kind == "scroll":
            page.mouse.wheel(float(args["delta_x"]), float(args["delta_y"]))
        elif kind in ("keyboard_press", "press") and action.target is None:
            page.keyboard.press(action.text or "")  # press("Key") of the first grammar: the focused element
        elif kind == "keyboard_type":
            page.keyboard.type(action.text or "")
        elif kind == "keyboard_insert_text":
            page.keyboard.insert_text(action.text or "")
        elif action.target is not None:
            self._on_element(self.locate(action.target), action)
        else:
            raise ActionRefused(f"{kind}() is not something to do on the page here")

    def _on_element(self, loc: Locator, action: Action) -> None:
        kind, args = action.kind, action.args
        mods = cast(Any, list(args.get("modifiers", [])))
        if kind == "click":
            loc.click(button=args.get("button", "left"), modifiers=mods)
        elif kind == "dblclick":
            loc.dblclick(button=args.get("button", "left"), modifiers=mods)
        elif kind == "fill":
            value = str(args.get("value", ""))
            if args.get("enable_autocomplete_menu") and value:
                loc.fill(value[:-1])  # the last key typed, so a suggestion list opens as for a person
                loc.press_sequentially(value[-1])
            else:
                loc.fill(value)
        elif kind in ("select", "select_option"):
            loc.select_option(args["option"] if kind == "select" else args["options"])
        elif kind == "press":
            loc.press(str(args["key_comb"]))
        elif kind == "check":
            loc.check()
        elif kind == "uncheck":
            loc.uncheck()
        elif kind == "hover":
            loc.hover()
        elif kind == "focus":
            loc.focus()
        elif kind == "clear":
            loc.clear()
        elif kind == "drag_and_drop":
            assert action.to is not None
            loc.drag_to(self.locate(action.to))
        else:
            raise ActionRefused(f"{kind}() is not something to do on the page here")
