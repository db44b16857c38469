"""sandgym/SWERepo-v0: fix an issue in a repository, judged like SWE-bench.

The repository sits at /workspace/repo in the agent's sandbox as one git
commit (no remotes, tags, reflog or later history), with the task's test
venv on PATH (`python`, `python -m pytest`; a `pytest` shell function).
Each step is one tool call (see actions.py for the grammar):

- `bash`: a command in bash; cwd and exported variables persist between
  calls (saved after each command, restored before the next); stdout and
  stderr are merged; each command has `command_timeout_s`;
- `view` a file (numbered lines, optional range) or list a folder;
- `str_replace` exactly one occurrence of a text; `create` a file;
- `run_tests`: the task's visible tests (or the ids given) through the
  verifier's runner, in the agent's sandbox, with a summary;
- `submit`: the diff of the work tree against the base commit (untracked
  files included) is verified in a fresh sandbox and the episode ends.
  When `max_steps` run out (or the steps of a TimeLimit wrapper, if
  fewer), the env submits by itself.

Observations: {"task": issue text and instructions, "feedback": the last
tool's output (capped)}. The reward is 1.0 only for FULL; `info` after the
last step holds `outcome`, `status`, `reward_valid` and per-test `tests`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from gymnasium import spaces

from sandgym.envs.base import SandgymEnv, check_options
from sandgym.outcomes import Outcome
from sandgym.runtimes import Runtime, Sandbox, SandboxError, SandboxSpec, get_runtime
from sandgym.runtimes.base import Mount
from sandgym.runtimes.pool import SandboxPool
from sandgym.runtimes.staging import stage_dir
from sandgym.spaces import TextOrToolCall, UnicodeText
from sandgym.specs import TaskSet, choose_task, load_family_task_set
from sandgym.specs.swe_repo import SWETaskPair
from sandgym.specs.swe_repo_options import SWERepoOptions
from sandgym.verifiers.models import Verdict
from sandgym.verifiers.swe_repo.checkout import StartState, start_state
from sandgym.verifiers.swe_repo.host import MAX_DIFF_BYTES, status_text, verify
from sandgym.verifiers.swe_repo.sandbox import (
    REPO_DIR,
    VENV_DIR,
    WORKSPACE,
    isolation_for,
    run_in_sandbox,
    sandbox_spec,
)

from .actions import ActionError, ToolCall, chat_tools, null_actions, oracle_actions, parse_action, tool_action

TOOLS_DIR = "/opt/sandgym/swe_tools"
SHELL_STATE = "/tmp/.sandgym_shell"
MAX_FEEDBACK = 10_000
# Restores the saved cwd and exports, runs the command ($1) in this shell so
# `cd` and `export` take effect, and saves them again on any exit.
SHELL_WRAPPER = r"""
__sg_state=@STATE@
[ -f "$__sg_state/env" ] && . "$__sg_state/env" >/dev/null 2>&1
cd "$(cat "$__sg_state/cwd" 2>/dev/null || echo @REPO@)" 2>/dev/null || cd @REPO@
__sg_save() {
  __sg_rc=$?
  mkdir -p "$__sg_state"
  pwd > "$__sg_state/cwd"
  export -p | grep -Ev '^declare -[a-zA-Z]* (PWD|OLDPWD|SHLVL|_)=' > "$__sg_state/env"
  exit $__sg_rc
}
trap __sg_save EXIT
pytest() { python -m pytest "$@"; }
exec 2>&1
eval "$1"
""".replace("@STATE@", SHELL_STATE).replace("@REPO@", REPO_DIR)
GIT = "/usr/bin/git"
# The diff is taken with a configuration the env owns: no system or global
# file, and every setting of the repository's own .git/config (the agent's)
# that could change how paths are written is overridden, so the verifier
# parses exactly what `git apply -p1` will do.
GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CEILING_DIRECTORIES": WORKSPACE,
    "GIT_DIR": f"{REPO_DIR}/.git",
    "GIT_WORK_TREE": REPO_DIR,
    "GIT_ATTR_NOSYSTEM": "1",
    "GIT_NO_REPLACE_OBJECTS": "1",
    "GIT_OPTIONAL_LOCKS": "0",
    "LANG": "C",
}
GIT_SAFE = [
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "core.quotePath=true",
    "-c",
    "core.autocrlf=false",
    "-c",
    "core.safecrlf=false",
    "-c",
    "core.filemode=true",
    "-c",
    "core.symlinks=true",
    "-c",
    "core.attributesFile=/dev/null",
    "-c",
    "core.excludesFile=/dev/null",
    "-c",
    "diff.noprefix=false",
    "-c",
    "diff.mnemonicPrefix=false",
    "-c",
    "diff.srcPrefix=a/",
    "-c",
    "diff.dstPrefix=b/",
    "-c",
    "diff.relative=false",
    "-c",
    "diff.external=",
    "-c",
    "diff.renames=false",
    "-c",
    "diff.suppressBlankEmpty=false",
    "-c",
    "diff.ignoreSubmodules=none",
    "-c",
    "color.ui=false",
]
DIFF_FLAGS = [
    "--cached",
    "--binary",
    "--no-color",
    "--no-ext-diff",
    "--no-textconv",
    "--no-renames",
    "--no-relative",
    "--src-prefix=a/",
    "--dst-prefix=b/",
    "--full-index",
]


def load_task_set(tasks: str | Path | TaskSet | None) -> TaskSet:
    return load_family_task_set(tasks, "swe_repo")


def cap(text: str, limit: int = MAX_FEEDBACK) -> str:
    """Head and tail of a long text, saying how much was cut."""
    if len(text) <= limit:
        return text
    head, tail = limit * 3 // 10, limit * 7 // 10
    return f"{text[:head]}\n[... {len(text) - head - tail} characters cut ...]\n{text[-tail:]}"


def render_prompt(task: SWETaskPair, max_steps: int, command_timeout_s: float) -> str:
    v = task.visible
    tests = ", ".join(v.visible_tests) if v.visible_tests else "none listed"
    return (
        f"{v.title + chr(10) + chr(10) if v.title else ''}{v.problem_statement.rstrip()}\n\n"
        f"The repository is at {REPO_DIR} (a git repository; your changes are compared with its one "
        f"commit). Fix the issue in the source code. Tests are not yours to change: changes to test "
        f"files, conftest.py or test configuration are discarded and flagged.\n\n"
        f"Tools, one per turn, as one fenced block: ```bash (cwd and exports persist; "
        f"{command_timeout_s:g} s per command), ```view PATH [START END], ```str_replace PATH "
        f"(old text, a line =======, new text), ```create PATH, ```run_tests [TEST ...] (visible tests: "
        f"{tests}), ```submit. You have {max_steps} steps; when they run out your work is submitted."
    )


def agent_spec(task: SWETaskPair, start: StartState, command_timeout_s: float, max_steps: int) -> SandboxSpec:
    """The agent's sandbox of `task` (the audit, audit.py, searches one of these)."""
    env = task.visible.environment
    timeout = max(command_timeout_s, task.visible.timeout_s)
    # Labelled by package, not task: tasks of one package share warm sandboxes.
    base = sandbox_spec(env, timeout, start.size_bytes, "agent", task.visible.repo.name)
    tools = Mount(source=str(stage_dir(Path(__file__).parent / "sandbox_tools")), target=TOOLS_DIR)
    root = REPO_DIR if env.import_root in (".", "") else f"{REPO_DIR}/{env.import_root}"
    return base.model_copy(
        update={
            "mounts": (*base.mounts, tools),
            "wall_timeout_s": max_steps * (timeout + 30) + 600,
            "env": {
                "PATH": f"{VENV_DIR}/bin:/usr/local/bin:/usr/bin:/bin",
                "PYTHONPATH": root,
                "VIRTUAL_ENV": VENV_DIR,
                "GIT_PAGER": "cat",
                "PAGER": "cat",
                "TERM": "dumb",
            },
        }
    )


