"""sandgym/BrowserForm-v0: web forms in a real browser; the server's state decides.

Each env instance (one worker) owns one sandbox with Chromium and the
bundled app on a loopback-only network. Every reset puts a fresh copy of
the task's database snapshot in place and opens a new BrowserContext, so
no cookie, storage or server row survives from one episode to the next.
Actions are text: BrowserGym's high-level actions or sandgym's first
grammar (see actions.py); `done()` or `send_msg_to_user(...)` ends the
episode and the verifier reads the database from the host side. With
`observation="browsergym"` the observation also carries BrowserGym's
fields (goal, url, axtree_txt, last_action, last_action_error).
"""

from __future__ import annotations

import hashlib
import mimetypes
import os
import secrets
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from gymnasium import spaces

from sandgym.envs.base import DEFAULT_MAX_ACTION_CHARS, SandgymEnv, action_problem, check_options
from sandgym.outcomes import Outcome
from sandgym.runtimes import Runtime, SandboxError
from sandgym.runtimes.browser import AppSpec, BrowserLimits
from sandgym.runtimes.staging import stage_dir
from sandgym.runtimes.tempdirs import owned_tempdir
from sandgym.spaces import UnicodeText
from sandgym.specs import TaskSet, choose_task, load_family_task_set
from sandgym.specs.browser_form import BrowserTaskPair
from sandgym.specs.browser_form_options import DEFAULT_MAX_STEPS, BrowserFormOptions
from sandgym.verifiers.browser_form.host import StateUnavailable, checked_tables, read_state, state_json, verify
from sandgym.verifiers.models import Attempt, RewardScheme, Verdict

from .actions import ENDING, GRAMMAR, ActionError, chat_tools, parse_action, tool_text
from .app import shopdata, trackerdata, wikidata
from .app.schema import build_database
from .axtree import to_axtree_txt
from .session import VIEWPORT, ActionRefused, BrowserSession, SessionBroken, failure_text

if TYPE_CHECKING:
    from playwright._impl._api_structures import SetCookieParam

APP_MODULE = "formapp:app"
# Each app's ASGI module, all in the one staged folder (app/).
APP_MODULES = {"forms": APP_MODULE, "shop": "shopapp:app", "tracker": "trackerapp:app", "wiki": "wikiapp:app"}
# The apps whose database is generated from a data seed: one template per seed, copied per episode.
GENERATED = {"shop": shopdata, "tracker": trackerdata, "wiki": wikidata}
DB_NAME = "app.sqlite"


def load_task_set(tasks: str | Path | TaskSet | None) -> TaskSet:
    return load_family_task_set(tasks, "browser_form")


def form_app(app: str = "forms") -> AppSpec:
    return AppSpec(app=APP_MODULES[app], source_dir=stage_dir(Path(__file__).parent / "app"))


def episode_files(task: BrowserTaskPair) -> dict[str, tuple[str, bytes]]:
    """The task's files for upload_file: name -> (MIME type by its extension, bytes)."""
    return {
        f.name: (mimetypes.guess_type(f.name)[0] or "application/octet-stream", f.data())
        for f in task.visible.files or []
    }


def task_app(task: BrowserTaskPair) -> str:
    return task.visible.app or "forms"


def render_goal(task: BrowserTaskPair, max_steps: int) -> str:
    files = task.visible.files or []
    listed = ", ".join(f"{f.name} ({len(f.data()):,} bytes)" for f in files)
    uploads = f" Files you can upload with upload_file(ref, 'name') on a file input: {listed}." if files else ""
    return (
        f"{task.visible.goal.strip()}\n\nYou are using a web app in a browser. Each turn you see the page's "
        f"accessibility snapshot; elements carry refs like [ref=e12]. {GRAMMAR} Call done() when the task is "
        f"finished; you have {max_steps} actions.{uploads}"
    )


# What observation="browsergym" adds (BrowserGym's names), all text.
BROWSERGYM_FIELDS = ("goal", "url", "axtree_txt", "last_action", "last_action_error")


def browsergym_fields(
    session: BrowserSession, goal: str, action: Any, error: str | None, snapshot: str | None
) -> dict[str, str]:
    """BrowserGym's observation keys: the goal alone, the absolute URL, the page as an
    axtree text whose [e12] ids are the refs actions take, the last action and its error."""
    try:
        url = session.url()
    except Exception:  # the page is gone (an infrastructure failure ends the episode)
        url = ""
    return {
        "goal": goal,
        "url": url,
        "axtree_txt": to_axtree_txt(snapshot) if snapshot else "",
        "last_action": "" if action is None else shown_action(action),
        "last_action_error": error or "",
    }


