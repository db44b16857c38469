"""Run folders read back (sandgym.runs) and the HTML report (sandgym.report).

Every run here is real: EvalRun on a small task set, real sandboxes, and a
real Chromium opens the report.
"""

from __future__ import annotations

import json
import re
import shutil
import statistics
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import pytest

from sandgym.harness import EvalRun
from sandgym.outcomes import OUTCOME_NAMES
from sandgym.policies import NullPolicy, OraclePolicy, ReplayPolicy
from sandgym.report import PHASES, fmt_seconds, write_report
from sandgym.runs import SUMMARY, TRAJECTORIES, RunError, load_run
from sandgym.runtimes.local.runtime import LocalRuntime
from sandgym.specs import TaskSet, TaskSetMeta
from tests.helpers import make_task

ENV = "sandgym/CodeFunction-v0"
XSS = "<script>alert(1)</script>"
CHROMIUM = "/usr/lib/chromium/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def tiny_task_set(root: Path, name: str = "report-mini") -> TaskSet:
    pairs = [
        make_task(
            task_id="add",
            entry_point="add",
            reference="def add(a, b):\n    return a + b\n",
            tests=[{"name": "small", "args": [2, 3], "expected": 5}, {"name": "signs", "args": [-1, 1], "expected": 0}],
            examples=[{"args": [1, 2], "expected": 3}],
        ),
        make_task(
            task_id="rev",
            entry_point="rev",
            reference="def rev(s):\n    return s[::-1]\n",
            tests=[
                {"name": "word", "args": ["hello"], "expected": "olleh"},
                {"name": "pair", "args": ["ab"], "expected": "ba"},
            ],
        ),
        make_task(
            task_id="even",
            entry_point="is_even",
            reference="def is_even(n):\n    return n % 2 == 0\n",
            check_code="def check(candidate):\n    assert candidate(4) is True\n    assert candidate(7) is False\n",
        ),
        make_task(
            task_id="sq",
            entry_point="sq",
            reference="def sq(x):\n    return x * x\n",
            tests=[{"args": [3], "expected": 9}],
        ),
    ]
    TaskSet(TaskSetMeta(name=name, family="code_function"), pairs).write(root)
    return TaskSet.load(root)


class BrokenVerifierRuntime(LocalRuntime):
    """A real local runtime whose verifier sandboxes for some tasks are closed
    before use: every attempt fails as infrastructure (env_error)."""

    def __init__(self, broken_tasks: set[str]):
        super().__init__()
        self.broken_tasks = broken_tasks

    def create(self, spec=None):
        box = super().create(spec)
        if spec is not None and spec.labels.get("role") == "verifier" and spec.labels.get("task") in self.broken_tasks:
            box.close()
        return box


