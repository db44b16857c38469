"""Mutants as candidate tasks: the order they are tried in, and the
evaluation of one (run the suite on the mutant in a sandbox, assemble the
task, validate it with the verifier) into an `Outcome`.
"""

from __future__ import annotations

import random
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path

from sandgym.envs.swe_repo.assemble import Package
from sandgym.envs.swe_repo.mutations import Mutation
from sandgym.specs.swe_repo import SWETaskPair

MAX_F2P_SHARE = 0.5  # a mutant failing more of the suite breaks the package, not one behaviour
# Single mutants that never go into a combination: too broad alone already, or
# failing a test that cannot be hidden (the combination would fail it too).
NOT_COMBINED = ("too_broad", "unhideable")


def order_candidates(mutations: list[Mutation], seed: int) -> list[Mutation]:
    """A seeded shuffle, round-robin over operators so every operator gets its
    turn early; typed mutations outside import-time code first (they fail
    tests rather than collection or with a TypeError)."""
    rng = random.Random(seed)
    out = []
    tiers = [
        [m for m in mutations if m.typed and not m.at_import],
        [m for m in mutations if not m.typed and not m.at_import],
        [m for m in mutations if m.at_import],
    ]
    for tier in tiers:
        by_op: dict[str, list[Mutation]] = {}
        for m in tier:
            by_op.setdefault(m.operator, []).append(m)
        for ms in by_op.values():
            rng.shuffle(ms)
        ops = sorted(by_op)
        rng.shuffle(ops)
        while any(by_op.values()):
            for op in ops:
                if by_op[op]:
                    out.append(by_op[op].pop())
    return out


@dataclass
class Outcome:
    """What became of one candidate."""

    kind: str  # kept | one of WASTE
    task: SWETaskPair | None = None
    detail: str = ""
    failing: list[str] = field(default_factory=list)  # usable tests the mutant fails
    diff_key: str = ""
    gold_runs: int = 0  # validation runs of the gold patch, and how many scored FULL
    gold_full: int = 0


@dataclass
class Candidate:
    """One or more mutants (two or three: a combined task) to evaluate as a task."""

    key: str  # journal key
    task_id: str
    mutations: list[Mutation]
    alone: list[set[str]]  # per mutation: the tests it fails alone (known for combinations)

    @property
    def functions(self) -> set[str]:
        return {f"{m.path}:{m.function}" for m in self.mutations}


class Worker:
    """A private copy of the pristine tree, mutated one candidate at a time."""

    def __init__(self, pkg: Package, root: Path):
        self.tree = root
        shutil.copytree(pkg.tree, root, ignore=shutil.ignore_patterns(".git"))


@dataclass
class Settings:
    """What shapes the tasks of one run."""

    levels: dict[str, float]
    seed: int = 0
    validate_runs: int = 2
    min_held_out: int = 1
    factory_version: int = 3  # 3: blind solvers run, whole-suite visible tests (factory.py)