class SWERepoEnv(SandgymEnv):
    """See the module docstring."""

    metadata = {"render_modes": ["ansi"], "render_fps": 1}

    def __init__(
        self,
        tasks: str | Path | TaskSet | None = None,
        runtime: str | Runtime = "local",
        max_steps: int = 30,
        command_timeout_s: float = 60.0,
        verifier_retries: int = 2,
        warm_pool: int = 1,
        render_mode: str | None = None,
    ):
        check_options(
            SWERepoOptions,
            max_steps=max_steps,
            command_timeout_s=command_timeout_s,
            verifier_retries=verifier_retries,
            warm_pool=warm_pool,
            render_mode=render_mode,
        )
        self.task_set = load_task_set(tasks)
        self._owns_runtime = isinstance(runtime, str)
        self.runtime = get_runtime(runtime) if isinstance(runtime, str) else runtime
        self.max_steps = max_steps
        self.command_timeout_s = float(command_timeout_s)
        self.verifier_retries = verifier_retries
        self.render_mode = render_mode
        self.reward_scheme = "binary"
        self.observation_space = spaces.Dict({"task": UnicodeText(), "feedback": UnicodeText()})
        # Text in the grammar, or a dict tool call: a dict is in the space when the parser takes it.
        self.action_space = TextOrToolCall(chat_tools(), parse_action)
        self.task: SWETaskPair | None = None
        self.last_verdict: Verdict | None = None
        self.artifact: str | None = None
        self.timings: dict[str, float] = {}
        self._sandbox: Sandbox | None = None
        # Agent sandboxes come from warm pools, one per sandbox spec (tasks of
        # one package share it); a finished episode's sandbox goes back after
        # the pool's verified reset.
        self.warm_pool = warm_pool
        self._pools: dict[str, SandboxPool] = {}
        self._pool: SandboxPool | None = None  # the one self._sandbox came from
        self._start: StartState | None = None
        self._steps = 0
        self._limit = max_steps  # this episode's steps: step_limit(max_steps)
        self._done = True
        self._obs: dict[str, str] = {}

    @property
    def config(self) -> dict[str, Any]:
        """The settings that shape episodes, as make() kwargs (for records)."""
        return {
            "max_steps": self.max_steps,
            "command_timeout_s": self.command_timeout_s,
            "verifier_retries": self.verifier_retries,
            "warm_pool": self.warm_pool,
        }

    # -- gymnasium API ---------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        task = choose_task(self.task_set, options, self.np_random)
        self._close_sandbox()
        self.task = SWETaskPair.of(task)
        self._steps, self._done = 0, False
        self._limit = self.step_limit(self.max_steps)
        self.last_verdict = self.artifact = None
        self.timings = {"create_s": 0.0, "exec_s": 0.0, "verify_s": 0.0}
        t0 = time.perf_counter()
        self._start = start_state(self.task.visible)
        self._sandbox = self._new_sandbox(self._agent_spec())
        try:
            self._sandbox.put_archive(self._start.repo_tar, WORKSPACE)
        except SandboxError:
            self._close_sandbox()
            raise
        self.timings["create_s"] = time.perf_counter() - t0
        prompt = render_prompt(self.task, self._limit, self.command_timeout_s)
        self._obs = {"task": prompt, "feedback": f"The repository is ready at {REPO_DIR}."}
        return dict(self._obs), self._info()

    def step(self, action: str | dict):
        if self._done or self.task is None:
            raise RuntimeError("the episode is over (or never began): call reset() first")
        self._steps += 1
        try:
            call = parse_action(action)
        except ActionError as e:
            return self._after(f"Invalid action: {e}", "invalid")
        if call.tool == "submit":
            return self._finish("")
        t0 = time.perf_counter()
        try:
            feedback = self._run_tool(call)
        except SandboxError as e:
            feedback = f"sandbox error while running {call.tool}: {e}"
            if self._sandbox is None or not self._sandbox.alive:
                # The agent's sandbox is gone: nothing more can be done in it.
                self.timings["exec_s"] += time.perf_counter() - t0
                return self._finish(feedback + "\n", lost=True)
        self.timings["exec_s"] += time.perf_counter() - t0
        return self._after(cap(feedback), call.tool)

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return f"{self._obs.get('task', '')}\n\n{self._obs.get('feedback', '')}"
        return None

    def close(self) -> None:
        self._close_sandbox()
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()
        if self._owns_runtime:
            self.runtime.close()

    # -- oracle and null, for harnesses and tests --------------------------------------

    def oracle_actions(self) -> list[dict]:
        """Apply the gold patch, then submit (the current task)."""
        assert self.task is not None, "call reset() first"
        return oracle_actions(self.task.hidden.patch)

    def null_actions(self) -> list[dict]:
        return null_actions()

    def chat_tools(self) -> list[dict]:
        """Tool schemas for chat models (the harness's openai policy), from `actions.TOOL_MODELS`."""
        return chat_tools()

    def tool_action(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return tool_action(name, arguments)

    # -- tools ---------------------------------------------------------------------------

    def _agent_spec(self) -> SandboxSpec:
        assert self.task is not None and self._start is not None
        return agent_spec(self.task, self._start, self.command_timeout_s, self.max_steps)

    def _run_tool(self, call: ToolCall) -> str:
        assert self._sandbox is not None and self.task is not None
        if call.tool == "bash":
            res = self._sandbox.exec(
                ["/bin/bash", "-c", SHELL_WRAPPER, "bash", call.args["command"]],
                timeout=self.command_timeout_s,
                cwd=REPO_DIR,
                max_output=4 << 20,
            )
            out = res.text("stdout")
            if res.timed_out:
                return (
                    f"{out}\n[the command timed out after {self.command_timeout_s:g} s and was killed; "
                    f"cwd and exports of this command were not saved]"
                )
            return f"{out}\n[exit code {res.exit_code}]" if res.exit_code else (out or "[no output, exit code 0]")
        if call.tool in ("view", "str_replace", "create"):
            req = {"op": call.tool, **call.args}
            res = self._sandbox.run_python(
                f"{TOOLS_DIR}/editor.py",
                stdin=json.dumps(req).encode(),
                timeout=self.command_timeout_s,
                max_output=8 << 20,
            )
            try:
                reply = json.loads(res.stdout.strip().splitlines()[-1])
                return reply["text"] if reply["ok"] else f"Error: {reply['text']}"
            except (ValueError, IndexError, KeyError, TypeError):
                return f"Error: the {call.tool} tool failed (exit {res.exit_code}): {res.text('stderr')[-1000:]}"
        if call.tool == "run_tests":
            return self._run_tests(call.args.get("tests") or list(self.task.visible.visible_tests))
        raise AssertionError(call.tool)

    def _run_tests(self, tests: list[str]) -> str:
        assert self._sandbox is not None and self.task is not None
        if not tests:
            return "This task lists no visible tests; give test ids: ```run_tests tests/test_x.py::test_y"
        run = run_in_sandbox(
            self._sandbox,
            self.task.visible.environment,
            tests,
            self.task.visible.timeout_s,
            isolation=isolation_for(self.runtime),
        )
        counts: dict[str, int] = {}
        for s in run.statuses.values():
            counts[s] = counts.get(s, 0) + 1
        summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no test ran"
        lines = [f"run_tests: {summary} ({run.collected} collected, exit code {run.exit_code})."]
        if run.timed_out:
            lines.append(f"The tests ran out of time ({self.task.visible.timeout_s:g} s).")
        elif not run.valid:
            lines.append(f"The test log is not valid: {run.problem}")
        bad = [t for t, s in run.statuses.items() if s in ("failed", "error")]
        if bad:
            lines.append("Failing: " + ", ".join(bad[:30]) + (" ..." if len(bad) > 30 else ""))
        for nodeid in list(run.collect_errors)[:5]:
            lines.append(f"Collection error in {nodeid}")
        lines.append("Output:\n" + run.output[-5000:])
        return "\n".join(lines)

    def _take_diff(self) -> tuple[str, str]:
        """(diff against the base commit with untracked files, problem)."""
        assert self._sandbox is not None and self._start is not None
        git = " ".join([GIT, *GIT_SAFE])
        cmd = f"{git} add -A >/dev/null && {git} diff {' '.join(DIFF_FLAGS)} {self._start.base_commit} --"
        res = self._sandbox.exec(
            ["/bin/sh", "-c", cmd], timeout=120, cwd=REPO_DIR, env=GIT_ENV, max_output=MAX_DIFF_BYTES + 1
        )
        if res.truncated or len(res.stdout) > MAX_DIFF_BYTES:
            return "", f"the diff is larger than {MAX_DIFF_BYTES} bytes; nothing was submitted"
        if not res.ok:
            return "", f"could not take the diff (git exit {res.exit_code}): {res.text('stderr')[-800:]}"
        return res.text("stdout"), ""

    # -- episode end ------------------------------------------------------------------------

    def _finish(self, before: str, lost: bool = False):
        assert self.task is not None
        self._done = True
        diff, problem = ("", "the agent's sandbox was lost") if lost else self._take_diff_safely()
        if problem and not diff and (self._sandbox is None or not self._sandbox.alive):
            lost = True  # lost between the last action and the submit: infrastructure, not an empty answer
        self.artifact = diff
        self._close_sandbox(reuse=not lost)
        if problem and not diff:
            self.last_verdict = Verdict(
                verifier_version="none",
                outcome=Outcome.ENV_ERROR if lost else Outcome.FAILED,
                status="ENV_ERROR" if lost else "EMPTY",
                detail=problem,
            )
        else:
            self.last_verdict = verify(self.task, diff, self.runtime, retries=self.verifier_retries)
        self.timings["verify_s"] = self.last_verdict.verify_s
        verdict = self.last_verdict
        reward = verdict.reward("binary")
        info = self._info(
            tool="submit",
            outcome=verdict.outcome.value,
            status=verdict.status,
            reward_valid=reward is not None,
            violations=list(verdict.violations),
            scan=list(getattr(verdict, "scan", [])),
            tests=[{"name": t.name, "status": t.status} for t in verdict.tests],
        )
        self._obs = {"task": self._obs["task"], "feedback": cap(before + status_text(verdict))}
        return dict(self._obs), float(reward or 0.0), True, False, info

    def _take_diff_safely(self) -> tuple[str, str]:
        try:
            return self._take_diff()
        except SandboxError as e:
            return "", f"could not take the diff: {e}"

    def _after(self, feedback: str, tool: str):
        if self._steps >= self._limit:
            return self._finish(f"{feedback}\n\nThe {self._limit} steps are used up: your work was submitted.\n")
        self._obs = {"task": self._obs["task"], "feedback": f"{feedback}\n[step {self._steps} of {self._limit}]"}
        return dict(self._obs), 0.0, False, False, self._info(tool=tool)

    def _info(self, **extra: Any) -> dict[str, Any]:
        assert self.task is not None
        return {"task_id": self.task.id, "step": self._steps, "max_steps": self._limit, **extra}

    def _new_sandbox(self, spec: SandboxSpec) -> Sandbox:
        if not self.warm_pool:
            return self.runtime.create(spec)
        key = spec.model_dump_json()
        if key not in self._pools:
            self._pools[key] = SandboxPool(self.runtime, spec, size=self.warm_pool, max_creating=1)
        self._pool = self._pools[key]
        return self._pool.acquire()

    def _close_sandbox(self, reuse: bool = True) -> None:
        sandbox, pool, self._sandbox, self._pool = self._sandbox, self._pool, None, None
        if sandbox is None:
            return
        if pool is not None:
            pool.release(sandbox, reuse=reuse)  # reused only after a verified reset
            return
        try:
            sandbox.close()
        except SandboxError:
            pass
