"""Trajectory records: one JSON object per episode (JSONL), and the run summary.

Records are written crash-safe (`RecordWriter`): each is encoded whole
before anything is written, then appended with one `os.write` of the
whole line on an `O_APPEND` descriptor and fsynced, so a crash leaves at
most one unterminated last line (which `--resume` cuts off), never a
record spliced into another. A write that fails (a full disk, a read-only
folder) is undone (the file is cut back to where it was) and raised as
`OutputError`, naming the path.
"""

from __future__ import annotations

import errno
import hashlib
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, model_validator

from sandgym.errors import SandgymError

from .observability.cost import cost_of
from .outcomes import OUTCOME_NAMES, Outcome
from .passk import pass_at_k

RECORD_VERSION = 1
# A stored artifact (a patch, code, an app's state) keeps at most this many
# bytes, its full size and sha256 beside it: a 55 MB patch is not copied into
# every record and report.
MAX_ARTIFACT_BYTES = 1 << 20
# A step's action and observation keep at most these many bytes each (the
# rest named by its size and sha256): a command printing gigabytes is not
# copied into the records. Actions: the envs' own default limit
# (max_action_chars), so an action an env took is stored whole by default.
MAX_ACTION_BYTES = 1 << 20
MAX_OBSERVATION_BYTES = 256 << 10


def cap_text(text: str, limit: int) -> str:
    """`text` itself when its UTF-8 fits in `limit` bytes; else its first
    bytes and a line naming the whole one's size and sha256."""
    if len(text) <= limit // 4:
        return text
    raw = encodable_text(text).encode("utf-8")
    if len(raw) <= limit:
        return text
    note = f"\n[sandgym: cut at {limit:,} of {len(raw):,} bytes; sha256 {hashlib.sha256(raw).hexdigest()}]"
    # The whole stays within `limit`, so reading the record back keeps it as it is.
    return raw[: limit - len(note)].decode("utf-8", "ignore") + note


class StepRecord(BaseModel):
    index: int
    action: str
    observation: str  # the feedback the agent saw after this action
    tool: str  # run | submit | invalid
    reward: float
    duration_s: float

    @model_validator(mode="before")
    @classmethod
    def _cap_texts(cls, data: Any) -> Any:
        if isinstance(data, dict):
            data = dict(data)
            for key, limit in (("action", MAX_ACTION_BYTES), ("observation", MAX_OBSERVATION_BYTES)):
                if isinstance(data.get(key), str):
                    data[key] = cap_text(data[key], limit)
        return data


class Timings(BaseModel):
    queue_s: float = 0.0  # waiting for a worker
    create_s: float = 0.0  # creating the agent's sandboxes
    exec_s: float = 0.0  # running the agent's commands
    verify_s: float = 0.0  # all verification attempts
    total_s: float = 0.0


class EpisodeRecord(BaseModel):
    record_version: int = RECORD_VERSION
    run_id: str
    episode_id: str
    task_id: str
    task_version: int
    task_set: str
    task_set_hash: str
    env_id: str
    env_version: str
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    runtime: dict[str, str]  # backend, isolation
    policy: dict[str, Any]  # name and config
    seed: int | None
    epoch: int = 0  # which sample of the task this is (--epochs, --samples): 0, 1, ...
    steps: list[StepRecord] = Field(default_factory=list)
    artifact: str | None = None  # what was verified: code, a diff, or the app's final state
    # Set when the artifact was longer than MAX_ARTIFACT_BYTES: `artifact` is
    # its first bytes; these are the whole one's size and sha256 (of its UTF-8).
    artifact_bytes: int | None = None
    artifact_sha256: str | None = None
    verifier_version: str | None = None
    outcome: str
    status: str | None = None  # the family verifier's own status (SWE: FULL, PARTIAL, NO, ...)
    reward: float | None  # None when infrastructure failed: not the model's score
    pass_rate: float | None = None
    tests: list[dict[str, Any]] = Field(default_factory=list)
    violations: list[str] = Field(default_factory=list)
    attempts: list[dict[str, Any]] = Field(default_factory=list)
    timings: Timings = Field(default_factory=Timings)
    started_at: str
    error: str | None = None  # a harness-level failure, with its message
    retries: list[dict[str, Any]] = Field(default_factory=list)  # earlier tries that ended in env_error
    # What the policy's agent kept of the episode (its `record_extras()`; chat: messages, token usage).
    policy_data: dict[str, Any] = Field(default_factory=dict)
    # Where the episode was played when not in the eval's own process: {"kind": "ray", "node": NODE_ID}.
    executor: dict[str, str] | None = None

    @model_validator(mode="before")
    @classmethod
    def _cap_artifact(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("artifact"), str) and data.get("artifact_sha256") is None:
            capped = cap_artifact(data["artifact"])
            if capped is not None:
                data = {**data, **capped}
        return data


