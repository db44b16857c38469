"""The one retry rule every verifier follows.

An attempt that ends in `env_error` (infrastructure: a sandbox that would
not start, a state that could not be read) is tried again, up to `retries`
more times; every attempt is kept, the first one included, so a record
shows what failed. Any other outcome is final: a wrong answer is never
retried into a right one.
"""

from __future__ import annotations

from collections.abc import Callable

from sandgym.outcomes import Outcome
from sandgym.verifiers.models import Attempt


def attempts_until_settled(attempt: Callable[[], Attempt], retries: int) -> list[Attempt]:
    """Run `attempt` until its outcome is not `env_error`, at most `retries + 1` times."""
    attempts = [attempt()]
    while attempts[-1].outcome == Outcome.ENV_ERROR and len(attempts) <= retries:
        attempts.append(attempt())
    return attempts
