"""Take tests out of a test file's text: the hidden tests of factory tasks.

A factory task's failing tests are removed from the agent's start state and
restored by the task's `test_patch`, which the verifier applies after the
agent's diff. Removal works on the test function's definition (decorators
included), found from the pytest node id; a parametrized function goes as a
whole, so its passing cases are hidden too. A class left without a
statement gets `pass`, so the file still parses.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass


class Unhideable(ValueError):
    """The test's definition is not in its file (inherited, generated)."""


@dataclass(frozen=True)
class Target:
    path: str
    scope: tuple[str, ...]  # enclosing classes, outermost first
    name: str  # the function's name, without parameters

    @property
    def qualname(self) -> str:
        return "::".join((*self.scope, self.name))


def target_of(test_id: str) -> Target:
    path, *parts = test_id.split("::")
    if not parts:
        raise Unhideable(f"{test_id}: not a test function id")
    return Target(path, tuple(parts[:-1]), parts[-1].split("[", 1)[0])


def same_function(test_id: str, target: Target) -> bool:
    t = target_of(test_id)
    return t == target


def _find(body: list[ast.stmt], scope: tuple[str, ...], name: str) -> tuple[ast.stmt, list[ast.stmt]] | None:
    """(the definition, the body that holds it), or None."""
    if scope:
        for stmt in body:
            if isinstance(stmt, ast.ClassDef) and stmt.name == scope[0]:
                return _find(stmt.body, scope[1:], name)
        return None
    found = None
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == name:
            found = (stmt, body)  # the last definition is the one pytest sees
    return found


def hide_tests(source: str, targets: list[Target]) -> str:
    """`source` without the definitions of `targets` (all in this file).
    Raises Unhideable when one is not defined here."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    drop: set[int] = set()  # 0-based line numbers
    emptied: dict[int, str] = {}  # line index -> indentation of a `pass` to put there
    by_body: dict[int, tuple[list[ast.stmt], list[ast.stmt]]] = {}
    for t in targets:
        hit = _find(tree.body, t.scope, t.name)
        if hit is None:
            raise Unhideable(f"{t.path}::{t.qualname}: no definition in the file (inherited or generated)")
        node, body = hit
        assert node.end_lineno is not None
        decos = getattr(node, "decorator_list", [])
        first = min([node.lineno, *(d.lineno for d in decos)])
        drop.update(range(first - 1, node.end_lineno))
        by_body.setdefault(id(body), (body, []))[1].append(node)
    for body, removed in by_body.values():
        if len(removed) == len(body) or all(s in removed or _is_docstring(s) for s in body):
            first = min(removed, key=lambda s: s.lineno)
            line = lines[first.lineno - 1]
            emptied[min(d.lineno for d in [first, *getattr(first, "decorator_list", [])]) - 1] = line[
                : len(line) - len(line.lstrip())
            ]
    out = []
    for i, line in enumerate(lines):
        if i in emptied:
            out.append(f"{emptied[i]}pass\n")
        if i not in drop:
            out.append(line)
    text = "".join(out)
    ast.parse(text)  # still a module
    return text


def _is_docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


def targets_by_file(test_ids: list[str]) -> dict[str, list[Target]]:
    out: dict[str, list[Target]] = {}
    for t in test_ids:
        target = target_of(t)
        if target not in out.setdefault(target.path, []):
            out[target.path].append(target)
    return out
