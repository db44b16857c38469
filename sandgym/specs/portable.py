"""A task set as one JSONL file (`sandgym tasks export --format jsonl`), any family.

Line 1 is `{"taskset": {...}}` (the set's taskset.yaml fields); every other
line is one task, `{"id": ..., "visible": {...}, "hidden": {...}}`, the two
halves exactly as the task-spec files hold them. Reading the file back
(`sandgym tasks import jsonl`) gives the same task-set hash.

The hidden halves are in the file: share it only where the verifier's data
may go.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from sandgym.safe_files import MAX_INPUT_BYTES, UnsafeFile, read_bytes_bounded, write_atomic
from sandgym.specs.base import (
    TaskSet,
    TaskSetMeta,
    TaskSpecError,
    family_models,
    format_validation_error,
    make_pair,
)


def write_jsonl(task_set: TaskSet, out: str | Path) -> Path:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"taskset": task_set.meta.model_dump(mode="json")}, ensure_ascii=False)]
    for t in task_set.tasks:
        lines.append(
            json.dumps(
                {
                    "id": t.id,
                    "visible": t.visible.model_dump(mode="json", exclude_defaults=True),
                    "hidden": t.hidden.model_dump(mode="json", exclude_defaults=True),
                },
                ensure_ascii=False,
            )
        )
    return write_atomic(out, "\n".join(lines) + "\n")


def read_jsonl(src: str | Path) -> TaskSet:
    src = Path(src)
    try:  # a regular file (no FIFO, no device), bounded, gzip allowed
        text = read_bytes_bounded(src, MAX_INPUT_BYTES).decode("utf-8")
    except UnsafeFile as e:
        raise TaskSpecError(str(e)) from None
    except UnicodeDecodeError as e:
        raise TaskSpecError(f"{src}: not UTF-8 text ({e.reason} at byte offset {e.start})") from None
    lines = [(n, line) for n, line in enumerate(text.split("\n"), 1) if line.strip()]
    if not lines:
        raise TaskSpecError(f'{src}: empty file; expected a {{"taskset": ...}} line, then one line per task')
    rows = []
    for n, line in lines:
        try:
            row = json.loads(line)
        except (ValueError, RecursionError) as e:
            raise TaskSpecError(f"{src}:{n}: not JSON: {e}") from None
        if not isinstance(row, dict):
            raise TaskSpecError(f"{src}:{n}: expected a JSON object, got {type(row).__name__}")
        rows.append((n, row))
    n0, first = rows[0]
    if set(first) != {"taskset"} or not isinstance(first["taskset"], dict):
        raise TaskSpecError(
            f'{src}:{n0}: the first line must be {{"taskset": {{"name": ..., "family": ...}}}} '
            "(as `sandgym tasks export --format jsonl` writes it)"
        )
    try:
        meta = TaskSetMeta.model_validate(first["taskset"])
    except ValidationError as e:
        raise TaskSpecError(format_validation_error(f"{src}:{n0} field `taskset`", e)) from None
    visible_model, hidden_model = family_models(meta.family)
    pairs = []
    seen: dict[str, int] = {}
    for n, row in rows[1:]:
        where = f"{src}:{n}"
        missing = [k for k in ("visible", "hidden") if not isinstance(row.get(k), dict)]
        if missing:
            raise TaskSpecError(
                f"{where}: field `{missing[0]}` missing or not an object (a task line holds both halves)"
            )
        try:
            visible = visible_model.model_validate(row["visible"])
            hidden = hidden_model.model_validate(row["hidden"])
        except ValidationError as e:
            raise TaskSpecError(format_validation_error(where, e)) from None
        if hidden.id != visible.id:
            raise TaskSpecError(f"{where}: field `hidden.id` is {hidden.id!r} but `visible.id` is {visible.id!r}")
        if visible.id in seen:
            raise TaskSpecError(f"{where}: field `visible.id`: {visible.id!r} also on line {seen[visible.id]}")
        seen[visible.id] = n
        pairs.append(make_pair(visible, hidden))
    if not pairs:
        raise TaskSpecError(f"{src}: the file holds no tasks")
    return TaskSet(meta, pairs)