def write_replay(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def task_set(tmp_path_factory) -> TaskSet:
    return tiny_task_set(tmp_path_factory.mktemp("tasks") / "ts")


@pytest.fixture(scope="module")
def mixed_run(task_set, tmp_path_factory) -> Path:
    """passed (add), failed with markup in its output (rev), not_executed (even), env_error (sq)."""
    tmp = tmp_path_factory.mktemp("mixed")
    replay = write_replay(
        tmp / "replay.jsonl",
        [
            {"task_id": "add", "actions": ["```python\ndef add(a, b):\n    return a + b\n```"]},
            {"task_id": "rev", "actions": [f"```python\ndef rev(s):\n    return {XSS!r}\n```"]},
            {"task_id": "sq", "actions": ["```python\ndef sq(x):\n    return x * x\n```"]},
        ],
    )
    rt = BrokenVerifierRuntime({"sq"})
    try:
        out = tmp / "run"
        EvalRun(ENV, task_set, ReplayPolicy(replay), rt, "local", out, concurrency=2).run()
    finally:
        rt.close()
    return out


@pytest.fixture(scope="module")
def oracle_run(task_set, runtime, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("oracle") / "run"
    EvalRun(ENV, task_set, OraclePolicy(), runtime, "local", out, concurrency=2).run()
    return out


class Page(HTMLParser):
    """The bits of the report the tests read: elements by attribute, and text."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict]] = []
        self.text_by_id: dict[str, list[str]] = {}
        self._open_ids: list[tuple[str, str]] = []
        self.texts: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.elements.append((tag, a))
        if "id" in a:
            self._open_ids.append((tag, a["id"]))
            self.text_by_id[a["id"]] = []

    def handle_endtag(self, tag):
        if self._open_ids and self._open_ids[-1][0] == tag:
            self._open_ids.pop()

    def handle_data(self, data):
        self.texts.append(data)
        for _, i in self._open_ids:
            self.text_by_id[i].append(data)

    def text_of(self, id_: str) -> str:
        return "".join(self.text_by_id[id_])

    def with_attr(self, name: str) -> list[dict]:
        return [a for _, a in self.elements if name in a]


def expected_success_line(records) -> str:
    scored = [r for r in records if r.reward is not None]
    passed = sum(r.outcome == "passed" for r in scored)
    rate = f"{100 * passed / len(scored):.1f}%" if scored else "n/a"
    c = Counter(r.outcome for r in records)
    return (
        f"passed {passed} of {len(scored)} scored ({rate}) · {c['env_error']} env_error and "
        f"{c['not_executed']} not_executed not scored"
    )


# -- the run folder ------------------------------------------------------------------------


def test_mixed_run_has_every_kind_of_outcome(mixed_run):
    run = load_run(mixed_run)
    by_task = {r.task_id: r for r in run.records}
    assert {t: r.outcome for t, r in by_task.items()} == {
        "add": "passed",
        "rev": "failed",
        "even": "not_executed",
        "sq": "env_error",
    }
    assert by_task["sq"].reward is None and len(by_task["sq"].attempts) == 3
    assert not run.interrupted and run.summary.n_episodes == 4 and run.summary.n_scored == 2


def test_load_run_errors_name_the_file_and_line(mixed_run, tmp_path):
    with pytest.raises(RunError, match="not a run folder"):
        load_run(tmp_path / "nowhere")

    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(RunError, match=re.escape(str(empty / TRAJECTORIES)) + ": missing"):
        load_run(empty)

    bad = tmp_path / "bad"
    shutil.copytree(mixed_run, bad)
    lines = (bad / TRAJECTORIES).read_text().splitlines()
    (bad / TRAJECTORIES).write_text("\n".join(lines[:2] + ["{not json"] + lines[2:]) + "\n")
    with pytest.raises(RunError, match=re.escape(f"{bad / TRAJECTORIES}, line 3: not JSON")):
        load_run(bad)

    row = json.loads(lines[0])
    del row["outcome"]
    (bad / TRAJECTORIES).write_text("\n".join([lines[1], json.dumps(row)]) + "\n")
    with pytest.raises(RunError, match=r"line 2: not an episode record: field `outcome`"):
        load_run(bad)

    (bad / TRAJECTORIES).write_text("\n".join(lines) + "\n")
    (bad / SUMMARY).write_text("{")
    with pytest.raises(RunError, match=re.escape(str(bad / SUMMARY)) + ": not JSON"):
        load_run(bad)
    summary = json.loads((mixed_run / SUMMARY).read_text())
    (bad / SUMMARY).write_text(json.dumps({**summary, "n_episodes": "many"}))
    with pytest.raises(RunError, match="field `n_episodes`"):
        load_run(bad)
    (bad / SUMMARY).write_text(json.dumps({**summary, "n_episodes": 9}))
    with pytest.raises(RunError, match="n_episodes is 9 but .* holds 4 records"):
        load_run(bad)

    only_summary = tmp_path / "only-summary"
    only_summary.mkdir()
    shutil.copy(mixed_run / SUMMARY, only_summary / SUMMARY)
    with pytest.raises(RunError, match="missing .summary.json is there, the records are not"):
        load_run(only_summary)


def test_interrupted_run_rebuilds_its_summary(mixed_run, tmp_path):
    cut = tmp_path / "cut"
    shutil.copytree(mixed_run, cut)
    (cut / SUMMARY).unlink()
    whole, run = load_run(mixed_run), load_run(cut)
    assert run.interrupted
    for field in (
        "run_id",
        "env_id",
        "task_set",
        "task_set_hash",
        "policy",
        "runtime",
        "seed",
        "n_episodes",
        "outcomes",
        "reward_mean",
        "n_scored",
    ):
        assert getattr(run.summary, field) == getattr(whole.summary, field), field

    # Half the records, as if the run was killed halfway.
    lines = (cut / TRAJECTORIES).read_text().splitlines()
    (cut / TRAJECTORIES).write_text("\n".join(lines[:2]) + "\n")
    run = load_run(cut)
    assert run.interrupted and run.summary.n_episodes == 2
    html = write_report(cut).read_text()
    page = Page(html)
    assert "Interrupted run" in page.text_of("interrupted")
    assert page.text_of("success-line") == expected_success_line(run.records)


# -- the report ----------------------------------------------------------------------------


def test_report_numbers_match_the_records(mixed_run):
    path = write_report(mixed_run)
    assert path == mixed_run / "report.html"
    run = load_run(mixed_run)
    page = Page(path.read_text())

    assert page.text_of("success-line") == expected_success_line(run.records)
    assert page.text_of("success-line") == "passed 1 of 2 scored (50.0%) · 1 env_error and 1 not_executed not scored"
    assert "mean reward 0.500 over 2 scored episodes" in page.text_of("reward-mean")

    meta = page.text_of("run")
    for value in (
        run.summary.run_id,
        run.summary.task_set,
        run.summary.task_set_hash,
        ENV,
        "replay",
        str(run.summary.policy["file"]),
        "local",
        "episodes",
    ):
        assert value in meta, value

    # Outcome chart: every outcome name, zeros included, counts from the records.
    counts = Counter(r.outcome for r in run.records)
    rows = {a["data-outcome"]: int(a["data-count"]) for a in page.with_attr("data-outcome")}
    assert list(rows) == list(OUTCOME_NAMES)
    assert rows == {name: counts.get(name, 0) for name in OUTCOME_NAMES}

    # Reward table: one row per episode, sorted by reward, unscored last.
    reward_rows = [a for tag, a in page.elements if tag == "tr" and "data-reward" in a]
    assert sorted(a["data-episode"] for a in reward_rows) == sorted(r.episode_id for r in run.records)
    by_id = {r.episode_id: r for r in run.records}
    assert [a["data-reward"] for a in reward_rows] == [str(by_id[a["data-episode"]].reward) for a in reward_rows]
    assert [a["data-reward"] for a in reward_rows] == ["1.0", "0.0", "None", "None"]

    # Latency: P50 and P95 of every phase, over the episodes that ran.
    ran = [r for r in run.records if not (r.outcome == "not_executed" and not r.steps)]
    assert len(ran) == 3
    section = page.text_of("latency")
    for phase in PHASES:
        values = sorted(getattr(r.timings, phase) for r in ran)
        p50 = statistics.median(values)
        p95 = statistics.quantiles(values, n=20, method="inclusive")[-1]
        assert f"{phase} · P50 {fmt_seconds(p50)} · P95 {fmt_seconds(p95)}" in section, phase
    assert len([a for tag, a in page.elements if tag == "svg" and "data-phase" in a]) == len(PHASES)

    # Failures: every episode that did not pass, with the first line of what went wrong.
    failures = page.text_of("failures")
    assert "Failures and errors (3)" in failures
    assert "word (failed): expected 'olleh', got " + repr(XSS) in failures
    assert "the policy has no actions for this task" in failures
    assert "is closed" in failures  # the env_error's verifier detail


def test_report_is_self_contained(mixed_run, tmp_path):
    html = write_report(mixed_run, tmp_path / "elsewhere" / "r.html").read_text()
    lowered = html.lower()
    for needle in ("http://", "https://", "<script", "<link", " src=", "@import", "url(", "<img", "<iframe"):
        assert needle not in lowered, needle
    assert "default-src 'none'" in html  # a CSP forbids loading anything, should escaping ever fail


def test_strings_from_records_are_escaped(mixed_run):
    html = write_report(mixed_run).read_text()
    assert XSS not in html
    assert "<script" not in html.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_oracle_report(oracle_run):
    page = Page(write_report(oracle_run).read_text())
    assert page.text_of("success-line") == "passed 4 of 4 scored (100.0%) · 0 env_error and 0 not_executed not scored"
    assert "every episode passed" in page.text_of("failures")
    assert "interrupted" not in page.text_by_id


def test_report_of_a_run_with_nothing_scored(task_set, runtime, tmp_path):
    out = tmp_path / "run"
    replay = write_replay(tmp_path / "replay.jsonl", [])
    EvalRun(ENV, task_set, ReplayPolicy(replay), runtime, "local", out).run()
    page = Page(write_report(out).read_text())
    assert page.text_of("success-line") == "passed 0 of 0 scored (n/a) · 0 env_error and 4 not_executed not scored"
    assert "no scored episodes" in page.text_of("reward-mean")


@pytest.mark.chromium
def test_report_opens_in_chromium(mixed_run, tmp_path):
    from playwright.sync_api import sync_playwright

    report = write_report(mixed_run)
    shot = tmp_path / "report.png"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            requests: list[str] = []
            page.on("request", lambda r: requests.append(r.url))
            page.goto(report.resolve().as_uri())
            assert requests == [report.resolve().as_uri()]  # nothing else was fetched
            body = page.inner_text("body")
            assert "passed 1 of 2 scored (50.0%) · 1 env_error and 1 not_executed not scored" in body
            assert XSS in body  # shown as text, not run
            assert page.evaluate("document.scripts.length") == 0
            svgs = page.locator("svg.chart")
            assert svgs.count() == 1 + len(PHASES)
            for i in range(svgs.count()):
                box = svgs.nth(i).bounding_box()
                assert box is not None and box["width"] > 100 and box["height"] > 50, box
            assert page.evaluate("document.documentElement.scrollWidth") <= 1280  # no sideways scrolling
            page.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


def test_null_policy_report(task_set, runtime, tmp_path):
    out = tmp_path / "run"
    EvalRun(ENV, task_set, NullPolicy(), runtime, "local", out).run()
    page = Page(write_report(out).read_text())
    assert page.text_of("success-line") == "passed 0 of 4 scored (0.0%) · 0 env_error and 0 not_executed not scored"
    rows = {a["data-outcome"]: int(a["data-count"]) for a in page.with_attr("data-outcome")}
    assert rows["failed"] == 4 and sum(rows.values()) == 4
