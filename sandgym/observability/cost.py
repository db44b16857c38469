"""Cost per usable trajectory, from episode records.

An episode holds its sandbox from when a worker starts it until it ends
(the record's `timings.total_s`, which starts after the queue wait), and
each verifier attempt that ran in a sandbox of its
own (`attempt.create_s` set) holds one more for its duration. The sum is
the episode's sandbox-seconds. CPU-seconds are counted only where the
backend reports them (a `cpu_s` in the record's timings); no backend does
yet, so they are None. `per_verified_success` divides by the episodes that
passed, `per_scored_episode` by those with a reward (the success rate's
denominator: `env_error` and `not_executed` left out).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sandgym.outcomes import Outcome


def episode_sandbox_s(rec: Any) -> float:
    t = rec.timings
    extra = sum(float(a.get("duration_s") or 0.0) for a in rec.attempts if a.get("create_s") is not None)
    return float(t.total_s) + extra


def episode_cpu_s(rec: Any) -> float | None:
    value = getattr(rec.timings, "cpu_s", None)
    return None if value is None else float(value)


def cost_of(records: Iterable[Any]) -> dict[str, Any]:
    recs = list(records)
    sandbox = [episode_sandbox_s(r) for r in recs]
    cpu = [episode_cpu_s(r) for r in recs]
    known_cpu = [c for c in cpu if c is not None]
    total_cpu = sum(known_cpu) if known_cpu and len(known_cpu) == len(cpu) else None
    total = sum(sandbox)
    successes = sum(1 for r in recs if r.outcome == Outcome.PASSED.value)
    scored = sum(1 for r in recs if r.reward is not None)

    def per(n: int, value: float | None) -> float | None:
        return None if value is None or not n else value / n

    return {
        "sandbox_s": total,
        "cpu_s": total_cpu,
        "n_episodes": len(recs),
        "n_verified_successes": successes,
        "n_scored": scored,
        "sandbox_s_per_episode": per(len(recs), total),
        "sandbox_s_per_verified_success": per(successes, total),
        "sandbox_s_per_scored_episode": per(scored, total),
        "cpu_s_per_episode": per(len(recs), total_cpu),
        "cpu_s_per_verified_success": per(successes, total_cpu),
        "cpu_s_per_scored_episode": per(scored, total_cpu),
    }
