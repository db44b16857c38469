"""SandboxFusion's stdio test mode: `POST /submit` judges a completion's
program against input/output cases, as its CommonOJ datasets (CodeContests,
APPS, ...) do, with the shapes its client (sandbox-fusion 0.3.7) sends and
reads: SubmitRequest {dataset, id, completion, config} -> EvalResult
{id, accepted, extracted_code, extracted_type, tests: [{passed, exec_info,
test_info}]}.

The cases come from either
- `config.provided_data`: the caller's own, SandboxFusion's format
  ({"test": [{"input": {"stdin": ...}, "output": {"stdout": ...}}, ...]});
- or `dataset`: one of the stdio task sets this server was given (the code
  family's `kind: stdio` tasks, by task id), whose hidden cases never
  leave the server: their test_info names the case, not its data.

Each case is one `/run_code` run (compile_cache.py spares the compiles
after the first); a case passes when the program exits 0 in time and its
stdout equals the expected output up to trailing whitespace.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from sandgym.runtimes.base import Runtime
from sandgym.specs import TaskSet
from sandgym.specs.code_function import CodeTaskPair, IOCase, same_output

from .compile_cache import CompileCache
from .languages import LANGUAGES
from .run_code import MAX_TIMEOUT_S, RunCodeError, RunCodeRequest, RunCodeResponse, run_code

MAX_CASES = 512


class TestConfig(BaseModel):
    __test__ = False  # not a pytest class
    model_config = ConfigDict(extra="ignore")

    dataset_type: str | None = None
    language: str | None = None
    compile_timeout: float | None = Field(None, gt=0, le=MAX_TIMEOUT_S)
    run_timeout: float | None = Field(None, gt=0, le=MAX_TIMEOUT_S)
    provided_data: list[dict[str, Any]] | dict[str, Any] | None = None
    extra: dict[str, Any] = Field(default_factory=dict)


class SubmitRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    dataset: str
    id: int | str
    completion: str
    config: TestConfig = Field(default_factory=TestConfig)


class EvalTestCase(BaseModel):
    passed: bool
    exec_info: RunCodeResponse
    test_info: dict[str, Any] | None = None


class EvalResult(BaseModel):
    id: int | str
    accepted: bool
    extracted_code: str
    full_code: str | None = None
    test_code: str | None = None
    tests: list[EvalTestCase]
    extracted_type: Literal["fenced", "incomplete_fenced", "heuristic", "empty"] | None = None
    extra: dict[str, Any] | None = None


class SubmitError(RunCodeError):
    """A malformed or unknown submission (HTTP 4xx); the message names the field."""


_FENCE = re.compile(r"```[^\n`]*\n(.*?)```", re.DOTALL)


def extract_code(completion: str) -> tuple[str, str]:
    """(code, SandboxFusion's extracted_type): the last fenced block, an
    unclosed one at the end, or else the whole completion."""
    blocks = _FENCE.findall(completion)
    if blocks:
        return blocks[-1], "fenced"
    start = completion.rfind("```")
    if start >= 0 and "\n" in completion[start:]:
        return completion[completion.index("\n", start) + 1 :], "incomplete_fenced"
    if completion.strip():
        return completion, "heuristic"
    return "", "empty"


def provided_cases(data: list[dict[str, Any]] | dict[str, Any]) -> list[IOCase]:
    """SandboxFusion's provided_data: {"test": [...]} or the list itself;
    each test {"input": {"stdin": s}, "output": {"stdout": s}}."""
    tests = data.get("test") if isinstance(data, dict) else data
    if not isinstance(tests, list) or not tests:
        raise SubmitError('config.provided_data: give {"test": [{"input": {"stdin": ...}, "output": {"stdout": ...}}]}')
    if len(tests) > MAX_CASES:
        raise SubmitError(f"config.provided_data: {len(tests)} tests, at most {MAX_CASES}")
    cases = []
    for i, t in enumerate(tests):
        try:
            stdin, stdout = t["input"].get("stdin", ""), t["output"]["stdout"]
        except (KeyError, TypeError, AttributeError):
            raise SubmitError(
                f'config.provided_data test {i}: needs "input": {{"stdin": ...}} and "output": {{"stdout": ...}}'
            ) from None
        if not isinstance(stdin, str) or not isinstance(stdout, str):
            raise SubmitError(f"config.provided_data test {i}: stdin and stdout must be strings")
        cases.append(IOCase(name=f"test_{i}", stdin=stdin, stdout=stdout))
    return cases


def dataset_cases(datasets: Mapping[str, TaskSet], name: str, task_id: int | str) -> tuple[CodeTaskPair, list[IOCase]]:
    if name not in datasets:
        raise SubmitError(
            f"dataset {name!r} is not served here; served: {', '.join(datasets) or 'none'} "
            '(or send the cases in config.provided_data with dataset_type "CommonOJDataset")'
        )
    ts = datasets[name]
    if str(task_id) not in ts.ids:
        raise SubmitError(f"id {task_id!r} is not a task of {name}; for example: {', '.join(ts.ids[:3])}")
    pair = CodeTaskPair.of(ts.get(str(task_id)))
    return pair, list(pair.hidden.io_tests)


def submit(
    runtime: Runtime, req: SubmitRequest, datasets: Mapping[str, TaskSet], cache: CompileCache | None = None
) -> EvalResult:
    """Judge `req`'s completion on every case; SubmitError for a malformed
    request."""
    language = req.config.language or "python"
    if language not in LANGUAGES:
        raise SubmitError(f"config.language {language!r} is not supported; supported: {', '.join(LANGUAGES)}")
    hidden = req.config.provided_data is None
    if hidden:
        task, cases = dataset_cases(datasets, req.dataset, req.id)
        run_timeout = req.config.run_timeout or task.visible.timeout_s
    else:
        assert req.config.provided_data is not None
        cases = provided_cases(req.config.provided_data)
        run_timeout = req.config.run_timeout or 10.0
    code, kind = extract_code(req.completion)
    tests = []
    for case in cases:
        got = run_code(
            runtime,
            RunCodeRequest(
                code=code,
                language=language,
                stdin=case.stdin,
                compile_timeout=req.config.compile_timeout or 60.0,
                run_timeout=run_timeout,
            ),
            cache,
        )
        out = got.run_result.stdout if got.run_result is not None else None
        passed = got.status == "Success" and out is not None and same_output(out, case.stdout)
        info: dict[str, Any] = {"name": case.name}
        if not hidden:
            info |= {"input": {"stdin": case.stdin}, "output": {"stdout": case.stdout}}
        tests.append(EvalTestCase(passed=passed, exec_info=got, test_info=info))
    return EvalResult(
        id=req.id,
        accepted=bool(tests) and all(t.passed for t in tests),
        extracted_code=code,
        extracted_type=kind,
        tests=tests,
    )
