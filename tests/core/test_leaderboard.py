"""Ranking runs (sandgym.leaderboard) on real run folders."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

from sandgym.harness import EvalRun
from sandgym.leaderboard import LeaderboardError, bootstrap_interval, rank, wilson_interval
from sandgym.policies import NullPolicy, OraclePolicy, Policy, ReplayPolicy
from sandgym.runs import TRAJECTORIES, RunError, load_run
from sandgym.specs import TaskSet, TaskSetMeta
from tests.helpers import make_task

ENV = "sandgym/CodeFunction-v0"


def tiny_task_set(root: Path, extra_test: bool = False) -> TaskSet:
    add_tests = [{"name": "small", "args": [2, 3], "expected": 5}, {"name": "signs", "args": [-1, 1], "expected": 0}]
    if extra_test:  # a different task set: one more hidden test
        add_tests.append({"name": "zeros", "args": [0, 0], "expected": 0})
    pairs = [
        make_task(task_id="add", entry_point="add", reference="def add(a, b):\n    return a + b\n", tests=add_tests),
        make_task(
            task_id="rev",
            entry_point="rev",
            reference="def rev(s):\n    return s[::-1]\n",
            tests=[
                {"name": "word", "args": ["hello"], "expected": "olleh"},
                {"name": "pair", "args": ["ab"], "expected": "ba"},
                {"name": "empty", "args": [""], "expected": ""},
                {"name": "one", "args": ["x"], "expected": "x"},
            ],
        ),
        make_task(
            task_id="sq",
            entry_point="sq",
            reference="def sq(x):\n    return x * x\n",
            tests=[{"args": [3], "expected": 9}, {"args": [-2], "expected": 4}],
        ),
    ]
    TaskSet(TaskSetMeta(name="board-mini", family="code_function"), pairs).write(root)
    return TaskSet.load(root)


def fence(code: str) -> str:
    return f"```python\n{code}```"


# Wrong in part: add passes 1 of 2 (return 0), rev 2 of 4 (palindromes only), sq 0 of 2.
PARTIAL = [
    {"task_id": "add", "actions": [fence("def add(a, b):\n    return 0\n")]},
    {"task_id": "rev", "actions": [fence("def rev(s):\n    return s if len(s) < 2 else 'nope'\n")]},
    {"task_id": "sq", "actions": [fence("def sq(x):\n    return x\n")]},
]


@pytest.fixture(scope="module")
def task_set(tmp_path_factory) -> TaskSet:
    return tiny_task_set(tmp_path_factory.mktemp("tasks") / "ts")


def scored(run_dir: Path) -> list[float]:
    """A run's rewards; every episode of these runs is scored (none is null)."""
    rewards = [r.reward for r in load_run(run_dir).records]
    assert all(x is not None for x in rewards), rewards
    return [x for x in rewards if x is not None]


