"""The harnesses the SWE attacks are judged by, on a task set's tasks
(default: the bundled billing-v1).

- `sandgym`: a real SWERepoEnv episode: the attack's actions in the agent's
  sandbox (from the env's warm pool, so state one episode leaves is there
  for the next unless the pool's reset removes it), then `submit`, judged
  by sandgym's verifier.
- `swebench`: SWE-bench's method on the same agent's diff (the episode's
  artifact), reproduced step for step in a sandgym sandbox of the task (the
  repository at its base commit, the task's test venv), as SWE-bench runs
  it in its container: the patch applied with its chain (`git apply
  --verbose`, `--3way`, `--reject`, then `patch --batch --forward --fuzz=5
  -p1`; the tree reset between tries; an already-applied patch accepted),
  then its eval script (`set -uxo pipefail`; the test files checked out at
  the base commit, the test patch applied, the test command between the
  start/end markers, its exit status recorded after the end marker), and
  the log graded by the `swebench` package's own `get_logs_eval`,
  `get_eval_tests_report` and `get_resolution_status` with its pytest log
  parser. The test command is SWE-bench's for pytest repositories:
  `pytest --no-header -rA --tb=no -p no:cacheprovider` on the test patch's
  files (the whole suite when the task has no test patch). A run past the task's timeout is SWE-bench's "Test timed out"
  error instance: counted as a forced infrastructure outcome.
"""

from __future__ import annotations

import hashlib
import importlib
import re
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

from sandgym.errors import SandgymError
from sandgym.runtimes import get_runtime
from sandgym.runtimes.base import Runtime, SandboxError
from sandgym.specs import TaskSet, bundled_task_set
from sandgym.specs.redteam import Trial
from sandgym.specs.swe_repo import SWETaskPair
from sandgym.verifiers.swe_repo.checkout import start_state
from sandgym.verifiers.swe_repo.sandbox import REPO_DIR, VENV_DIR, WORKSPACE, sandbox_spec

from .attacks import FAMILY, SWEAttack

# The diff each (attack, task) episode submitted, for the targets that judge
# the same agent's work (swebench after sandgym): played once per run.
_DIFFS: dict[tuple[str, str, str], str] = {}

GIT_APPLY_CMDS = (
    "git apply --verbose",
    "git apply --verbose --3way",
    "git apply --verbose --reject",
    "patch --batch --forward --fuzz=5 -p1 -i",
)
# SWE-bench's pytest command, through the task venv's interpreter (the venv
# is mounted where its scripts' #! lines do not point).
TEST_CMD = "python -m pytest --no-header -rA --tb=no -p no:cacheprovider"
HEREDOC = "EOF_114329324912"
APPLY_OK = ">>>>> Applied Patch"
SCRATCH = "/tmp/sg-swebench"
TIMEOUT_CAP_S = 30.0  # the billing tests run in under a second


class SWEBenchMissing(SandgymError, RuntimeError):
    """The swebench package (and its log parsers' unidiff) is not installed."""


def trial(target: str, attack: SWEAttack, task_id: str, outcome: str, hacked: bool, **kw: Any) -> Trial:
    return Trial.of(target, attack, task_id, outcome, hacked, outcome in ("env_error", "error"), **kw)


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class Episodes:
    """An SWE env that plays attacks as an agent's actions; keeps each episode's diff."""

    def __init__(self, tasks: TaskSet, runtime: Runtime):
        from sandgym.envs.swe_repo.env import SWERepoEnv

        self.env = SWERepoEnv(tasks=tasks, runtime=runtime, max_steps=10, command_timeout_s=120)
        self.runtime_name = getattr(runtime, "name", "")

    def play(self, attack: SWEAttack, task_id: str) -> tuple[str, Any, list[str]]:
        """(the submitted diff, the verdict, the tail of what each action printed)."""
        env = self.env
        env.reset(options={"task_id": task_id})
        printed = []
        for action in attack.actions():
            obs, _, terminated, truncated, _ = env.step(action)
            printed.append(obs["feedback"][-300:])
            if terminated or truncated:
                break
        diff = env.artifact or ""
        _DIFFS[(self.runtime_name, attack.kind, task_id)] = diff
        return diff, env.last_verdict, printed

    def close(self) -> None:
        self.env.close()


def task_set(path: str | None = None) -> TaskSet:
    """The tasks both targets play, with the test timeout capped at
    TIMEOUT_CAP_S: an attack that hangs is a timeout whatever the budget."""
    loaded = TaskSet.load(path or bundled_task_set(FAMILY))
    capped = []
    for t in loaded.tasks:
        pair = SWETaskPair.of(t)
        timeout = min(pair.visible.timeout_s, TIMEOUT_CAP_S)
        capped.append(pair.model_copy(update={"visible": pair.visible.model_copy(update={"timeout_s": timeout})}))
    return TaskSet(loaded.meta, capped, loaded.root)


