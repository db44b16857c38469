"""Ranking runs made on the same task set.

`rank(run_dirs)` loads each run folder and ranks the runs by mean reward,
with a 95% confidence interval: the Wilson score interval when every
reward is 0 or 1, otherwise a percentile bootstrap of the mean (fixed seed,
2000 resamples, so the same records always give the same interval).

A `not_executed` episode (the policy gave nothing, a prediction is missing)
counts as reward 0, the way SWE-bench counts a missing prediction as
unresolved; `env_error` episodes are infrastructure's, not the model's, and
are left out. Both are counted in their own columns. Runs with several
samples per task (`--epochs`, `--samples`) also show pass@k.

Results compare only on the same task-set hash: runs on different hashes
are refused, naming each folder and its hash; finished runs over different
tasks of one set (--task-id, --limit) are refused unless `allow_subsets`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from sandgym.errors import SandgymError

from .passk import pass_at_k
from .records import policy_label
from .runs import Run, load_run

Z95 = 1.959963984540054  # the 97.5% quantile of the standard normal
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0

CIMethod = Literal["wilson", "bootstrap"]


class LeaderboardError(SandgymError, ValueError):
    """The runs cannot be ranked together; the message says which and why."""


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion."""
    if n <= 0:
        raise ValueError("the Wilson interval needs at least one trial")
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be between 0 and n={n}, got {successes}")
    p = successes / n
    z2 = z * z
    denom = 1 + z2 / n
    center = (p + z2 / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    low = 0.0 if successes == 0 else max(0.0, center - half)
    high = 1.0 if successes == n else min(1.0, center + half)
    return low, high


def bootstrap_interval(
    values: Iterable[float], resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED, level: float = 0.95
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean. The values are sorted first, so the
    interval depends only on the multiset of values, not on record order."""
    xs = np.sort(np.asarray(list(values), dtype=float))
    if xs.size == 0:
        raise ValueError("the bootstrap needs at least one value")
    rng = np.random.default_rng(seed)
    means = np.empty(resamples)
    chunk = max(1, min(resamples, 4_000_000 // xs.size))  # bounded memory for big runs
    for start in range(0, resamples, chunk):
        stop = min(start + chunk, resamples)
        idx = rng.integers(0, xs.size, size=(stop - start, xs.size))
        means[start:stop] = xs[idx].mean(axis=1)
    alpha = (1 - level) / 2
    lo, hi = np.percentile(means, [100 * alpha, 100 * (1 - alpha)])
    return float(lo), float(hi)


@dataclass
class Entry:
    rank: int
    run_dir: Path
    run_id: str
    policy: dict[str, Any]
    runtime: str
    env_id: str
    env_kwargs: dict[str, Any]
    task_set: str
    task_set_hash: str
    n_episodes: int
    n_scored: int  # episodes with a reward (not env_error, not not_executed)
    n_counted: int  # what the mean is over: scored + not_executed (as 0)
    passed: int
    env_error: int
    not_executed: int
    mean: float | None  # mean reward over scored episodes
    ci_low: float | None
    ci_high: float | None
    ci_method: CIMethod | None
    interrupted: bool = False
    pass_at_k: dict[str, float] = field(default_factory=dict)
    samples_per_task: int = 1

    @property
    def policy_name(self) -> str:
        return str(self.policy.get("name", "?"))

    @property
    def model(self) -> str:
        """The model's name when the policy has one (not "openai"), else the policy's label."""
        return policy_label(self.policy)

    @property
    def policy_config(self) -> dict[str, Any]:
        return {k: v for k, v in self.policy.items() if k != "name"}


@dataclass
class Board:
    task_set: str
    task_set_hash: str
    entries: list[Entry]
    warnings: list[str] = field(default_factory=list)

    def to_rows(self) -> list[dict[str, Any]]:
        """One plain (JSON-ready) dict per run, best first."""
        return [
            {
                "rank": e.rank,
                "model": e.model,
                "policy": e.policy_name,
                "policy_config": e.policy_config,
                "mean_reward": e.mean,
                "ci_low": e.ci_low,
                "ci_high": e.ci_high,
                "ci_method": e.ci_method,
                "n_scored": e.n_scored,
                "n_counted": e.n_counted,
                "n_episodes": e.n_episodes,
                "pass_at_k": e.pass_at_k,
                "samples_per_task": e.samples_per_task,
                "passed": e.passed,
                "env_error": e.env_error,
                "not_executed": e.not_executed,
                "runtime": e.runtime,
                "env_id": e.env_id,
                "env_kwargs": e.env_kwargs,
                "run_id": e.run_id,
                "run_dir": str(e.run_dir),
                "task_set": e.task_set,
                "task_set_hash": e.task_set_hash,
                "interrupted": e.interrupted,
            }
            for e in self.entries
        ]

    def to_markdown(self) -> str:
        head = [
            "rank",
            "model",
            "policy",
            "mean reward",
            "95% CI",
            "counted",
            "episodes",
            "env_error",
            "not_executed",
            "pass@k",
            "runtime",
            "run id",
            "folder",
        ]
        numeric = ("rank", "mean reward", "counted", "episodes", "env_error", "not_executed")
        lines = [
            f"Leaderboard: task set {_md(self.task_set)} (`{self.task_set_hash}`), mean reward per episode: "
            "not_executed counts as 0 (as SWE-bench counts a missing prediction), env_error is left out",
            "",
            "| " + " | ".join(head) + " |",
            "|" + "|".join("---:" if h in numeric else "---" for h in head) + "|",
        ]
        for e in self.entries:
            ci = "n/a" if e.ci_low is None else f"[{e.ci_low:.3f}, {e.ci_high:.3f}] {e.ci_method}"
            mean = "n/a" if e.mean is None else f"{e.mean:.3f}"
            cfg = ", ".join(f"{k}={v}" for k, v in e.policy_config.items())
            policy = e.policy_name + (f" ({cfg})" if cfg else "")
            folder = str(e.run_dir) + (" (interrupted)" if e.interrupted else "")
            cells = [
                str(e.rank),
                e.model,
                policy,
                mean,
                ci,
                str(e.n_counted),
                str(e.n_episodes),
                str(e.env_error),
                str(e.not_executed),
                format_pass_at_k(e.pass_at_k) if e.samples_per_task > 1 else "",
                e.runtime,
                e.run_id,
                folder,
            ]
            lines.append("| " + " | ".join(_md(c) for c in cells) + " |")
        if self.warnings:
            lines.append("")
            lines += [f"Warning: {_md(w)}" for w in self.warnings]
        return "\n".join(lines) + "\n"


def format_pass_at_k(values: dict[str, float]) -> str:
    return ", ".join(f"pass@{k} {v:.3f}" for k, v in values.items())


def _md(text: str) -> str:
    """A Markdown table cell: no pipes or line breaks from run data."""
    return " ".join(str(text).split()).replace("\\", "\\\\").replace("|", "\\|")


def _entry(run: Run) -> Entry:
    recs = run.records
    scored = [r.reward for r in recs if r.reward is not None]
    not_executed = sum(r.outcome == "not_executed" for r in recs)
    counted = scored + [0.0] * not_executed  # a missing answer is unresolved, as in SWE-bench
    mean = ci_low = ci_high = None
    method: CIMethod | None = None
    if counted:
        mean = sum(counted) / len(counted)
        if all(x in (0.0, 1.0) for x in counted):
            method = "wilson"
            ci_low, ci_high = wilson_interval(int(sum(counted)), len(counted))
        else:
            method = "bootstrap"
            ci_low, ci_high = bootstrap_interval(counted)
    first = recs[0] if recs else None
    s = run.summary
    per_task: dict[str, int] = {}
    for r in recs:
        per_task[r.task_id] = per_task.get(r.task_id, 0) + 1
    return Entry(
        rank=0,
        run_dir=run.path,
        run_id=s.run_id,
        policy=dict(s.policy),
        runtime=s.runtime,
        env_id=s.env_id,
        env_kwargs=dict(first.env_kwargs) if first else {},
        task_set=s.task_set,
        task_set_hash=s.task_set_hash,
        n_episodes=len(recs),
        n_scored=len(scored),
        n_counted=len(counted),
        passed=sum(r.outcome == "passed" for r in recs),
        env_error=sum(r.outcome == "env_error" for r in recs),
        not_executed=not_executed,
        mean=mean,
        ci_low=ci_low,
        ci_high=ci_high,
        ci_method=method,
        interrupted=run.interrupted,
        pass_at_k=pass_at_k((r.task_id, r.outcome) for r in recs),
        samples_per_task=max(per_task.values(), default=1),
    )


def _differences(entries: list[Entry]) -> list[str]:
    """Settings that make the means measure different things: warned about, not refused."""
    warnings = []
    for label, get in (
        ("env", lambda e: e.env_id),
        ("reward scheme", lambda e: e.env_kwargs.get("reward", "binary")),
        ("mode", lambda e: e.env_kwargs.get("mode", "single")),
    ):
        values = sorted({str(get(e)) for e in entries})
        if len(values) > 1:
            warnings.append(f"the runs differ in {label} ({', '.join(values)}); their means may not be comparable")
    interrupted = [str(e.run_dir) for e in entries if e.interrupted]
    if interrupted:
        warnings.append(f"interrupted runs (no summary.json; only finished episodes count): {', '.join(interrupted)}")
    skipped = [f"{e.run_dir} ({e.not_executed})" for e in entries if e.not_executed]
    if skipped:
        warnings.append(
            "not_executed episodes (no answer) count as unresolved, reward 0, as SWE-bench counts a "
            "missing prediction: " + ", ".join(skipped)
        )
    partial = [f"{e.run_dir} ({e.n_episodes})" for e in entries if e.n_episodes != max(x.n_episodes for x in entries)]
    if partial:
        warnings.append("some runs cover fewer episodes than others: " + ", ".join(partial))
    return warnings


def _check_subsets(runs: list[Run]) -> None:
    """Finished runs over different tasks of one set measure different things: refused, in one line."""
    covered = {r.path: frozenset(rec.task_id for rec in r.records) for r in runs if not r.interrupted}
    if len(set(covered.values())) > 1:
        sizes = ", ".join(f"{path} {len(ids)}" for path, ids in covered.items())
        raise LeaderboardError(
            f"the runs cover different tasks of one task set (tasks per run: {sizes}); "
            "rank them anyway with --allow-subsets"
        )


def rank(run_dirs: Iterable[str | Path | Run], allow_subsets: bool = False) -> Board:
    """Rank runs on one task set by mean reward (not_executed as 0, env_error left out), best first.

    Raises LeaderboardError when there is no run, when a run appears twice, when
    the runs were made on different task sets (task_set_hash), or when finished
    runs cover different tasks of the set (unless `allow_subsets`); RunError (a
    ValueError) when a folder cannot be read.
    """
    runs = [d if isinstance(d, Run) else load_run(d) for d in run_dirs]
    if not runs:
        raise LeaderboardError("no runs to rank: pass at least one run folder (written by `sandgym eval --out DIR`)")
    hashes = {r.summary.task_set_hash for r in runs}
    if len(hashes) > 1:
        listing = "\n".join(
            f"  {r.path}: {r.summary.task_set_hash} ({r.summary.task_set})"
            for r in sorted(runs, key=lambda r: (r.summary.task_set_hash, str(r.path)))
        )
        raise LeaderboardError(
            f"the runs were made on {len(hashes)} different task sets (task_set_hash differs); results "
            f"compare only on the same hash. Rank each group separately:\n{listing}"
        )
    seen: dict[str, Path] = {}
    for r in runs:
        if r.summary.run_id in seen:
            raise LeaderboardError(
                f"run {r.summary.run_id} appears twice ({seen[r.summary.run_id]} and {r.path}); pass each run once"
            )
        seen[r.summary.run_id] = r.path
    if not allow_subsets:
        _check_subsets(runs)
    entries = [_entry(r) for r in runs]
    # Best mean first; among equal means the tighter lower bound, then more scored episodes.
    entries.sort(key=lambda e: (e.mean is None, -(e.mean or 0.0), -(e.ci_low or 0.0), -e.n_counted, str(e.run_dir)))
    for i, e in enumerate(entries):  # competition ranking: equal means share a rank ("1, 1, 3")
        prev = entries[i - 1] if i else None
        e.rank = prev.rank if prev is not None and prev.mean == e.mean else i + 1
    names = sorted({r.summary.task_set for r in runs})
    return Board(task_set=", ".join(names), task_set_hash=hashes.pop(), entries=entries, warnings=_differences(entries))
