"""The SWE task factory: `sandgym tasks make-swe --package NAME==VERSION`.

From one PyPI release to validated SWE tasks:

1. find the sdist, record its url and sha256, unpack it and make a git
   repository of it (the patches are `git diff`s in that repository;
   `source_tree.py`);
2. find the package's test requirements (`requirements.py`), pin them,
   build the cached venv;
3. run the whole suite twice in sandboxes; the tests that pass both times
   (in test files, which the verifier protects) are the usable ones;
4. propose AST mutations of the source files (`mutations.py`), run the
   suite on each mutant in a sandbox, keep those that make usable tests fail
   without breaking collection (`candidates.py`);
5. FAIL_TO_PASS = usable tests the mutant fails; PASS_TO_PASS = the other
   usable tests of the same files; the issue comes from the failures
   (`assemble.py`, `issues.py`);
6. validate with the verifier: the gold patch scores FULL and the empty
   diff NO, twice each; anything else drops the task;
7. audit it (`audit.py`): a task whose answer or hidden tests an agent
   could find in its sandbox is dropped, with the place logged.

This module holds the run over one package (`make_swe`, resumable through
`journal.py`) and writes task sets.
"""

from __future__ import annotations

import json
import random
import re
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sandgym.envs.swe_repo.assemble import Package
from sandgym.envs.swe_repo.candidates import (
    NOT_COMBINED,
    Candidate,
    Outcome,
    Settings,
    Worker,
    evaluate,
    order_candidates,
)
from sandgym.envs.swe_repo.journal import Journal, last_combination_number
from sandgym.envs.swe_repo.mutations import Mutation, find_mutations
from sandgym.envs.swe_repo.requirements import (
    check_plain_requirement,
    discover_test_requirements,
    loosen,
    normalize_name,
)
from sandgym.envs.swe_repo.source_tree import detect_import_root, is_test_path, make_repo, source_files
from sandgym.errors import SandgymError
from sandgym.runtimes.base import SandboxError
from sandgym.specs import TaskPair, TaskSet, TaskSetMeta, TaskSpecError
from sandgym.specs.swe_repo import RepoSource, SWETaskPair, TestEnvironment
from sandgym.verifiers.swe_repo.sources import RepoError, find_sdist, pristine_tree, test_venv
from sandgym.verifiers.swe_repo.wheels import pip_as_build_user, pip_said, run_pip

# 2: hidden failing tests, held-out tests, issue levels, combined bugs;
# 3: mutants without tells (mutation style 3), blind solvers, whole-suite
# visible tests for symptom/minimal texts, three validation runs.
FACTORY_VERSION = 3
FACTORY_VERSIONS = (2, 3)
PIN_PYTEST = "pytest==8.3.4"  # the verifier's base requirement; resolved pins must agree with it
# What that pytest imports before any test: a package of these names is
# shadowed by pytest's own copy in the venv, so no mutant of it can fail a test.
PYTEST_IMPORTS = {"pytest", "iniconfig", "packaging", "pluggy", "exceptiongroup", "tomli", "colorama", "pygments"}


class FactoryError(SandgymError, RuntimeError):
    """The factory cannot proceed; the message says what to change."""


class EnvBuildError(FactoryError):
    """The package's test environment could not be built or its suite did not
    run: counted apart in the factory report (environment build success)."""


WASTE = (
    "survived",
    "broke_import",
    "too_broad",
    "timed_out",
    "unhideable",
    "no_held_out",
    "quoted",
    "duplicate",
    "invalid",
    "reachable",
    "blind",  # a blind solver (blind.py) fixes it without reading the issue
)


