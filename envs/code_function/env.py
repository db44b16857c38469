"""sandgym/CodeFunction-v0: write a function; hidden tests judge it.

Single-turn: one action holds the code; it is verified and the episode ends.
Multi-turn: actions run code on the visible examples in the agent's own
sandbox, until one submits (or the turns run out: the last action is
always a submission). Verification always happens in a fresh sandbox.

Stdio tasks (`kind: stdio`): the action holds a whole program in any
language of the `/run_code` table, in a fence tagged with it; hidden
input/output pairs judge it (verifiers/code_function/stdio.py), and a
multi-turn run shows the visible pairs' results.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Literal

from gymnasium import spaces

from sandgym.envs.base import DEFAULT_MAX_ACTION_CHARS, SandgymEnv, action_problem, check_options
from sandgym.envs.tools import function_tool, tool_arguments
from sandgym.outcomes import Outcome, retry_delay
from sandgym.runtimes import Egress, Runtime, Sandbox, SandboxError, SandboxSpec, get_runtime
from sandgym.spaces import UnicodeText
from sandgym.specs import TaskSet, choose_task, load_family_task_set
from sandgym.specs.code_function import CodeTaskPair
from sandgym.specs.code_function_options import CodeFunctionOptions
from sandgym.verifiers.code_function.host import boundary_mount, candidate_isolation, run_examples, verify
from sandgym.verifiers.code_function.stdio import run_cases, stdio_language, verify_stdio
from sandgym.verifiers.models import Attempt, RewardScheme, Verdict

from .actions import FENCE_LANGUAGES, TOOL_MODELS, parse_action, tool_text

Mode = Literal["single", "multi"]


def load_task_set(tasks: str | Path | TaskSet | None) -> TaskSet:
    return load_family_task_set(tasks, "code_function")


def _call_text(entry_point: str, ex) -> str:
    args = [repr(a) for a in ex.args] + [f"{k}={v!r}" for k, v in ex.kwargs.items()]
    return f"{entry_point}({', '.join(args)}) == {ex.expected!r}"


def render_prompt(task: CodeTaskPair, mode: Mode, max_turns: int) -> str:
    v = task.visible
    if v.kind == "stdio":
        return render_stdio_prompt(task, mode, max_turns)
    parts = [v.prompt.rstrip()]
    if v.examples:
        parts.append("Examples:\n" + "\n".join("  " + _call_text(v.entry_point, ex) for ex in v.examples))
    if mode == "single":
        parts.append(f"Reply with the complete code in one ```python block; it must define `{v.entry_point}`.")
    else:
        parts.append(
            f"You have {max_turns} turns. A reply with a ```python block runs it on the visible examples "
            f"and shows the results. To submit, write SUBMIT on the first line, then the ```python block "
            f"(SUBMIT alone submits the code you ran last). Your last turn is always a submission. "
            f"The code must define `{v.entry_point}`."
        )
    return "\n\n".join(parts)


# The languages a stdio program may be written in, by their fence tags (actions.py).
STDIO_LANGUAGES = ", ".join(dict.fromkeys(FENCE_LANGUAGES.values()))


def render_stdio_prompt(task: CodeTaskPair, mode: Mode, max_turns: int) -> str:
    v = task.visible
    parts = [v.prompt.rstrip()]
    for i, ex in enumerate(v.io_examples, 1):
        parts.append(
            f"Example {i} input:\n```\n{ex.stdin.rstrip()}\n```\nExample {i} output:\n```\n{ex.stdout.rstrip()}\n```"
        )
    how = (
        "Write a whole program that reads standard input and writes standard output, in one fenced block "
        f"tagged with its language ({STDIO_LANGUAGES}; e.g. ```cpp). Each hidden case has {v.timeout_s:g} s."
    )
    if mode == "multi":
        how += (
            f" You have {max_turns} turns. A reply with a program runs it on the examples and shows the results. "
            "To submit, write SUBMIT on the first line, then the block. Your last turn is always a submission."
        )
    parts.append(how)
    return "\n\n".join(parts)


class CodeFunctionEnv(SandgymEnv):
    """See the module docstring. `info` after the last step holds `outcome`,
    `reward_valid` (False for infrastructure errors, whose reward 0.0 is not
    the model's score), `pass_rate` and per-test `tests`; the full verdict
    with attempts and timings is `env.unwrapped.last_verdict`."""

    metadata = {"render_modes": ["ansi"], "render_fps": 1}

    def __init__(
        self,
        tasks: str | Path | TaskSet | None = None,
        mode: Mode = "single",
        runtime: str | Runtime = "local",
        max_turns: int = 5,
        reward: RewardScheme = "binary",
        verifier_retries: int = 2,
        render_mode: str | None = None,
        max_action_chars: int = DEFAULT_MAX_ACTION_CHARS,
    ):
        opts = check_options(
            CodeFunctionOptions,
            mode=mode,
            max_turns=max_turns,
            reward=reward,
            verifier_retries=verifier_retries,
            max_action_chars=max_action_chars,
            render_mode=render_mode,
        )
        self.max_action_chars = opts.max_action_chars
        self.task_set = load_task_set(tasks)
        self._owns_runtime = isinstance(runtime, str)
        self.runtime = get_runtime(runtime) if isinstance(runtime, str) else runtime
        self.mode: Mode = mode
        self.max_turns = max_turns if mode == "multi" else 1
        self.reward_scheme: RewardScheme = reward
        self.verifier_retries = verifier_retries
        self.render_mode = render_mode
        self.observation_space = spaces.Dict({"task": UnicodeText(), "feedback": UnicodeText()})
        self.action_space = UnicodeText()
        self.task: CodeTaskPair | None = None
        self.last_verdict: Verdict | None = None
        self.submitted_code: str | None = None
        self.timings: dict[str, float] = {}
        self._sandbox: Sandbox | None = None
        self._last_code: str | None = None
        self.submitted_language = self._last_language = "python"
        self._turn = 0
        self._limit = self.max_turns  # this episode's turns: step_limit(max_turns)
        self._done = True
        self._obs: dict[str, str] = {}
        self._aborted = threading.Event()
        self._verifier_sandbox: Sandbox | None = None

    @property
    def config(self) -> dict[str, Any]:
        """The settings that shape episodes, as make() kwargs (for records)."""
        return {
            "mode": self.mode,
            "max_turns": self.max_turns,
            "reward": self.reward_scheme,
            "verifier_retries": self.verifier_retries,
            "max_action_chars": self.max_action_chars,
        }

    # -- gymnasium API ---------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        self._done = True  # a reset that fails (an unknown task id) leaves no episode running
        self._close_sandbox()
        super().reset(seed=seed)
        task = choose_task(self.task_set, options, self.np_random)
        self._aborted.clear()
        self.task = CodeTaskPair.of(task)
        self._turn, self._done = 0, False
        self._limit = self.step_limit(self.max_turns)
        self._last_code = self.submitted_code = self.artifact = None
        self.submitted_language = self._last_language = "python"
        self.last_verdict = None
        self.timings = {"create_s": 0.0, "exec_s": 0.0, "verify_s": 0.0}
        self._obs = {"task": render_prompt(self.task, self.mode, self._limit), "feedback": ""}
        return dict(self._obs), self._info()

    def step(self, action: str):
        if self._done or self.task is None:
            raise RuntimeError("the episode is over (or never began): call reset() first")
        self._turn += 1
        final_turn = self._turn >= self._limit
        refused = action_problem(action, self.max_action_chars)
        if refused is not None:
            # The policy's mistake, answered like an action with no code: the
            # turn is used (a single-turn episode ends failed); an oversized
            # action ends the episode.
            problem, ends = refused
            if ends:
                return self._finish(None, problem.removesuffix(": the episode ends here"))
            if final_turn:
                return self._finish(self._last_code, problem)
            return self._observe(f"{problem}. Turn {self._turn} of {self._limit}.", "invalid")
        stdio = self.task.visible.kind == "stdio"
        parsed = parse_action(action, self.task.visible.entry_point, self.mode == "multi", stdio=stdio)
        if parsed.submit or final_turn:
            # An action with no code at all submits the code run last.
            if parsed.any_code:
                self._last_language = parsed.language
            code = parsed.code if parsed.any_code else self._last_code
            return self._finish(code, parsed.problem)
        if parsed.code is None:
            return self._observe(f"{parsed.problem}. Turn {self._turn} of {self._limit}.", "invalid")
        self._last_code, self._last_language = parsed.code, parsed.language
        t0 = time.perf_counter()
        try:
            feedback = self._run_examples(parsed.code)
        except SandboxError as e:
            # The agent's sandbox failed, again and again: infrastructure, not the model.
            self.timings["exec_s"] += time.perf_counter() - t0
            return self._finish_env_error(f"the agent's sandbox failed: {e}")
        self.timings["exec_s"] += time.perf_counter() - t0
        return self._observe(f"{feedback}\n\nTurn {self._turn} of {self._limit}.", "run")

    def _run_examples(self, code: str) -> str:
        """The visible examples run in the agent's sandbox. A sandbox that
        dies under the run (its agent killed) is replaced and the run tried
        again after a backoff (`verifier_retries` times); SandboxError if it
        keeps failing."""
        assert self.task is not None
        if self.task.visible.kind == "stdio":
            return self._run_io_examples(code)
        for n in range(self.verifier_retries + 1):
            if self._aborted.is_set():
                raise SandboxError("aborted: the episode's deadline passed, or the run was interrupted")
            sandbox = self._agent_sandbox()
            feedback = run_examples(sandbox, self.task, code, candidate_isolation(self.runtime))
            if sandbox.alive:
                return feedback
            self._close_sandbox()
            if n < self.verifier_retries:
                self._aborted.wait(retry_delay(n, 0.5, 8.0))
        raise SandboxError(feedback)

    def _run_io_examples(self, code: str) -> str:
        """Stdio tasks: the visible pairs, in a fresh sandbox of the
        `polyglot` image (the agent's own has no compilers)."""
        assert self.task is not None
        if not self.task.visible.io_examples:
            return "this task has no visible examples: submit when ready"
        lang = stdio_language(self._last_language)
        got = run_cases(self.task, code, lang, self.runtime, list(self.task.visible.io_examples), hidden=False)
        if got.outcome == Outcome.ENV_ERROR:
            raise SandboxError(got.detail)
        lines = [
            f"{t.status.upper()}: example {i}" + (f" -> {t.detail}" if t.detail else "")
            for i, t in enumerate(got.tests, 1)
        ]
        return "\n".join(lines or [got.detail])

    # -- what the harness's oracle and null policies play ---------------------

    def oracle_actions(self) -> list[str]:
        """The reference solution, submitted."""
        assert self.task is not None, "reset() first"
        block = f"```python\n{self.task.hidden.reference_solution.rstrip()}\n```"
        return [f"SUBMIT\n{block}" if self.mode == "multi" else block]

    def null_actions(self) -> list[str]:
        """An empty code block, submitted."""
        return ["SUBMIT\n```python\n```" if self.mode == "multi" else "```python\n```"]

    def chat_tools(self) -> list[dict[str, Any]]:
        """`submit_code` (and `run_code` in multi mode), made from the action
        models of `actions.TOOL_MODELS`; a call becomes this env's text grammar."""
        names = ["run_code", "submit_code"] if self.mode == "multi" else ["submit_code"]
        return [function_tool(name, TOOL_MODELS[name]) for name in names]

    def tool_action(self, name: str, arguments: dict[str, Any]) -> str:
        tools = ("run_code", "submit_code") if self.mode == "multi" else ("submit_code",)
        if name not in tools:
            raise ValueError(f"unknown tool {name!r}; this env's tools are {', '.join(tools)}")
        return tool_text(name, tool_arguments(name, TOOL_MODELS[name], arguments)["code"])

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return f"{self._obs.get('task', '')}\n\n{self._obs.get('feedback', '')}"
        return None

    def close(self) -> None:
        self._close_sandbox()
        if self._owns_runtime:
            self.runtime.close()

    def abort(self) -> None:
        """From another thread: cut off the agent's and the verifier's sandboxes
        (a run or a verification blocked in them returns as env_error)."""
        self._aborted.set()
        for sandbox in (self._sandbox, self._verifier_sandbox):
            if sandbox is not None:
                sandbox.abort()

    # -- internals -----------------------------------------------------------------

    def _info(self, **extra: Any) -> dict[str, Any]:
        assert self.task is not None
        return {"task_id": self.task.id, "mode": self.mode, "turn": self._turn, "max_turns": self._limit, **extra}

    def _observe(self, feedback: str, tool: str):
        self._obs = {"task": self._obs["task"], "feedback": feedback}
        return dict(self._obs), 0.0, False, False, self._info(tool=tool)

    def _agent_sandbox(self) -> Sandbox:
        assert self.task is not None
        if self._sandbox is None or not self._sandbox.alive:
            self._close_sandbox()
            spec = SandboxSpec(
                mounts=(boundary_mount(),),
                labels={"role": "agent", "task": self.task.id},
                egress=tuple(Egress(**rule.model_dump()) for rule in self.task.visible.egress),
            )
            self._sandbox = self.runtime.create(spec)
            self.timings["create_s"] += self._sandbox.info.create_s
        return self._sandbox

    def _close_sandbox(self) -> None:
        if self._sandbox is not None:
            try:
                self._sandbox.close()
            except SandboxError:
                pass
            self._sandbox = None

    def _watch_verifier(self, sandbox: Sandbox | None) -> None:
        self._verifier_sandbox = sandbox
        if sandbox is not None and self._aborted.is_set():
            sandbox.abort()

    def _finish_env_error(self, detail: str):
        """End the episode as `env_error`: the infrastructure failed, nothing was judged."""
        assert self.task is not None
        self._done = True
        self._close_sandbox()
        self.submitted_code = self.artifact = None
        self.last_verdict = Verdict(
            verifier_version="none",
            outcome=Outcome.ENV_ERROR,
            detail=detail,
            attempts=[Attempt(outcome=Outcome.ENV_ERROR, detail=detail)],
        )
        info = self._info(tool="run", outcome=Outcome.ENV_ERROR.value, reward_valid=False, pass_rate=0.0, tests=[])
        feedback = self._verdict_text(self.last_verdict) + f" ({detail[:300]})"
        self._obs = {"task": self._obs["task"], "feedback": feedback}
        return dict(self._obs), 0.0, True, False, info

    def _finish(self, code: str | None, problem: str):
        assert self.task is not None
        self._done = True
        self._close_sandbox()
        self.submitted_code = self.artifact = code  # what was verified
        if code is None:
            self.last_verdict = Verdict(
                verifier_version="none", outcome=Outcome.FAILED, detail=problem or "nothing was submitted"
            )
            feedback = f"{problem}. The episode is over: nothing was verified."
        elif self.task.visible.kind == "stdio":
            self.submitted_language = self._last_language
            self.last_verdict = verify_stdio(
                self.task, code, self.submitted_language, self.runtime, retries=self.verifier_retries
            )
            feedback = self._verdict_text(self.last_verdict)
        else:
            self.last_verdict = verify(
                self.task, code, self.runtime, retries=self.verifier_retries, watch=self._watch_verifier
            )
            feedback = self._verdict_text(self.last_verdict)
        self.timings["verify_s"] = self.last_verdict.verify_s
        verdict = self.last_verdict
        reward = verdict.reward(self.reward_scheme)
        info = self._info(
            tool="submit",
            outcome=verdict.outcome.value,
            reward_valid=reward is not None,
            pass_rate=verdict.pass_rate,
            tests=[{"name": t.name, "status": t.status} for t in verdict.tests],
        )
        self._obs = {"task": self._obs["task"], "feedback": feedback}
        return dict(self._obs), float(reward or 0.0), True, False, info

    @staticmethod
    def _verdict_text(verdict: Verdict) -> str:
        passed = sum(t.status == "passed" for t in verdict.tests)
        text = f"Verdict: {verdict.outcome.value} ({passed}/{len(verdict.tests)} hidden tests passed)."
        if verdict.outcome == Outcome.ENV_ERROR:
            text += " An infrastructure error prevented verification; this is not a score."
        elif verdict.detail:
            text += f"\n{verdict.detail[:500]}"
        return text