def shown_action(action: Any) -> str:
    """An action as feedback quotes it: its start, as text whatever it is."""
    text = action if isinstance(action, str) else repr(action)
    return text.strip()[:200].encode("utf-8", "backslashreplace").decode("utf-8")


def png_array(png: bytes) -> np.ndarray:
    """A PNG as an RGB array."""
    import io

    from PIL import Image

    img = Image.open(io.BytesIO(png)).convert("RGB")
    return np.asarray(img, dtype=np.uint8).copy()


def refused_verdict(problem: str) -> Verdict:
    """The verdict of an episode the policy ended by breaking the env's rules (an oversized action)."""
    return Verdict(
        verifier_version="none",
        outcome=Outcome.FAILED,
        detail=problem,
        attempts=[Attempt(outcome=Outcome.FAILED, detail=problem)],
    )


class BrowserFormEnv(SandgymEnv):
    """See the module docstring. After the last step `info` holds `outcome`,
    `reward_valid` and per-check `tests`; `last_verdict`, `artifact` (the
    final server state as JSON) and `timings` are on the env."""

    metadata = {"render_modes": ["ansi", "rgb_array"], "render_fps": 1}
    reward_scheme: RewardScheme = "binary"
    observation_space: spaces.Dict

    def __init__(
        self,
        tasks: str | Path | TaskSet | None = None,
        runtime: str | Runtime = "local",
        max_steps: int = DEFAULT_MAX_STEPS,
        verifier_retries: int = 2,
        render_mode: str | None = None,
        screenshot: bool = False,
        max_action_chars: int = DEFAULT_MAX_ACTION_CHARS,
        observation: str = "text",
        limits: BrowserLimits | dict[str, float] | None = None,
    ):
        opts = check_options(
            BrowserFormOptions,
            max_steps=max_steps,
            verifier_retries=verifier_retries,
            render_mode=render_mode,
            screenshot=screenshot,
            max_action_chars=max_action_chars,
            observation=observation,
        )
        self.max_action_chars = opts.max_action_chars
        self.observation_mode = opts.observation
        self.task_set = load_task_set(tasks)
        first = self.task_set.tasks[0] if len(self.task_set) else None
        self.app = task_app(BrowserTaskPair.of(first)) if first is not None else "forms"
        self.session = BrowserSession(form_app(self.app), runtime, BrowserLimits.of(limits))
        self.max_steps = max_steps
        self.verifier_retries = verifier_retries
        self.render_mode = render_mode
        self.with_screenshot = screenshot
        obs: dict[str, spaces.Space[Any]] = {"task": UnicodeText(), "feedback": UnicodeText()}
        if self.observation_mode == "browsergym":
            obs.update({key: UnicodeText() for key in BROWSERGYM_FIELDS})
        if screenshot:
            obs["screenshot"] = spaces.Box(0, 255, (VIEWPORT["height"], VIEWPORT["width"], 3), np.uint8)
        self.observation_space = spaces.Dict(obs)
        self.action_space = UnicodeText()
        self.task: BrowserTaskPair | None = None
        self.last_verdict: Verdict | None = None
        self.artifact: str | None = None
        self.violations: list[str] = []
        self.messages: list[str] = []  # send_msg_to_user / report_infeasible texts of the episode
        self.timings: dict[str, float] = {}
        self._snapshots = owned_tempdir("form-snapshots")
        self._step = 0
        self._limit = max_steps
        self._done = True
        self._obs: dict[str, Any] = {}
        self._final_png: bytes | None = None  # the last frame of an ended episode (see screenshot())

    @property
    def config(self) -> dict[str, Any]:
        return {
            "max_steps": self.max_steps,
            "verifier_retries": self.verifier_retries,
            "screenshot": self.with_screenshot,
            "max_action_chars": self.max_action_chars,
            "observation": self.observation_mode,
        }

    def oracle_actions(self) -> list[str]:
        if self.task is None:
            raise RuntimeError("call reset() first: the oracle's actions belong to the current task")
        return list(self.task.hidden.oracle)

    def null_actions(self) -> list[str]:
        return ["done()"]

    def chat_tools(self) -> list[dict[str, Any]]:
        """One tool per action (BrowserGym's names), generated from the parser's argument models."""
        return chat_tools()

    def tool_action(self, name: str, arguments: dict[str, Any]) -> str:
        """The text action of a tool call, e.g. click(bid='e12'); its arguments are checked by step()."""
        return tool_text(name, arguments)

    # -- gymnasium API -------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        self._done = True  # a reset that fails (an unknown task id) leaves no episode running
        super().reset(seed=seed)
        task = choose_task(self.task_set, options, self.np_random)
        self.task = BrowserTaskPair.of(task)
        self.last_verdict, self.artifact, self.violations, self.messages = None, None, [], []
        self._final_png = None
        self.timings = {"create_s": 0.0, "exec_s": 0.0, "verify_s": 0.0}
        self._step, self._done = 0, False
        self._limit = self.step_limit(self.task.visible.max_steps or self.max_steps)
        t0 = time.perf_counter()
        if task_app(self.task) != self.app:  # a set that mixes apps: this task's app in a new sandbox
            self.session.close()
            self.app = task_app(self.task)
            self.session.app = form_app(self.app)
        # Nothing of the last episode may write after the swap: its context closes (in the
        # background while the copy is staged, which the app cannot see yet) before it.
        self.session.close_context(wait=False)
        self.session.ensure_browser()
        parts = {"reset_stage_s": time.perf_counter()}
        staged, cookies = self._stage_database(self.task)
        # The next context, made while the last episode's agent acted (no page of an episode
        # used it; it loads nothing ahead: the start page needs this episode's database and
        # cookies), takes its cookies while the last one is still closing, rather than after;
        # nothing loads in it before the swap, and its session exists only in the staged copy.
        parts["reset_context_s"] = time.perf_counter()
        self.session.new_page(cookies)
        parts["reset_wait_s"] = time.perf_counter()
        if not self.session.wait_closed():  # a wedged browser was killed: a new sandbox
            self.session.close()
            self.session.ensure_browser()
            staged, cookies = self._stage_database(self.task)
            self.session.new_page(cookies)
        self._swap_database(staged)
        self.session.files = episode_files(self.task)
        # The start page and its first snapshot in one call on the driver's loop.
        parts["reset_load_s"] = time.perf_counter()
        snapshot = self.session.load(self.task.visible.start_path)
        # Where a reset's time goes (each part until the next begins): benchmarks/bench_shop.py reports them.
        ends = [*list(parts.values())[1:], time.perf_counter()]
        self.timings.update({k: end - start for (k, start), end in zip(parts.items(), ends, strict=True)})
        self.timings["create_s"] = time.perf_counter() - t0
        self._obs = {"task": render_goal(self.task, self._limit)}
        obs = self._observe("(episode start)", None, snapshot)
        self.session.prepare_spare()
        return obs, self._info()

    def step(self, action: str):
        if self._done or self.task is None:
            raise RuntimeError("the episode is over (or never began): call reset() first")
        from playwright.sync_api import Error as PlaywrightError

        self._step += 1
        t0 = time.perf_counter()
        tool, error = "invalid", None
        refused = action_problem(action, self.max_action_chars)
        if refused is not None and refused[1]:
            return self._finish(tool, refused_by_policy=refused[0].removesuffix(": the episode ends here"))
        try:
            if refused is not None:
                raise ActionError(refused[0])
            parsed = parse_action(action)
            tool = parsed.kind
            if parsed.kind in ENDING:
                if parsed.kind != "done":
                    self.messages.append(parsed.text or "")
                return self._finish(tool, last_action=action)
            self.session.perform(parsed)
        except ActionRefused as e:
            error, tool = str(e), "refused"
            if e.violation:
                self.violations.append(str(e))
        except SessionBroken as e:
            return self._finish(tool, session_error=str(e))
        except (ActionError, LookupError, PlaywrightError) as e:
            error = failure_text(e)
        finally:
            self.timings["exec_s"] += time.perf_counter() - t0
        if self._step >= self._limit:
            return self._finish(tool, truncated=True, last_action=action, last_error=error)
        try:
            obs = self._observe(action, error)
        except SessionBroken as e:
            return self._finish(tool, session_error=str(e))
        return obs, 0.0, False, False, self._info(tool=tool, error=error)

    def render(self):
        if self.render_mode == "ansi":
            return f"{self._obs.get('task', '')}\n\n{self._obs.get('feedback', '')}"
        if self.render_mode == "rgb_array":
            return self._screenshot_array()
        return None

    def screenshot(self) -> bytes:
        """A PNG of the current page; after the last step, of the page as the episode
        ended (kept when render_mode is 'rgb_array' or screenshot=True: its context is closed)."""
        if self._done and self.session.page is None:
            if self._final_png is None:
                raise RuntimeError(
                    "the episode is over and its page closed; take screenshot() before the last step, "
                    "or make the env with render_mode='rgb_array' or screenshot=True to keep the last frame"
                )
            return self._final_png
        return self.session.screenshot()

    def close(self) -> None:
        self.session.close_runtime()
        shutil.rmtree(self._snapshots, ignore_errors=True)

    def abort(self) -> None:
        """From another thread: kill the browser and the app, and cancel the
        env's waiting Playwright call, so that a blocked step returns."""
        self.session.abort()

    # -- internals ------------------------------------------------------------------------

    def _stage_database(self, task: BrowserTaskPair) -> tuple[Path, list[SetCookieParam]]:
        """A fresh copy of the task's snapshot, beside the app's database but not yet
        it, with a session if the task starts signed in. Returns the copy and the
        cookies the new context starts with."""
        data = GENERATED.get(task.visible.app or "")
        if data is not None:
            # One template per app and data seed, generated once per env; every episode copies it.
            data_seed = data.DEFAULT_SEED if task.visible.data_seed is None else task.visible.data_seed
            snap = self._snapshots / f"{task.visible.app}-{data_seed}.sqlite"
        else:
            snap = self._snapshots / f"{hashlib.sha256(task.id.encode()).hexdigest()[:16]}.sqlite"
        if not snap.exists():
            tmp = snap.with_suffix(".tmp")
            tmp.unlink(missing_ok=True)
            if data is not None:
                data.build_database(tmp, data_seed)
            else:
                build_database(tmp, task.visible.seed)
            os.replace(tmp, snap)
        state_dir = self.session.state_dir
        staged = state_dir / (DB_NAME + ".new")
        shutil.copyfile(snap, staged)
        cookies: list[SetCookieParam] = []
        if task.visible.login_as:
            import sqlite3

            token = secrets.token_urlsafe(24)
            con = sqlite3.connect(staged)
            try:
                # The copy is not the app's until the swap (a rename): no fsync needed.
                con.execute("PRAGMA synchronous = OFF")
                con.execute("PRAGMA journal_mode = MEMORY")
                row = con.execute("SELECT id FROM users WHERE username = ?", (task.visible.login_as,)).fetchone()
                if row is None:
                    raise ValueError(
                        f"task {task.id!r}: login_as names {task.visible.login_as!r}, which is not a seeded user"
                    )
                con.execute("INSERT INTO sessions (token, user_id) VALUES (?, ?)", (token, row[0]))
                con.commit()
            finally:
                con.close()
            cookies.append({"name": "sid", "value": token, "url": self.session.origin, "httpOnly": True})
        sandbox = self.session.sandbox
        assert sandbox is not None  # reset() started the browser
        if sandbox.app_owner:
            os.chown(staged, *sandbox.app_owner)
        os.chmod(staged, 0o600)
        return staged, cookies

    def _swap_database(self, staged: Path) -> None:
        """Put the staged copy in place (a new inode: a request still holding the old
        file writes nowhere)."""
        state_dir = self.session.state_dir
        for leftover in state_dir.glob(DB_NAME + "-*"):  # a journal of the last episode
            leftover.unlink(missing_ok=True)
        os.replace(staged, state_dir / DB_NAME)
        # Where the sandbox does not share the state folder, it gets the copy the same way.
        sandbox = self.session.sandbox
        assert sandbox is not None  # reset() started the browser
        sandbox.push_state(DB_NAME)

    def _observe(self, action: Any, error: str | None, snapshot: str | None = None) -> dict[str, Any]:
        """The observation after an action; `snapshot`: the page's, if already taken."""
        last = (
            ""
            if action is None
            else (f"Last action: {shown_action(action)} -> " + (f"error: {error}" if error else "ok") + "\n")
        )
        if snapshot is None:
            snapshot = self.session.snapshot()
        feedback = f"URL: {self.session.path()}\n{last}Step {self._step} of {self._limit}.\n\n{snapshot}"
        self._obs = {"task": self._obs["task"], "feedback": feedback}
        out = dict(self._obs)
        if self.observation_mode == "browsergym":
            out.update(self._browsergym_fields(action, error, snapshot))
        if self.with_screenshot:
            out["screenshot"] = self._screenshot_array()
        self.session.warm_actions()  # while the agent reads this observation
        return out

    def _browsergym_fields(self, action: Any, error: str | None, snapshot: str | None) -> dict[str, str]:
        assert self.task is not None
        return browsergym_fields(self.session, self.task.visible.goal.strip(), action, error, snapshot)

    def _screenshot_array(self) -> np.ndarray:
        return png_array(self.screenshot())

    def _info(self, **extra: Any) -> dict[str, Any]:
        assert self.task is not None
        return {"task_id": self.task.id, "step": self._step, "max_steps": self._limit, **extra}

    def _finish(
        self,
        tool: str,
        truncated: bool = False,
        session_error: str | None = None,
        refused_by_policy: str | None = None,
        last_action: Any = None,
        last_error: str | None = None,
    ):
        assert self.task is not None
        self._done = True
        t0 = time.perf_counter()
        captured: list = []
        task = self.task

        def load_state():
            sandbox = self.session.sandbox
            if sandbox is not None:
                try:  # where the state folder is not shared: the sandbox's database, copied out
                    sandbox.pull_state(DB_NAME)
                except SandboxError as e:
                    raise StateUnavailable(f"the app's database could not be copied out of the sandbox: {e}") from e
            # A generated app's thousands of rows: only the tables the verdict reads (and the artifact keeps).
            tables = checked_tables(task.hidden) if task.visible.app in GENERATED else None
            state = read_state(self.session.state_dir / DB_NAME, tables)
            captured[:] = [state]
            return state

        if refused_by_policy is not None:
            self.last_verdict = refused_verdict(refused_by_policy)
        else:
            self.last_verdict = verify(
                self.task.hidden,
                load_state,
                retries=self.verifier_retries,
                violations=self.violations,
                session_error=session_error,
                messages=self.messages,
            )
        self.artifact = state_json(captured[0]) if captured else None
        self.timings["verify_s"] = time.perf_counter() - t0
        verdict = self.last_verdict
        reward = verdict.reward(self.reward_scheme)
        text = f"Verdict: {verdict.outcome.value}."
        if refused_by_policy is not None:
            text += f" {refused_by_policy}."
        if verdict.outcome == Outcome.ENV_ERROR:
            text += f" An infrastructure error ended the episode ({verdict.detail}); this is not a score."
            if self.session.sandbox is not None:
                self.session.close()  # relaunched by the next reset
        elif truncated:
            text = f"The step limit ({self._limit}) was reached. " + text
        feedback, snapshot = text, None
        if verdict.outcome != Outcome.ENV_ERROR:
            try:
                snapshot = self.session.snapshot()
                feedback = f"{text}\n\nURL: {self.session.path()}\n\n{snapshot}"
            except SessionBroken:
                pass
        self._obs = {"task": self._obs["task"], "feedback": feedback}
        out = dict(self._obs)
        if self.observation_mode == "browsergym":
            out.update(self._browsergym_fields(last_action, last_error, snapshot))
        if self.with_screenshot or self.render_mode == "rgb_array":
            try:
                self._final_png = self.session.screenshot()
            except Exception:  # a page that died: no last frame
                self._final_png = None
        if self.with_screenshot:
            shape = self.observation_space["screenshot"].shape
            out["screenshot"] = png_array(self._final_png) if self._final_png else np.zeros(shape, np.uint8)
        # The episode is over: its context starts closing now, in the background, so the next
        # reset rarely waits for it (the reset still waits, before the swap, should it be open).
        self.session.close_context(wait=False)
        info = self._info(
            tool=tool,
            outcome=verdict.outcome.value,
            reward_valid=reward is not None,
            pass_rate=verdict.pass_rate,
            tests=[{"name": t.name, "status": t.status} for t in verdict.tests],
            **({"message": self.messages[-1]} if self.messages else {}),
        )
        return out, float(reward or 0.0), not truncated, truncated, info
