"""The one retry rule every verifier follows.

An attempt that ends in `env_error` (infrastructure: a sandbox that would
not start, a state that could not be read) is tried again, up to `retries`
more times, after a pause that grows (exponential backoff with jitter,
`sandgym.outcomes.retry_delay`): a backend that is briefly down (an
in-sandbox agent killed, a daemon restarting) gets time to come back
instead of failing every attempt within milliseconds. Every attempt is
kept, the first one included, so a record shows what failed. Any other
outcome is final: a wrong answer is never retried into a right one.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from sandgym.outcomes import Outcome, retry_delay
from sandgym.verifiers.models import Attempt

BACKOFF_BASE_S = 0.5  # the first retry waits 0.25-0.5 s, the next 0.5-1 s, ...
BACKOFF_CAP_S = 8.0


def attempts_until_settled(
    attempt: Callable[[], Attempt],
    retries: int,
    backoff_s: float = BACKOFF_BASE_S,
    sleep: Callable[[float], None] = time.sleep,
) -> list[Attempt]:
    """Run `attempt` until its outcome is not `env_error`, at most `retries + 1`
    times, waiting `retry_delay(n, backoff_s, BACKOFF_CAP_S)` before retry n."""
    attempts = [attempt()]
    while attempts[-1].outcome == Outcome.ENV_ERROR and len(attempts) <= retries:
        sleep(retry_delay(len(attempts) - 1, backoff_s, BACKOFF_CAP_S))
        attempts.append(attempt())
    return attempts
