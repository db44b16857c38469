"""The SWE task factory: `sandgym tasks make-swe --package NAME==VERSION`.

From one PyPI release to validated SWE tasks:

1. find the sdist, record its url and sha256, unpack it and make a git
   repository of it (the patches are `git diff`s in that repository);
2. find the package's test requirements, pin them, build the cached venv;
3. run the whole suite twice in sandboxes; the tests that pass both times
   (in test files, which the verifier protects) are the usable ones;
4. propose AST mutations of the source files (`mutations.py`), run the
   suite on each mutant in a sandbox, keep those that make usable tests fail
   without breaking collection;
5. FAIL_TO_PASS = usable tests the mutant fails; PASS_TO_PASS = the other
   usable tests of the same files; the issue comes from the failures
   (`issues.py`);
6. validate with the verifier: the gold patch scores FULL and the empty
   diff NO, twice each; anything else drops the task.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from email.parser import Parser
from pathlib import Path

from sandgym.envs.swe_repo.issues import write_issue
from sandgym.envs.swe_repo.mutations import Mutation, find_mutations
from sandgym.errors import SandgymError
from sandgym.specs import TaskPair, TaskSet, TaskSetMeta, TaskSpecError
from sandgym.specs.swe_repo import RepoSource, SWEHidden, SWETask, TestEnvironment
from sandgym.verifiers.swe_repo.checkout import GIT_IDENTITY
from sandgym.verifiers.swe_repo.sources import SANDBOX_PYTHON, RepoError, find_sdist, pristine_tree, test_venv

FACTORY_VERSION = 1
PIN_PYTEST = "pytest==8.3.4"  # the verifier's base requirement; resolved pins must agree with it
# Dependency names that are tooling around tests, not needed to run them here
# (coverage and linters; benchmark plugins; the runner's own pytest).
TOOLING = {
    "pytest",
    "coverage",
    "pytest-cov",
    "pycodestyle",
    "flake8",
    "ruff",
    "mypy",
    "pyright",
    "ty",
    "black",
    "isort",
    "pre-commit",
    "tox",
    "nox",
    "pytest-benchmark",
    "pytest-codspeed",
    "codecov",
    "pylint",
    "atheris",
    "pytest-xdist",
    "pytest-randomly",
    "pytest-timeout",
    "build",
    "twine",
    "wheel",
    "setuptools",
}
TEST_EXTRAS = ("test", "tests", "testing")
REQUIREMENT_FILES = (
    "requirements-test.txt",
    "requirements-tests.txt",
    "requirements_test.txt",
    "test-requirements.txt",
    "requirements/test.txt",
    "requirements/tests.txt",
    "requirements/testing.txt",
    "tests/requirements.txt",
)
MAX_F2P_SHARE = 0.5  # a mutant failing more of the suite breaks the package, not one behaviour


class FactoryError(SandgymError, RuntimeError):
    """The factory cannot proceed; the message says what to change."""


@dataclass
class FactoryStats:
    package: str = ""
    usable_tests: int = 0
    flaky_tests: int = 0
    suite_s: float = 0.0
    candidates: int = 0
    tried: int = 0
    survived: int = 0
    broke_import: int = 0
    too_broad: int = 0
    timed_out: int = 0
    invalid: int = 0
    validated: int = 0
    started: float = field(default_factory=time.monotonic)
    finished: float = 0.0
    by_operator: dict[str, int] = field(default_factory=dict)

    @property
    def minutes(self) -> float:
        return ((self.finished or time.monotonic()) - self.started) / 60

    @property
    def per_minute(self) -> float:
        return self.validated / self.minutes if self.minutes else 0.0

    def line(self) -> str:
        return (
            f"{self.package}: {self.validated} validated of {self.tried} mutants tried "
            f"({self.survived} survived, {self.broke_import} broke collection, {self.too_broad} too broad, "
            f"{self.timed_out} hung, {self.invalid} failed validation) in {self.minutes:.1f} min "
            f"= {self.per_minute:.1f} tasks/min; usable tests {self.usable_tests}, flaky {self.flaky_tests}"
        )


Progress = Callable[[str, int, int], None]  # (phase, done, total)


# -- package, requirements -------------------------------------------------------


def parse_package(spec: str) -> tuple[str, str]:
    m = re.fullmatch(r"\s*([A-Za-z0-9][A-Za-z0-9._\-]*)\s*==\s*([A-Za-z0-9.+!\-]+)\s*", spec)
    if not m:
        raise FactoryError(f"--package {spec!r}: expected NAME==VERSION, e.g. toolz==1.0.0")
    return m.group(1), m.group(2)


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _req_name(req: str) -> str:
    m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._\-]*)", req)
    return _norm(m.group(1)) if m else ""


def _drop_extra_marker(req: str) -> str:
    """`foo>=1; extra == "tests"` -> `foo>=1` (pip evaluates the other markers)."""
    if ";" not in req:
        return req.strip()
    spec, marker = req.split(";", 1)
    parts = [p.strip() for p in re.split(r"\band\b", marker) if not re.search(r"\bextra\s*==", p)]
    return spec.strip() + (f"; {' and '.join(parts)}" if parts else "")


def discover_test_requirements(tree: Path, name: str) -> tuple[list[str], list[str]]:
    """(requirement strings, where each group was found). Looks at the sdist's
    metadata (runtime requirements and a test/tests/testing extra), PEP 735
    dependency groups of those names, and the usual requirements files."""
    found: list[str] = []
    sources: list[str] = []
    pkg_info = tree / "PKG-INFO"
    if pkg_info.exists():
        meta = Parser().parsestr(pkg_info.read_text(errors="replace"))
        for req in meta.get_all("Requires-Dist") or []:
            extra = re.search(r"""\bextra\s*==\s*["']([^"']+)["']""", req)
            if extra is None or extra.group(1) in TEST_EXTRAS:
                found.append(_drop_extra_marker(req))
        if found:
            sources.append("PKG-INFO Requires-Dist (runtime and test extras)")
    pyproject = tree / "pyproject.toml"
    data: dict = {}
    if pyproject.exists():
        try:
            data = tomllib.loads(pyproject.read_text())
        except tomllib.TOMLDecodeError:
            data = {}
    if not pkg_info.exists():
        # A checkout rather than an sdist: the same metadata, from its source files.
        declared, where = _declared_requirements(tree, data)
        found += declared
        sources += where
    if data:
        groups = data.get("dependency-groups", {})
        for g in TEST_EXTRAS:
            items = [r for r in groups.get(g, []) if isinstance(r, str)]
            if items:
                found += items
                sources.append(f"pyproject.toml [dependency-groups] {g}")
    for rel in REQUIREMENT_FILES:
        p = tree / rel
        if p.exists():
            lines = [ln.split("#", 1)[0].strip() for ln in p.read_text(errors="replace").splitlines()]
            found += [ln for ln in lines if ln and not ln.startswith("-")]
            sources.append(rel)
    own = _norm(name)
    keep = [r for r in dict.fromkeys(found) if _req_name(r) and _req_name(r) not in TOOLING and _req_name(r) != own]
    return keep, sources


def _declared_requirements(tree: Path, pyproject: dict) -> tuple[list[str], list[str]]:
    """Runtime requirements and test extras a source checkout declares:
    pyproject.toml's [project] table, else setup.cfg's [options]."""
    found: list[str] = []
    sources: list[str] = []
    project = pyproject.get("project", {}) if isinstance(pyproject.get("project"), dict) else {}
    deps = [r for r in project.get("dependencies", []) if isinstance(r, str)]
    extras = project.get("optional-dependencies", {})
    for g in TEST_EXTRAS:
        deps += [r for r in (extras.get(g, []) if isinstance(extras, dict) else []) if isinstance(r, str)]
    if deps:
        found += [_drop_extra_marker(r) for r in deps]
        sources.append("pyproject.toml [project] (runtime and test extras)")
    setup_cfg = tree / "setup.cfg"
    if not deps and setup_cfg.exists():
        import configparser

        cfg = configparser.ConfigParser(interpolation=None)
        try:
            cfg.read_string(setup_cfg.read_text(errors="replace"))
        except configparser.Error:
            return found, sources

        def lines(section: str, key: str) -> list[str]:
            raw = cfg.get(section, key, fallback="")
            return [ln.split("#", 1)[0].strip() for ln in raw.splitlines() if ln.split("#", 1)[0].strip()]

        reqs = lines("options", "install_requires")
        for g in TEST_EXTRAS:
            reqs += lines("options.extras_require", g)
        if reqs:
            found += [_drop_extra_marker(r) for r in reqs]
            sources.append("setup.cfg [options] (install_requires and test extras)")
    return found, sources


def pin_requirements(requirements: list[str]) -> list[str]:
    """Resolve `requirements` together with the verifier's pytest for the
    sandbox interpreter (pip's resolver, a dry run against PyPI) and return
    name==version pins, leaving out pytest and what pytest itself pulls in."""
    if not requirements:
        return []

    def resolve(reqs: list[str]) -> dict[str, str]:
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "--python",
                SANDBOX_PYTHON,
                "install",
                "--dry-run",
                "--ignore-installed",
                "--quiet",
                "--disable-pip-version-check",
                "--report",
                "-",
                *reqs,
            ],
            capture_output=True,
            text=True,
        )
        if r.returncode != 0:
            raise FactoryError(f"cannot resolve test requirements {reqs}: {r.stderr[-1500:]}")
        report = json.loads(r.stdout)
        return {_norm(i["metadata"]["name"]): i["metadata"]["version"] for i in report.get("install", [])}

    base = resolve([PIN_PYTEST])
    full = resolve([PIN_PYTEST, *requirements])
    return sorted(f"{n}=={v}" for n, v in full.items() if base.get(n) != v)


def detect_import_root(tree: Path) -> str:
    """`src` for src-layouts, the repository root otherwise."""
    src = tree / "src"
    if src.is_dir() and any((p / "__init__.py").exists() or p.suffix == ".py" for p in src.iterdir()):
        return "src"
    return "."


# -- which files are tests, which are source ---------------------------------------


def is_test_path(path: str) -> bool:
    """The verifier's notion of a test file (it refuses agents' edits there)."""
    from sandgym.verifiers.swe_repo.host import protected_reason

    return protected_reason(path) is not None


def source_files(tree: Path, import_root: str) -> list[str]:
    """Python modules of the package itself: under the import root, not tests,
    not build scripts or docs."""
    root = tree / import_root
    out = []
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(tree).as_posix()
        parts = set(Path(rel).parts)
        if is_test_path(rel) or parts & {
            "docs",
            "doc",
            "examples",
            "benchmark",
            "benchmarks",
            "tools",
            "scripts",
            "build",
            ".github",
        }:
            continue
        if import_root == "." and len(Path(rel).parts) == 1 and p.name in ("setup.py", "noxfile.py", "conftest.py"):
            continue
        if any(part.endswith(".egg-info") for part in parts):
            continue
        out.append(rel)
    return out


# -- git ---------------------------------------------------------------------------


def make_repo(tree: Path):
    """A git repository of the pristine tree: one commit, fixed identity."""
    import git

    repo = git.Repo.init(tree)
    with repo.config_writer() as cw:
        cw.set_value("core", "autocrlf", "false")
        cw.set_value("user", "name", GIT_IDENTITY["GIT_AUTHOR_NAME"])
        cw.set_value("user", "email", GIT_IDENTITY["GIT_AUTHOR_EMAIL"])
    repo.git.add("-A", "-f", ".")
    repo.git.commit("-q", "-m", "pristine", "--no-verify", env=GIT_IDENTITY)
    return repo


def diff_of(repo, path: str, new_text: str) -> tuple[str, str]:
    """(base_patch pristine->mutant, gold patch mutant->pristine) of one file,
    as git writes them; the file is restored afterwards."""
    file = Path(repo.working_tree_dir) / path
    original = file.read_bytes()
    try:
        file.write_text(new_text, encoding="utf-8")
        forward = repo.git.diff("--no-color", "--no-ext-diff", "--", path) + "\n"
        backward = repo.git.diff("--no-color", "--no-ext-diff", "-R", "--", path) + "\n"
    finally:
        file.write_bytes(original)
    return forward, backward


# -- the factory ---------------------------------------------------------------------


@dataclass
class Prepared:
    name: str
    version: str
    source: RepoSource
    environment: TestEnvironment
    tree: Path
    repo: object
    usable: list[str]  # tests that passed twice, in test files
    suite_s: float
    requirement_sources: list[str]


def _statuses_ok(run) -> dict[str, str]:
    return run.statuses if not run.timed_out else {}


def prepare(name: str, version: str, work: Path, runtime, stats: FactoryStats, log: Callable[[str], None]) -> Prepared:
    from sandgym.verifiers.swe_repo.host import run_tests

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
    a, b = _statuses_ok(first), _statuses_ok(second)
    flaky = {t for t in set(a) | set(b) if a.get(t) != b.get(t)}
    usable = sorted(t for t, s in a.items() if s == "passed" and t not in flaky and is_test_path(t.split("::")[0]))
    stats.usable_tests, stats.flaky_tests, stats.suite_s = len(usable), len(flaky), suite_s
    if not usable:
        raise FactoryError(f"{name}=={version}: no test passes here; pick another release or package")
    log(f"{name}=={version}: {len(usable)} usable tests, {len(flaky)} flaky, suite {suite_s:.1f} s")
    return Prepared(name, version, source, environment, tree, repo, usable, suite_s, found_in)


def order_candidates(mutations: list[Mutation], seed: int) -> list[Mutation]:
    """A seeded shuffle, then round-robin over operators so every operator
    gets its turn early, whatever the package's mix."""
    rng = random.Random(seed)
    by_op: dict[str, list[Mutation]] = {}
    for m in mutations:
        by_op.setdefault(m.operator, []).append(m)
    for ms in by_op.values():
        rng.shuffle(ms)
    ops = sorted(by_op)
    rng.shuffle(ops)
    out = []
    while any(by_op.values()):
        for op in ops:
            if by_op[op]:
                out.append(by_op[op].pop())
    return out


