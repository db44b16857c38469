"""sandgym/MiniWoB-<task>-v0: the MiniWoB++ task pages of the `miniwob` wheel, in the browser sandbox.

The pages are served over http on the sandbox's loopback (flight.* pages
need http) by the same sandbox as the form app. Each episode has a new
BrowserContext with the page loaded ahead, while the last episode's agent
acted (`BrowserSession.prepare_spare`); the reset starts a seeded episode
with the time limit lifted (`Math.seedrandom(seed); core.EPISODE_MAX_TIME
= T; core.startEpisodeReal()`) and waits for `WOB_TASK_READY`, in one
`evaluate`. The goal is
`core.getUtterance()`; the reward is the page's undiscounted
`WOB_RAW_REWARD_GLOBAL` once `WOB_DONE_GLOBAL` is set. The agent has no
action that runs script, so it cannot set these itself.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym

from sandgym.envs.base import DEFAULT_MAX_ACTION_CHARS, NoReference, SandgymEnv, action_problem, check_options
from sandgym.outcomes import Outcome
from sandgym.runtimes import Runtime
from sandgym.runtimes.browser import AppSpec, BrowserLimits, stage_tree
from sandgym.runtimes.staging import stage_dir
from sandgym.spaces import UnicodeText
from sandgym.specs import TaskSet
from sandgym.specs.browser_form import miniwob_task_set

# The page listing and the ids' registration live with the options, in a
# module `import sandgym` may load (this one imports the browser sandbox).
from sandgym.specs.browser_form_options import MiniWoBOptions, miniwob_html, miniwob_tasks
from sandgym.verifiers.models import Attempt, Verdict

from .actions import ENDING, GRAMMAR, ActionError, chat_tools, parse_action, tool_text
from .env import BROWSERGYM_FIELDS, browsergym_fields, refused_verdict, shown_action
from .session import ActionRefused, BrowserSession, SessionBroken, failure_text, warm_utility_world

if TYPE_CHECKING:
    from playwright.async_api import Page

STATIC_IN_SANDBOX = "/opt/sandgym/static"
# The longest delay setTimeout honours (2^31 - 1 ms would overflow past it): 24 hours.
NO_TIME_LIMIT_MS = 86_400_000
READY_TIMEOUT_MS = 15_000
# Seed, lift the time limit, start, wait for the task to be ready (polled), return the goal.
START_EPISODE = """async ([seed, t, timeout]) => {
  Math.seedrandom(seed); core.EPISODE_MAX_TIME = t; core.startEpisodeReal();
  const deadline = Date.now() + timeout;
  while (WOB_TASK_READY !== true) {
    if (Date.now() > deadline) throw new Error('the task page did not become ready');
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
  return core.getUtterance();
}"""
# The task page is the episode: leaving it would end the task unscored.
NO_NAVIGATION = frozenset({"goto", "go_back", "go_forward"})
VERIFIER_VERSION = "miniwob-1"


def miniwob_app() -> AppSpec:
    html = miniwob_html()
    import importlib.metadata as md

    staged = stage_tree(html, f"miniwob-html-{md.version('miniwob')}")
    return AppSpec(
        app="static_app:app",
        source_dir=stage_dir(Path(__file__).parent / "app"),
        env={"SANDGYM_STATIC_ROOT": STATIC_IN_SANDBOX},
        mounts=((str(staged), STATIC_IN_SANDBOX),),
    )


class MiniWoBEnv(SandgymEnv):
    """One MiniWoB++ task. The step reward is 0 until the page ends the
    episode; then it is the raw reward (-1..1). `done()` ends it early."""

    metadata = {"render_modes": ["ansi"], "render_fps": 1}
    reward_scheme = "raw"
    mode = "multi"

    def __init__(
        self,
        task: str,
        runtime: str | Runtime = "local",
        max_steps: int = 20,
        render_mode: str | None = None,
        tasks: TaskSet | str | Path | None = None,
        max_action_chars: int = DEFAULT_MAX_ACTION_CHARS,
        observation: str = "text",
        limits: BrowserLimits | dict[str, float] | None = None,
    ):
        opts = check_options(
            MiniWoBOptions,
            task=task,
            max_steps=max_steps,
            render_mode=render_mode,
            max_action_chars=max_action_chars,
            observation=observation,
        )
        self.max_action_chars = opts.max_action_chars
        self.observation_mode = opts.observation
        if task not in miniwob_tasks():
            raise ValueError(
                f"unknown MiniWoB task {task!r}; the wheel has {len(miniwob_tasks())}, e.g. click-button, enter-text"
            )
        import importlib.metadata as md

        # The page is the one task of this env's set; episodes differ by seed.
        self.task_set = miniwob_task_set(task, md.version("miniwob"))
        if tasks is not None and not (isinstance(tasks, TaskSet) and tasks.hash == self.task_set.hash):
            raise ValueError(
                f"MiniWoB envs take no task set: the page {task!r} is the one task (task set "
                f"{self.task_set.meta.name!r}); leave --tasks out and use --epochs N for N seeded episodes"
            )
        self.task_name = task
        self.max_steps = max_steps
        self.render_mode = render_mode
        self.session = BrowserSession(miniwob_app(), runtime, BrowserLimits.of(limits))
        keys = ("task", "feedback", *(BROWSERGYM_FIELDS if self.observation_mode == "browsergym" else ()))
        self.observation_space = gym.spaces.Dict({key: UnicodeText() for key in keys})
        self.action_space = UnicodeText()
        self.last_verdict: Verdict | None = None
        self.artifact: str | None = None
        self.timings: dict[str, float] = {}
        self.utterance = ""
        self._step = 0
        self._limit = max_steps  # this episode's steps: step_limit(max_steps)
        self._done = True
        self._obs: dict[str, str] = {}

    @property
    def config(self) -> dict[str, Any]:
        return {
            "task": self.task_name,
            "max_steps": self.max_steps,
            "max_action_chars": self.max_action_chars,
            "observation": self.observation_mode,
        }

    def oracle_actions(self) -> list[str]:
        """MiniWoB++ pages ship no scripted solution; a policy must solve the page itself."""
        raise NoReference(f"MiniWoB task {self.task_name!r} has no reference solution")

    def null_actions(self) -> list[str]:
        """End the episode at once: the page scores it as not done."""
        return ["done()"]

    def chat_tools(self) -> list[dict[str, Any]]:
        """The browser actions as tools, without the navigation ones."""
        return chat_tools(exclude=NO_NAVIGATION)

    def tool_action(self, name: str, arguments: dict[str, Any]) -> str:
        return tool_text(name, arguments)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        self._done = True  # a reset that fails leaves no episode running
        super().reset(seed=seed)
        options = dict(options or {})
        if options.get("task_id") in (None, self.task_set.ids[0]):
            options.pop("task_id", None)
        if options:
            raise ValueError(
                f"unknown reset option(s) {options}; MiniWoB envs take only task_id={self.task_set.ids[0]!r}"
            )
        page_seed = int(self.np_random.integers(2**31 - 1))
        t0 = time.perf_counter()
        self.session.ensure_browser()
        # The page was loaded ahead in a context no page had used (prepare_spare below);
        # the page keeps no server state, so the last context closes in the background.
        self.session.close_context(wait=False)
        self.session.new_page(setup=self._load_page)
        self.utterance = self.session.run(self._start_episode(page_seed))
        self.timings = {"create_s": time.perf_counter() - t0, "exec_s": 0.0, "verify_s": 0.0}
        self.last_verdict, self.artifact = None, None
        self._step, self._done = 0, False
        self._limit = self.step_limit(self.max_steps)
        self._obs = {
            "task": f"{self.utterance}\n\n{GRAMMAR} goto(), go_back() and go_forward() are not available here."
        }
        self._observe(None, None)
        self.session.prepare_spare(self._load_page)
        return dict(self._obs), {"task": self.task_name, "seed": page_seed, "step": 0}

    async def _load_page(self, page: Page) -> None:
        await page.goto(f"{self.session.origin}/miniwob/{self.task_name}.html", wait_until="load")
        # Playwright's script is set up in a page on first use, once in its main world (the
        # snapshot, refs) and once in its utility world (clicks, fills): here, ahead, not in
        # the reset's snapshot and the first action.
        await page.locator(":root").count()
        await warm_utility_world(page)

    async def _start_episode(self, seed: int) -> Any:
        """Start the seeded episode, wait for WOB_TASK_READY and return the utterance: one round trip."""
        page = self.session.current_page()
        return await asyncio.wait_for(
            page.evaluate(START_EPISODE, [seed, NO_TIME_LIMIT_MS, READY_TIMEOUT_MS]), READY_TIMEOUT_MS / 1000 + 5
        )

    def _observe(self, action: Any, error: str | None) -> None:
        """The observation after an action, into `_obs` (the task text kept)."""
        last = (
            ""
            if action is None
            else (f"Last action: {shown_action(action)} -> " + (f"error: {error}" if error else "ok") + "\n")
        )
        snapshot = self.session.snapshot()
        feedback = f"{last}Step {self._step} of {self._limit}.\n\n{snapshot}"
        self._obs = {"task": self._obs["task"], "feedback": feedback}
        if self.observation_mode == "browsergym":
            self._obs.update(browsergym_fields(self.session, self.utterance, action, error, snapshot))

    def _final(self, feedback: str, action: Any, error: str | None, page_alive: bool) -> None:
        """The last observation: the verdict, and BrowserGym's keys on the final page."""
        self._obs = {"task": self._obs["task"], "feedback": feedback}
        if self.observation_mode == "browsergym":
            snapshot = None
            if page_alive:
                try:
                    snapshot = self.session.snapshot()
                except SessionBroken:
                    pass
            self._obs.update(browsergym_fields(self.session, self.utterance, action, error, snapshot))

    def _wob(self) -> dict[str, Any]:
        return self.session.evaluate(
            "() => ({done: WOB_DONE_GLOBAL, raw: WOB_RAW_REWARD_GLOBAL, reason: WOB_REWARD_REASON})"
        )

    def step(self, action: str):
        if self._done:
            raise RuntimeError("the episode is over (or never began): call reset() first")
        from playwright.sync_api import Error as PlaywrightError

        self._step += 1
        tool, error = "invalid", None
        t0 = time.perf_counter()
        refused = action_problem(action, self.max_action_chars)
        if refused is not None and refused[1]:
            return self._finish(tool, refused_by_policy=refused[0].removesuffix(": the episode ends here"))
        try:
            if refused is not None:
                raise ActionError(refused[0])
            parsed = parse_action(action)
            tool = parsed.kind
            if parsed.kind in ENDING:
                return self._finish(tool, last_action=action)
            if parsed.kind in NO_NAVIGATION:
                raise ActionRefused(f"{parsed.kind}() is not available in MiniWoB tasks: act on the page")
            self.session.perform(parsed)
            wob = self._wob()
            if wob["done"]:
                return self._finish(tool, last_action=action, wob=wob)
        except ActionRefused as e:
            error, tool = str(e), "refused"
        except SessionBroken as e:
            return self._finish(tool, session_error=str(e))
        except (ActionError, LookupError, PlaywrightError) as e:
            error = failure_text(e)
        finally:
            self.timings["exec_s"] += time.perf_counter() - t0
        if self._step >= self._limit:
            return self._finish(tool, truncated=True, last_action=action, last_error=error)
        try:
            self._observe(action, error)
        except SessionBroken as e:
            return self._finish(tool, session_error=str(e))
        return (
            dict(self._obs),
            0.0,
            False,
            False,
            {"task": self.task_name, "step": self._step, "tool": tool, "error": error},
        )

    def _finish(
        self,
        tool: str,
        truncated: bool = False,
        session_error: str | None = None,
        refused_by_policy: str | None = None,
        last_action: Any = None,
        last_error: str | None = None,
        wob: dict[str, Any] | None = None,
    ):
        self._done = True
        t0 = time.perf_counter()
        if refused_by_policy is not None:
            self.artifact = None
            self.last_verdict = refused_verdict(refused_by_policy)
            self.timings["verify_s"] = time.perf_counter() - t0
            self._final(f"Verdict: failed. {refused_by_policy}.", None, None, page_alive=True)
            info = {
                "task": self.task_name,
                "step": self._step,
                "tool": tool,
                "outcome": Outcome.FAILED.value,
                "reward_valid": True,
                "raw_reward": 0.0,
            }
            return dict(self._obs), 0.0, True, False, info
        if session_error is None and wob is None:  # not read by the step that ended the episode
            try:
                wob = self._wob()
            except Exception as e:  # the page or browser died at the end
                session_error = f"reading the page's reward failed: {e}"
        if session_error is not None:
            outcome, raw, detail = Outcome.ENV_ERROR, None, session_error
            self.session.close()
        else:
            assert wob is not None
            raw = float(wob["raw"]) if wob.get("done") else 0.0
            outcome = Outcome.PASSED if raw > 0 else Outcome.FAILED
            detail = str(wob.get("reason") or ("the episode did not finish" if not wob.get("done") else ""))
        self.artifact = None if session_error else json.dumps(wob, sort_keys=True)
        self.last_verdict = Verdict(
            verifier_version=VERIFIER_VERSION,
            outcome=outcome,
            detail=detail,
            attempts=[Attempt(outcome=outcome, detail=detail)],
        )
        self.timings["verify_s"] = time.perf_counter() - t0
        feedback = f"Verdict: {outcome.value} (raw reward {raw})."
        self._final(feedback, last_action, last_error, page_alive=session_error is None)
        info = {
            "task": self.task_name,
            "step": self._step,
            "tool": tool,
            "outcome": outcome.value,
            "reward_valid": raw is not None,
            "raw_reward": raw,
        }
        return dict(self._obs), float(raw or 0.0), not truncated, truncated, info

    def render(self):
        if self.render_mode == "ansi":
            return f"{self._obs.get('task', '')}\n\n{self._obs.get('feedback', '')}"
        return None

    def close(self) -> None:
        self.session.close_runtime()

    def abort(self) -> None:
        """From another thread: kill the browser and the app, and cancel the env's waiting Playwright call."""
        self.session.abort()