def cap_artifact(text: str) -> dict[str, Any] | None:
    """The record fields of an artifact over MAX_ARTIFACT_BYTES (its first
    bytes, whole size and sha256), or None when it fits."""
    if len(text) <= MAX_ARTIFACT_BYTES // 4:  # fits whatever its characters' sizes
        return None
    raw = encodable_text(text).encode("utf-8")
    if len(raw) <= MAX_ARTIFACT_BYTES:
        return None
    return {
        "artifact": raw[:MAX_ARTIFACT_BYTES].decode("utf-8", "ignore"),  # a character cut in two is dropped
        "artifact_bytes": len(raw),
        "artifact_sha256": hashlib.sha256(raw).hexdigest(),
    }


class Summary(BaseModel):
    run_id: str
    env_id: str
    task_set: str
    task_set_hash: str
    policy: dict[str, Any]
    runtime: str
    seed: int | None
    n_episodes: int
    outcomes: dict[str, int]
    reward_mean: float | None  # over episodes with a valid reward
    n_scored: int  # episodes with a valid reward
    wall_s: float
    sandgym_version: str
    n_tasks: int = 0  # distinct tasks among the episodes
    samples_per_task: int = 1  # the most episodes of any one task (--epochs, --samples)
    # pass@k (k in 1, 10, 100 where every task has k samples), unbiased estimator; see sandgym.passk
    pass_at_k: dict[str, float] = Field(default_factory=dict)
    # sandbox-seconds (and CPU-seconds where known) per episode, verified success and scored episode
    cost: dict[str, Any] = Field(default_factory=dict)
    # Token totals over the run's episodes, from the policy's usage reports
    # (chat models: prompt_tokens, completion_tokens, total_tokens, requests);
    # empty when the policy reports none.
    tokens: dict[str, int] = Field(default_factory=dict)


def token_totals(records: list[EpisodeRecord]) -> dict[str, int]:
    """The sum of every record's `policy_data["usage"]` counts (ints only)."""
    totals: dict[str, int] = {}
    for r in records:
        usage = r.policy_data.get("usage") if isinstance(r.policy_data, dict) else None
        if not isinstance(usage, dict):
            continue
        for key, value in usage.items():
            if isinstance(value, int) and not isinstance(value, bool):
                totals[key] = totals.get(key, 0) + value
    return totals


def summarize(records: list[EpisodeRecord], wall_s: float, sandgym_version: str, **fields: Any) -> Summary:
    """The summary of `records`; `fields` are the run's own (run_id, env_id, task_set, ...)."""
    rewards = [r.reward for r in records if r.reward is not None]
    per_task: dict[str, int] = {}
    for r in records:
        per_task[r.task_id] = per_task.get(r.task_id, 0) + 1
    return Summary(
        n_episodes=len(records),
        outcomes=count_outcomes([r.outcome for r in records]),
        reward_mean=sum(rewards) / len(rewards) if rewards else None,
        n_scored=len(rewards),
        wall_s=wall_s,
        sandgym_version=sandgym_version,
        n_tasks=len(per_task),
        samples_per_task=max(per_task.values(), default=1),
        pass_at_k=pass_at_k((r.task_id, r.outcome) for r in records),
        cost=cost_of(records),
        tokens=token_totals(records),
        **fields,
    )


def policy_label(policy: dict[str, Any]) -> str:
    """What to call a run's policy in tables: the model when there is one
    (chat models, predictions), the replay file's name, else the policy's name."""
    if policy.get("model"):
        return str(policy["model"])
    if policy.get("name") == "replay" and policy.get("file"):
        return "replay:" + str(policy["file"]).replace("\\", "/").rsplit("/", 1)[-1]
    return str(policy.get("name", "?"))


def count_outcomes(outcomes: list[str]) -> dict[str, int]:
    counts = {name: 0 for name in OUTCOME_NAMES}
    for o in outcomes:
        counts[o] = counts.get(o, 0) + 1
    return counts


class OutputError(SandgymError, OSError):
    """The run folder cannot be written (read-only, full, gone, a file too
    large); the message names the path, the reason and the fix."""


def output_error(path: str | Path, e: OSError, doing: str = "write") -> OutputError:
    why = e.strerror or str(e)
    name = errno.errorcode.get(e.errno or 0, "")
    hint = {
        errno.ENOSPC: "free some space or choose another --out folder",
        errno.EDQUOT: "free some space or choose another --out folder",
        errno.EFBIG: "the file is at the size limit (ulimit -f); choose another --out folder",
        errno.EROFS: "the file system is read-only; choose another --out folder",
        errno.EACCES: "it is not writable by this user; choose another --out folder",
        errno.EPERM: "it is not writable by this user; choose another --out folder",
    }.get(e.errno or 0, "choose another --out folder")
    return OutputError(f"cannot {doing} {path}: {why}{f' ({name})' if name else ''}; {hint}")