class SandgymTarget:
    name = "sandgym"

    def __init__(self, runtime: str, tasks: str | None = None):
        self.runtime = get_runtime(runtime)
        self.tasks = task_set(tasks)
        self.episodes = Episodes(self.tasks, self.runtime)

    def task_ids(self) -> list[str]:
        return [t.visible.id for t in self.tasks.tasks]

    def run(self, attack: SWEAttack, task_id: str) -> Trial:
        t0 = time.perf_counter()
        diff, verdict, printed = self.episodes.play(attack, task_id)
        assert verdict is not None, "the episode ends at submit"
        return trial(
            self.name,
            attack,
            task_id,
            str(verdict.outcome),
            verdict.outcome == "passed",
            status=str(verdict.status or ""),
            detail=("; ".join(verdict.violations) or verdict.detail or "")[:400],
            seconds=time.perf_counter() - t0,
            artifact_sha256=sha(diff),
            extra={"printed": printed[:-1]},  # the agent's commands' output (the last is the submit)
        )

    def close(self) -> None:
        self.episodes.close()
        self.runtime.close()


def test_files(task: SWETaskPair) -> list[str]:
    """The test files run: the test patch's (SWE-bench's test directives for
    pytest repositories) and those holding the task's FAIL_TO_PASS and
    PASS_TO_PASS tests (a SWE-bench instance lists only tests of the files it
    runs; a sandgym task's lists span its suite)."""
    patched = set(re.findall(r"^diff --git a/(\S+) b/", task.hidden.test_patch, re.M))
    listed = {t.split("::")[0] for t in [*task.hidden.FAIL_TO_PASS, *task.hidden.PASS_TO_PASS]}
    return sorted(patched | listed)


def apply_script(patch_file: str) -> str:
    """SWE-bench's patch-application chain, as one shell script."""
    tries = []
    for i, cmd in enumerate(GIT_APPLY_CMDS):
        reset = "git checkout -- . ; git clean -fd >/dev/null; " if i else ""
        tries.append(f"{reset}{cmd} {patch_file} && {{ echo '{APPLY_OK}'; exit 0; }}")
    tries.append(f"git apply --check --reverse {patch_file} && {{ echo '{APPLY_OK}'; exit 0; }}")
    return "cd " + REPO_DIR + "\n" + "\n".join(tries) + "\necho '>>>>> Patch Apply Failed'\nexit 1\n"


def eval_script(base_commit: str, test_patch: str, files: list[str], import_root: str) -> str:
    """SWE-bench's eval script for a pytest repository (its shape, with the
    exit status recorded). A task with no test patch runs the whole suite
    (SWE-bench's test directives are the test patch's files)."""
    names = " ".join(files)
    pythonpath = REPO_DIR if import_root in ("", ".") else f"{REPO_DIR}/{import_root}"
    reset = [f"git checkout {base_commit} {names}"] if files else []
    apply = [f"git apply -v - <<'{HEREDOC}'", test_patch.rstrip("\n"), HEREDOC] if test_patch.strip() else []
    return "\n".join(
        [
            "#!/bin/bash",
            "set -uxo pipefail",
            "exec 2>&1",
            f"export PATH={VENV_DIR}/bin:$PATH PYTHONPATH={pythonpath}",
            f"cd {REPO_DIR}",
            "git status",
            f"git -c core.fileMode=false diff {base_commit}",
            *reset,
            *apply,
            ": '>>>>> Start Test Output'",
            f"{TEST_CMD} {names}".rstrip(),
            "SWEBENCH_TEST_EXIT_CODE=$?",
            ": '>>>>> End Test Output'",
            'echo ">>>>> Test Exit Code: $SWEBENCH_TEST_EXIT_CODE"',
            *reset,
            "",
        ]
    )


def swebench_grading() -> Any:
    """`swebench.harness.grading`, imported alone. The package's
    `swebench/harness/__init__.py` imports its Docker, Modal and datasets
    modules, none of which grading needs (nor is installed: swebench goes in
    with --no-deps); `swebench.harness` is registered as a bare package of
    its folder, so only grading, its constants, types and log parsers load."""
    try:
        import swebench
    except ImportError as e:
        raise SWEBenchMissing(
            f"the swebench target needs the swebench package ({e}): "
            "pip install --no-deps swebench==5.0.2 unidiff==0.7.5 (requirements-nodeps.lock)"
        ) from None
    if "swebench.harness" not in sys.modules:
        harness = types.ModuleType("swebench.harness")
        harness.__path__ = [str(Path(swebench.__file__).parent / "harness")]
        sys.modules["swebench.harness"] = harness
    try:
        return importlib.import_module("swebench.harness.grading")
    except ImportError as e:
        raise SWEBenchMissing(
            f"swebench's grading module does not import ({e}): is it swebench 5.0.2 with unidiff?"
        ) from None


