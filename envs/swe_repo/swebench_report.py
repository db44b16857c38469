"""SWE-bench's run report, for the family's eval-run outputs.

Two hooks of the family table (`sandgym/families.py`):

- `run_report` (`sandgym eval --predictions`): the counts and id lists of
  SWE-bench's run report (swebench.harness.reporting.make_run_report), in
  its order, from the run's records; the core writes it to the run folder's
  `report.json`.
- `report_sections` (`sandgym report`): that report as a section of the
  run's HTML report.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from sandgym.outcomes import Outcome

# The file the core writes `run_report`'s result to (sandgym.predictions.REPORT).
RUN_REPORT = "report.json"


class JudgedRecord(Protocol):
    """What the report reads of an episode record (sandgym.records.EpisodeRecord)."""

    task_id: str
    artifact: str | None
    outcome: str
    status: str | None


def swebench_report(records: Sequence[JudgedRecord], task_ids: list[str]) -> dict[str, Any]:
    """SWE-bench's run report from records (one per task): a task without a
    record, or whose record is `not_executed`, had no prediction
    (incomplete); an empty artifact ("", as SWE-bench tests it: a blank one
    is submitted) is an empty patch (not run); `env_error` and a patch that
    did not apply (APPLY_FAILED) are errors; every other is completed, and
    resolved when it passed."""
    by_task = {r.task_id: r for r in records}
    submitted: list[str] = []
    completed: list[str] = []
    resolved: list[str] = []
    unresolved: list[str] = []
    empty: list[str] = []
    errors: list[str] = []
    incomplete: list[str] = []
    for tid in sorted(task_ids):
        r = by_task.get(tid)
        if r is None or r.outcome == Outcome.NOT_EXECUTED.value:
            incomplete.append(tid)
            continue
        submitted.append(tid)
        if not r.artifact:
            empty.append(tid)
        elif r.outcome == Outcome.ENV_ERROR.value or r.status == "APPLY_FAILED":
            errors.append(tid)
        else:
            completed.append(tid)
            (resolved if r.outcome == Outcome.PASSED.value else unresolved).append(tid)
    return {
        "total_instances": len(task_ids),
        "submitted_instances": len(submitted),
        "completed_instances": len(completed),
        "resolved_instances": len(resolved),
        "unresolved_instances": len(unresolved),
        "empty_patch_instances": len(empty),
        "error_instances": len(errors),
        "completed_ids": completed,
        "incomplete_ids": incomplete,
        "empty_patch_ids": empty,
        "submitted_ids": submitted,
        "resolved_ids": resolved,
        "unresolved_ids": unresolved,
        "error_ids": errors,
    }


def run_report(records: Sequence[JudgedRecord], task_ids: list[str], kind: str, model: str) -> dict[str, Any] | None:
    """The family's `run_report` hook: SWE-bench's run report of a
    predictions run (one model_patch per task); samples runs get none."""
    if kind != "predictions":
        return None
    report = swebench_report(records, task_ids)
    report["model_name_or_path"] = model
    return report


def _esc(value: object) -> str:
    return html.escape(str(value), quote=True)  # as sandgym.report escapes: the file is a stranger's


def report_sections(run_dir: Path, records: Sequence[JudgedRecord]) -> str:
    """The family's `report_sections` hook: the run's `report.json` as
    SWE-bench's harness counts it; "" for a run without one."""
    path = run_dir / RUN_REPORT
    try:
        data = json.loads(path.read_text()) if path.is_file() else None
    except (OSError, ValueError):
        data = None
    if not isinstance(data, dict):
        return ""
    keys = [k for k in data if k.endswith("_instances")]
    items = "".join(f'<dt>{_esc(k)}</dt><dd class="mono" data-field="{_esc(k)}">{_esc(data[k])}</dd>' for k in keys)
    return (
        f'<section id="swebench"><h2>SWE-bench report</h2><p class="sub">From {_esc(RUN_REPORT)}, as '
        "SWE-bench's harness counts: a missing prediction is incomplete, an empty patch is not run, an "
        f'infrastructure error is an error.</p><dl class="meta">{items}</dl></section>'
    )