@dataclass
class Outcome:
    kind: str  # kept | survived | broke_import | too_broad | timed_out | invalid
    task: TaskPair | None = None
    detail: str = ""


class _Worker:
    """A private copy of the pristine tree, mutated one file at a time."""

    def __init__(self, prep: Prepared, root: Path):
        self.tree = root
        shutil.copytree(prep.tree, root, ignore=shutil.ignore_patterns(".git"))


def evaluate(
    prep: Prepared,
    index: int,
    mutation: Mutation,
    worker: _Worker,
    runtime,
    repo_lock: threading.Lock,
    validate_runs: int = 2,
) -> Outcome:
    from sandgym.verifiers.swe_repo.host import run_tests, verify

    file = worker.tree / mutation.path
    original = file.read_text(encoding="utf-8")
    mutant = mutation.apply(original)
    timeout = max(60.0, 5 * prep.suite_s)
    try:
        file.write_text(mutant, encoding="utf-8")
        run = run_tests(runtime, worker.tree, prep.environment, None, timeout)
    finally:
        file.write_text(original, encoding="utf-8")
    if run.timed_out:
        return Outcome("timed_out")
    if run.collect_errors or any(run.status(t) == "missing" for t in prep.usable):
        return Outcome("broke_import", detail=", ".join(sorted(run.collect_errors))[:200])
    f2p = [t for t in prep.usable if run.status(t) in ("failed", "error")]
    if not f2p:
        return Outcome("survived")
    if len(f2p) > max(20, MAX_F2P_SHARE * len(prep.usable)):
        return Outcome("too_broad", detail=f"{len(f2p)} of {len(prep.usable)} tests fail")
    files = {t.split("::")[0] for t in f2p}
    failing = set(f2p)
    p2p = [t for t in prep.usable if t.split("::")[0] in files and t not in failing]
    with repo_lock:
        base_patch, gold = diff_of(prep.repo, mutation.path, mutant)
    task_id = f"{prep.name}-{prep.version}/mut-{index:04d}"
    module = mutation.path[:-3].replace("/", ".")
    if prep.environment.import_root != ".":
        module = module[len(prep.environment.import_root.rstrip("/")) + 1 :]
    module = module.removesuffix(".__init__")
    title, issue = write_issue(
        prep.name,
        prep.version,
        f"{module}.{mutation.function}",
        mutation.path,
        f2p,
        run.details,
        base_patch,
        is_test_path,
    )
    timeout_s = float(min(600, max(60, int(10 * prep.suite_s))))
    task = TaskPair(
        visible=SWETask(
            id=task_id,
            title=title,
            problem_statement=issue,
            repo=prep.source,
            environment=prep.environment,
            base_patch=base_patch,
            visible_tests=sorted(files),
            timeout_s=timeout_s,
            source=f"sandgym.swe_factory/{FACTORY_VERSION}",
            tags=["mutation", mutation.operator, prep.name],
        ),
        hidden=SWEHidden(id=task_id, patch=gold, FAIL_TO_PASS=f2p, PASS_TO_PASS=p2p),
    )
    for _ in range(validate_runs):
        good = verify(task, gold, runtime)
        if good.status != "FULL":
            return Outcome("invalid", detail=f"gold patch: {good.status} {good.detail[:200]}")
        empty = verify(task, "", runtime)
        if empty.status != "NO":
            return Outcome("invalid", detail=f"empty diff: {empty.status} {empty.detail[:200]}")
    return Outcome("kept", task)


