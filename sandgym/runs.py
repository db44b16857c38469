"""Reading a run folder back: `summary.json` and `trajectories.jsonl`.

A run folder is what `sandgym eval --out DIR` (sandgym.harness.EvalRun)
writes: one EpisodeRecord JSON object per line in `trajectories.jsonl`,
appended as each episode finishes, and `summary.json` once the run ends.
A run that was interrupted has records but no summary; `load_run` still
loads it and rebuilds the summary from the records (`Run.interrupted`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from pydantic import ValidationError

from sandgym.errors import SandgymError

from .records import EpisodeRecord, Summary, latest_records, summarize
from .safe_files import MAX_INPUT_BYTES, UnsafeFile, read_bytes_bounded

TRAJECTORIES = "trajectories.jsonl"  # the names sandgym.harness writes
SUMMARY = "summary.json"


class RunError(SandgymError, ValueError):
    """A run folder is missing a file or holds a malformed one; the message
    names the folder, the file and (for records) the line."""


@dataclass
class Run:
    path: Path
    summary: Summary
    records: list[EpisodeRecord]
    interrupted: bool = False  # summary.json was missing: the summary was rebuilt from the records

    @property
    def scored(self) -> list[EpisodeRecord]:
        """Episodes with a valid reward (env_error and not_executed have none)."""
        return [r for r in self.records if r.reward is not None]


def _fields(err: ValidationError) -> str:
    parts = []
    for e in err.errors()[:5]:
        loc = ".".join(str(x) for x in e["loc"]) or "(top level)"
        parts.append(f"field `{loc}`: {e['msg']}")
    more = len(err.errors()) - 5
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


def _read_text(path: Path) -> str:
    """A run folder's file: a regular file inside the folder (no symlink out
    of it, no FIFO or device), bounded."""
    try:
        return read_bytes_bounded(path, MAX_INPUT_BYTES, root=path.parent).decode("utf-8")
    except UnsafeFile as e:
        raise RunError(str(e)) from None
    except UnicodeDecodeError as e:
        raise RunError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None


def _read_records(path: Path) -> list[EpisodeRecord]:
    text = _read_text(path)
    records = []
    lines = text.split("\n")
    torn = lines.pop()  # after the last newline: "" unless a write was cut off
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}, line {n}"
        try:
            raw = json.loads(line)
        except (ValueError, RecursionError) as e:
            raise RunError(f"{where}: not JSON ({e}); each line must be one episode record") from None
        if not isinstance(raw, dict):
            raise RunError(f"{where}: expected a JSON object (one episode record), got {type(raw).__name__}")
        try:
            records.append(EpisodeRecord.model_validate(raw))
        except ValidationError as e:
            raise RunError(f"{where}: not an episode record: {_fields(e)}") from None
    if torn.strip():
        # An unterminated last line: the run was killed while writing it (the
        # record was never complete); `sandgym eval --resume` cuts it off.
        try:
            records.append(EpisodeRecord.model_validate_json(torn))
        except ValueError:
            pass
    return latest_records(records)


def _read_summary(path: Path) -> Summary:
    text = _read_text(path)
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError) as e:  # JSON and UTF-8 errors alike
        raise RunError(f"{path}: not JSON ({e}); delete it to rebuild the summary from the records") from None
    if not isinstance(raw, dict):
        raise RunError(f"{path}: expected a JSON object, got {type(raw).__name__}")
    try:
        return Summary.model_validate(raw)
    except ValidationError as e:
        raise RunError(f"{path}: not a run summary: {_fields(e)}") from None


def _wall_s(records: list[EpisodeRecord]) -> float:
    """From the first episode's start to the last one's end: the best a run
    without its summary can tell."""
    spans = []
    for r in records:
        try:
            start = datetime.fromisoformat(r.started_at).timestamp()
        except ValueError:
            continue
        spans.append((start, start + r.timings.total_s))
    if not spans:
        return 0.0
    return max(e for _, e in spans) - min(s for s, _ in spans)


def summary_from_records(records: list[EpisodeRecord], where: Path) -> Summary:
    """The summary the harness would have written, rebuilt from records."""
    if not records:
        raise RunError(f"{where}: no episode records and no {SUMMARY}: nothing to load")
    first = records[0]
    return summarize(
        records,
        _wall_s(records),
        "unknown",
        run_id=first.run_id,
        env_id=first.env_id,
        task_set=first.task_set,
        task_set_hash=first.task_set_hash,
        policy=first.policy,
        runtime=first.runtime.get("name") or first.runtime.get("backend", "unknown"),
        seed=first.seed,
    )


def _check_consistent(run_dir: Path, summary: Summary | None, records: list[EpisodeRecord]) -> None:
    traj = run_dir / TRAJECTORIES
    for field in ("run_id", "task_set_hash"):
        values = {getattr(r, field) for r in records}
        if len(values) > 1:
            raise RunError(
                f"{traj}: records from more than one run ({field} values: "
                f"{', '.join(sorted(values))}); one folder must hold one run"
            )
    if summary is None:
        return
    summ = run_dir / SUMMARY
    if records:
        for field in ("run_id", "task_set_hash"):
            rec_value, sum_value = getattr(records[0], field), getattr(summary, field)
            if rec_value != sum_value:
                raise RunError(f"{summ}: {field} is {sum_value!r} but the records in {traj} say {rec_value!r}")
    if summary.n_episodes != len(records):
        raise RunError(f"{summ}: n_episodes is {summary.n_episodes} but {traj} holds {len(records)} records")


def load_run(run_dir: str | Path) -> Run:
    """Load a run folder; raises RunError naming the file (and line) that is wrong."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise RunError(
            f"{run_dir}: not a run folder (expected {TRAJECTORIES} and {SUMMARY}, "
            "as written by `sandgym eval --out DIR`)"
        )
    traj, summ = run_dir / TRAJECTORIES, run_dir / SUMMARY
    if not traj.is_file():
        hint = f" ({SUMMARY} is there, the records are not)" if summ.exists() else ""
        raise RunError(
            f"{traj}: missing{hint}; a run folder holds {TRAJECTORIES}, one record per episode, "
            "as written by `sandgym eval --out DIR`"
        )
    records = _read_records(traj)
    if summ.exists():
        summary = _read_summary(summ)
        _check_consistent(run_dir, summary, records)
        return Run(path=run_dir, summary=summary, records=records)
    _check_consistent(run_dir, None, records)
    return Run(path=run_dir, summary=summary_from_records(records, run_dir), records=records, interrupted=True)
