"""`sandgym tasks validate SET --task-id ID --repeat K`: only the named tasks,
each judged K times (gold passes, no change fails) in real sandboxes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from sandgym.cli import app
from sandgym.specs import TaskSet, bundled_dir
from sandgym.specs.swe_repo import SWETaskPair

runner = CliRunner()
BILLING = bundled_dir() / "swe_repo" / "billing-v1"


@pytest.mark.sandbox
def test_repeat_judges_the_chosen_task_k_times():
    args = ["tasks", "validate", str(BILLING), "--task-id", "billing/bulk-threshold", "--repeat", "3"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "1 of 1 tasks passed 3 of 3 runs" in result.stdout
    assert "1 tasks, 0 problems" in result.stdout


@pytest.mark.sandbox
def test_a_broken_task_fails_every_run_and_is_named(tmp_path: Path):
    root = tmp_path / "broken"
    shutil.copytree(BILLING, root)
    hidden = root / "hidden" / "billing_bulk-threshold.yaml"
    data = yaml.safe_load(hidden.read_text())
    task = SWETaskPair.of(TaskSet.load(root).get(data["id"]))
    data["patch"] = task.visible.base_patch  # re-injects the bug: not a fix
    hidden.write_text(yaml.safe_dump(data))
    args = ["tasks", "validate", str(root), "--task-id", "billing/bulk-threshold", "--repeat", "2", "-j", "1"]
    result = runner.invoke(app, args)
    assert result.exit_code == 1
    assert "0 of 1 tasks passed 2 of 2 runs" in result.stdout and "flaky" not in result.stdout
    assert result.stdout.count("billing/bulk-threshold: the oracle policy scored") == 2


def test_unknown_task_id_is_named_with_the_fix():
    result = runner.invoke(app, ["tasks", "validate", str(BILLING), "--task-id", "billing/nope"])
    assert result.exit_code != 0
    assert "billing/nope" in result.output and "sandgym tasks list" in result.output
