"""Crash-safe records: whole-line appends, encoding failures as env_error, torn lines, superseded records."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sandgym.records import (
    EpisodeRecord,
    OutputError,
    RecordWriter,
    StepRecord,
    encode_record,
    latest_records,
)
from sandgym.runs import load_run

from ._faults import small_tmpfs


def record(task_id: str = "t/a", outcome: str = "passed", epoch: int = 0, **fields) -> EpisodeRecord:
    return EpisodeRecord(
        run_id="r1",
        episode_id=f"r1-{task_id}-{epoch}",
        task_id=task_id,
        task_version=1,
        task_set="s",
        task_set_hash="sha256:x",
        env_id="sandgym/CodeFunction-v0",
        env_version="0",
        runtime={"backend": "local", "isolation": "namespaces", "name": "local"},
        policy={"name": "replay"},
        seed=0,
        epoch=epoch,
        outcome=outcome,
        reward=1.0 if outcome == "passed" else None,
        started_at="2025-01-01T00:00:00+00:00",
        **fields,
    )


def test_each_record_is_one_whole_line(tmp_path):
    path = tmp_path / "t.jsonl"
    with RecordWriter(path) as w:
        for i in range(5):
            w.write(record(f"t/{i}", artifact="x\u2028y" * 100))  # a line separator inside a string: still one line
    data = path.read_bytes()
    assert data.count(b"\n") == 5 and data.endswith(b"\n")
    assert [json.loads(line)["task_id"] for line in data.splitlines()] == [f"t/{i}" for i in range(5)]


def test_text_utf8_cannot_hold_is_stored_escaped_with_its_verdict_kept():
    bad = record(
        steps=[StepRecord(index=0, action="a\ud800b", observation="ok", tool="submit", reward=1.0, duration_s=0.1)],
        artifact="\udcff",
    )
    again = EpisodeRecord.model_validate_json(encode_record(bad))
    assert again.outcome == "passed" and again.reward == 1.0 and again.error is None  # the verdict is the model's
    assert again.steps[0].action == "a\\ud800b" and again.artifact == "\\udcff" and again.task_id == "t/a"


def test_a_record_that_cannot_be_encoded_becomes_that_episodes_env_error():
    bad = record(policy_data={"x": object()}, artifact="\udcff")
    again = EpisodeRecord.model_validate_json(encode_record(bad))
    assert again.outcome == "env_error" and again.reward is None
    assert again.error is not None and "could not be encoded" in again.error
    assert again.task_id == "t/a"


def test_the_run_folder_reader_takes_superseded_and_torn_records(tmp_path):
    path = tmp_path / "trajectories.jsonl"
    with RecordWriter(path) as w:
        w.write(record("t/a", "env_error"))
        w.write(record("t/b", "failed"))
        w.write(record("t/a", "passed"))  # --resume played t/a again
    with open(path, "ab") as f:
        f.write(encode_record(record("t/c"))[:40])  # a write cut off by a crash
    run = load_run(tmp_path)
    assert [(r.task_id, r.outcome) for r in run.records] == [("t/a", "passed"), ("t/b", "failed")]
    assert run.interrupted and run.summary.n_episodes == 2


def test_latest_records_keeps_final_outcomes_in_order():
    recs = [record("a", "env_error"), record("b"), record("a", "env_error"), record("a", "failed"), record("c")]
    assert [(r.task_id, r.outcome) for r in latest_records(recs)] == [("a", "failed"), ("b", "passed"), ("c", "passed")]
    # Epochs are episodes of their own.
    assert len(latest_records([record("a", epoch=0), record("a", epoch=1)])) == 2


def test_a_full_disk_leaves_no_torn_line_and_names_the_path(tmp_path):
    with small_tmpfs(tmp_path / "small", 16) as small:
        path = small / "trajectories.jsonl"
        w = RecordWriter(path)
        written = 0
        with pytest.raises(OutputError) as err:
            for i in range(1000):
                w.write(record(f"t/{i}", artifact="x" * 3000))
                written += 1
        w.close()
        assert str(path) in str(err.value) and "ENOSPC" in str(err.value) and "\n" not in str(err.value)
        data = path.read_bytes()
        assert data.endswith(b"\n") and data.count(b"\n") == written > 0
        assert all(json.loads(line) for line in data.splitlines())


def test_a_file_size_limit_leaves_no_torn_line(tmp_path):
    # In a child process: RLIMIT_FSIZE would limit this test process's own files too.
    script = f"""
import resource, sys
sys.path.insert(0, {str(Path(__file__).parents[2])!r})
from tests.core.test_records import record
from sandgym.records import RecordWriter, OutputError
resource.setrlimit(resource.RLIMIT_FSIZE, (10_000, resource.RLIM_INFINITY))
w = RecordWriter({str(tmp_path / "t.jsonl")!r})
try:
    for i in range(100):
        w.write(record(f"t/{{i}}", artifact="x" * 1500))
except OutputError as e:
    print(e)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert "EFBIG" in out.stdout and "ulimit" in out.stdout, out.stdout + out.stderr
    data = (tmp_path / "t.jsonl").read_bytes()
    assert data.endswith(b"\n") and all(json.loads(line) for line in data.splitlines())


def test_an_unwritable_folder_is_an_output_error(tmp_path):
    with pytest.raises(OutputError, match="cannot open .*missing/t.jsonl: No such file"):
        RecordWriter(tmp_path / "missing" / "t.jsonl")


def test_huge_step_actions_and_observations_keep_their_first_bytes_and_a_digest():
    import hashlib

    from sandgym.records import MAX_ACTION_BYTES, MAX_OBSERVATION_BYTES, StepRecord

    action, observation = "a" * (3 * MAX_ACTION_BYTES), "é" * MAX_OBSERVATION_BYTES
    step = StepRecord(index=0, action=action, observation=observation, tool="run", reward=0.0, duration_s=0.0)
    assert len(step.action.encode()) <= MAX_ACTION_BYTES and len(step.observation.encode()) <= MAX_OBSERVATION_BYTES
    assert step.action.startswith("a" * 1000)
    raw = observation.encode()
    assert f"of {len(raw):,} bytes; sha256 {hashlib.sha256(raw).hexdigest()}]" in step.observation
    assert StepRecord.model_validate_json(step.model_dump_json()) == step  # read back as stored
    small = StepRecord(index=0, action="ls", observation="x" * 1000, tool="run", reward=0.0, duration_s=0.0)
    assert (small.action, small.observation) == ("ls", "x" * 1000)