@dataclass
class FactoryStats:
    """What one package's run made and wasted; saved with the run, summed on resume."""

    package: str = ""
    usable_tests: int = 0
    flaky_tests: int = 0  # same id in both runs, different result
    unstable_ids: int = 0  # an id only one of the two runs produced (parametrize ids from unordered data)
    suite_s: float = 0.0
    candidates: int = 0
    tried: int = 0
    validated: int = 0
    combined: int = 0  # validated tasks with two or three bugs
    skipped_at_import: int = 0  # mutants left untried: their function broke collection before
    waste: dict[str, int] = field(default_factory=dict)
    by_operator: dict[str, int] = field(default_factory=dict)
    by_level: dict[str, int] = field(default_factory=dict)
    gold_runs: int = 0  # validation runs of gold patches (every candidate that reached validation)
    gold_full: int = 0  # of them, FULL
    seconds: float = 0.0  # wall time spent, over every (resumed) run
    started: float = field(default_factory=time.monotonic)
    running: bool = True

    def finish(self) -> None:
        if self.running:
            self.seconds += time.monotonic() - self.started
            self.running = False

    def wasted(self, kind: str) -> None:
        self.waste[kind] = self.waste.get(kind, 0) + 1

    @property
    def minutes(self) -> float:
        return (self.seconds + (time.monotonic() - self.started if self.running else 0.0)) / 60

    @property
    def per_minute(self) -> float:
        return self.validated / self.minutes if self.minutes else 0.0

    @property
    def gold_pass_rate(self) -> float | None:
        """Share of gold-patch validation runs that scored FULL (None: none ran)."""
        return self.gold_full / self.gold_runs if self.gold_runs else None

    def level_shares(self) -> dict[str, float]:
        n = sum(self.by_level.values())
        return {k: round(v / n, 3) for k, v in sorted(self.by_level.items())} if n else {}

    def report(self) -> str:
        """The figures the field publishes for one package."""
        rate = self.gold_pass_rate
        gold = f"{rate:.1%} of {self.gold_runs} runs" if rate is not None else "no run"
        levels = ", ".join(f"{k} {v:.0%}" for k, v in self.level_shares().items()) or "no task"
        return f"{self.package}: environment built; gold FULL {gold}; levels {levels}"

    def line(self) -> str:
        waste = ", ".join(f"{self.waste[k]} {k}" for k in WASTE if self.waste.get(k))
        return (
            f"{self.package}: {self.validated} validated ({self.combined} combined) of {self.tried} mutants tried "
            f"(wasted: {waste or 'none'}; {self.skipped_at_import} skipped at import) in {self.minutes:.1f} min "
            f"= {self.per_minute:.1f} tasks/min; usable tests {self.usable_tests}, flaky {self.flaky_tests}, "
            f"unstable ids {self.unstable_ids}"
        )

    def record(self) -> dict:
        out = {k: v for k, v in asdict(self).items() if k not in ("started", "running")}
        out["seconds"] = round(self.minutes * 60, 1)
        out["suite_s"] = round(self.suite_s, 2)
        rate = self.gold_pass_rate
        out["gold_pass_rate"] = round(rate, 4) if rate is not None else None
        out["level_share"] = self.level_shares()
        out["env_built"] = True
        return out


Progress = Callable[[str, int, int], None]  # (phase, done, total)


# -- package, requirements, usable tests --------------------------------------------


def parse_package(spec: str) -> tuple[str, str]:
    m = re.fullmatch(r"\s*([A-Za-z0-9][A-Za-z0-9._\-]*)\s*==\s*([A-Za-z0-9.+!\-]+)\s*", spec)
    if not m:
        raise FactoryError(f"--package {spec!r}: expected NAME==VERSION, e.g. toolz==1.0.0")
    return m.group(1), m.group(2)


def pin_requirements(requirements: list[str]) -> list[str]:
    """Resolve `requirements` together with the verifier's pytest for the
    sandbox interpreter (pip's resolver, a dry run against PyPI) and return
    name==version pins, leaving out pytest and what pytest itself pulls in."""
    if not requirements:
        return []
    for req in requirements:  # from the repository: nothing pip would fetch, build or read on the host
        try:
            check_plain_requirement(req, "the repository's test requirements")
        except ValueError as e:
            raise FactoryError(str(e)) from None

    def resolve(reqs: list[str]) -> dict[str, str]:
        # As the unprivileged build user, under the sandboxes' interpreter (its markers).
        with pip_as_build_user() as (pip, work):
            args = ["install", "--dry-run", "--ignore-installed", "--quiet", "--report", "-"]
            # Wheels only: an sdist's build backend (setup.py) would run here, on the host, to read its metadata.
            r = run_pip(pip, work, [*args, "--only-binary", ":all:", "--", *reqs])
        if r.returncode != 0:
            raise FactoryError(f"cannot resolve test requirements {reqs}: {pip_said(r.stderr)}")
        report = json.loads(r.stdout)
        return {normalize_name(i["metadata"]["name"]): i["metadata"]["version"] for i in report.get("install", [])}

    base = resolve([PIN_PYTEST])
    try:
        full = resolve([PIN_PYTEST, *requirements])
    except FactoryError:
        # A lock file (pip-compile's requirements/tests.txt) pins another pytest
        # and its dependencies: the names without their versions, resolved anew.
        loose = [loosen(r) for r in requirements]
        if loose == requirements:
            raise
        full = resolve([PIN_PYTEST, *loose])
    return sorted(f"{n}=={v}" for n, v in full.items() if base.get(n) != v)


