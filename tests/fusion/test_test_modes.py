"""SandboxFusion's test modes through its real client (its own venv):
`pytest`, `go_test`, `junit` and `jest` run a test file with the image's
own test runners (Debian's python3-pytest, golang-go, junit5 and jest; no
network at run time). A passing file is a Success; a failing one is a
Failed run whose output is the runner's report naming the failed test.
On the local runtime and on Docker with runc and gVisor."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sandgym.fusion.api import build_run_code_app
from sandgym.fusion.languages import TEST_MODES
from sandgym.fusion.samples import TEST_FAIL, TEST_PASS
from sandgym.runtimes import get_runtime

from .sandbox_fusion_client import run_client, serving

pytestmark = pytest.mark.sandbox

# Generous: a JVM or Jest start on a loaded 2-core machine, under gVisor.
TIMEOUT_S = 120.0
# What each runner prints when its one test passed.
SAYS_PASSED = {"pytest": "1 passed", "go_test": "ok", "junit": "1 tests successful", "jest": "1 passed"}


@pytest.fixture(
    scope="module",
    params=[
        "local",
        pytest.param("docker", marks=pytest.mark.docker),
        pytest.param("docker:runsc", marks=pytest.mark.docker),
    ],
)
def endpoint(request) -> Iterator[str]:
    rt = get_runtime(request.param)
    with serving(build_run_code_app(rt, concurrency=2)) as url:
        yield url


def request(mode: str, code: str) -> dict:
    return {"language": mode, "code": code, "compile_timeout": TIMEOUT_S, "run_timeout": TIMEOUT_S}


def said(resp: dict) -> str:
    return "\n".join(
        (resp[k] or {}).get(s) or "" for k in ("compile_result", "run_result") for s in ("stdout", "stderr")
    )


def test_every_test_mode_has_samples():
    assert set(TEST_PASS) == set(TEST_FAIL) == set(TEST_MODES) == {"pytest", "go_test", "junit", "jest"}


def test_a_passing_test_file_is_a_success(endpoint):
    got = run_client(endpoint, [request(mode, code) for mode, code in TEST_PASS.items()])
    for mode, r in zip(TEST_PASS, got, strict=True):
        assert "error" not in r, (mode, r)
        resp = r["response"]
        assert (resp["status"], r["summary"]) == ("Success", "Success"), (mode, resp)
        assert resp["run_result"]["status"] == "Finished" and resp["run_result"]["return_code"] == 0
        # The runner ran the one test and said so.
        out = said(resp)
        assert SAYS_PASSED[mode] in out, (mode, out)


def test_a_failing_test_file_is_a_failure_with_the_runners_report(endpoint):
    got = run_client(endpoint, [request(mode, code) for mode, code in TEST_FAIL.items()])
    for mode, r in zip(TEST_FAIL, got, strict=True):
        assert "error" not in r, (mode, r)
        resp = r["response"]
        assert (resp["status"], r["summary"]) == ("Failed", "RunFailed"), (mode, resp)
        assert resp["run_result"]["status"] == "Finished" and resp["run_result"]["return_code"] != 0
        out = said(resp)
        assert "wrong_sum" in out, (mode, out)  # the failed test, by name


def test_a_test_file_that_does_not_build_is_a_failure(endpoint):
    broken = {
        "pytest": "def test_x(:\n    pass\n",
        "go_test": 'package main\n\nimport "testing"\n\nfunc TestX(t *testing.T) { undefinedName() }\n',
        "junit": 'public class BrokenTest {\n  @org.junit.jupiter.api.Test\n  void x() { int y = "text"; }\n}\n',
        "jest": 'test("x", () => {\n  expect(1).toBe(1;\n});\n',
    }
    got = run_client(endpoint, [request(mode, code) for mode, code in broken.items()])
    for mode, r in zip(broken, got, strict=True):
        resp = r["response"]
        assert resp["status"] == "Failed", (mode, resp)
        compiled = TEST_MODES[mode].compile is not None
        assert r["summary"] == ("CompileFailed" if compiled else "RunFailed"), (mode, resp)
        assert said(resp).strip(), mode  # the compiler or runner said why
