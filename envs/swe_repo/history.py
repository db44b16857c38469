"""Tasks from real fix commits of a public repository (tag `history`).

A commit on the first-parent line of a repository that changes both source
and tests, where some of its tests fail before it and pass after it, is a
task: the start state is its parent (a `RepoSource(kind="git")` at the
parent), the gold patch is the commit's source change, and the commit's
test change is the hidden test patch. FAIL_TO_PASS and PASS_TO_PASS are
found as SWE-bench finds them: the test files the commit touches, run in
a sandbox (the repository's code is hostile) on the parent with the test
patch applied and on the commit; a test that passes only after is
FAIL_TO_PASS, one that passes on both is PASS_TO_PASS.

Issue texts come from the failing tests' reports at the levels the
mutation factory uses (`assemble.issue_text`): a symptom or minimal text
shows a reproduction made from a failing test, kept only when it gives
another outcome on the parent than on the fix (`repro_check.tells_apart`);
otherwise the text says where (`located`). The commit message is not used:
it usually names the fix.

Left out: merges' second parents (a merge on the first-parent line counts
as one change against its first parent), commits that change the build or
test configuration (`setup.py`, `pyproject.toml`, ...), binary changes,
gold patches over MAX_GOLD_LINES changed lines or MAX_GOLD_FILES files.
The test environment is the parent's declared test requirements pinned to
wheels for the sandbox's Python (factory.pin_requirements).
"""

from __future__ import annotations

import ast
import re
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from sandgym.envs.swe_repo.assemble import Dropped, choose_level, issue_text, suite_roots
from sandgym.envs.swe_repo.factory import FactoryError, pin_requirements
from sandgym.envs.swe_repo.issues import changed_lines, names_any
from sandgym.envs.swe_repo.repro_check import filled, run_outcomes, runnable, tells_apart
from sandgym.envs.swe_repo.reproduction import Repro, explain_reproduction
from sandgym.envs.swe_repo.requirements import discover_test_requirements
from sandgym.envs.swe_repo.source_tree import detect_import_root, is_test_path
from sandgym.envs.swe_repo.static_repro import static_reproductions
from sandgym.specs.swe_repo import Difficulty, IssueLevel, RepoSource, SWEHidden, SWETask, SWETaskPair, TestEnvironment
from sandgym.verifiers.swe_repo.git_sources import run_git, write_tree
from sandgym.verifiers.swe_repo.sandbox import run_tests
from sandgym.verifiers.swe_repo.sources import RepoError

SOURCE = "history"
MAX_GOLD_LINES = 120
MAX_GOLD_FILES = 4
MAX_TEST_LINES = 800
MAX_REPRO_TRIES = 3  # each try is two sandbox runs
MAX_STATIC_TESTS = 60  # failing tests whose source is read for reproductions
MAX_STATIC_RUNS = 80  # of those reproductions, run at once on each side (one run each; each stops after 5 s)
# A commit that changes how the project is built or tested changes the environment too.
CONFIG_FILES = {"setup.py", "setup.cfg", "pyproject.toml", "tox.ini", "pytest.ini", "noxfile.py", "Pipfile"}
NOT_SOURCE_DIRS = ("docs/", "doc/", "examples/", "benchmarks/", "scripts/", ".github/")
VERSION_RE = re.compile(r"""^\s*(?:__version__|version)\s*=\s*["']([0-9][0-9A-Za-z.+\-]*)["']""", re.M)


@dataclass
class FixCommit:
    commit: str
    parent: str
    src_paths: list[str]
    test_paths: list[str]
    gold: str
    test_patch: str


def _text(git_dir: Path, args: list[str]) -> str:
    return run_git(args, git_dir).decode("utf-8", "surrogateescape")


def _changed(patch: str) -> int:
    return sum(1 for ln in patch.splitlines() if ln[:1] in "+-" and not ln.startswith(("+++", "---")))


