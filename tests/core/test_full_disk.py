"""A full disk and deeply nested JSON: one line of error, no traceback, no
half-written output (issue 37).

The disk is real: a 1 MiB tmpfs mounted for the test (root is needed;
without it the test is skipped, it is never faked) and filled to its last
few KiB, so each write meets ENOSPC from the kernel."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandgym.specs import TaskSet, bundled_task_set

from ._faults import error_lines


def sandgym(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SANDGYM_WARM_UP": "0", "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "sandgym", *args], capture_output=True, text=True, timeout=300, cwd=cwd, env=env
    )


def one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = error_lines(proc.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    return lines[0]


@pytest.fixture
def full_disk(tmp_path) -> Iterator[Path]:
    """A tmpfs of 1 MiB with a few KiB left."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs", str(disk)], check=True)
    try:
        fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError:
            pass
        finally:
            os.close(fd)
        os.truncate(disk / "filler", os.path.getsize(disk / "filler") - 8192)  # 8 KiB left
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def left_on(disk: Path) -> list[str]:
    return sorted(p.name for p in disk.iterdir() if p.name != "filler")


def test_tasks_export_to_a_full_disk_is_one_line_and_no_file(full_disk, tmp_path):
    err = one_line_error(
        sandgym("tasks", "export", "code_function/basic-v1", "--out", str(full_disk / "x.jsonl"), cwd=tmp_path)
    )
    assert "x.jsonl" in err and "No space left" in err
    assert left_on(full_disk) == []


def test_tasks_import_to_a_full_disk_leaves_no_half_set(full_disk, tmp_path):
    export = sandgym("tasks", "export", "code_function/basic-v1", "--out", "set.jsonl", cwd=tmp_path)
    assert export.returncode == 0, export.stderr
    err = one_line_error(
        sandgym("tasks", "import", "jsonl", "set.jsonl", "--out", str(full_disk / "set"), cwd=tmp_path)
    )
    assert "No space left" in err
    assert left_on(full_disk) == []  # neither the set nor the folder it was written in aside


@pytest.mark.sandbox
def test_report_and_eval_on_a_full_disk_keep_what_was_whole(full_disk, tmp_path):
    task = TaskSet.load(bundled_task_set("code_function")).get("basic/add-months")
    (tmp_path / "s.jsonl").write_text(
        json.dumps({"task_id": task.id, "completion": "def add_months(day, n):\n    return day\n", "model": "m"}) + "\n"
    )
    args = ["eval", "--samples", "s.jsonl", "--tasks", "code_function/basic-v1", "--task-id", task.id]
    assert sandgym(*args, "--out", "run", cwd=tmp_path).returncode == 0
    # The report: an old one stays whole; no temporary file is left.
    (full_disk / "report.html").write_text("old report\n")
    err = one_line_error(sandgym("report", "run", "--out", str(full_disk / "report.html"), cwd=tmp_path))
    assert "No space left" in err
    assert (full_disk / "report.html").read_text() == "old report\n"
    assert left_on(full_disk) == ["report.html"]
    (full_disk / "report.html").unlink()
    # An eval whose records cannot be written: one line, nothing torn.
    os.truncate(full_disk / "filler", os.path.getsize(full_disk / "filler") + 8192 - 256)
    err = one_line_error(sandgym(*args, "--out", str(full_disk / "run"), cwd=tmp_path))
    assert "No space left" in err
    kept = full_disk / "run" / "trajectories.jsonl"
    assert not kept.exists() or all(json.loads(line) for line in kept.read_text().splitlines())
    assert not (full_disk / "run" / "summary.json").exists()


DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize(
    "command,name,text",
    [
        (["tasks", "import", "jsonl"], "deep.jsonl", DEEP + "\n"),
        (["tasks", "import", "swebench"], "deep.jsonl", DEEP + "\n"),
        (["tasks", "import", "swebench"], "deep.json", DEEP),
        (["tasks", "import", "humaneval"], "deep.jsonl", DEEP + "\n"),
        (["eval", "--samples"], "deep.jsonl", DEEP + "\n"),
        (["eval", "--predictions"], "deep.json", DEEP),
        (["eval", "--policy"], "deep.jsonl", DEEP + "\n"),
    ],
)
def test_deeply_nested_json_is_one_line_of_error(tmp_path, command, name, text):
    (tmp_path / name).write_text(text)
    if command == ["eval", "--policy"]:
        args = [*command, f"replay:{name}", "--out", "run"]
    elif command[0] == "eval":
        args = [*command, name, "--out", "run"]
    else:
        args = [*command, name, "--out", "out"]
    before = sorted(p.name for p in tmp_path.iterdir())
    err = one_line_error(sandgym(*args, cwd=tmp_path))
    assert name in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written
