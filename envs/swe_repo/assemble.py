"""One factory task from a mutant and its failing tests.

The start state is the pristine tree with the bug(s) injected and the
failing tests' definitions taken out of their test files; the gold `patch`
undoes the bug, the `test_patch` puts the tests back (the verifier applies
it after the agent's diff). The issue text is written at the task's level
from one failing test per injected bug (the "shown" tests); the other
failing tests are held out: never named, never quoted, so an answer that
special-cases the shown inputs fails them. Checks that drop a task: a test
that cannot be hidden, no held-out failing test, a changed source line
quoted in the text, a hidden test or file named in a symptom text.
"""

from __future__ import annotations

import hashlib
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sandgym.envs.swe_repo.hiding import Definitions, Target, Unhideable, hide_tests, target_of
from sandgym.envs.swe_repo.issues import names_any, telling_lines, write_issue, write_minimal, write_symptom
from sandgym.envs.swe_repo.mutations import Mutation
from sandgym.envs.swe_repo.reproduction import Repro, reproduction
from sandgym.specs.swe_repo import Difficulty, IssueLevel, RepoSource, SWEHidden, SWETask, SWETaskPair, TestEnvironment

# Long parametrized tables make long test lists: each list keeps a seeded
# sample of at most this many ids (the shown tests always), so specs stay small.
LIST_CAP = 40
# Reproductions run (buggy and fixed) per bug before the text falls back to `located`.
MAX_CHECKS = 3


class Dropped(Exception):
    """The candidate cannot make a task; `kind` names the waste bucket."""

    def __init__(self, kind: str, detail: str = ""):
        super().__init__(detail or kind)
        self.kind = kind
        self.detail = detail


@dataclass
class Package:
    """What assembly needs to know about the package."""

    name: str
    version: str
    source: RepoSource
    environment: TestEnvironment
    tree: Path  # the pristine tree (a git repository)
    repo: object  # git.Repo of `tree`
    usable: list[str]
    suite_s: float
    factory_source: str
    collect_errors: frozenset[str] = frozenset()  # modules that fail to import in the pristine tree too
    _definitions: Definitions | None = None

    def definitions(self) -> Definitions:
        """Where the test methods are defined (base classes too), read once
        from the pristine tree; call with the repository lock held."""
        if self._definitions is None:
            from sandgym.verifiers.swe_repo.path_policy import protected_reason

            texts = {}
            for p in sorted(self.tree.rglob("*.py")):
                rel = p.relative_to(self.tree).as_posix()
                if ".git" not in p.relative_to(self.tree).parts and protected_reason(rel) is not None:
                    try:
                        texts[rel] = p.read_text(encoding="utf-8")
                    except (OSError, UnicodeDecodeError):
                        continue
            self._definitions = Definitions(texts)
        return self._definitions


def apply_all(text: str, mutations: list[Mutation]) -> str:
    """Every mutation's edits on one file's text (they do not overlap: other functions)."""
    edits = sorted((e for m in mutations for e in m.edits), key=lambda e: e.start, reverse=True)
    for e in edits:
        text = text[: e.start] + e.text + text[e.end :]
    return text


def mutated_files(texts: dict[str, str], mutations: list[Mutation]) -> dict[str, str]:
    """{path: mutant text} of the files the mutations edit, from their `texts`."""
    by_path: dict[str, list[Mutation]] = {}
    for m in mutations:
        by_path.setdefault(m.path, []).append(m)
    return {p: apply_all(texts[p], ms) for p, ms in by_path.items()}


def read_texts(tree: Path, paths: set[str]) -> dict[str, str]:
    return {p: (tree / p).read_text(encoding="utf-8") for p in sorted(paths)}