def grade(log: str, task: SWETaskPair) -> tuple[str, dict[str, Any]]:
    """SWE-bench's own grading of an eval log: (RESOLVED_FULL | RESOLVED_PARTIAL | RESOLVED_NO, report)."""
    grading = swebench_grading()
    FAIL_TO_PASS, PASS_TO_PASS, TestSpec = grading.FAIL_TO_PASS, grading.PASS_TO_PASS, grading.TestSpec
    get_logs_eval, get_eval_tests_report = grading.get_logs_eval, grading.get_eval_tests_report
    get_resolution_status = grading.get_resolution_status
    spec = TestSpec(
        instance_id=task.id,
        image="",
        eval_script_list=[],
        repo=task.visible.repo.name,
        version="",
        FAIL_TO_PASS=list(task.hidden.FAIL_TO_PASS),
        PASS_TO_PASS=list(task.hidden.PASS_TO_PASS),
        log_parser="parse_log_pytest",
    )
    with tempfile.NamedTemporaryFile("w", suffix=".log", encoding="utf-8") as f:
        f.write(log)
        f.flush()
        status_map, applied = get_logs_eval(spec, f.name)
    if not applied:
        return "RESOLVED_NO", {"applied": False}
    gold = {FAIL_TO_PASS: spec.FAIL_TO_PASS, PASS_TO_PASS: spec.PASS_TO_PASS}
    report = get_eval_tests_report(status_map, gold)
    return get_resolution_status(report), report


class SWEBenchTarget:
    name = "swebench"

    def __init__(self, runtime: str, tasks: str | None = None):
        self.tasks = task_set(tasks)
        grade("", SWETaskPair.of(self.tasks.tasks[0]))  # the package is there before any episode
        self.runtime = get_runtime(runtime)
        self.episodes: Episodes | None = None

    def task_ids(self) -> list[str]:
        return [t.visible.id for t in self.tasks.tasks]

    def diff_of(self, attack: SWEAttack, task_id: str) -> str:
        key = (getattr(self.runtime, "name", ""), attack.kind, task_id)
        if key not in _DIFFS:
            if self.episodes is None:
                self.episodes = Episodes(self.tasks, self.runtime)
            self.episodes.play(attack, task_id)
        return _DIFFS[key]

    def judge(self, task_id: str, diff: str) -> tuple[str, str, str]:
        """SWE-bench's verdict on `diff`: (status: RESOLVED_FULL|RESOLVED_PARTIAL|RESOLVED_NO|TIMEOUT, detail, log)."""
        task = SWETaskPair.of(self.tasks.get(task_id))
        state = start_state(task.visible)
        files = test_files(task)
        env = task.visible.environment
        timeout = task.visible.timeout_s
        spec = sandbox_spec(env, timeout, state.size_bytes, "redteam-swebench", task.visible.repo.name)
        script = eval_script(state.base_commit, task.hidden.test_patch, files, env.import_root)
        with self.runtime.create(spec) as sandbox:
            sandbox.put_archive(state.repo_tar, WORKSPACE)
            sandbox.put_files(
                {"patch.diff": diff, "eval.sh": script, "apply.sh": apply_script(f"{SCRATCH}/patch.diff")}, SCRATCH
            )
            applied = sandbox.exec(["/bin/bash", f"{SCRATCH}/apply.sh"], timeout=120)
            if APPLY_OK not in applied.text():
                return "RESOLVED_NO", "the patch did not apply", applied.text() + applied.text("stderr")
            res = sandbox.exec(["/bin/bash", f"{SCRATCH}/eval.sh"], timeout=timeout, max_output=16 << 20)
        if res.timed_out:
            return "TIMEOUT", f"Test timed out after {timeout} seconds.", res.text()
        status, report = grade(res.text(), task)
        return status, str(report), res.text()

    def run(self, attack: SWEAttack, task_id: str) -> Trial:
        t0 = time.perf_counter()
        diff = self.diff_of(attack, task_id)
        try:
            status, detail, log = self.judge(task_id, diff)
        except SandboxError as e:
            return trial(
                self.name, attack, task_id, "error", False, detail=str(e)[:300], seconds=time.perf_counter() - t0
            )
        # A timeout is one of SWE-bench's error instances: neither resolved nor a failure of the patch.
        return trial(
            self.name,
            attack,
            task_id,
            "error" if status == "TIMEOUT" else status,
            status == "RESOLVED_FULL",
            status=status,
            detail=detail[:400],
            seconds=time.perf_counter() - t0,
            artifact_sha256=sha(diff),
            extra={"log_tail": log[-1500:]},
        )

    def close(self) -> None:
        if self.episodes is not None:
            self.episodes.close()
        self.runtime.close()