def encodable_text(value: str) -> str:
    """`value` with lone surrogates (the only code points UTF-8 cannot hold)
    written as \\udXXX escapes; `value` itself when it has none."""
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        return value.encode("utf-8", "backslashreplace").decode("utf-8")


def clean_strings(value: Any) -> Any:
    """A copy of JSON-like data whose strings are all valid Unicode (lone surrogates escaped)."""
    if isinstance(value, str):
        return encodable_text(value)
    if isinstance(value, dict):
        return {clean_strings(k): clean_strings(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean_strings(v) for v in value]
    return value


def encode_record(rec: EpisodeRecord) -> bytes:
    """The record as one JSONL line (UTF-8, newline-terminated). A string
    UTF-8 cannot hold (a lone surrogate in a sample, an action, a model's
    name) is stored with those code points escaped and the verdict kept:
    text is never the infrastructure's failure. Only a record that still
    cannot be encoded (a value JSON cannot say) becomes an `env_error`
    record naming why: one bad episode never ends a run."""
    try:
        return (rec.model_dump_json() + "\n").encode("utf-8")
    except (ValueError, TypeError, UnicodeError, RecursionError) as e:  # PydanticSerializationError is a ValueError
        reason = f"{type(e).__name__}: {e}"
    data = clean_strings(rec.model_dump(mode="python", warnings=False))
    try:
        return (EpisodeRecord.model_validate(data).model_dump_json() + "\n").encode("utf-8")
    except (ValueError, TypeError, UnicodeError, RecursionError) as e:
        reason = f"{type(e).__name__}: {e}"
    data.update(
        outcome=Outcome.ENV_ERROR.value,
        reward=None,
        pass_rate=None,
        status=None,
        error=encodable_text(f"the episode's record could not be encoded as JSON ({reason[:500]})"),
    )
    fixed = EpisodeRecord.model_validate(data)
    try:
        return (fixed.model_dump_json() + "\n").encode("utf-8")
    except (ValueError, TypeError, UnicodeError, RecursionError):
        bare = rec.model_copy(
            update={
                "steps": [],
                "artifact": None,
                "policy_data": {},
                "env_kwargs": {},
                "tests": [],
                "attempts": [],
                "retries": [],
                "violations": [],
                "outcome": Outcome.ENV_ERROR.value,
                "reward": None,
                "pass_rate": None,
                "status": None,
                "error": fixed.error,
            }
        )
        return (EpisodeRecord.model_validate(clean_strings(bare.model_dump())).model_dump_json() + "\n").encode()


class RecordWriter:
    """Appends encoded records to one JSONL file, crash-safe (see the module
    docstring). One writer per file; not for concurrent use."""

    def __init__(self, path: str | Path, fsync: bool = True):
        self.path = Path(path)
        self.fsync = fsync
        try:
            self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as e:
            raise output_error(self.path, e, "open") from None
        if fsync:
            try:  # the new file's name, durable too
                dfd = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY)
                try:
                    os.fsync(dfd)
                finally:
                    os.close(dfd)
            except OSError:
                pass

    def write(self, rec: EpisodeRecord) -> bytes:
        """Encode and append one record; returns the line written."""
        line = encode_record(rec)
        self.append(line)
        return line

    def append(self, line: bytes) -> None:
        try:
            start = os.fstat(self.fd).st_size
        except OSError as e:
            raise output_error(self.path, e) from None
        try:
            n = os.write(self.fd, line)
            while n < len(line):  # a short write (a signal, the disk filling up): the rest, or an error
                n += os.write(self.fd, line[n:])
            if self.fsync:
                os.fsync(self.fd)
        except OSError as e:
            try:  # no torn line: cut the file back to the last whole record
                os.ftruncate(self.fd, start)
            except OSError:
                pass
            raise output_error(self.path, e) from None

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def episode_key(rec: EpisodeRecord) -> tuple[str, int]:
    return rec.task_id, rec.epoch


def latest_records(records: Iterable[EpisodeRecord]) -> list[EpisodeRecord]:
    """The records that count, in file order: an `env_error` record is
    superseded by a later record of the same episode (task and epoch), which
    `--resume` appends when it plays the episode again. (A run that ends
    rewrites its file without them; an interrupted resume may leave both.)"""
    out: list[EpisodeRecord] = []
    where: dict[tuple[str, int], int] = {}
    for rec in records:
        key = episode_key(rec)
        i = where.get(key)
        if i is not None and out[i].outcome == Outcome.ENV_ERROR.value:
            out[i] = rec
            continue
        where[key] = len(out)
        out.append(rec)
    return out
