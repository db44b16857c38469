"""Outcome names shared by every family, verifier, record and report, and
the one backoff for retrying `env_error`."""

from __future__ import annotations

import random
from enum import Enum

_jitter = random.Random()


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


def retry_delay(attempt: int, base_s: float, cap_s: float, rng: random.Random | None = None) -> float:
    """Seconds to wait before retrying an `env_error` for the `attempt`-th
    time (0 for the first retry): exponential (base_s, 2*base_s, 4*base_s,
    ...) up to `cap_s`, with jitter (between half and all of it), so that
    retries of many episodes spread out instead of hitting a sick sandbox
    backend together. Every retry of `env_error` (verifiers, the harness's
    episode retries) waits this long."""
    if base_s <= 0:
        return 0.0
    full = min(cap_s, base_s * 2 ** min(attempt, 30))
    return full / 2 + (rng or _jitter).uniform(0, full / 2)