def classify(paths: list[str]) -> tuple[list[str], list[str]] | None:
    """(source files, test files) of a commit's changed paths, or None when it
    touches the configuration or changes no source or no test."""
    src, tests = [], []
    for p in paths:
        base = PurePosixPath(p).name
        if base in CONFIG_FILES or base.startswith("requirements"):
            return None
        if not p.endswith(".py"):
            continue  # docs, changelogs, data: neither the fix nor its tests
        if is_test_path(p):
            tests.append(p)
        elif not p.startswith(NOT_SOURCE_DIRS):
            src.append(p)
    return (src, tests) if src and tests else None


def fix_commits(git_dir: Path, rev: str = "HEAD") -> list[FixCommit]:
    """Every first-parent commit of `rev` that changes source and tests, oldest first."""
    out = []
    for line in _text(git_dir, ["rev-list", "--first-parent", "--reverse", "--parents", rev]).splitlines():
        ids = line.split()
        if len(ids) < 2:
            continue  # the root commit has nothing before it
        commit, parent = ids[0], ids[1]
        listing = _text(git_dir, ["diff", "--name-only", "--no-renames", "-z", parent, commit]).split("\0")
        split = classify([p for p in listing if p])
        if split is None:
            continue
        src, tests = split
        if len(src) > MAX_GOLD_FILES:
            continue
        diff = ["diff", "--no-color", "--no-ext-diff", "--no-renames", "--binary", parent, commit, "--"]
        gold, test_patch = _text(git_dir, diff + src), _text(git_dir, diff + tests)
        if "GIT binary patch" in gold + test_patch or _changed(gold) > MAX_GOLD_LINES:
            continue
        if _changed(test_patch) > MAX_TEST_LINES:
            continue
        out.append(FixCommit(commit, parent, src, tests, gold, test_patch))
    return out


