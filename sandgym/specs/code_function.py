"""Spec models of the code-function family: a function to write, tests to
judge it; or (`kind: stdio`) a whole program, in any language of the
`/run_code` table, that reads stdin and writes stdout, judged by hidden
input/output pairs (CodeContests / APPS style)."""

from __future__ import annotations

import keyword
from typing import Any, Literal

from pydantic import (
    Field,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from sandgym.specs.base import HiddenSpec, StrictModel, TaskId, TaskPair, VisibleSpec, json_data
from sandgym.specs.egress import EgressRule


class Example(StrictModel):
    """One call of the entry point: positional args, keyword args, expected return."""

    args: list[Any] = Field(default_factory=list)
    kwargs: dict[str, Any] = Field(default_factory=dict)
    expected: Any = None

    @field_validator("args", "kwargs", "expected")
    @classmethod
    def _plain(cls, v: Any) -> Any:
        return json_data(v)


class TestCase(Example):
    name: str | None = None


class IOCase(StrictModel):
    """One run of a stdio program: what it reads, what it must write
    (compared line by line, trailing whitespace ignored)."""

    name: str | None = None
    stdin: str = ""
    stdout: str


TaskKind = Literal["function", "stdio"]


def same_output(got: str, want: str) -> bool:
    """How a stdio program's output is judged: equal to the expected one
    up to trailing whitespace on each line and trailing blank lines."""
    return output_lines(got) == output_lines(want)


def output_lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.rstrip().splitlines()]


def _without_defaults(data: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """A dump without the fields stdio tasks added, where they hold their
    defaults: the content hash of every function-task set stays what it was."""
    return {k: v for k, v in data.items() if not (k in defaults and v == defaults[k])}


class CodeTask(VisibleSpec):
    """The visible half of a code-function task."""

    schema_version: Literal[1] = 1
    id: TaskId
    family: Literal["code_function"] = "code_function"
    version: int = Field(1, ge=1, description="Bump when the task's meaning changes.")
    title: str = ""
    prompt: str = Field(min_length=1, description="What the agent is asked to do.")
    kind: TaskKind = Field("function", description="function: a Python function; stdio: a program reading stdin.")
    entry_point: str = Field(
        "", validate_default=True, description="Name of the function the code must define (function tasks)."
    )
    context_code: str = Field("", description="Code the candidate module starts with (imports, helpers).")
    examples: list[Example] = Field(default_factory=list, description="Visible examples.")
    io_examples: list[IOCase] = Field(default_factory=list, description="Visible input/output pairs (stdio tasks).")
    tags: list[str] = Field(default_factory=list)
    timeout_s: float = Field(10.0, gt=0, le=600, description="Wall time for verifying one submission.")
    float_tolerance: float | None = Field(None, ge=0, description="Compare floats within this tolerance.")
    source: str = Field("sandgym", description="Where the task comes from (dataset name).")
    egress: list[EgressRule] = Field(
        default_factory=list,
        description="What the agent's sandbox may reach (addresses/CIDRs and ports); nothing by default. "
        "Honoured on k8s (a NetworkPolicy); other runtimes refuse such a task.",
    )

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without_defaults(handler(self), {"kind": "function", "io_examples": [], "egress": []})

    @field_validator("entry_point")
    @classmethod
    def _entry(cls, v: str, info: ValidationInfo) -> str:
        kind = info.data.get("kind", "function")
        if kind == "function" and (not v.isidentifier() or keyword.iskeyword(v)):
            raise ValueError(f"entry_point {v!r} is not a Python identifier")
        if kind == "stdio" and v:
            raise ValueError("a stdio task has no entry_point: it asks for a whole program")
        return v

    @model_validator(mode="after")
    def _kind_fields(self) -> CodeTask:
        if self.kind == "stdio" and self.examples:
            raise ValueError("a stdio task has no examples: give io_examples")
        if self.kind == "function" and self.io_examples:
            raise ValueError("io_examples belong to stdio tasks (kind: stdio)")
        return self


class CodeHidden(HiddenSpec):
    """The hidden half: only the verifier reads it."""

    schema_version: Literal[1] = 1
    id: str
    tests: list[TestCase] = Field(default_factory=list, description="Calls and expected returns.")
    check_code: str | None = Field(None, description="Python defining check(candidate) that asserts (HumanEval style).")
    io_tests: list[IOCase] = Field(default_factory=list, description="Hidden input/output pairs (stdio tasks).")
    reference_solution: str = Field(min_length=1, description="Code that passes every test (Python).")
    reference_solutions: dict[str, str] = Field(
        default_factory=dict, description="More reference solutions by `/run_code` language (stdio tasks)."
    )

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without_defaults(handler(self), {"io_tests": [], "reference_solutions": {}})

    @model_validator(mode="after")
    def _has_tests(self) -> CodeHidden:
        if not self.tests and not self.check_code and not self.io_tests:
            raise ValueError("a hidden spec needs `tests`, `check_code` or (stdio tasks) `io_tests`")
        return self


class CodeTaskPair(TaskPair):
    visible: CodeTask
    hidden: CodeHidden

    @model_validator(mode="after")
    def _kind_matches(self) -> CodeTaskPair:
        stdio = self.visible.kind == "stdio"
        if stdio and (self.hidden.tests or self.hidden.check_code or not self.hidden.io_tests):
            raise ValueError(f"{self.visible.id}: a stdio task is judged by hidden io_tests alone")
        if not stdio and (self.hidden.io_tests or self.hidden.reference_solutions):
            raise ValueError(f"{self.visible.id}: io_tests and reference_solutions belong to stdio tasks")
        return self

    def reference(self, language: str = "python") -> str:
        """The reference solution in `language`."""
        if language == "python":
            return self.hidden.reference_solution
        return self.hidden.reference_solutions[language]


VISIBLE = CodeTask
HIDDEN = CodeHidden
PAIR = CodeTaskPair
LIST_COLUMNS = ("entry point", "tags", "examples", "hidden tests")


def list_row(task: CodeTaskPair) -> tuple[str, ...]:
    """The `sandgym tasks list` columns of one task (after its id)."""
    v, h = task.visible, task.hidden
    if v.kind == "stdio":
        return ("(stdio)", ",".join(v.tags), str(len(v.io_examples)), str(len(h.io_tests)))
    return (v.entry_point, ",".join(v.tags), str(len(v.examples)), "check()" if h.check_code else str(len(h.tests)))