# -- the factory ---------------------------------------------------------------------


def refuse_shadowed(name: str, version: str) -> None:
    if normalize_name(name) in PYTEST_IMPORTS:
        raise FactoryError(
            f"{name}=={version}: pytest imports its own copy of {name} before the tests run, "
            "so the tests never see a mutant; pick a package pytest does not depend on"
        )


def prepare(
    name: str,
    version: str,
    work: Path,
    runtime,
    stats: FactoryStats,
    log: Callable[[str], None],
    factory_version: int = FACTORY_VERSION,
) -> Package:
    from sandgym.verifiers.swe_repo.sandbox import run_tests

    refuse_shadowed(name, version)
    url, sha = find_sdist(name, version)
    source = RepoSource(kind="pypi", name=name, version=version, sdist_url=url, sdist_sha256=sha)
    tree = pristine_tree(source, work / "pristine")
    repo = make_repo(tree)
    wanted, found_in = discover_test_requirements(tree, name)
    pins = pin_requirements(wanted)
    environment = TestEnvironment(requirements=pins, import_root=detect_import_root(tree))
    log(
        f"{name}=={version}: sdist sha256 {sha[:12]}…, import_root {environment.import_root!r}, "
        f"requirements {pins or 'none beyond pytest'} (from {', '.join(found_in) or 'nothing declared'})"
    )
    test_venv(environment)
    t0 = time.monotonic()
    first = run_tests(runtime, tree, environment, None, 600)
    suite_s = time.monotonic() - t0
    second = run_tests(runtime, tree, environment, None, 600)
    if first.timed_out or not first.statuses:
        raise FactoryError(
            f"{name}=={version}: the test suite did not run here "
            f"({first.problem or 'no test records'}):\n{first.output[-1500:]}"
        )
    usable, flaky, unstable = stable_passing(first.statuses, {} if second.timed_out else second.statuses)
    stats.usable_tests, stats.flaky_tests, stats.unstable_ids, stats.suite_s = (
        len(usable),
        len(flaky),
        len(unstable),
        suite_s,
    )
    if not usable:
        raise FactoryError(f"{name}=={version}: no test passes here; pick another release or package")
    log(
        f"{name}=={version}: {len(usable)} usable tests, {len(flaky)} flaky, {len(unstable)} with unstable ids, "
        f"suite {suite_s:.1f} s"
    )
    return Package(
        name,
        version,
        source,
        environment,
        tree,
        repo,
        usable,
        suite_s,
        f"sandgym.swe_factory/{factory_version}",
        frozenset(first.collect_errors) | frozenset(second.collect_errors),
    )


def stable_passing(a: dict[str, str], b: dict[str, str]) -> tuple[list[str], set[str], set[str]]:
    """(usable, flaky, unstable) from two runs of the whole suite. A test is
    flaky when its id is in both runs with different results; an id that only
    one run produced is unstable (pytest numbers parametrize cases built from
    sets or dicts, so the ids move between runs): it cannot be named in a
    spec, but its result says nothing about flakiness."""
    moved = set(a) ^ set(b)
    # Every case of a test function with a moving id: the ids that happened to
    # match between these two runs need not match in the next.
    moving_functions = {t.split("[", 1)[0] for t in moved}
    unstable = {t for t in set(a) | set(b) if t.split("[", 1)[0] in moving_functions}
    flaky = {t for t in set(a) & set(b) if a[t] != b[t]} - unstable
    usable = sorted(
        t
        for t, s in a.items()
        if s == "passed" and t not in flaky and t not in unstable and is_test_path(t.split("::")[0])
    )
    return usable, flaky, unstable


# -- the run over one package, resumable --------------------------------------------------


