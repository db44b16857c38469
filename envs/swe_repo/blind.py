"""Blind solvers: issue-agnostic rewrites that undo a mutation operator's tell.

A task a script solves without reading the issue measures grep, not
debugging. Each solver here rewrites EVERY occurrence of one tell in the
package's source files (the start state), as a script that never read the
issue would; the factory judges the result with the verifier like any
answer and drops a candidate that one of them solves (`blind_solver`).

The tells are those of mutation style 2 (`mutations.py`): a condition
wrapped in `not (...)`, an off-by-one that left `x + 0` / `x - 0` / `-0`,
a shifted bound written `(expr) + 1`. Style 3 writes none of them, so on
its mutants a solver changes only code the package itself wrote that way
(and then the verifier says whether that happens to fix the bug). A
dropped statement left as `pass` has no blind undo: the statement is gone.
"""

from __future__ import annotations

import ast
import difflib
import io
import re
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sandgym.envs.swe_repo.mutations import Edit, Positions


@dataclass(frozen=True)
class BlindResult:
    solver: str
    diff: str


def _apply(source: str, edits: list[Edit]) -> str:
    for e in sorted(edits, key=lambda e: e.start, reverse=True):
        source = source[: e.start] + e.text + source[e.end :]
    return source


def _parse(source: str) -> ast.Module | None:
    try:
        return ast.parse(source)
    except SyntaxError:
        return None


def unwrap_not(source: str) -> str:
    """`not (X)` -> `(X)`: the parentheses stay, so precedence around it holds."""
    tree = _parse(source)
    if tree is None:
        return source
    pos = Positions(source)
    edits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            a, _ = pos.span(node)
            m = re.match(r"not\s*\(", source[a:])
            inner_start = pos.span(node.operand)[0]
            if m and a + m.end() <= inner_start:  # the `(` opens before the operand: wrapping parentheses
                edits.append(Edit(a, a + m.end() - 1, ""))
    return _apply(source, edits)


def _is_int(node: ast.expr, value: int) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int and node.value == value


def zero_term_to_one(source: str) -> str:
    """`x + 0`, `x - 0`, `-0` -> the 1 an off-by-one took away."""
    tree = _parse(source)
    if tree is None:
        return source
    pos = Positions(source)
    edits = []
    for node in ast.walk(tree):
        zero = None
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)) and _is_int(node.right, 0):
            zero = node.right
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and _is_int(node.operand, 0):
            zero = node.operand
        if zero is not None:
            a, b = pos.span(zero)
            if source[a:b] == "0":
                edits.append(Edit(a, b, "1"))
    return _apply(source, edits)


def drop_parenthesized_shift(source: str) -> str:
    """`(a - b) + 1` / `(a - b) - 1` -> `(a - b)`: a bound shifted by a term
    added outside parentheses no one needed."""
    tree = _parse(source)
    if tree is None:
        return source
    pos = Positions(source)
    edits = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, (ast.Add, ast.Sub))
            and isinstance(node.left, ast.BinOp)
            and isinstance(node.left.op, (ast.Add, ast.Sub))
            and _is_int(node.right, 1)
        ):
            left_end = pos.span(node.left)[1]
            right_start, right_end = pos.span(node.right)
            gap = source[left_end:right_start]
            m = re.fullmatch(r"(\))(\s*[+-]\s*)", gap)
            if m:
                edits.append(Edit(left_end + 1, right_end, ""))
    return _apply(source, edits)


SOLVERS: dict[str, Callable[[str], str]] = {
    "unwrap_not": unwrap_not,
    "zero_term_to_one": zero_term_to_one,
    "drop_parenthesized_shift": drop_parenthesized_shift,
}


def file_diff(path: str, old: str, new: str) -> str:
    """A git-style diff of one text file (a/ b/ prefixes), as the verifier reads answers."""
    if old == new:
        return ""
    lines = list(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True), n=3))
    if not lines:
        return ""
    body = []
    for line in lines[2:]:  # difflib's own ---/+++ lines are replaced below
        body.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n" + "".join(body)


def blind_diffs(files: dict[str, str]) -> dict[str, str]:
    """{solver: its diff over `files` (path -> start-state source)}, for the
    solvers that change anything."""
    out = {}
    for name, solve in SOLVERS.items():
        diff = "".join(file_diff(p, text, solve(text)) for p, text in sorted(files.items()))
        if diff:
            out[name] = diff
    return out


def tree_sources(tree: Path, import_root: str, replaced: dict[str, str] | None = None) -> dict[str, str]:
    """{path: text} of the package's source files in `tree`, with `replaced`
    (the mutated files) read from there instead: a start state."""
    from sandgym.envs.swe_repo.source_tree import source_files

    out = {}
    for rel in source_files(tree, import_root):
        if replaced and rel in replaced:
            out[rel] = replaced[rel]
            continue
        try:
            out[rel] = (tree / rel).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue  # a file no solver can rewrite
    return out


def task_sources(task) -> dict[str, str]:
    """The start-state source files of a task (`SWETaskPair`), from the
    verifier's cached start state: what a blind script would rewrite."""
    from sandgym.verifiers.swe_repo.checkout import REPO_NAME, start_state

    visible = task.visible
    with tempfile.TemporaryDirectory(prefix="sandgym-blind-") as tmp:
        with tarfile.open(fileobj=io.BytesIO(start_state(visible).tree_tar)) as tar:
            tar.extractall(tmp, filter="data")
        return tree_sources(Path(tmp) / REPO_NAME, visible.environment.import_root)


def blind_solver(task, files: dict[str, str], runtime) -> BlindResult | None:
    """The first blind solver whose rewrite of `files` (the start state's
    source files) the verifier scores FULL on `task`, or None."""
    from sandgym.verifiers.swe_repo.host import verify

    for name, diff in blind_diffs(files).items():
        if verify(task, diff, runtime).status == "FULL":
            return BlindResult(name, diff)
    return None