def make_swe(
    package: str,
    max_tasks: int,
    seed: int,
    runtime,
    jobs: int = 2,
    progress: Progress | None = None,
    log: Callable[[str], None] = print,
    max_tries: int | None = None,
) -> tuple[list[TaskPair], FactoryStats]:
    """Validated tasks from one PyPI release, at most `max_tasks`, at most one per function."""
    name, version = parse_package(package)
    stats = FactoryStats(package=f"{name}=={version}")
    progress = progress or (lambda phase, done, total: None)
    with tempfile.TemporaryDirectory(prefix="sandgym-factory-") as tmp:
        work = Path(tmp)
        progress("preparing", 0, max_tasks)
        prep = prepare(name, version, work, runtime, stats, log)
        mutations = []
        for rel in source_files(prep.tree, prep.environment.import_root):
            mutations += find_mutations((prep.tree / rel).read_text(encoding="utf-8"), rel)
        candidates = order_candidates(mutations, seed)
        stats.candidates = len(candidates)
        if not candidates:
            raise FactoryError(f"{package}: no mutable code found in {prep.environment.import_root!r}")
        limit = max_tries or len(candidates)
        workers = [_Worker(prep, work / f"worker-{i}") for i in range(jobs)]
        free = list(workers)
        repo_lock = threading.Lock()
        claimed: set[str] = set()  # functions with a task kept or in flight
        kept: list[TaskPair] = []
        kept_functions: set[str] = set()
        pending: dict[Future, tuple[str, _Worker]] = {}
        queue = list(enumerate(candidates))
        deferred: list[tuple[int, Mutation]] = []
        progress("mutating", 0, max_tasks)
        with ThreadPoolExecutor(jobs) as pool:
            while True:
                while free and queue and len(kept) + len(pending) < max_tasks and stats.tried < limit:
                    index, m = queue.pop(0)
                    fkey = f"{m.path}:{m.function}"
                    if fkey in claimed:
                        deferred.append((index, m))
                        continue
                    claimed.add(fkey)
                    worker = free.pop()
                    stats.tried += 1
                    pending[pool.submit(evaluate, prep, index, m, worker, runtime, repo_lock)] = (fkey, worker)
                if not pending:
                    break
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    fkey, worker = pending.pop(fut)
                    free.append(worker)
                    try:
                        out = fut.result()
                    except (RepoError, OSError, TaskSpecError, ValueError) as e:  # infrastructure; keep going
                        out = Outcome("invalid", detail=str(e)[:300])
                    if out.kind == "kept":
                        kept.append(out.task)
                        kept_functions.add(fkey)
                        op = out.task.visible.tags[1]
                        stats.by_operator[op] = stats.by_operator.get(op, 0) + 1
                        stats.validated += 1
                    else:
                        claimed.discard(fkey)
                        key = {
                            "survived": "survived",
                            "broke_import": "broke_import",
                            "too_broad": "too_broad",
                            "timed_out": "timed_out",
                        }.get(out.kind, "invalid")
                        setattr(stats, key, getattr(stats, key) + 1)
                        if out.kind == "invalid":
                            log(f"dropped {fkey}: {out.detail}")
                    progress("mutating", len(kept), max_tasks)
                if not queue and deferred and len(kept) < max_tasks:
                    # Functions still without a task get their next mutation; kept ones stay at one.
                    queue = [(i, m) for i, m in deferred if f"{m.path}:{m.function}" not in kept_functions]
                    deferred = []
    stats.finished = time.monotonic()
    return sorted(kept, key=lambda t: t.id), stats


def write_task_set(tasks: list[TaskPair], out: Path, name: str = "", description: str = "") -> TaskSet:
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
