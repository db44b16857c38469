"""Blind solvers: issue-agnostic rewrites that undo a mutation's tell, and
the factory's use of them (a candidate one of them solves is dropped)."""

from __future__ import annotations

import ast
from pathlib import Path

from sandgym.envs.swe_repo.blind import (
    SOLVERS,
    blind_diffs,
    blind_solver,
    drop_parenthesized_shift,
    file_diff,
    task_sources,
    unwrap_not,
    zero_term_to_one,
)
from sandgym.envs.swe_repo.mutations import find_mutations
from sandgym.specs import TaskSet
from sandgym.specs.swe_repo import SWETaskPair
from tests.swe_repo.test_mutation_style import TELLING

V3 = Path(__file__).resolve().parents[2] / "task_specs" / "swe_repo" / "pypi-v3"


def test_each_solver_undoes_its_tell_and_keeps_precedence():
    assert unwrap_not("def f(a, b):\n    return x and not (a or b)\n") == "def f(a, b):\n    return x and (a or b)\n"
    assert unwrap_not("def f(a):\n    return not a\n") == "def f(a):\n    return not a\n"  # no wrapping parentheses
    assert unwrap_not("def f(a):\n    return not (a)[0]\n") == "def f(a):\n    return not (a)[0]\n"
    assert (
        zero_term_to_one("y = x + 0\nz = n - 0\nw = -0\nv = x + 10\n") == "y = x + 1\nz = n - 1\nw = -1\nv = x + 10\n"
    )
    assert drop_parenthesized_shift("r = range((n - k) + 1)\n") == "r = range((n - k))\n"
    assert drop_parenthesized_shift("r = range(n - k + 1)\n") == "r = range(n - k + 1)\n"
    for solve in SOLVERS.values():
        assert solve("def broken(:\n") == "def broken(:\n"


def test_solvers_undo_style_2_mutants_and_find_nothing_in_style_3_ones():
    """What each solver is for: style 2's tells (the rewrite gives back code that
    behaves as the original); style 3 leaves them nothing to rewrite."""
    undone = set()
    for m in find_mutations(TELLING, "m.py", style=2):
        mutant = m.apply(TELLING)
        for name, solve in SOLVERS.items():
            fixed = solve(mutant)
            if fixed != mutant and ast.dump(ast.parse(fixed)) == ast.dump(ast.parse(TELLING)):
                undone.add((m.operator, name))
    assert {("negate_condition", "unwrap_not"), ("off_by_one", "zero_term_to_one")} <= undone
    assert ("shift_bound", "drop_parenthesized_shift") in undone
    for m in find_mutations(TELLING, "m.py", style=3):
        assert blind_diffs({"m.py": m.apply(TELLING)}) == {}, m


def test_file_diff_is_a_git_diff_the_verifier_reads():
    from sandgym.verifiers.swe_repo.diffs import split_diff

    diff = file_diff("pkg/m.py", "a = 1\nb = not (a)\n", "a = 1\nb = (a)\n")
    sections = split_diff(diff)
    assert [s.paths for s in sections] == [("pkg/m.py",)] and not sections[0].problem
    assert file_diff("pkg/m.py", "same\n", "same\n") == ""


def _v3_task(task_id: str) -> SWETaskPair:
    ts = TaskSet.load(V3)
    return next(SWETaskPair.of(t) for t in ts.tasks if t.id == task_id)


def test_a_task_a_blind_solver_fixes_is_found_and_one_it_cannot_is_not(runtime):
    """Real tasks of pypi-v3 (factory version 2), judged by the real verifier:
    an added `not (...)` a script unwraps without reading the issue, and a
    swapped argument pair no solver touches. The factory (version 3) drops a
    candidate exactly when `blind_solver` names a solver (candidates.evaluate)."""
    solvable = _v3_task("inflection-0.5.1/mut-0001")
    assert "not (" in solvable.visible.base_patch
    found = blind_solver(solvable, task_sources(solvable), runtime)
    assert found is not None and found.solver == "unwrap_not"
    kept = _v3_task("inflection-0.5.1/mut-0085")
    assert blind_solver(kept, task_sources(kept), runtime) is None


def test_factory_drops_a_candidate_a_blind_solver_solves_and_keeps_one_it_cannot(runtime, tmp_path):
    """The factory's own check (`candidates.blind_check`, run on every
    candidate of factory version 3) on the pristine tree with the mutated
    file in, as a worker holds it."""
    from sandgym.envs.swe_repo.candidates import blind_check
    from sandgym.verifiers.swe_repo.diffs import patch_paths
    from sandgym.verifiers.swe_repo.sources import pristine_tree

    for task_id, dropped in (("inflection-0.5.1/mut-0001", True), ("inflection-0.5.1/mut-0085", False)):
        task = _v3_task(task_id)
        tree = pristine_tree(task.visible.repo, tmp_path / task_id.replace("/", "_"))
        start = task_sources(task)
        mutated = {p: start[p] for p in patch_paths(task.hidden.patch)}
        assert all(mutated[p] != (tree / p).read_text() for p in mutated)  # the bug is in
        out = blind_check(task, tree, task.visible.environment.import_root, mutated, runtime, ["t"])
        if dropped:
            assert out is not None and out.kind == "blind" and "unwrap_not" in out.detail
        else:
            assert out is None
