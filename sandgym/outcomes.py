"""Outcome names shared by every family, verifier, record and report."""

from __future__ import annotations

from enum import Enum


class Outcome(str, Enum):
    PASSED = "passed"
    FAILED = "failed"  # a wrong answer
    TIMEOUT = "timeout"  # the model's code ran out of time: the model's fault
    ENV_ERROR = "env_error"  # infrastructure: retried, never scored as the model's 0
    NOT_EXECUTED = "not_executed"  # nothing was submitted
    VIOLATION = "violation"  # tampering was detected

    def __str__(self) -> str:
        return self.value


OUTCOME_NAMES: tuple[str, ...] = tuple(o.value for o in Outcome)
