"""`sandgym tasks export --format hf`: a task set as a Hugging Face `datasets` dataset of training prompts.

One row per task, for any family: the prompt is the env's own first
observation (`obs["task"]` after a reset onto the task, so it is exactly
what the model sees in an episode; no action is taken, nothing is
verified), with what reward functions and tool adapters need to find the
task again. The columns serve both trainers:

- TRL: `prompt` (a one-message chat prompt), `task_id` (read by
  `trl_environment`'s `reset` and by `trl_reward_func`), `environment` (the
  env id, for a `dict` environment_factory);
- verl: `data_source`, `ability`, `reward_model` {style, ground_truth: the
  task id}, `extra_info` {split, index, task_id, task_set, tools_kwargs:
  each tool's `create_kwargs`, as verl's multi-turn rollout passes them to
  `SandgymTool.create`};
- `family`, `env_id`, `task_set` (name), `task_set_hash`, `task_set_path`.

`out` ending in `.parquet`, `.jsonl` or `.json` writes that one file (load it
with `datasets.load_dataset("parquet"|"json", data_files=...)`); any other
path is a folder written by `Dataset.save_to_disk` (`datasets.load_from_disk`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from sandgym.errors import SandgymError
from sandgym.families import family
from sandgym.specs import TaskSet

from .episodes import make_env_factory, tool_specs

FORMAT = "hf"


class DatasetsMissing(SandgymError, RuntimeError):
    """The optional `datasets` package is not installed."""


def _datasets() -> Any:
    try:
        import datasets
    except ImportError:
        raise DatasetsMissing(
            "--format hf needs the Hugging Face `datasets` package, which is not installed: "
            "pip install 'sandgym[train]' (or pip install datasets)"
        ) from None
    return datasets


def task_rows(
    task_set: TaskSet,
    *,
    split: str = "train",
    env_kwargs: dict[str, Any] | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> list[dict[str, Any]]:
    """The dataset's rows: one per task, its prompt rendered by the family's env."""
    fam = family(task_set.meta.family)
    root = str(task_set.root.resolve()) if task_set.root else None
    env = make_env_factory(fam.env_id, task_set, "local", **(env_kwargs or {}))()
    rows = []
    try:
        tools = [t.name for t in tool_specs(env)]
        for i, task in enumerate(task_set.tasks):
            if progress:
                progress("rendering prompts", i, len(task_set))
            try:
                obs, _ = env.reset(options={"task_id": task.id})
            except Exception as e:
                raise SandgymError(f"task {task.id}: the env could not start it to render its prompt: {e}") from e
            create = {"task_id": task.id}
            rows.append(
                {
                    "task_id": task.id,
                    "prompt": [{"role": "user", "content": str(obs["task"])}],
                    "family": fam.name,
                    "env_id": fam.env_id,
                    "environment": fam.env_id,
                    "task_set": task_set.meta.name,
                    "task_set_hash": task_set.hash,
                    "task_set_path": root,
                    "data_source": f"sandgym/{fam.name}",
                    "ability": fam.name,
                    "reward_model": {"style": "rule", "ground_truth": task.id},
                    "extra_info": {
                        "split": split,
                        "index": i,
                        "task_id": task.id,
                        "task_set": root,
                        "tools_kwargs": {name: {"create_kwargs": create} for name in tools},
                    },
                }
            )
    finally:
        env.close()
    if progress:
        progress("rendering prompts", len(task_set), len(task_set))
    return rows


def export_dataset(task_set: TaskSet, out: Path, options: dict[str, Any]) -> str:
    """The `hf` exporter (`sandgym tasks export --format hf`); a summary line."""
    unknown = set(options) - {"progress", "split", "env_kwargs"}
    if unknown:
        flags = ", ".join("--" + k.replace("_", "-") for k in sorted(unknown))
        raise SandgymError(f"the hf format takes no {flags}: it writes prompts only, for any family")
    datasets = _datasets()  # before any env starts: fail fast when it is missing
    rows = task_rows(
        task_set,
        split=options.get("split", "train"),
        env_kwargs=options.get("env_kwargs"),
        progress=options.get("progress"),
    )
    ds = datasets.Dataset.from_list(rows)
    out = Path(out)
    suffix = out.suffix.lower()
    if suffix == ".parquet":
        ds.to_parquet(str(out))
        how = f"parquet file {out} (datasets.load_dataset('parquet', data_files=...))"
    elif suffix in (".jsonl", ".json"):
        ds.to_json(str(out), lines=True)
        how = f"JSON-lines file {out} (datasets.load_dataset('json', data_files=...))"
    else:
        if out.is_file() or (out.is_dir() and any(out.iterdir())):
            raise SandgymError(f"{out}: exists and is not an empty folder; choose another --out for save_to_disk")
        ds.save_to_disk(str(out))
        how = f"dataset folder {out} (datasets.load_from_disk)"
    return f"wrote {len(rows)} training prompts to the {how}; datasets {datasets.__version__}"


__all__ = ["DatasetsMissing", "export_dataset", "task_rows"]
