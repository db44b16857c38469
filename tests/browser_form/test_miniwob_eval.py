"""MiniWoB envs through `sandgym eval`, `report` and `leaderboard`.

A MiniWoB page has no task files: the page is the one task of its env's
task set (`miniwob/<page>`, hashed with the miniwob wheel's version), and
episodes differ by seed, so `--epochs N` plays N seeded episodes of it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from typer.testing import CliRunner

from sandgym.cli import app
from sandgym.harness import EvalRun
from sandgym.leaderboard import rank
from sandgym.records import EpisodeRecord
from tests.browser_form.test_miniwob import solve

pytestmark = pytest.mark.chromium

ENV = "sandgym/MiniWoB-click-button-v0"
runner = CliRunner()


@dataclass
class SolvingAgent:
    """Reads the goal and the page's snapshot, then clicks the button."""

    actions: list[str] = field(default_factory=list)

    def act(self, obs: dict[str, Any], info: dict[str, Any]) -> str | None:
        if not self.actions:
            goal = obs["task"].split("\n\n", 1)[0]
            self.actions = solve("click-button", goal, obs["feedback"])
        return self.actions.pop(0) if self.actions else None


@dataclass
class SolvingPolicy:
    name: str = "click-solver"
    config: dict[str, Any] = field(default_factory=lambda: {"model": "scripted-click-solver"})

    def begin(self, task, env) -> SolvingAgent:
        return SolvingAgent()


def test_miniwob_runs_through_eval_report_and_leaderboard(runtime, tmp_path):
    solved = tmp_path / "solved"
    run = EvalRun(ENV, None, SolvingPolicy(), runtime, "local", solved, epochs=3, seed=7)
    summary = run.run()
    assert summary.task_set == "miniwob/click-button" and summary.n_tasks == 1
    assert summary.samples_per_task == 3 and summary.outcomes["passed"] == 3
    assert summary.pass_at_k == {"1": 1.0}
    records = [EpisodeRecord.model_validate_json(x) for x in (solved / "trajectories.jsonl").read_text().splitlines()]
    assert sorted(r.seed or 0 for r in records) == [7, 8, 9]  # every record keeps its seed
    assert {r.task_id for r in records} == {"miniwob/click-button"}

    # The CLI: null policy (done() at once), two epochs; oracle has no script here: not_executed.
    null_out = tmp_path / "null"
    result = runner.invoke(
        app, ["eval", "--env", ENV, "--policy", "null", "--epochs", "2", "-j", "1", "--out", str(null_out)]
    )
    assert result.exit_code == 0, result.output
    oracle_out = tmp_path / "oracle"
    result = runner.invoke(app, ["eval", "--env", ENV, "--policy", "oracle", "-j", "1", "--out", str(oracle_out)])
    assert result.exit_code == 0, result.output
    oracle = json.loads((oracle_out / "summary.json").read_text())
    assert oracle["outcomes"]["not_executed"] == 1 and oracle["task_set_hash"] == summary.task_set_hash

    for out in (solved, null_out, oracle_out):
        result = runner.invoke(app, ["report", str(out)])
        assert result.exit_code == 0, result.output
        assert "miniwob/click-button" in (out / "report.html").read_text()
    board = rank([null_out, oracle_out, solved])
    rows = board.to_rows()
    assert rows[0]["model"] == "scripted-click-solver" and rows[0]["mean_reward"] == 1.0
    assert {r["model"]: r["mean_reward"] for r in rows[1:]} == {"null": 0.0, "oracle": 0.0}
    result = runner.invoke(app, ["leaderboard", str(solved), str(null_out), str(oracle_out)])
    assert result.exit_code == 0 and "scripted-click-solver" in result.output


def test_miniwob_envs_refuse_a_task_set(runtime):
    from sandgym.specs import TaskSet

    with pytest.raises(ValueError, match="MiniWoB envs take no task set"):
        EvalRun(ENV, TaskSet.load("browser_form/basic-v1"), SolvingPolicy(), runtime, "local", "unused")