def make_swe(
    package: str,
    max_tasks: int,
    seed: int,
    runtime,
    jobs: int = 2,
    progress: Progress | None = None,
    log: Callable[[str], None] = print,
    max_tries: int | None = None,
    levels: dict[str, float] | None = None,
    combined_share: float = 0.0,
    journal: Path | None = None,
    min_held_out: int = 1,
    factory_version: int = FACTORY_VERSION,
) -> tuple[list[SWETaskPair], FactoryStats]:
    """Validated tasks from one PyPI release: at most `max_tasks`, one
    single-bug task per function, and about `combined_share` of them with two
    or three bugs in different functions (each failing tests alone). With
    `journal`, evaluated candidates are recorded there and skipped when the
    run is started again. `factory_version` 2 makes the tasks of the older
    sets again (mutation style 2, no blind solvers, two validation runs)."""
    name, version = parse_package(package)
    stats = FactoryStats(package=f"{name}=={version}")
    if factory_version not in FACTORY_VERSIONS:
        raise FactoryError(f"--factory-version {factory_version}: expected one of {FACTORY_VERSIONS}")
    cfg = Settings(
        levels=levels or {"located": 1.0},
        seed=seed,
        min_held_out=min_held_out,
        validate_runs=3 if factory_version >= 3 else 2,
        factory_version=factory_version,
    )
    book = Journal(journal) if journal else None
    if book and book.done and book.done.get("max_tasks", 0) >= max_tasks:
        old = book.done.get("stats", {})
        stats.__dict__.update({k: v for k, v in old.items() if k in stats.__dict__ and k != "started"})
        stats.running = False
        return sorted(book.tasks(), key=lambda t: t.id), stats
    progress = progress or (lambda phase, done, total: None)
    with tempfile.TemporaryDirectory(prefix="sandgym-factory-") as tmp:
        work = Path(tmp)
        progress("preparing", 0, max_tasks)
        refuse_shadowed(name, version)  # not an environment that failed to build
        try:
            pkg = prepare(name, version, work, runtime, stats, log, factory_version)
        except EnvBuildError:
            raise
        except (FactoryError, RepoError, OSError, SandboxError) as e:
            raise EnvBuildError(str(e)) from e
        mutations = []
        for rel in source_files(pkg.tree, pkg.environment.import_root):
            mutations += find_mutations((pkg.tree / rel).read_text(encoding="utf-8"), rel, style=factory_version)
        ordered = order_candidates(mutations, seed)
        stats.candidates = len(ordered)
        if not ordered:
            raise FactoryError(f"{package}: no mutable code found in {pkg.environment.import_root!r}")
        run = _Run(pkg, runtime, jobs, cfg, stats, book, work, log, progress, max_tasks)
        n_combined = round(max_tasks * combined_share)
        run.singles(ordered, max_tasks - n_combined, max_tries or len(ordered))
        if n_combined:
            run.combinations(max_tasks, seed)
    stats.finish()
    if book:
        book.add({"done": True, "max_tasks": max_tasks, "stats": stats.record()})
    return sorted(run.kept, key=lambda t: t.id), stats