def diffs(repo, new_texts: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """({path: pristine -> new}, {path: new -> pristine}) as git writes them;
    the files are restored afterwards."""
    root = Path(repo.working_tree_dir)
    originals = {p: (root / p).read_bytes() for p in new_texts}
    forward, backward = {}, {}
    try:
        for p, text in new_texts.items():
            (root / p).write_text(text, encoding="utf-8")
        for p in new_texts:
            forward[p] = repo.git.diff("--no-color", "--no-ext-diff", "--", p) + "\n"
            backward[p] = repo.git.diff("--no-color", "--no-ext-diff", "-R", "--", p) + "\n"
    finally:
        for p, raw in originals.items():
            (root / p).write_bytes(raw)
    return forward, backward


def diff_key(base_patch_source: str) -> str:
    """Two tasks with the same injected change are one task."""
    return hashlib.sha256(base_patch_source.encode()).hexdigest()[:16]


def _sample(rng: random.Random, items: list[str], k: int) -> list[str]:
    return list(items) if len(items) <= k else rng.sample(items, max(0, k))


def suite_roots(tests: list[str]) -> list[str]:
    """The whole test suite as few paths as pytest takes: each test file's
    top folder (`tests`), or the file itself when it lies at the top."""
    roots = set()
    for t in tests:
        parts = t.split("::")[0].split("/")
        roots.add(parts[0])
    return sorted(roots)


def choose_level(levels: dict[str, float], task_id: str, seed: int) -> IssueLevel:
    """The task's issue-text level: one level, or a seeded draw by weight."""
    names = sorted(levels)
    if len(names) == 1:
        return names[0]  # type: ignore[return-value]
    rng = random.Random(f"{seed}:{task_id}")
    return rng.choices(names, weights=[levels[n] for n in names])[0]  # type: ignore[return-value]


def _shown_tests(
    mutations: list[Mutation],
    f2p: list[str],
    alone: list[set[str]],
    details: dict[str, str],
    sources: dict[str, str],
    check: Callable[[Repro], bool] | None = None,
) -> tuple[list[str], list[Repro | None]]:
    """One failing test per mutation (one that fails with that mutation alone),
    preferring a test that gives a standalone reproduction; with `check`,
    only a reproduction it accepts (at most MAX_CHECKS tried per bug)."""
    shown: list[str] = []
    repros: list[Repro | None] = []
    for fails in alone:
        options = [t for t in f2p if t in fails and t not in shown]
        if not options:
            raise Dropped("invalid", "a mutation fails no test of the combination")
        best, best_repro = options[0], None
        checks = 0
        for t in options[:60]:
            r = reproduction(t, details.get(t, ""), sources[t.split("::")[0]])
            if r is not None and (best_repro is None or (r.args and not best_repro.args)):
                if check is not None:
                    if checks >= MAX_CHECKS:
                        break
                    checks += 1
                    if not check(r):
                        continue
                best, best_repro = t, r  # one whose input is literals first: it can make a minimal text
                if r.args:
                    break
        shown.append(best)
        repros.append(best_repro)
    return shown, repros


def issue_text(
    name: str,
    version: str,
    import_root: str,
    places: list[tuple[str, str]],
    shown: list[str],
    repros: list[Repro | None],
    details: dict[str, str],
    src_patch: str,
    is_test_file,
    n_listed: int,
    n_held_out: int,
    secret_names: list[str],
    level: IssueLevel,
) -> tuple[str, str, IssueLevel]:
    """(title, text, the level it is written at). A `minimal` text needs the
    reproduction's input to be literals, else it is written at `symptom`; a
    `symptom` text needs a standalone reproduction of every bug, else it is
    written at `located`, as is a text that would name a hidden test, test
    file or source file (`secret_names`); `places` are the (file, function)
    of each bug, for that text. Raises Dropped when even the `located` text
    quotes a line the bug changed."""
    if level == "minimal" and any(r is None or not r.args for r in repros):
        level = "symptom"  # the input is no literal: the call shows it
    if level != "located" and any(r is None for r in repros):
        level = "located"  # no standalone reproduction: the text says where instead
    secrets = telling_lines(src_patch)
    if level != "located":
        found = [r for r in repros if r is not None]
        title, issue = (write_symptom if level == "symptom" else write_minimal)(name, version, found)
        text = f"{title}\n{issue}"
        if not any(s in text for s in secrets) and not names_any(text, secret_names):
            return title, issue, level
        level = "located"  # the reproduction would give the place or the change away
    path0, function0 = places[0]
    module = path0[:-3].replace("/", ".")
    if import_root != ".":
        module = module[len(import_root.rstrip("/")) + 1 :]
    module = module.removesuffix(".__init__")
    where = ", ".join(f"`{function}` in `{path}`" for path, function in places)
    title, issue = write_issue(
        name,
        version,
        f"{module}.{function0}",
        path0,
        shown,
        details,
        src_patch,
        is_test_file,
        total=n_listed,
        hidden=True,
    )
    if len(places) > 1:
        issue = issue.replace(
            "no longer behaves as its tests expect.", f"no longer behaves as its tests expect (see {where})."
        )
    issue += f"\nThe other {n_held_out} failing tests are not listed here; a fix has to cover them as well.\n"
    if any(s in f"{title}\n{issue}" for s in secrets):
        raise Dropped("quoted", "the issue text quotes a changed line")
    return title, issue, level


def assemble(
    pkg: Package,
    task_id: str,
    mutations: list[Mutation],
    f2p: list[str],
    alone: list[set[str]],
    details: dict[str, str],
    level: IssueLevel,
    repo_lock: threading.Lock,
    timeout_s: float,
    min_held_out: int = 1,
    check: Callable[[Repro], bool] | None = None,
    whole_suite_visible: bool = False,
) -> tuple[SWETaskPair, str]:
    """(the task, its diff key). Raises Dropped. With `check`, a reproduction
    is shown only if it accepts it (factory version 3: it tells the buggy
    library from the fixed one); with `whole_suite_visible`, a symptom or
    minimal task's visible tests are the whole suite, not the files its
    failing tests came from (which would say where to look)."""
    # 1. hide every failing test's definition (whole parametrized functions;
    # an inherited test method in the base class that defines it).
    with repo_lock:  # another thread may have a file of the pristine tree changed for a diff
        defs = pkg.definitions()
        by_file: dict[str, list[Target]] = {}
        for t in f2p:
            try:
                target = defs.resolve(target_of(t))
            except Unhideable as e:
                raise Dropped("unhideable", str(e)[:200]) from None
            if target not in by_file.setdefault(target.path, []):
                by_file[target.path].append(target)
        hidden_targets: set[Target] = {t for ts in by_file.values() for t in ts}
        test_files = sorted({t.split("::")[0] for t in f2p})  # where pytest finds the failing tests
        try:
            pristine = read_texts(pkg.tree, set(by_file) | set(test_files) | {m.path for m in mutations})
        except (OSError, UnicodeDecodeError) as e:
            raise Dropped("unhideable", str(e)[:200]) from None
    test_texts: dict[str, str] = {}
    for path, targets in by_file.items():
        try:
            test_texts[path] = hide_tests(pristine[path], targets)
        except (Unhideable, SyntaxError, UnicodeDecodeError) as e:
            raise Dropped("unhideable", str(e)[:200]) from None
    failing = set(f2p)
    hidden_pass = [
        t for t in pkg.usable if t not in failing and "::" in t and defs.resolve(target_of(t)) in hidden_targets
    ]
    neighbours = [
        t
        for t in pkg.usable
        if t.split("::")[0] in {*by_file, *test_files} and t not in failing and t not in hidden_pass
    ]
    rng = random.Random(task_id)
    p2p = sorted(_sample(rng, hidden_pass, LIST_CAP // 2) + _sample(rng, neighbours, LIST_CAP // 2))
    # 2. patches: base (pristine -> start), gold (start -> pristine source), test patch.
    sources = mutated_files(pristine, mutations)
    with repo_lock:
        forward, backward = diffs(pkg.repo, {**sources, **test_texts})
    src_paths, test_paths = sorted(sources), sorted(test_texts)
    base_patch = "".join(forward[p] for p in sorted(forward))
    gold = "".join(backward[p] for p in src_paths)
    test_patch = "".join(backward[p] for p in test_paths)
    key = diff_key("".join(forward[p] for p in src_paths))
    # 3. the issue text, from one shown test per mutation; the rest held out.
    shown, repros = _shown_tests(mutations, f2p, alone, details, pristine, check)
    listed = sorted(shown + _sample(rng, [t for t in f2p if t not in shown], LIST_CAP - len(shown)))
    held_out = [t for t in listed if t not in shown]
    if len(held_out) < min_held_out:
        raise Dropped("no_held_out", f"{len(f2p)} failing test(s), none left to hold out")
    src_patch = "".join(forward[p] for p in src_paths)
    title, issue, level = issue_text(
        pkg.name,
        pkg.version,
        pkg.environment.import_root,
        [(m.path, m.function) for m in mutations],
        shown,
        repros,
        details,
        src_patch,
        lambda p: p in by_file or p in test_files or p.startswith(("tests/", "test/")),
        len(listed),
        len(held_out),
        sorted({target_of(t).name for t in f2p} | set(src_paths) | set(test_paths) | set(test_files)),
        level,
    )
    functions = {f"{m.path}:{m.function}" for m in mutations}
    difficulty = Difficulty(
        issue_level=level,
        names_location=level == "located",
        failing_tests=len(listed),
        held_out=len(held_out),
        files_touched=len(src_paths),
        functions_touched=len(functions),
    )
    ops = sorted({m.operator for m in mutations})
    task = SWETaskPair(
        visible=SWETask(
            id=task_id,
            title=title,
            problem_statement=issue,
            repo=pkg.source,
            environment=pkg.environment,
            base_patch=base_patch,
            visible_tests=suite_roots(pkg.usable) if whole_suite_visible and level != "located" else test_files,
            timeout_s=timeout_s,
            source=pkg.factory_source,
            tags=["mutation", *ops, pkg.name, f"issue:{level}", *(["combined"] if len(mutations) > 1 else [])],
            difficulty=difficulty,
        ),
        hidden=SWEHidden(id=task_id, patch=gold, test_patch=test_patch, FAIL_TO_PASS=listed, PASS_TO_PASS=p2p),
    )
    return task, key


def rewrite_issue(
    pair: SWETaskPair,
    details: dict[str, str],
    test_sources: dict[str, str],
    alone: list[set[str]],
    places: list[tuple[str, str]],
    level: IssueLevel,
) -> SWETaskPair | None:
    """The task with its issue text written again at `level` (symptom or
    minimal) from its failing tests' reports (`details`: FAIL_TO_PASS id ->
    pytest's report on the start state with the test patch applied;
    `test_sources`: test file -> text; `alone`: per injected bug, the tests it
    fails alone; `places`: per bug, its file and function), falling back as
    `issue_text` does, or None when the text cannot be written (a bug fails
    none of the listed tests). Only the title, the text, its tags and the
    recorded level change: the patches, the test lists and the id stay, so
    the task validates as before."""
    visible, hidden = pair.visible, pair.hidden
    f2p = list(hidden.FAIL_TO_PASS)
    try:
        shown, repros = _shown_tests([], f2p, alone, details, test_sources)
    except Dropped:
        return None
    from sandgym.verifiers.swe_repo.diffs import patch_paths

    src_paths, test_paths = patch_paths(hidden.patch), patch_paths(hidden.test_patch)
    test_files = set(test_paths) | {t.split("::")[0] for t in f2p}
    secret = sorted({target_of(t).name for t in f2p} | set(src_paths) | test_files)
    held_out = len([t for t in f2p if t not in shown])
    try:
        title, issue, got = issue_text(
            visible.repo.name,
            visible.repo.version or "",
            visible.environment.import_root,
            places,
            shown,
            repros,
            details,
            hidden.patch,
            lambda p: p in test_files or p.startswith(("tests/", "test/")),
            len(f2p),
            held_out,
            secret,
            level,
        )
    except Dropped:
        return None
    tags = [f"issue:{got}" if t.startswith("issue:") else t for t in visible.tags]
    difficulty = visible.difficulty.model_copy(update={"issue_level": got, "names_location": got == "located"})  # type: ignore[union-attr]
    new_visible = visible.model_copy(
        update={"title": title, "problem_statement": issue, "tags": tags, "difficulty": difficulty}
    )
    return SWETaskPair(visible=new_visible, hidden=hidden)
