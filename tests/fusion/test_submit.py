"""SandboxFusion's stdio test mode, `POST /submit` (sandgym/fusion/
submit.py), driven by its real client's `submit`: cases the caller
provides (CommonOJ's format) and the hidden cases of the bundled stdio task
set, by task id; a right program is accepted in any language, a wrong or
slow one is not, hidden data stays on the server, bad submissions are a
4xx naming the field."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from sandgym.fusion.api import build_run_code_app
from sandgym.fusion.compile_cache import CompileCache
from sandgym.fusion.submit import extract_code, provided_cases
from sandgym.runtimes import get_runtime
from sandgym.specs import TaskSet
from sandgym.specs.code_function import CodeTaskPair

from .sandbox_fusion_client import SUBMIT_SCRIPT, run_client, serving

DATASET = "code_function/stdio-v1"
SUM = "import sys\nprint(sum(map(int, sys.stdin.read().split())))\n"
CASES = {"test": [{"input": {"stdin": "1 2\n"}, "output": {"stdout": "3\n"}}, {"input": {}, "output": {"stdout": "0"}}]}


def test_code_is_read_as_sandbox_fusion_reads_it():
    assert extract_code("say\n```python\nx = 1\n```\nthen\n```cpp\nint main() {}\n```\n") == (
        "int main() {}\n",
        "fenced",
    )
    assert extract_code("```python\nprint(1)\n") == ("print(1)\n", "incomplete_fenced")
    assert extract_code("print(1)") == ("print(1)", "heuristic")
    assert extract_code("  ") == ("", "empty")
    assert [c.stdin for c in provided_cases(CASES)] == ["1 2\n", ""]


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, CompileCache]]:
    app = build_run_code_app(get_runtime("local"), concurrency=2)
    with serving(app) as url:
        yield url, app.state.compile_cache


def submit_request(completion: str, language: str = "python", **config) -> dict:
    return {
        "dataset": "my_contest",
        "id": 7,
        "completion": completion,
        "config": {"dataset_type": "CommonOJDataset", "language": language, "provided_data": CASES, **config},
    }


@pytest.mark.sandbox
def test_provided_cases_accept_a_right_program_and_not_a_wrong_one(served):
    url, _ = served
    got = run_client(
        url,
        [
            submit_request(f"Here:\n```python\n{SUM}```"),
            submit_request("```python\nprint(3)\n```"),
            submit_request("```python\nwhile True:\n    pass\n```", run_timeout=1.0),
        ],
        SUBMIT_SCRIPT,
    )
    right, wrong, slow = (r["result"] for r in got)
    assert right["accepted"] and right["extracted_type"] == "fenced" and len(right["tests"]) == 2, right
    assert right["tests"][0]["test_info"]["output"] == {"stdout": "3\n"}  # the caller's own data, echoed
    assert not wrong["accepted"] and [t["passed"] for t in wrong["tests"]] == [True, False], wrong
    assert not slow["accepted"]
    assert {t["exec_info"]["run_result"]["status"] for t in slow["tests"]} == {"TimeLimitExceeded"}


@pytest.mark.sandbox
@pytest.mark.parametrize("language", ["cpp", "go", "nodejs"])
def test_the_bundled_tasks_judge_a_reference_in_any_language_once_compiled(served, language):
    url, cache = served
    pair = CodeTaskPair.of(TaskSet.load(DATASET).get("stdio/gcd-lcm"))
    hits = cache.hits
    got = run_client(
        url,
        [
            {
                "dataset": DATASET,
                "id": "stdio/gcd-lcm",
                "completion": f"```{language}\n{pair.reference(language)}```",
                "config": {"language": language},
            }
        ],
        SUBMIT_SCRIPT,
    )[0]
    result = got["result"]
    assert result["accepted"], result
    assert len(result["tests"]) == len(pair.hidden.io_tests)
    # Hidden cases stay on the server: a name, no data.
    assert all(set(t["test_info"]) == {"name"} for t in result["tests"])
    if language != "nodejs":  # compiled once, then from the cache for every later case
        assert cache.hits - hits == len(pair.hidden.io_tests) - 1


@pytest.mark.sandbox
def test_a_wrong_program_on_a_bundled_task_is_not_accepted(served):
    url, _ = served
    got = run_client(
        url,
        [{"dataset": DATASET, "id": "stdio/sum-list", "completion": "print(0)", "config": {"language": "python"}}],
        SUBMIT_SCRIPT,
    )[0]["result"]
    assert not got["accepted"] and got["extracted_type"] == "heuristic"


def _post(url: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(
        f"{url}/submit", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.mark.sandbox
@pytest.mark.parametrize(
    "body, says",
    [
        ({"dataset": "/etc", "id": 1, "completion": "x", "config": {}}, "not served here"),
        ({"dataset": DATASET, "id": "stdio/nope", "completion": "x", "config": {}}, "not a task"),
        ({"dataset": "x", "id": 1, "completion": "x", "config": {"language": "cobol"}}, "config.language"),
        ({"dataset": "x", "id": 1, "completion": "x", "config": {"provided_data": {"test": [1]}}}, "provided_data"),
    ],
)
def test_bad_submissions_are_a_4xx_naming_the_field(served, body, says):
    status, got = _post(served[0], body)
    assert status == 400 and says in got["detail"], got