class _Run:
    """The evaluation loop of one package: candidates through a pool of workers."""

    def __init__(self, pkg, runtime, jobs, cfg, stats, book, work, log, progress, max_tasks):
        self.pkg, self.runtime, self.cfg, self.stats, self.book = pkg, runtime, cfg, stats, book
        self.log, self.progress, self.max_tasks = log, progress, max_tasks
        self.workers = [Worker(pkg, work / f"worker-{i}") for i in range(jobs)]
        self.repo_lock = threading.Lock()
        self.kept: list[SWETaskPair] = book.tasks() if book else []
        self.diff_keys = {r.get("diff_key", "") for r in (book.entries.values() if book else ()) if r.get("diff_key")}
        self.failing: dict[str, tuple[Mutation, set[str]]] = {}  # single mutants that fail tests: the combination pool
        self.broke: set[str] = set()  # functions whose mutant broke collection
        self.kept_functions: set[str] = set()
        self.kept_keys: set[str] = set()  # single mutants that are tasks
        for r in book.entries.values() if book else ():
            self._replay(r)
            if r.get("outcome") == "kept" and not r.get("combined"):
                self.kept_functions |= set(r.get("functions", []))
                self.kept_keys.add(r["key"])
            if r.get("outcome") == "broke_import":
                self.broke |= set(r.get("functions", []))

    def _replay(self, r: dict) -> None:
        """Count a journal entry of an earlier (killed) run in this run's stats."""
        stats = self.stats
        stats.tried += 1
        stats.seconds = max(stats.seconds, float(r.get("elapsed_s", 0.0)))
        stats.gold_runs += int(r.get("gold_runs", 0))
        stats.gold_full += int(r.get("gold_full", 0))
        if r.get("outcome") == "kept":
            stats.validated += 1
            stats.combined += bool(r.get("combined"))
            for op in r.get("operators", []):
                stats.by_operator[op] = stats.by_operator.get(op, 0) + 1
            if r.get("level"):
                stats.by_level[r["level"]] = stats.by_level.get(r["level"], 0) + 1
        else:
            stats.wasted(str(r.get("outcome")))

    def _record(self, cand: Candidate, out: Outcome) -> None:
        stats = self.stats
        stats.tried += 1
        stats.gold_runs += out.gold_runs
        stats.gold_full += out.gold_full
        combined = len(cand.mutations) > 1
        if out.kind == "kept" and out.diff_key in self.diff_keys:
            out = Outcome("duplicate", failing=out.failing, gold_runs=out.gold_runs, gold_full=out.gold_full)
        if out.kind == "kept":
            assert out.task is not None
            self.kept.append(out.task)
            self.diff_keys.add(out.diff_key)
            stats.validated += 1
            stats.combined += combined
            for m in cand.mutations:
                stats.by_operator[m.operator] = stats.by_operator.get(m.operator, 0) + 1
            level = out.task.visible.difficulty.issue_level  # type: ignore[union-attr]
            stats.by_level[level] = stats.by_level.get(level, 0) + 1
            if not combined:
                self.kept_functions |= cand.functions
                self.kept_keys.add(cand.key)
        else:
            stats.wasted(out.kind)
            if out.kind == "broke_import":
                self.broke |= cand.functions
            if out.kind in ("invalid", "reachable", "blind"):
                self.log(f"dropped {cand.task_id}: {out.detail}")
        if not combined and out.failing and out.kind not in NOT_COMBINED:
            self.failing[cand.key] = (cand.mutations[0], set(out.failing))
        if self.book:
            rec = {
                "key": cand.key,
                "outcome": out.kind,
                "functions": sorted(cand.functions),
                "combined": combined,
                "failing": out.failing if not combined and out.kind != "too_broad" else [],
                "diff_key": out.diff_key,
                "detail": out.detail[:300],
                "task_id": cand.task_id,
                "operators": [m.operator for m in cand.mutations],
                "level": out.task.visible.difficulty.issue_level if out.kind == "kept" else "",  # type: ignore[union-attr]
                "elapsed_s": round(stats.minutes * 60, 1),
                "gold_runs": out.gold_runs,
                "gold_full": out.gold_full,
            }
            if out.task is not None and out.kind == "kept":
                rec["task"] = {
                    "visible": out.task.visible.model_dump(mode="json"),
                    "hidden": out.task.hidden.model_dump(mode="json"),
                }
            self.book.add(rec)
        self.progress("combining" if combined else "mutating", len(self.kept), self.max_tasks)

    def _pool(self, next_candidate: Callable[[], Candidate | None], want: int, limit: int) -> None:
        free = list(self.workers)
        pending: dict[Future, tuple[Candidate, Worker]] = {}
        tried = 0
        with ThreadPoolExecutor(len(self.workers)) as pool:
            while True:
                while free and len(self.kept) + len(pending) < want and tried < limit:
                    cand = next_candidate()
                    if cand is None:
                        break
                    tried += 1
                    worker = free.pop()
                    fut = pool.submit(evaluate, self.pkg, cand, worker, self.runtime, self.repo_lock, self.cfg)
                    pending[fut] = (cand, worker)
                if not pending:
                    return
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    cand, worker = pending.pop(fut)
                    free.append(worker)
                    try:
                        out = fut.result()
                    except (RepoError, OSError, TaskSpecError, ValueError, SandboxError) as e:
                        # Infrastructure, not the mutant: counted, not journaled (a rerun tries it again).
                        self.stats.wasted("infra")
                        self.log(f"infrastructure error on {cand.task_id}: {str(e)[:300]}")
                        continue
                    self._record(cand, out)

    def singles(self, ordered: list[Mutation], want: int, limit: int) -> None:
        """At most one task per function: a function's next mutant is tried only
        after its earlier ones failed to make a task."""
        prefix = f"{self.pkg.name}-{self.pkg.version}"
        queue = list(enumerate(ordered))
        in_flight: set[str] = set()
        for _, m in queue:
            rec = self.book.entries.get(m.key) if self.book else None
            if rec and rec.get("failing") and rec.get("outcome") not in NOT_COMBINED:
                self.failing[m.key] = (m, set(rec["failing"]))

        def next_candidate() -> Candidate | None:
            while queue:
                for i, (index, m) in enumerate(queue):
                    fkey = f"{m.path}:{m.function}"
                    if self.book and m.key in self.book.entries:
                        queue.pop(i)
                        break
                    if fkey in self.kept_functions:
                        queue.pop(i)
                        break
                    if fkey in self.broke:
                        self.stats.skipped_at_import += 1
                        queue.pop(i)
                        break
                    if fkey in in_flight:
                        continue
                    queue.pop(i)
                    in_flight.add(fkey)
                    return Candidate(m.key, f"{prefix}/mut-{index:04d}", [m], [])
                else:
                    return None  # only functions with a mutant in flight are left
            return None

        # Functions leave `in_flight` when their outcome is recorded.
        record = self._record

        def release(cand: Candidate, out: Outcome) -> None:
            in_flight.difference_update(cand.functions)
            record(cand, out)

        self._record = release  # type: ignore[method-assign]
        try:
            self._pool(next_candidate, want, limit)
        finally:
            self._record = record  # type: ignore[method-assign]

    def combinations(self, want: int, seed: int) -> None:
        """Two or three failing single mutants of different functions (different
        files first), each failing tests alone; every bug must be fixed."""
        rng = random.Random(seed)
        pool = sorted(self.failing.items())
        rng.shuffle(pool)
        # Mutants that are no single task of their own first: fresh bugs.
        shipped = set(self.kept_keys)
        pool.sort(key=lambda kv: kv[0] in shipped)
        prefix = f"{self.pkg.name}-{self.pkg.version}"
        used: set[str] = set()  # each mutant leads at most one combination
        # Ids go on after the highest one an earlier (killed) run gave out.
        base = last_combination_number(self.book.entries.values() if self.book else ())
        made = [0]

        def next_candidate() -> Candidate | None:
            while True:
                avail = [(k, m, f) for k, (m, f) in pool if k not in used]
                if len(avail) < 2:
                    return None
                lead, rest = avail[0], avail[1:]
                used.add(lead[0])
                size = 3 if len(avail) >= 3 and rng.random() < 0.3 else 2
                others = [x for x in rest if x[1].path != lead[1].path] + [x for x in rest if x[1].path == lead[1].path]
                picked = [lead]
                for x in others:
                    if len(picked) == size:
                        break
                    if any(x[1].path == p[1].path and x[1].function == p[1].function for p in picked):
                        continue
                    picked.append(x)
                if len(picked) < 2:
                    continue
                key = "+".join(sorted(k for k, _, _ in picked))
                if self.book and key in self.book.entries:
                    continue
                made[0] += 1
                return Candidate(
                    key, f"{prefix}/combo-{base + made[0]:04d}", [p[1] for p in picked], [p[2] for p in picked]
                )

        self._pool(next_candidate, want, 4 * want)


def write_task_set(tasks: list[SWETaskPair], out: Path, name: str = "", description: str = "") -> TaskSet:
    """Write (or extend) a swe_repo task set in `out`; tasks with the same id are replaced."""
    out = Path(out)
    existing: list[TaskPair] = []
    if (out / "taskset.yaml").exists():
        old = TaskSet.load(out)
        if old.meta.family != "swe_repo":
            raise FactoryError(f"{out}: holds a {old.meta.family} task set; choose another --out folder")
        new_ids = {t.id for t in tasks}
        existing = [t for t in old.tasks if t.id not in new_ids]
        meta = old.meta
    else:
        meta = TaskSetMeta(
            name=name or out.name,
            family="swe_repo",
            version=1,
            description=description
            or "Bugs injected by AST mutation into PyPI packages "
            "(sandgym tasks make-swe), each validated by the verifier.",
        )
    everything = existing + list(tasks)
    for sub in ("tasks", "hidden"):
        if (out / sub).is_dir():
            for f in (out / sub).glob("*.yaml"):
                f.unlink()
    TaskSet(meta, everything).write(out)
    return TaskSet.load(out)
