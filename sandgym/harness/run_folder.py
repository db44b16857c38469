"""The run folder (`--out`): made ready for a run, read back by `--resume`,
its files replaced whole.

`--resume` cuts off an unterminated last line (a record whose write was
interrupted), keeps every finished episode and plays the missing ones and
those that ended in `env_error` (the earlier tries kept in the new
record's `retries`). Records are appended by `sandgym.records.RecordWriter`;
the summary, and the records file when a resume superseded some of its
records, are written aside and renamed over the old file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sandgym.outcomes import Outcome
from sandgym.records import EpisodeRecord, Summary, encode_record, episode_key, output_error
from sandgym.run_lock import RunFolderBusy, RunLock, lock_run_folder
from sandgym.runs import SUMMARY, TRAJECTORIES

from .episode import try_of
from .identity import RunIdentity


@dataclass
class ReadBack:
    """What `--resume` found in the records file."""

    run_id: str | None = None  # the earlier run's id, which the new records keep
    finished: list[EpisodeRecord] = field(default_factory=list)  # the last final record of each episode
    # Episodes whose records all ended in env_error: every earlier try, to play again.
    replay: dict[tuple[str, int], list[dict[str, Any]]] = field(default_factory=dict)
    last_errors: dict[tuple[str, int], EpisodeRecord] = field(default_factory=dict)  # their last records
    superseded: bool = False  # the file holds records the new ones replace: rewrite it at the end


class RunFolder:
    """A run's output folder: `trajectories.jsonl` and `summary.json`."""

    def __init__(self, path: Path, log: Callable[[str], None]):
        self.path = path
        self.records_path = path / TRAJECTORIES
        self.log = log
        self.lock: RunLock | None = None

    def prepare(self, resume: bool) -> None:
        """Create the folder and hold its lock (RunFolderBusy while another
        run writes it; `release()` lets it go); refuse one that holds a
        run's records unless resuming; clear temporary files a killed run
        left behind."""
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            self.lock = lock_run_folder(self.path)
        except RunFolderBusy:
            raise
        except OSError as e:
            raise output_error(self.path, e, "lock") from None
        records = self.records_path
        if records.exists() and records.stat().st_size > 0 and not resume:
            self.release()
            raise FileExistsError(
                f"{records} already holds a run's records; pass --resume to finish that run, "
                "or choose another --out folder"
            )
        for tmp in self.path.glob(".*.tmp"):  # left by a run killed while replacing a file
            owner = tmp.name.rsplit(".", 2)[-2] if tmp.name.count(".") >= 3 else ""
            if not owner.isdigit() or not os.path.exists(f"/proc/{owner}"):
                tmp.unlink(missing_ok=True)

    def release(self) -> None:
        """Let the folder's lock go (the run is over)."""
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    def read_back(self, run: RunIdentity) -> ReadBack:
        """Take over the finished episodes of an interrupted run with the same
        settings as `run` (a record made otherwise raises ValueError)."""
        path = self.records_path
        found = ReadBack()
        if not path.exists():
            return found
        try:
            data = path.read_bytes()
        except OSError as e:
            raise output_error(path, e, "read") from None
        if data and not data.endswith(b"\n"):
            keep = data.rfind(b"\n") + 1
            try:
                os.truncate(path, keep)
            except OSError as e:
                raise output_error(path, e, "cut off the unterminated last line of") from None
            self.log(
                f"{path}: cut off an unterminated last line ({len(data) - keep} bytes: a record whose "
                "write was interrupted); its episode runs again"
            )
            data = data[:keep]
        mine = {
            "env_id": run.env_id,
            "task_set_hash": run.task_set.hash,
            "env_kwargs": run.env_kwargs,
            "policy": run.policy_config,
        }
        by_key: dict[tuple[str, int], list[EpisodeRecord]] = {}
        for n, raw in enumerate(data.split(b"\n"), 1):
            if not raw.strip():
                continue
            try:
                rec = EpisodeRecord.model_validate_json(raw)
            except ValueError as e:
                first = str(e).splitlines()[0]
                raise ValueError(f"{path}:{n}: not an episode record ({first}); move the file aside") from None
            for key, value in {**mine, "seed": run.seed_of(rec.epoch)}.items():
                if getattr(rec, key) != value:
                    raise ValueError(
                        f"--resume: {path} was made with {key}={getattr(rec, key)!r}, "
                        f"this run has {value!r}; use the same settings or another --out"
                    )
            found.run_id = rec.run_id
            by_key.setdefault(episode_key(rec), []).append(rec)
        found.superseded = sum(len(recs) for recs in by_key.values()) > len(by_key)
        for episode, recs in by_key.items():
            final = [r for r in recs if r.outcome != Outcome.ENV_ERROR.value]
            if final:
                found.finished.append(final[-1])
                continue
            earlier: list[dict[str, Any]] = []
            for r in recs:  # every try of every earlier run, in order
                earlier += [t for t in r.retries if t not in earlier]
                earlier.append(try_of(r))
            found.replay[episode] = earlier
            found.last_errors[episode] = recs[-1]
        found.superseded = found.superseded or bool(found.replay)
        return found

    def replace(self, target: Path, data: bytes) -> None:
        """Write `data` aside, fsync, rename over `target`: a crash never leaves half a file."""
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, target)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            raise output_error(target, e) from None

    def compact(self, records: list[EpisodeRecord]) -> None:
        """Rewrite the records file as `records`: without the `env_error`
        records a resume superseded."""
        self.replace(self.records_path, b"".join(encode_record(r) for r in records))

    def write_summary(self, summary: Summary) -> None:
        self.replace(self.path / SUMMARY, (json.dumps(summary.model_dump(), indent=2) + "\n").encode())
