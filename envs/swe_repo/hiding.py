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


class Definitions:
    """Where test methods are defined. A unittest-style suite often defines
    its tests once in a mixin or base class (in the same file or another test
    module) and runs them in several subclasses: pytest's id names the
    subclass (or a class imported into it), the definition to hide is in the
    base. `resolve` follows the bases by name, through the test files given;
    a base it cannot place (defined outside them, or under the same name in
    two files) leaves the target as it is, and hiding it then raises
    `Unhideable`."""

    def __init__(self, texts: dict[str, str]):
        self.trees: dict[str, ast.Module] = {}
        self.classes: dict[str, list[str]] = {}  # top-level class name -> files defining it
        for path, source in sorted(texts.items()):
            try:
                tree = ast.parse(source)
            except (SyntaxError, ValueError):
                continue
            self.trees[path] = tree
            for stmt in tree.body:
                if isinstance(stmt, ast.ClassDef):
                    self.classes.setdefault(stmt.name, []).append(path)
        self._cache: dict[Target, Target] = {}

    def resolve(self, target: Target) -> Target:
        if target not in self._cache:
            tree = self.trees.get(target.path)
            found = None
            if tree is not None and len(target.scope) == 1 and _find(tree.body, target.scope, target.name) is None:
                found = self._inherited(target.path, target.scope[0], target.name, set())
            self._cache[target] = found or target
        return self._cache[target]

    def _class(self, path: str, name: str) -> ast.ClassDef | None:
        found = None
        for stmt in self.trees[path].body:
            if isinstance(stmt, ast.ClassDef) and stmt.name == name:
                found = stmt  # the last definition is the one Python keeps
        return found

    def _inherited(self, path: str, cls: str, name: str, seen: set[tuple[str, str]]) -> Target | None:
        if (path, cls) in seen:
            return None
        seen.add((path, cls))
        node = self._class(path, cls)
        if node is None:
            # A class imported into the test module (pytest collects it there too).
            where = [p for p in self.classes.get(cls, []) if p != path]
            return self._inherited(where[0], cls, name, seen) if len(where) == 1 else None
        if _find(node.body, (), name) is not None:
            return Target(path, (cls,), name)
        for base in node.bases:  # depth first, left to right: Python's order for simple hierarchies
            base_name = base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else ""
            if not base_name:
                continue
            where = [path] if self._class(path, base_name) is not None else self.classes.get(base_name, [])
            if len(where) != 1:
                continue  # unknown (a library's class such as unittest.TestCase) or ambiguous
            found = self._inherited(where[0], base_name, name, seen)
            if found is not None:
                return found
        return None
