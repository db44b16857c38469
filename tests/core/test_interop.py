"""Bringing data in and out, and harness habits: task sets by name, the
bundled-set listing, sandgym's own JSONL export, --limit, --epochs with
pass@k, default run folders, --version, the family table's hooks, and a
leaderboard that names the model and fits 80 columns."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from rich.console import Console
from typer.testing import CliRunner

from sandgym import __version__
from sandgym.cli import app, leaderboard_table
from sandgym.families import FAMILIES, family_of_env, load
from sandgym.leaderboard import rank
from sandgym.passk import estimate_pass_at_k, pass_at_k
from sandgym.records import EpisodeRecord, Summary, policy_label
from sandgym.specs import TaskSet, TaskSpecError, bundled_dir, bundled_task_sets, resolve_task_set
from sandgym.specs.portable import read_jsonl, write_jsonl

runner = CliRunner()

TASKS = {
    "add": (
        {"id": "add", "prompt": "Return a + b.", "entry_point": "add"},
        {
            "id": "add",
            "tests": [{"args": [2, 3], "expected": 5}],
            "reference_solution": "def add(a, b):\n    return a + b\n",
        },
    ),
    "neg": (
        {"id": "neg", "prompt": "Return -x.", "entry_point": "neg"},
        {"id": "neg", "tests": [{"args": [2], "expected": -2}], "reference_solution": "def neg(x):\n    return -x\n"},
    ),
    "sq": (
        {"id": "sq", "prompt": "Return x * x.", "entry_point": "sq"},
        {"id": "sq", "tests": [{"args": [3], "expected": 9}], "reference_solution": "def sq(x):\n    return x * x\n"},
    ),
}


def write_set(root: Path, name: str = "interop-mini") -> Path:
    (root / "tasks").mkdir(parents=True)
    (root / "hidden").mkdir()
    (root / "taskset.yaml").write_text(yaml.safe_dump({"name": name, "family": "code_function"}))
    for slug, (vis, hid) in TASKS.items():
        (root / "tasks" / f"{slug}.yaml").write_text(yaml.safe_dump(vis))
        (root / "hidden" / f"{slug}.yaml").write_text(yaml.safe_dump(hid))
    return root


@pytest.fixture(scope="module")
def task_dir(tmp_path_factory) -> Path:
    return write_set(tmp_path_factory.mktemp("interop") / "ts")


def records_of(out: Path) -> list[EpisodeRecord]:
    return [EpisodeRecord.model_validate_json(x) for x in (out / "trajectories.jsonl").read_text().splitlines()]


# -- the command line ------------------------------------------------------------------------


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"sandgym {__version__}"


def test_tasks_list_without_arguments_lists_every_bundled_set():
    result = runner.invoke(app, ["tasks", "list"])
    assert result.exit_code == 0, result.output
    names = bundled_task_sets()
    assert {"code_function/basic-v1", "swe_repo/pypi-v1", "swe_repo/billing-v1", "browser_form/basic-v1"} <= set(names)
    for name in names:
        ts = TaskSet.load(bundled_dir() / name)
        line = next(ln for ln in result.output.splitlines() if f" {name} " in ln)
        assert ts.meta.family in line and f" {len(ts)} " in line and ts.hash[:19] in line


def test_task_sets_by_bundled_name_and_a_path_wins(tmp_path, monkeypatch):
    assert resolve_task_set("swe_repo/pypi-v1") == bundled_dir() / "swe_repo" / "pypi-v1"
    assert resolve_task_set("pypi-v1") == bundled_dir() / "swe_repo" / "pypi-v1"  # one family has that name
    with pytest.raises(TaskSpecError, match="several bundled task sets .*basic-v1"):
        resolve_task_set("basic-v1")
    with pytest.raises(TaskSpecError, match="not a task-set folder .* bundled sets: .*swe_repo/pypi-v1"):
        TaskSet.load("swe_repo/no-such-set")
    assert TaskSet.load("swe_repo/pypi-v1").meta.name == "pypi-v1"
    # A folder of that name here wins over the bundled set.
    monkeypatch.chdir(tmp_path)
    write_set(tmp_path / "code_function" / "basic-v1", name="mine")
    assert TaskSet.load("code_function/basic-v1").meta.name == "mine"
    result = runner.invoke(app, ["tasks", "list", "code_function/basic-v1"])
    assert result.exit_code == 0 and "mine v1" in result.output


def test_eval_by_name_limit_and_a_new_folder_per_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for _ in range(2):  # twice: the second run must not stop on the first one's folder
        result = runner.invoke(app, ["eval", "--tasks", "code_function/basic-v1", "--limit", "2", "-j", "2"])
        assert result.exit_code == 0, result.output
    runs = sorted((tmp_path / "runs").iterdir())
    assert len(runs) == 2
    for run in runs:
        assert run.name.startswith("CodeFunction-v0-oracle-")
        stamp = run.name.removeprefix("CodeFunction-v0-oracle-")[:15]
        assert len(stamp) == 15 and stamp[8] == "-" and stamp.replace("-", "").isdigit()
        records = records_of(run)
        expected = TaskSet.load("code_function/basic-v1").ids[:2]
        assert sorted(r.task_id for r in records) == expected
        assert all(r.outcome == "passed" for r in records)


def test_epochs_play_each_task_n_times_and_report_pass_at_k(task_dir, tmp_path):
    replay = tmp_path / "half.jsonl"
    # sq has no actions: not_executed in every epoch (a failure for pass@k).
    replay.write_text(
        json.dumps({"task_id": "add", "actions": ["```python\ndef add(a, b):\n    return a + b\n```"]})
        + "\n"
        + json.dumps({"task_id": "neg", "actions": ["```python\ndef neg(x):\n    return x\n```"]})
        + "\n"
    )
    out = tmp_path / "run"
    args = ["eval", "--tasks", str(task_dir), "--policy", f"replay:{replay}", "--epochs", "3", "--seed", "5"]
    result = runner.invoke(app, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    records = records_of(out)
    assert sorted((r.task_id, r.epoch) for r in records) == [(t, e) for t in ("add", "neg", "sq") for e in range(3)]
    assert all(r.seed == 5 + r.epoch for r in records)
    summary = Summary.model_validate_json((out / "summary.json").read_text())
    assert summary.samples_per_task == 3 and summary.n_tasks == 3
    assert summary.pass_at_k == pytest.approx({"1": 1 / 3})
    # Resuming a finished run plays nothing more; the seeds check per epoch.
    result = runner.invoke(app, [*args, "--out", str(out), "--resume"])
    assert result.exit_code == 0, result.output
    assert len(records_of(out)) == 9


def test_jsonl_export_import_round_trip_keeps_the_hash(tmp_path):
    for name in ("code_function/basic-v1", "swe_repo/billing-v1", "browser_form/basic-v1"):
        ts = TaskSet.load(name)
        out = tmp_path / f"{name.replace('/', '_')}.jsonl"
        result = runner.invoke(app, ["tasks", "export", name, "--out", str(out)])
        assert result.exit_code == 0, result.output
        assert read_jsonl(out).hash == ts.hash
        dest = tmp_path / f"imported-{name.replace('/', '_')}"
        result = runner.invoke(app, ["tasks", "import", "jsonl", str(out), "--out", str(dest)])
        assert result.exit_code == 0, result.output
        assert TaskSet.load(dest).hash == ts.hash
    # A family without that format says which it has.
    result = runner.invoke(app, ["tasks", "export", "code_function/basic-v1", "--format", "swebench", "--out", "x"])
    assert result.exit_code == 2 and "exports as jsonl" in result.output
    # A broken line is named.
    bad = tmp_path / "bad.jsonl"
    write_jsonl(TaskSet.load("code_function/basic-v1"), bad)
    lines = bad.read_text().splitlines()
    lines[2] = json.dumps({"id": "x", "visible": {"id": "x"}, "hidden": {}})
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(TaskSpecError, match=r"bad.jsonl:3"):
        read_jsonl(bad)


# -- the family table's hooks -----------------------------------------------------------------


def test_family_hooks_are_import_strings_that_load():
    for fam in FAMILIES.values():
        if fam.predictions:
            assert callable(load(fam.predictions))
        for _fmt, ref in fam.exporters:
            assert callable(load(ref))
    assert family_of_env("sandgym/SWERepo-v0").predictions
    assert family_of_env("sandgym/CodeFunction-v0").predictions


def test_predictions_for_a_family_without_the_hook_are_refused(tmp_path):
    preds = tmp_path / "p.jsonl"
    preds.write_text(json.dumps({"task_id": "t", "completion": "x"}) + "\n")
    result = runner.invoke(app, ["eval", "--env", "sandgym/BrowserForm-v0", "--samples", str(preds)])
    assert result.exit_code == 2 and "judges no predictions" in result.output


def test_predictions_naming_unknown_tasks_are_refused(task_dir, tmp_path):
    preds = tmp_path / "p.jsonl"
    preds.write_text(json.dumps({"task_id": "nope", "completion": "x"}) + "\n")
    result = runner.invoke(
        app, ["eval", "--tasks", str(task_dir), "--samples", str(preds), "--out", str(tmp_path / "o")]
    )
    assert result.exit_code == 2 and "not in task set" in result.output and "p.jsonl:1" in result.output


# -- pass@k ------------------------------------------------------------------------------------


def test_pass_at_k_rules():
    assert estimate_pass_at_k(10, 0, 1) == 0.0 and estimate_pass_at_k(10, 10, 10) == 1.0
    assert estimate_pass_at_k(10, 3, 1) == pytest.approx(0.3)
    with pytest.raises(ValueError, match="at least 10 samples"):
        estimate_pass_at_k(5, 1, 10)
    # env_error samples are not the model's: left out of n.
    outcomes = [("a", "passed"), ("a", "env_error"), ("a", "failed"), ("b", "not_executed"), ("b", "passed")]
    assert pass_at_k(outcomes) == {"1": pytest.approx(0.5)}
    assert pass_at_k([("a", "env_error")]) == {}


# -- the leaderboard ---------------------------------------------------------------------------


def fake_run(root: Path, policy: dict, outcomes: list[str], run_id: str) -> Path:
    """A run folder as `sandgym eval` writes it, with the given outcomes on tasks t0, t1, ..."""
    root.mkdir(parents=True)
    records = []
    for i, outcome in enumerate(outcomes):
        reward = {"passed": 1.0, "failed": 0.0}.get(outcome)
        records.append(
            EpisodeRecord(
                run_id=run_id,
                episode_id=f"{run_id}-{i:05d}",
                task_id=f"t{i}",
                task_version=1,
                task_set="board",
                task_set_hash="sha256:" + "ab" * 32,
                env_id="sandgym/SWERepo-v0",
                env_version="0",
                runtime={"backend": "local", "isolation": "namespaces", "name": "local"},
                policy=policy,
                seed=0,
                outcome=outcome,
                reward=reward,
                started_at="2026-11-30T12:00:00+00:00",
            )
        )
    (root / "trajectories.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in records))
    return root


def test_leaderboard_names_the_model_and_fits_80_columns(tmp_path):
    long_model = "meta-llama/Llama-3.3-70B-Instruct-Turbo-with-a-very-long-fine-tune-suffix"
    a = fake_run(
        tmp_path / "a",
        {"name": "openai", "model": "qwen2.5-coder-32b", "base_url": "http://127.0.0.1:8000/v1"},
        ["passed", "passed", "failed", "env_error"],
        "aaaa",
    )
    b = fake_run(
        tmp_path / "b",
        {"name": "openai", "model": long_model, "base_url": "http://x/v1"},
        ["passed", "not_executed", "not_executed", "failed"],
        "bbbb",
    )
    board = rank([a, b])
    rows = board.to_rows()
    assert [r["model"] for r in rows] == ["qwen2.5-coder-32b", long_model]
    # not_executed counts as unresolved (0); env_error is left out and counted apart.
    assert (rows[0]["mean_reward"], rows[0]["n_counted"], rows[0]["env_error"]) == (pytest.approx(2 / 3), 3, 1)
    assert (rows[1]["mean_reward"], rows[1]["n_counted"], rows[1]["not_executed"]) == (0.25, 4, 2)
    console = Console(width=80, record=True, color_system=None)
    console.print(leaderboard_table(board))
    text = console.export_text()
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80, text
    assert "qwen2.5-coder-32b" in text and "meta-llama/Llama-3.3" in text and "openai" not in text
    row_a = next(line for line in lines if "qwen2.5-coder-32b" in line)
    assert "0.667" in row_a and row_a.split()[-2:] == ["1", "0"]  # env_err 1, not_run 0
    row_b = next(line for line in lines if "meta-llama" in line)
    assert "0.250" in row_b and row_b.split()[-2:] == ["0", "2"]
    # The CLI prints the same table (and the run folders below it).
    result = runner.invoke(app, ["leaderboard", str(a), str(b)])
    assert result.exit_code == 0, result.output
    assert "qwen2.5-coder-32b" in result.output and f"#1 {a}" in result.output


def test_policy_labels():
    assert policy_label({"name": "openai", "model": "m-1"}) == "m-1"
    assert policy_label({"name": "replay", "file": "/x/y/actions.jsonl"}) == "replay:actions.jsonl"
    assert policy_label({"name": "oracle"}) == "oracle"