def evaluate(
    pkg: Package, cand: Candidate, worker: Worker, runtime, repo_lock: threading.Lock, cfg: Settings
) -> Outcome:
    from sandgym.envs.swe_repo.assemble import Dropped, assemble, choose_level, mutated_files, read_texts
    from sandgym.envs.swe_repo.audit import audit_task
    from sandgym.verifiers.swe_repo.host import verify
    from sandgym.verifiers.swe_repo.sandbox import run_tests

    originals = read_texts(worker.tree, {m.path for m in cand.mutations})
    texts = mutated_files(originals, cand.mutations)
    timeout = max(60.0, 5 * pkg.suite_s)
    try:
        for p, text in texts.items():
            (worker.tree / p).write_text(text, encoding="utf-8")
        run = run_tests(runtime, worker.tree, pkg.environment, None, timeout)
    finally:
        for p, text in originals.items():
            (worker.tree / p).write_text(text, encoding="utf-8")
    if run.timed_out:
        return Outcome("timed_out")
    missing = sum(run.status(t) == "missing" for t in pkg.usable)
    # Only a module that imports in the pristine tree and not with the mutant counts.
    if set(run.collect_errors) - pkg.collect_errors or missing > len(pkg.usable) // 2:
        return Outcome("broke_import", detail=", ".join(sorted(run.collect_errors))[:200])
    f2p = [t for t in pkg.usable if run.status(t) in ("failed", "error")]
    if not f2p:
        return Outcome("survived")
    if len(f2p) > max(20, MAX_F2P_SHARE * len(pkg.usable)):
        return Outcome("too_broad", detail=f"{len(f2p)} of {len(pkg.usable)} tests fail", failing=f2p)
    alone = cand.alone or [set(f2p)]
    if any(not (fails & set(f2p)) for fails in alone):
        return Outcome("invalid", detail="one bug of the combination fails no test with the others in")
    level = choose_level(cfg.levels, cand.task_id, cfg.seed)

    def check(r) -> bool:  # the worker's tree is pristine again here
        from sandgym.envs.swe_repo.repro_check import tells_apart

        return tells_apart(r, worker.tree, texts, pkg.environment, runtime, timeout)[0]

    timeout_s = float(min(600, max(60, int(10 * pkg.suite_s))))
    try:
        task, key = assemble(
            pkg,
            cand.task_id,
            cand.mutations,
            f2p,
            alone,
            run.details,
            level,
            repo_lock,
            timeout_s,
            cfg.min_held_out,
            check=check if cfg.factory_version >= 3 else None,
            whole_suite_visible=cfg.factory_version >= 3,
        )
    except Dropped as e:
        return Outcome(e.kind, detail=e.detail, failing=f2p)
    gold_runs = 0
    for _ in range(cfg.validate_runs):
        good = verify(task, task.hidden.patch, runtime)
        gold_runs += 1
        if good.status != "FULL":
            return Outcome(
                "invalid",
                detail=f"gold patch: {good.status} {good.detail[:200]}",
                failing=f2p,
                gold_runs=gold_runs,
                gold_full=gold_runs - 1,
            )
        empty = verify(task, "", runtime)
        if empty.status != "NO":
            return Outcome(
                "invalid",
                detail=f"empty diff: {empty.status} {empty.detail[:200]}",
                failing=f2p,
                gold_runs=gold_runs,
                gold_full=gold_runs,
            )
    if cfg.factory_version >= 3:
        # The worker's tree is pristine again: the start state is it with the mutants in.
        blind = blind_check(task, worker.tree, pkg.environment.import_root, texts, runtime, f2p)
        if blind is not None:
            blind.gold_runs, blind.gold_full = gold_runs, gold_runs
            return blind
    # No task ships with its answer or hidden tests within the agent's reach.
    found = audit_task(task, runtime)
    if found:
        where = "; ".join(f"{f.kind} {f.file} at {f.where}" for f in found[:3])
        return Outcome(
            "reachable",
            detail=f"within the agent's reach: {where}",
            failing=f2p,
            gold_runs=gold_runs,
            gold_full=gold_runs,
        )
    return Outcome("kept", task, failing=f2p, diff_key=key, gold_runs=gold_runs, gold_full=gold_runs)


def blind_check(
    task: SWETaskPair, pristine: Path, import_root: str, mutated: dict[str, str], runtime, f2p: list[str]
) -> Outcome | None:
    """Outcome "blind" when a blind solver (blind.py) fixes the candidate whose
    start state is the `pristine` tree with the `mutated` files in, else None."""
    from sandgym.envs.swe_repo.blind import blind_solver, tree_sources

    solved = blind_solver(task, tree_sources(pristine, import_root, mutated), runtime)
    if solved is None:
        return None
    return Outcome("blind", detail=f"solved by the blind solver {solved.solver}", failing=f2p)
