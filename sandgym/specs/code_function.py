"""Spec models of the code-function family: a function to write, tests to judge it."""

from __future__ import annotations

import keyword
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from sandgym.specs.base import HiddenSpec, StrictModel, TaskId, TaskPair, VisibleSpec, json_data


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


class CodeTask(VisibleSpec):
    """The visible half of a code-function task."""

    schema_version: Literal[1] = 1
    id: TaskId
    family: Literal["code_function"] = "code_function"
    version: int = Field(1, ge=1, description="Bump when the task's meaning changes.")
    title: str = ""
    prompt: str = Field(min_length=1, description="What the agent is asked to do.")
    entry_point: str = Field(description="Name of the function the code must define.")
    context_code: str = Field("", description="Code the candidate module starts with (imports, helpers).")
    examples: list[Example] = Field(default_factory=list, description="Visible examples.")
    tags: list[str] = Field(default_factory=list)
    timeout_s: float = Field(10.0, gt=0, le=600, description="Wall time for verifying one submission.")
    float_tolerance: float | None = Field(None, ge=0, description="Compare floats within this tolerance.")
    source: str = Field("sandgym", description="Where the task comes from (dataset name).")

    @field_validator("entry_point")
    @classmethod
    def _entry(cls, v: str) -> str:
        if not v.isidentifier() or keyword.iskeyword(v):
            raise ValueError(f"entry_point {v!r} is not a Python identifier")
        return v


class CodeHidden(HiddenSpec):
    """The hidden half: only the verifier reads it."""

    schema_version: Literal[1] = 1
    id: str
    tests: list[TestCase] = Field(default_factory=list, description="Calls and expected returns.")
    check_code: str | None = Field(None, description="Python defining check(candidate) that asserts (HumanEval style).")
    reference_solution: str = Field(min_length=1, description="Code that passes every test.")

    @model_validator(mode="after")
    def _has_tests(self) -> CodeHidden:
        if not self.tests and not self.check_code:
            raise ValueError("a hidden spec needs `tests` or `check_code`")
        return self


class CodeTaskPair(TaskPair):
    visible: CodeTask
    hidden: CodeHidden


VISIBLE = CodeTask
HIDDEN = CodeHidden
PAIR = CodeTaskPair
LIST_COLUMNS = ("entry point", "tags", "examples", "hidden tests")


def list_row(task: CodeTaskPair) -> tuple[str, ...]:
    """The `sandgym tasks list` columns of one task (after its id)."""
    v, h = task.visible, task.hidden
    return (v.entry_point, ",".join(v.tags), str(len(v.examples)), "check()" if h.check_code else str(len(h.tests)))