def touched_places(start: Path, fc: FixCommit) -> list[tuple[str, str]]:
    """(file, innermost function or class) of every hunk the gold patch changes in the start state."""
    places: list[tuple[str, str]] = []
    current = ""
    for line in fc.gold.splitlines():
        if line.startswith("--- "):
            current = line[6:] if line.startswith("--- a/") else ""
        m = re.match(r"@@ -(\d+)(?:,(\d+))? ", line)
        if not (m and current and (start / current).is_file()):
            continue
        first, count = int(m.group(1)), int(m.group(2) or 1)
        try:
            tree = ast.parse((start / current).read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        best, size = "", 10**9
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                end = node.end_lineno or node.lineno
                # the hunk's changed lines lie inside the node (its 3 lines of context around them)
                if node.lineno <= first + 3 and end >= first + max(count - 4, 0) and end - node.lineno < size:
                    best, size = node.name, end - node.lineno
        if best and (current, best) not in places:
            places.append((current, best))
    return places


def project_version(tree: Path, import_root: str) -> str:
    """The version the tree declares (a development tree between releases), or ''."""
    files = [tree / "pyproject.toml", tree / "setup.py", tree / "setup.cfg"]
    root = tree / import_root
    files += sorted(root.glob("*/__init__.py")) + sorted(root.glob("*/*version*.py")) + sorted(root.glob("*.py"))
    for f in files:
        try:
            m = VERSION_RE.search(f.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            continue
        if m:
            return m.group(1)
    return ""


def generated_files(tree: Path) -> dict[str, str]:
    """Version modules a build writes from git metadata (setuptools-scm's
    `version_file`/`write_to`, hatch-vcs's `version-file`) that the tree lacks:
    the package imports them, so the start state gets them (as `base_patch`)."""
    import tomllib

    try:
        data = tomllib.loads((tree / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    tool = data.get("tool", {})
    scm = tool.get("setuptools_scm", {})
    hook = tool.get("hatch", {}).get("build", {}).get("hooks", {}).get("vcs", {})
    out = {}
    for path in (scm.get("version_file"), scm.get("write_to"), hook.get("version-file")):
        if isinstance(path, str) and path.endswith(".py") and ".." not in path and not path.startswith("/"):
            if not (tree / path).exists():
                out[path] = '__version__ = version = "0.0.dev0"\n__version_tuple__ = version_tuple = (0, 0, "dev0")\n'
    return out


def added_files_patch(files: dict[str, str]) -> str:
    """A unified diff that creates `files`."""
    out = []
    for path, text in sorted(files.items()):
        lines = text.splitlines()
        out += [f"diff --git a/{path} b/{path}", "new file mode 100644", "--- /dev/null", f"+++ b/{path}"]
        out += [f"@@ -0,0 +1,{len(lines)} @@", *(f"+{ln}" for ln in lines)]
    return "\n".join(out) + "\n" if out else ""


class Environments:
    """Pinned test environments, found once per distinct declared requirement list."""

    def __init__(self, log: Callable[[str], None]):
        self.log = log
        self._pins: dict[tuple[str, ...], list[str]] = {}

    def of(self, tree: Path, project: str) -> TestEnvironment:
        wanted, _ = discover_test_requirements(tree, project)
        key = tuple(wanted)
        if key not in self._pins:
            self._pins[key] = pin_requirements(wanted)
            self.log(f"{project}: requirements {self._pins[key] or 'none beyond pytest'}")
        return TestEnvironment(requirements=self._pins[key], import_root=detect_import_root(tree))


@dataclass
class Built:
    task: SWETaskPair | None
    why: str = ""  # the waste kind when no task
    detail: str = ""


def _copy_from(git_dir: Path, commit: str, paths: list[str], dest: Path) -> None:
    """Put each path as it is at `commit` into `dest` (removed when the commit deletes it)."""
    for p in paths:
        target = dest / p
        try:
            data = run_git(["cat-file", "blob", f"{commit}:{p}"], git_dir)
        except RepoError:  # not in that commit: deleted there
            target.unlink(missing_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


def _all_tests(tree: Path) -> list[str]:
    return sorted(str(p.relative_to(tree)) for p in tree.rglob("*.py") if is_test_path(str(p.relative_to(tree))))


def build_task(
    fc: FixCommit,
    name: str,
    git_dir: Path,
    runtime,
    work: Path,
    envs: Environments,
    levels: dict[str, float],
    seed: int = 0,
    timeout_s: float = 300,
) -> Built:
    """One fix commit as a task, or why not (Built.why)."""
    project = name.rsplit("/", 1)[-1]
    task_id = f"{project}/{fc.commit[:12]}"
    work.mkdir(parents=True, exist_ok=True)
    before = write_tree(git_dir, fc.parent, work / "before")  # parent + the commit's tests
    generated = generated_files(before)
    for path, text in generated.items():
        (before / path).parent.mkdir(parents=True, exist_ok=True)
        (before / path).write_text(text, encoding="utf-8")
    start_texts = {p: (before / p).read_text(encoding="utf-8") for p in fc.src_paths if (before / p).is_file()}
    all_tests = _all_tests(before)
    try:
        env = envs.of(before, project)
    except (FactoryError, ValueError) as e:
        return Built(None, "requirements", str(e)[:300])
    version = project_version(before, env.import_root)
    places = touched_places(before, fc)
    _copy_from(git_dir, fc.commit, fc.test_paths, before)
    after = work / "after"
    shutil.copytree(before, after)
    _copy_from(git_dir, fc.commit, fc.src_paths, after)
    run_files = [p for p in fc.test_paths if (after / p).is_file() and PurePosixPath(p).name.startswith("test")]
    if not run_files:
        return Built(None, "no_test_file")
    a = run_tests(runtime, before, env, run_files, timeout_s)
    b = run_tests(runtime, after, env, run_files, timeout_s)
    if a.timed_out or b.timed_out:
        return Built(None, "timed_out")
    if not b.valid or b.forged:
        return Built(None, "invalid", b.problem)
    f2p = sorted(t for t, s in b.statuses.items() if s == "passed" and a.status(t) != "passed")
    p2p = sorted(t for t, s in b.statuses.items() if s == "passed" and a.status(t) == "passed")
    if not f2p:
        return Built(None, "no_fail_to_pass")
    if not places:
        return Built(None, "module_level")  # no function or class to name in a located text
    details = {t: a.details.get(t, "") for t in f2p}
    sources = {p: (after / p).read_text(encoding="utf-8", errors="replace") for p in run_files}
    level: IssueLevel = choose_level(levels, task_id, seed)
    test_names = sorted({t.split("::")[-1].split("[")[0] for t in f2p})
    mutated = {p: start_texts.get(p, "") for p in fc.src_paths}
    notes: list[str] = []  # why the failing tests gave no reproduction (the run's log)

    def issue_at(shown: str, repro: Repro | None) -> tuple[str, str, IssueLevel]:
        return issue_text(
            project,
            version or "(development tree)",
            env.import_root,
            places,
            [shown],
            [repro],
            details,
            fc.gold,
            lambda p: p in fc.test_paths or p.startswith(("tests/", "test/")),
            len(f2p),
            len(f2p) - 1,
            sorted(set(test_names) | set(fc.src_paths) | set(fc.test_paths)),
            level,
        )

    written = None
    if level != "located":
        for shown, repro in _reproductions(f2p, details, sources, after, mutated, env, runtime, places, fc.gold, notes):
            try:
                written = issue_at(shown, repro)
            except Dropped:
                written = None
            if written is not None and written[2] != "located":
                break
            written = None
            notes.append(f"{shown.split('::')[-1][:60]}: its text would give the place or the change away")
    try:
        title, issue, got = written or issue_at(f2p[0], None)
    except Dropped as e:
        return Built(None, e.kind, e.detail)
    difficulty = Difficulty(
        issue_level=got,
        names_location=got == "located",
        failing_tests=len(f2p),
        held_out=len(f2p) - 1,
        files_touched=len(fc.src_paths),
        functions_touched=len(places),
    )
    visible = SWETask(
        id=task_id,
        title=title,
        problem_statement=issue,
        repo=RepoSource(kind="git", name=name, version=version, commit=fc.parent),
        environment=env,
        base_patch=added_files_patch(generated),
        visible_tests=suite_roots(all_tests) if got != "located" else sorted({t.split("::")[0] for t in f2p}),
        timeout_s=timeout_s,
        source=SOURCE,
        tags=["history", project, f"issue:{got}"],
        difficulty=difficulty,
    )
    hidden = SWEHidden(id=task_id, patch=fc.gold, test_patch=fc.test_patch, FAIL_TO_PASS=f2p, PASS_TO_PASS=p2p)
    return Built(SWETaskPair(visible=visible, hidden=hidden), detail="; ".join(notes[-40:]) if got == "located" else "")


def _changed_names(patch: str) -> set[str]:
    """The identifiers on a patch's changed lines, keywords and builtins left out."""
    import builtins
    import keyword

    words = set(re.findall(r"[A-Za-z_]\w{2,}", "\n".join(changed_lines(patch))))
    return {w for w in words if not keyword.iskeyword(w) and w not in dir(builtins) and w != "self"}


def _reproductions(
    f2p: list[str],
    details: dict[str, str],
    sources: dict[str, str],
    after: Path,
    mutated: dict[str, str],
    env: TestEnvironment,
    runtime,
    places: list[tuple[str, str]],
    gold: str,
    notes: list[str],
) -> Iterator[tuple[str, Repro]]:
    """(failing test, reproduction) pairs that tell the parent from the fix,
    best first: made from pytest's report of a failing test (up to
    MAX_REPRO_TRIES, each run on both sides), then read from the failing
    tests' source and filled in from one run of all of them on each side
    (`static_reproductions`: a test module that does not import on the
    parent, an assertion in a helper, a value pytest cut short). Why others
    failed goes to `notes`."""
    tries = 0
    for t in f2p:
        try:
            r: Repro | str = explain_reproduction(t, details[t], sources.get(t.split("::")[0], ""))
        except (ValueError, TypeError, AttributeError, RecursionError, MemoryError) as e:
            r = type(e).__name__
        if isinstance(r, str):
            notes.append(f"{t.split('::')[-1][:60]}: {r}")
            continue
        tries += 1
        ok, why = tells_apart(r, after, mutated, env, runtime)
        if ok:
            yield t, r
        else:
            notes.append(f"{t.split('::')[-1][:60]}: {why[:120]}")
        if tries >= MAX_REPRO_TRIES:
            break
    pairs = []
    read = f2p[:MAX_STATIC_TESTS]
    per_test = max(2, MAX_STATIC_RUNS // max(1, len(read)))  # one failing test: any of its checks may be the one
    for t in read:
        path = t.split("::")[0]
        unread: list[str] = []
        try:
            found = static_reproductions(t, sources.get(path, ""), per_test, unread, conftests(after, path))
        except (ValueError, TypeError, AttributeError, RecursionError, MemoryError):
            continue
        pairs += [(t, r) for r in found if runnable(r)]
        if not found and unread:
            notes.append(f"{t.split('::')[-1][:60]} (read from its source): {unread[-1][:120]}")
    # When the module failed to import, every test fails: those using the names the fix
    # changes or adds (its functions, the identifiers on its changed lines) come first.
    names = sorted({function for _, function in places} | _changed_names(gold))
    pairs.sort(key=lambda pair: -len(names_any(pair[1].block(), names)))
    pairs = pairs[:MAX_STATIC_RUNS]
    if not pairs:
        return
    outcomes = run_outcomes([r for _, r in pairs], after, mutated, env, runtime, fixed_twice=True)
    for (t, r), (buggy, fixed) in zip(pairs, outcomes, strict=True):
        done = filled(r, buggy, fixed)
        if done is None:
            notes.append(f"{t.split('::')[-1][:60]} (read from its source): buggy {buggy}, fixed {fixed}"[:200])
        else:
            yield t, done


def conftests(tree: Path, test_path: str) -> list[str]:
    """The text of each conftest.py on the way from `test_path`'s folder up to the root of `tree`, nearest first."""
    out = []
    folder = PurePosixPath(test_path).parent
    for up in [folder, *folder.parents]:
        f = tree / up / "conftest.py"
        if f.is_file() and not f.is_symlink() and f.stat().st_size < 200_000:
            out.append(f.read_text(encoding="utf-8", errors="replace"))
    return out


# -- the run over repositories ------------------------------------------------------------


@dataclass
class RepoStats:
    """Per repository: what was tried, kept and wasted (the factory report's figures)."""

    name: str
    candidates: int = 0
    tried: int = 0
    kept: int = 0
    envs_built: int = 0  # candidates whose test environment resolved and whose tests ran
    gold_runs: int = 0
    gold_full: int = 0
    waste: dict[str, int] = field(default_factory=dict)
    levels: dict[str, int] = field(default_factory=dict)

    def record(self) -> dict:
        return {
            "repository": self.name,
            "candidate_commits": self.candidates,
            "tried": self.tried,
            "tasks": self.kept,
            "environment_build_rate": round(self.envs_built / self.tried, 3) if self.tried else None,
            "gold_pass_rate": round(self.gold_full / self.gold_runs, 3) if self.gold_runs else None,
            "waste": dict(sorted(self.waste.items())),
            "levels": dict(sorted(self.levels.items())),
        }


def validate_repeat(task: SWETaskPair, runtime, repeat: int = 3) -> tuple[list[str], int]:
    """(problems, gold FULL runs): gold FULL and the empty diff NO in every one of
    `repeat` runs, and nothing of the answer within reach (audited once)."""
    from sandgym.envs.swe_repo.swebench import validate_task
    from sandgym.verifiers.swe_repo.host import verify

    problems = validate_task(task, runtime)
    full = 0 if any(p.startswith("gold patch") for p in problems) else 1
    for _ in range(repeat - 1):
        if problems:
            break
        gold, empty = verify(task, task.hidden.patch, runtime), verify(task, "", runtime)
        full += gold.status == "FULL"
        if gold.status != "FULL":
            problems.append(f"gold patch scored {gold.status} on a rerun")
        if empty.status != "NO":
            problems.append(f"the empty diff scored {empty.status} on a rerun")
    return problems, full


def run_repository(
    name: str,
    git_dir: Path,
    runtime,
    work: Path,
    envs: Environments,
    stats: RepoStats,
    levels: dict[str, float],
    max_tasks: int,
    seed: int = 0,
    jobs: int = 2,
    log: Callable[[str], None] = print,
    on_task: Callable[[SWETaskPair], object] = lambda task: None,
) -> list[SWETaskPair]:
    """Tasks from the newest fix commits of one repository, each validated 3 times
    and handed to `on_task` as it is kept;
    its bundle chain (history_bundles.py) is written for the candidates, then
    cut to the kept tasks' base commits."""
    from concurrent.futures import ThreadPoolExecutor

    from sandgym.envs.swe_repo.blind import blind_solver, task_sources
    from sandgym.verifiers.swe_repo.git_sources import repo_slug
    from sandgym.verifiers.swe_repo.history_bundles import history_dir, write_chain

    found = fix_commits(git_dir)
    stats.candidates = len(found)
    folder = history_dir() / repo_slug(name)
    write_chain(git_dir, [fc.parent for fc in found], folder)  # what the verifier reads the start states from
    newest_first = list(reversed(found))
    kept: list[SWETaskPair] = []

    def one(i_fc: tuple[int, FixCommit]) -> tuple[FixCommit, Built, list[str], int]:
        i, fc = i_fc
        slot = work / f"{repo_slug(name)}-{fc.commit[:12]}"
        try:
            built = build_task(fc, name, git_dir, runtime, slot, envs, levels, seed)
            problems, full = validate_repeat(built.task, runtime) if built.task else ([], 0)
            if built.task is not None and not problems:
                # A fix whose tests also pass after an issue-agnostic rewrite (blind.py) tests too little.
                solved = blind_solver(built.task, task_sources(built.task), runtime)
                if solved is not None:
                    built = Built(None, "blind", f"solved by {solved.solver}")
        except Exception as e:  # one commit's failure (a sandbox, a venv) drops that commit only
            built, problems, full = Built(None, "error", f"{type(e).__name__}: {e}"[:300]), [], 0
        finally:
            shutil.rmtree(slot, ignore_errors=True)
        return fc, built, problems, full

    with ThreadPoolExecutor(max(1, jobs)) as pool:
        batch = max(1, jobs) * 2
        for start in range(0, len(newest_first), batch):
            if len(kept) >= max_tasks:
                break
            for fc, built, problems, full in pool.map(one, enumerate(newest_first[start : start + batch])):
                if len(kept) >= max_tasks:
                    break  # the rest of the batch: written nowhere, so the set and the chain agree
                stats.tried += 1
                if built.why not in ("requirements", "error"):
                    stats.envs_built += 1
                if built.task is not None:
                    stats.gold_runs += 3 if not problems or full else 1
                    stats.gold_full += full
                kind = built.why or ("unstable" if problems else "")
                if kind:
                    stats.waste[kind] = stats.waste.get(kind, 0) + 1
                    log(f"{name} {fc.commit[:12]}: dropped ({kind}) {built.detail[:200]}{'; '.join(problems)[:300]}")
                    continue
                assert built.task is not None and built.task.visible.difficulty is not None
                level = built.task.visible.difficulty.issue_level
                stats.levels[level] = stats.levels.get(level, 0) + 1
                stats.kept += 1
                kept.append(built.task)
                on_task(built.task)
                f2p = len(built.task.hidden.FAIL_TO_PASS)
                log(f"{name} {fc.commit[:12]}: task {built.task.id} ({level}, {f2p} F2P) {built.detail[:1000]}")
    kept = kept[:max_tasks]
    keep = {t.visible.repo.commit for t in kept}
    write_chain(git_dir, [fc.parent for fc in found if fc.parent in keep], folder)
    return kept


def rewrite_located(
    tasks: list[SWETaskPair],
    repos: dict[str, Path],
    runtime,
    levels: dict[str, float],
    seed: int = 0,
    log: Callable[[str], None] = print,
) -> list[SWETaskPair]:
    """`tasks` with each `located` text of a repository in `repos` written again
    by `build_task` from the same commit at a level drawn from `levels` (what a
    newer generator finds reproductions for). A new text is taken only when the
    task's start state, environment and hidden half come out exactly as they
    were, so the task validates as before; the others are kept as they are."""
    import tempfile

    envs = Environments(log)
    by_repo: dict[str, dict[str, FixCommit]] = {}
    out = []
    for pair in tasks:
        v = pair.visible
        if v.repo.kind != "git" or v.repo.name not in repos or v.difficulty is None:
            out.append(pair)
            continue
        if v.difficulty.issue_level != "located":
            out.append(pair)
            continue
        name = v.repo.name
        if name not in by_repo:
            by_repo[name] = {fc.commit[:12]: fc for fc in fix_commits(repos[name])}
        fc = by_repo[name].get(pair.id.rsplit("/", 1)[-1])
        if fc is None or fc.parent != v.repo.commit:
            log(f"{pair.id}: kept as it was (its commit is not a candidate here)")
            out.append(pair)
            continue
        with tempfile.TemporaryDirectory(prefix="sandgym-history-") as tmp:
            try:
                built = build_task(fc, name, repos[name], runtime, Path(tmp) / "w", envs, levels, seed, v.timeout_s)
            except Exception as e:  # one commit's failure keeps that task as it was
                built = Built(None, "error", f"{type(e).__name__}: {e}"[:300])
        new = built.task
        same = new is not None and (
            new.hidden == pair.hidden
            and new.visible.repo == v.repo
            and new.visible.environment == v.environment
            and new.visible.base_patch == v.base_patch
        )
        if new is None or not same:
            log(f"{pair.id}: kept as it was ({built.why or 'rebuilt differently'}) {built.detail[:200]}")
            out.append(pair)
            continue
        level = new.visible.difficulty.issue_level if new.visible.difficulty else "located"
        log(f"{pair.id}: {level} {built.detail[:600]}")
        out.append(SWETaskPair(visible=new.visible, hidden=pair.hidden))
    return out


def parse_repo_arg(spec: str) -> tuple[str, Path]:
    """`owner/name=GIT_DIR` (a clone or bare repository) -> (name, git dir)."""
    from sandgym.specs.swe_repo import check_repo_name
    from sandgym.verifiers.swe_repo.git_sources import is_git_repo

    name, sep, path = spec.partition("=")
    if not sep:
        raise FactoryError(f"--repo {spec!r}: expected owner/name=GIT_DIR, e.g. tkem/cachetools=/src/cachetools")
    try:
        check_repo_name(name)
    except ValueError as e:
        raise FactoryError(f"--repo {spec!r}: {e}") from None
    git_dir = is_git_repo(Path(path))
    if git_dir is None:
        raise FactoryError(f"--repo {spec!r}: {path} is no git clone or bare repository")
    return name, git_dir


def make_history(
    repos: list[tuple[str, Path]],
    out: Path,
    runtime,
    max_tasks: int,
    levels: dict[str, float],
    seed: int = 0,
    jobs: int = 2,
    log: Callable[[str], None] = print,
) -> list[RepoStats]:
    """Tasks from each repository's fix commits, written to (or added to) the set `out`."""
    import tempfile

    from sandgym.envs.swe_repo.factory import write_task_set

    envs = Environments(log)
    everything: list[RepoStats] = []
    description = (
        "Tasks from real fix commits of public repositories (`sandgym tasks make-history`): "
        "start state the parent commit, gold the commit's source change, its test change hidden; "
        "each validated three times (gold FULL, empty diff NO) and audited."
    )
    for name, git_dir in repos:
        stats = RepoStats(name)
        with tempfile.TemporaryDirectory(prefix="sandgym-history-") as tmp:
            # Each task is written as it is kept, so a stopped run loses none.
            run_repository(
                name,
                git_dir,
                runtime,
                Path(tmp),
                envs,
                stats,
                levels,
                max_tasks,
                seed,
                jobs,
                log,
                on_task=lambda task: write_task_set([task], out, description=description),
            )
        everything.append(stats)
        log(f"{name}: {stats.record()}")
    return everything
