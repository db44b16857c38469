"""The code-function env's options (sandgym/CodeFunction-v0): make() kwargs and their defaults."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sandgym.specs.options import DEFAULT_MAX_ACTION_CHARS, EnvOptions


class CodeFunctionOptions(EnvOptions):
    """The env's options (make() kwargs, `-o KEY=VALUE`), checked strictly up front."""

    mode: Literal["single", "multi"] = "single"
    max_turns: int = Field(5, ge=1, le=1000)
    reward: Literal["binary", "pass_rate"] = "binary"
    verifier_retries: int = Field(2, ge=0, le=10)
    max_action_chars: int = Field(DEFAULT_MAX_ACTION_CHARS, ge=1)
    render_mode: Literal["ansi"] | None = None