@pytest.fixture(scope="module")
def runs(task_set, runtime, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("runs")
    replay = root / "partial.jsonl"
    replay.write_text("".join(json.dumps(r) + "\n" for r in PARTIAL))
    empty = root / "empty.jsonl"
    empty.write_text("")
    made: dict[str, Path] = {}
    plays: list[tuple[str, Policy, dict | None]] = [
        ("oracle", OraclePolicy(), None),
        ("null", NullPolicy(), None),
        ("partial_binary", ReplayPolicy(replay), None),
        ("partial_rate", ReplayPolicy(replay), {"mode": "single", "max_turns": 5, "reward": "pass_rate"}),
        ("nothing", ReplayPolicy(empty), None),
    ]
    for name, policy, kwargs in plays:
        made[name] = root / name
        EvalRun(ENV, task_set, policy, runtime, "local", made[name], concurrency=3, env_kwargs=kwargs).run()
    return made


# -- intervals -----------------------------------------------------------------------------


def test_wilson_known_values():
    lo, hi = wilson_interval(8, 10)
    assert lo == pytest.approx(0.4902, abs=5e-4) and hi == pytest.approx(0.9433, abs=5e-4)
    lo, hi = wilson_interval(0, 10)
    assert lo == 0.0 and hi == pytest.approx(0.2775, abs=5e-4)
    lo, hi = wilson_interval(10, 10)
    assert lo == pytest.approx(0.7225, abs=5e-4) and hi == 1.0
    lo, hi = wilson_interval(50, 100)  # symmetric about 0.5
    assert lo == pytest.approx(1 - hi) and lo == pytest.approx(0.4038, abs=5e-4)
    with pytest.raises(ValueError):
        wilson_interval(0, 0)


def test_bootstrap_is_deterministic_and_order_free():
    values = [0.0, 0.25, 0.5, 0.5, 1.0, 1.0, 0.75]
    first = bootstrap_interval(values)
    shuffled = values[:]
    random.Random(1).shuffle(shuffled)
    assert bootstrap_interval(shuffled) == first
    assert first[0] < sum(values) / len(values) < first[1]
    assert bootstrap_interval([0.5]) == (0.5, 0.5)


# -- ranking -------------------------------------------------------------------------------


def test_oracle_ranks_above_null(runs):
    board = rank([runs["null"], runs["oracle"]])
    top, bottom = board.entries
    assert (top.rank, top.policy_name, top.mean) == (1, "oracle", 1.0)
    assert (bottom.rank, bottom.policy_name, bottom.mean) == (2, "null", 0.0)
    assert top.ci_method == bottom.ci_method == "wilson"
    assert (top.ci_low, top.ci_high) == pytest.approx(wilson_interval(3, 3))
    assert (bottom.ci_low, bottom.ci_high) == pytest.approx(wilson_interval(0, 3))
    assert board.task_set_hash == load_run(runs["oracle"]).summary.task_set_hash

    rows = board.to_rows()
    assert [r["policy"] for r in rows] == ["oracle", "null"]
    assert json.loads(json.dumps(rows)) == rows  # plain data
    assert {k: rows[0][k] for k in ("n_scored", "n_episodes", "env_error", "not_executed", "runtime")} == {
        "n_scored": 3,
        "n_episodes": 3,
        "env_error": 0,
        "not_executed": 0,
        "runtime": "local",
    }
    assert rows[0]["run_id"] == load_run(runs["oracle"]).summary.run_id
    assert rows[0]["run_dir"] == str(runs["oracle"])

    md = board.to_markdown()
    assert board.task_set_hash in md
    lines = [line for line in md.splitlines() if line.startswith("| ")]
    assert lines[1].startswith("| 1 | oracle | oracle | 1.000 | [") and str(runs["oracle"]) in lines[1]
    assert lines[2].startswith("| 2 | null | null | 0.000 | [0.000, ")


def test_different_task_sets_are_refused(runs, runtime, tmp_path):
    other_set = tiny_task_set(tmp_path / "other-ts", extra_test=True)
    other = tmp_path / "other-run"
    EvalRun(ENV, other_set, OraclePolicy(), runtime, "local", other).run()
    mine = load_run(runs["oracle"]).summary.task_set_hash
    assert other_set.hash != mine
    with pytest.raises(LeaderboardError) as err:
        rank([runs["oracle"], runs["null"], other])
    message = str(err.value)
    for folder, h in ((runs["oracle"], mine), (runs["null"], mine), (other, other_set.hash)):
        assert f"{folder}: {h}" in message
    assert "different task sets" in message


def graded_task_set(root: Path, passes: list[int]) -> tuple[TaskSet, Path]:
    """One task per entry of `passes`, each with 7 hidden tests, and a replay file whose
    code for task i passes passes[i] of them: pass-rate rewards passes[i] / 7."""
    pairs = [
        make_task(
            task_id=f"graded-{i}",
            entry_point="f",
            reference="def f(x):\n    return 10 * x\n",
            tests=[{"args": [x], "expected": 10 * x} for x in range(7)],
        )
        for i in range(len(passes))
    ]
    TaskSet(TaskSetMeta(name="graded", family="code_function"), pairs).write(root / "ts")
    replay = root / "graded.jsonl"
    replay.write_text(
        "".join(
            json.dumps(
                {"task_id": f"graded-{i}", "actions": [fence(f"def f(x):\n    return 10 * x if x < {k} else -1\n")]}
            )
            + "\n"
            for i, k in enumerate(passes)
        )
    )
    return TaskSet.load(root / "ts"), replay


def test_pass_rate_rewards_use_a_deterministic_bootstrap(runtime, tmp_path):
    ts, replay = graded_task_set(tmp_path, [0, 1, 2, 3, 5, 6, 7])
    run_dir = tmp_path / "rate"
    EvalRun(
        ENV,
        ts,
        ReplayPolicy(replay),
        runtime,
        "local",
        run_dir,
        concurrency=3,
        env_kwargs={"mode": "single", "max_turns": 5, "reward": "pass_rate"},
    ).run()
    rewards = sorted(scored(run_dir))
    assert rewards == pytest.approx([k / 7 for k in (0, 1, 2, 3, 5, 6, 7)])

    board = rank([run_dir])
    (e,) = board.entries
    assert e.ci_method == "bootstrap" and e.mean == pytest.approx(24 / 49)
    assert e.mean is not None and e.ci_low is not None and e.ci_high is not None
    assert 0.0 <= e.ci_low < e.mean < e.ci_high <= 1.0
    assert (e.ci_low, e.ci_high) == bootstrap_interval(rewards)  # seed 0, 2000 resamples
    # Other seeds give other intervals on these rewards: the fixed seed is what makes it repeatable.
    assert {bootstrap_interval(rewards, seed=s) for s in range(1, 6)} - {(e.ci_low, e.ci_high)}
    assert rank([run_dir]).to_rows() == board.to_rows()

    # The same records in another order (another completion order) give the same interval.
    copy = tmp_path / "reordered"
    shutil.copytree(run_dir, copy)
    lines = (copy / TRAJECTORIES).read_text().splitlines()
    (copy / TRAJECTORIES).write_text("\n".join(reversed(lines)) + "\n")
    (again,) = rank([copy]).entries
    assert (again.ci_low, again.ci_high) == (e.ci_low, e.ci_high)


def test_mixed_reward_schemes_are_warned_about(runs):
    board = rank([runs["partial_rate"], runs["partial_binary"]])
    rate, binary = board.entries
    assert sorted(scored(runs["partial_rate"])) == [0.0, 0.5, 0.5]
    assert (rate.ci_method, binary.ci_method) == ("bootstrap", "wilson")
    assert rate.mean == pytest.approx(1 / 3) and binary.mean == 0.0
    assert any("reward scheme" in w for w in board.warnings)
    assert "Warning: the runs differ in reward scheme (binary, pass_rate)" in board.to_markdown()


def test_not_executed_counts_as_unresolved_as_in_swebench(runs):
    board = rank([runs["nothing"], runs["null"], runs["oracle"]])
    assert [e.policy_name for e in board.entries][0] == "oracle"
    nothing = next(e for e in board.entries if e.run_dir == runs["nothing"])
    # No answer at all: reward 0 on each of the 3 tasks (SWE-bench: a missing prediction is unresolved).
    assert nothing.n_scored == 0 and nothing.not_executed == 3 and nothing.n_episodes == 3 and nothing.n_counted == 3
    assert nothing.mean == 0.0 and (nothing.ci_low, nothing.ci_high) == pytest.approx(wilson_interval(0, 3))
    assert nothing.rank == 2  # shares the null policy's rank
    assert nothing.model == "replay:empty.jsonl"
    row = [line for line in board.to_markdown().splitlines() if str(runs["nothing"]) in line][0]
    assert (
        row.startswith("| 2 | replay:empty.jsonl | replay (file=") and "| 0.000 |" in row and "| 3 | 3 | 0 | 3 |" in row
    )
    assert any("not_executed" in w and "unresolved" in w and str(runs["nothing"]) in w for w in board.warnings)


def test_equal_means_share_a_rank(runs, task_set, runtime, tmp_path):
    second = tmp_path / "oracle-again"
    EvalRun(ENV, task_set, OraclePolicy(), runtime, "local", second).run()
    board = rank([runs["null"], runs["oracle"], second])
    assert [e.rank for e in board.entries] == [1, 1, 3]
    assert [e.policy_name for e in board.entries] == ["oracle", "oracle", "null"]


def test_refusals(runs, tmp_path):
    with pytest.raises(LeaderboardError, match="no runs to rank"):
        rank([])
    with pytest.raises(LeaderboardError, match="appears twice"):
        rank([runs["oracle"], runs["oracle"]])
    with pytest.raises(RunError, match="not a run folder"):
        rank([tmp_path / "missing"])
    assert issubclass(LeaderboardError, ValueError)


def test_markdown_cells_cannot_break_the_table(task_set, runtime, tmp_path):
    replay = tmp_path / "a|b.jsonl"
    replay.write_text(json.dumps(PARTIAL[0]) + "\n")
    out = tmp_path / "run"
    EvalRun(ENV, task_set, ReplayPolicy(replay), runtime, "local", out).run()
    md = rank([out]).to_markdown()
    row = [line for line in md.splitlines() if line.startswith("| 1 |")][0]
    assert "a\\|b.jsonl" in row
    assert row.count(" | ") == 12  # 13 cells


def test_runs_over_different_subsets_are_refused_unless_allowed(runs, task_set, runtime, tmp_path):
    subset = tmp_path / "subset"
    EvalRun(ENV, task_set, OraclePolicy(), runtime, "local", subset).run(["add", "rev"])
    with pytest.raises(LeaderboardError) as err:
        rank([runs["null"], subset])
    message = str(err.value)
    assert "\n" not in message and "--allow-subsets" in message
    assert f"{runs['null']} 3" in message and f"{subset} 2" in message
    board = rank([runs["null"], subset], allow_subsets=True)
    assert [e.run_dir for e in board.entries] == [subset, runs["null"]]
    from typer.testing import CliRunner

    from sandgym.cli import app

    result = CliRunner().invoke(app, ["leaderboard", str(runs["null"]), str(subset)])
    assert result.exit_code != 0 and "--allow-subsets" in result.output
    result = CliRunner().invoke(app, ["leaderboard", "--allow-subsets", "--json", str(runs["null"]), str(subset)])
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.output)["rows"]) == 2
