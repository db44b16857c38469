"""The SWE repo-issue env's options (sandgym/SWERepo-v0): make() kwargs and their defaults."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sandgym.specs.options import EnvOptions


class SWERepoOptions(EnvOptions):
    """The env's options (make() kwargs, `-o KEY=VALUE`), checked strictly up front."""

    max_steps: int = Field(30, ge=1)
    command_timeout_s: float = Field(60.0, gt=0)
    verifier_retries: int = Field(2, ge=0)
    warm_pool: int = Field(1, ge=0)  # idle sandboxes kept per sandbox spec
    render_mode: Literal["ansi"] | None = None
