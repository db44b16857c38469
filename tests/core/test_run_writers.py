"""One writer per run folder; killed and stopped samples runs resume
without redoing or duplicating a record (issue 37).

The lock tests hold the lock in a real second process and kill it with
SIGKILL; the eval tests run `sandgym eval --samples` for real (judges in
local sandboxes), stopped by SIGKILL or SIGTERM while a slow sample is
being judged."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sandgym.run_lock import LOCK_NAME, RunFolderBusy, lock_run_folder
from sandgym.specs import TaskSet, bundled_task_set

HOLD = (
    "import sys, time; from sandgym.run_lock import lock_run_folder; "
    "lock_run_folder(sys.argv[1]); print('held', flush=True); time.sleep(600)"
)


def holder(folder: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "held\n"
    return proc


def test_a_second_writer_is_refused_naming_the_holder_and_the_lock_dies_with_it(tmp_path):
    proc = holder(tmp_path)
    try:
        with pytest.raises(RunFolderBusy) as err:
            lock_run_folder(tmp_path)
        message = str(err.value)
        assert "\n" not in message and str(tmp_path) in message and f"pid {proc.pid}" in message
    finally:
        proc.kill()  # SIGKILL: no clean-up of its own
        proc.wait()
    with lock_run_folder(tmp_path):  # not stale
        assert (tmp_path / LOCK_NAME).read_text().strip() == str(os.getpid())
        with pytest.raises(RunFolderBusy):  # another open file of this same process is refused too
            lock_run_folder(tmp_path)
    lock_run_folder(tmp_path).release()


def test_a_planted_lock_symlink_is_not_followed(tmp_path):
    target = tmp_path / "host-file"
    target.write_text("keep\n")
    run = tmp_path / "run"
    run.mkdir()
    (run / LOCK_NAME).symlink_to(target)
    with pytest.raises(OSError):
        lock_run_folder(run)
    assert target.read_text() == "keep\n"


# --- sandgym eval --samples, for real -------------------------------------------------------------

SLOW = "def add_months(day, n):\n    import time\n    time.sleep(60)\n"  # judged until the task's verify timeout


def sandgym(*args: str, cwd: Path, **kw) -> subprocess.Popen[str]:
    env = {**os.environ, "SANDGYM_WARM_UP": "0"}
    return subprocess.Popen(
        [sys.executable, "-m", "sandgym", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


def samples_run(tmp_path: Path, completions: list[str]) -> tuple[list[str], str]:
    task = TaskSet.load(bundled_task_set("code_function")).get("basic/add-months")
    rows = [{"task_id": task.id, "completion": c, "model": "m"} for c in completions]
    (tmp_path / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ["eval", "--samples", "samples.jsonl", "--tasks", "code_function/basic-v1", "--task-id", task.id]
    return [*args, "--concurrency", "1", "--out", "run"], task.id


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def wait_for(check, proc: subprocess.Popen[str], what: str) -> None:
    deadline = time.monotonic() + 240
    while not check():
        assert proc.poll() is None, f"the run ended before {what}: {proc.communicate()}"
        assert time.monotonic() < deadline, f"never saw {what}"
        time.sleep(0.1)


@pytest.mark.sandbox
def test_two_evals_on_one_out_folder_the_second_refuses_in_one_line(tmp_path):
    args, _ = samples_run(tmp_path, [SLOW] * 6)
    first = sandgym(*args, cwd=tmp_path)
    lock = tmp_path / "run" / LOCK_NAME
    try:
        wait_for(lambda: lock.exists() and lock.read_text().strip() == str(first.pid), first, "the lock held")
        second = sandgym(*args, cwd=tmp_path)
        out, err = second.communicate(timeout=300)
        assert second.returncode == 2, err
        [line] = err.strip().splitlines()
        assert "run" in line and f"pid {first.pid}" in line and "another --out" in line
        assert first.poll() is None  # the first run goes on, alone in the folder
        policy = subprocess.run(
            [sys.executable, "-m", "sandgym", "eval", "--tasks", "code_function/basic-v1", "--out", "run", "--resume"],
            cwd=tmp_path,
            env={**os.environ, "SANDGYM_WARM_UP": "0"},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert policy.returncode == 2 and f"pid {first.pid}" in policy.stderr, policy.stderr
    finally:
        first.kill()
        first.communicate()
    records = [json.loads(x) for x in lines(tmp_path / "run" / "trajectories.jsonl")]
    assert {r["policy"]["name"] for r in records} <= {"samples"}  # nothing of the refused runs


FAST = "def add_months(day, n):\n    return day\n"  # a wrong answer, judged in a second


@pytest.mark.sandbox
def test_a_killed_samples_run_resumes_without_redoing_or_duplicating(tmp_path):
    args, task_id = samples_run(tmp_path, [FAST, FAST, SLOW, FAST])
    records = tmp_path / "run" / "trajectories.jsonl"
    run = sandgym(*args, cwd=tmp_path)
    wait_for(lambda: len(lines(records)) >= 2, run, "two records")
    run.send_signal(signal.SIGKILL)
    run.communicate()
    before = lines(records)
    assert 2 <= len(before) < 4
    again = sandgym(*args, "--resume", cwd=tmp_path)  # the killed run's lock died with it
    out, err = again.communicate(timeout=600)
    assert again.returncode == 0, err
    after = lines(records)
    assert after[: len(before)] == before  # kept as they were, not judged again
    epochs = sorted(json.loads(x)["epoch"] for x in after)
    assert epochs == [0, 1, 2, 3]  # each sample once
    assert {json.loads(x)["run_id"] for x in after} == {json.loads(before[0])["run_id"]}
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["n_episodes"] == 4 and summary["outcomes"]["env_error"] == 0
    assert task_id in out or "summary" in out


@pytest.mark.sandbox
def test_sigterm_keeps_the_running_judgement_and_says_what_was_kept(tmp_path):
    args, _ = samples_run(tmp_path, [FAST, SLOW, FAST, FAST])
    records = tmp_path / "run" / "trajectories.jsonl"
    run = sandgym(*args, cwd=tmp_path)
    wait_for(lambda: len(lines(records)) >= 1, run, "a record")
    run.send_signal(signal.SIGTERM)
    out, err = run.communicate(timeout=300)
    assert run.returncode == 128 + signal.SIGTERM, err
    kept = lines(records)
    assert f"interrupted: {len(kept)} records are in" in err and "--resume" in err
    assert "SIGTERM: nothing new is judged" in err
    assert 1 in {json.loads(x)["epoch"] for x in kept}  # the slow one, running at the signal, was kept
    assert "Traceback" not in err
    assert not (tmp_path / "run" / "summary.json").exists()
    again = sandgym(*args, "--resume", cwd=tmp_path)
    out, err = again.communicate(timeout=600)
    assert again.returncode == 0, err
    assert sorted(json.loads(x)["epoch"] for x in lines(records)) == [0, 1, 2, 3]
    assert lines(records)[: len(kept)] == kept


@pytest.mark.sandbox
def test_resume_refuses_a_samples_file_that_changed(tmp_path):
    args, _ = samples_run(tmp_path, [FAST, FAST])
    assert sandgym(*args, cwd=tmp_path).wait(timeout=300) == 0
    samples_run(tmp_path, [FAST, "def add_months(day, n):\n    return n\n"])
    again = sandgym(*args, "--resume", cwd=tmp_path)
    out, err = again.communicate(timeout=300)
    assert again.returncode == 2 and "changed" in err and "Traceback" not in err, err
