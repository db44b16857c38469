"""A lone surrogate in a sample is the model's answer, judged and stored
escaped: never env_error, so summary.json, the leaderboard and the report
agree (issue 37). Judges in real sandboxes: marked `sandbox`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sandgym.specs import TaskSet, bundled_task_set

pytestmark = pytest.mark.sandbox


def sandgym(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sandgym", *args], capture_output=True, text=True, timeout=300, cwd=cwd
    )


def test_surrogate_samples_keep_their_verdict_and_every_view_agrees(tmp_path):
    task = TaskSet.load(bundled_task_set("code_function")).tasks[0]
    model = "evil\x1b]0;title\x07[/]"
    rows = [
        {"task_id": task.id, "completion": "    return '\ud800'\n", "model": model},
        {"task_id": task.id, "completion": "    x = '\udfff'\n    raise ValueError(x)\n", "model": model},
    ]
    (tmp_path / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    before = sorted(p.name for p in tmp_path.iterdir())
    proc = sandgym(
        "eval", "--samples", "samples.jsonl", "--tasks", "code_function/basic-v1", "--out", "run", cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*before, "run"])  # nothing else written
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["outcomes"]["env_error"] == 0 and summary["outcomes"]["failed"] == 2
    records = [json.loads(line) for line in (tmp_path / "run" / "trajectories.jsonl").read_text().splitlines()]
    judged = [r for r in records if r["outcome"] != "not_executed"]
    assert sorted(r["artifact"] for r in judged) == sorted(
        [rows[0]["completion"].replace("\ud800", "\\ud800"), rows[1]["completion"].replace("\udfff", "\\udfff")]
    )
    board = sandgym("leaderboard", "run", "--json", cwd=tmp_path)
    assert board.returncode == 0, board.stderr
    [row] = json.loads(board.stdout)["rows"]
    assert row["env_error"] == 0 and row["pass_at_k"].get("1", 0.0) == summary["pass_at_k"]["1"]
    table = sandgym("leaderboard", "run", cwd=tmp_path)
    assert table.returncode == 0 and "\x1b" not in table.stdout and "\x07" not in table.stdout, table.stderr
    assert sandgym("report", "run", cwd=tmp_path).returncode == 0


def test_validate_prints_hostile_titles_and_names_as_text(tmp_path):
    """An unbalanced `[/]` once crashed `tasks validate`; escapes reached the terminal raw."""
    from sandgym.specs.base import TaskSetMeta, make_pair
    from sandgym.specs.code_function import CodeHidden, CodeTask

    t = TaskSet.load(bundled_task_set("code_function")).tasks[0]
    title = "\x1b]0;pwned\x07\x1b[2J [/] [bold]b\u202e"
    visible = CodeTask.model_validate({**t.visible.model_dump(), "title": title})
    hidden = CodeHidden.model_validate(t.hidden.model_dump())
    meta = TaskSetMeta(name="evil [/] \x1b[2J", family="code_function")
    root = TaskSet(meta, [make_pair(visible, hidden)]).write(tmp_path / "evil")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    proc = sandgym("tasks", "validate", str(root), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout + proc.stderr
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out and "Traceback" not in out
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # nothing written
