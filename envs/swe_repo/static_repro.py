"""Reproductions of a failing test read from its source alone
(`static_reproductions`), for when pytest's report gives none; each one is
run on the buggy and the fixed library before it is shown
(`repro_check.run_outcomes`).
"""

from __future__ import annotations

import ast
import copy

from sandgym.envs.swe_repo.parametrize import callee_name
from sandgym.envs.swe_repo.repro_ast import (
    BUILTIN_NAMES,
    DEFINITIONS,
    MAX_SETUP_CHARS,
    MAX_VALUE_CHARS,
    SIMPLE,
    Substitute,
    all_loads,
    from_unittest,
    id_parts,
    input_of,
    involves_call_or_local,
    module_scope,
    names_in,
    needs_fixtures,
    standalone,
    substitutions,
    test_helper,
)
from sandgym.envs.swe_repo.reproduction import Repro

STATIC_HELPER_LINES = 15  # read from the source, a reproduction may carry a longer helper
STATIC_SETUP_LINES = 24


def static_reproductions(test_id: str, test_source: str, limit: int = 3) -> list[Repro]:
    """Reproductions of a test read from its source alone, for when pytest's
    report gives none (its module failed to import on the start state, the
    failing line is in a helper, pytest cut a value short): each checking
    statement of the test body in order (an assertion, or a call under
    `pytest.raises`), with every statement before it as setup, while the body
    stays simple. What comes back is not known here: each one is run on the
    buggy and the fixed library and its outcome and expectation filled in
    from those runs (`repro_check.run_outcomes`), or dropped."""
    parts = id_parts(test_id)
    if parts is None:
        return []
    _, scope, func_name, idpart = parts
    try:
        tree = ast.parse(test_source)
    except SyntaxError:
        return []
    imports, module_values = module_scope(tree)
    owner = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name in scope[:-1]), tree)
    bodies = [owner.body] if isinstance(owner, ast.Module) else [c.body for c in _class_line(tree, owner)]
    func = next(
        (
            n
            for body in bodies  # an inherited test is its base's function, with its own class's attributes
            for n in body
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == func_name
        ),
        None,
    )
    if func is None:
        return []
    subst = substitutions(func, module_values, imports, idpart, test_source)
    if isinstance(subst, str) or needs_fixtures(func, tree, set(subst) | {"tmp_path"}):
        return []
    imports = dict(imports) | _star_names(tree, func, imports, module_values)
    prelude: list[ast.stmt] = []
    if "tmp_path" in {a.arg for a in func.args.args}:  # pytest's fixture, made by hand
        imports |= {"tempfile": "import tempfile", "pathlib": "import pathlib"}
        prelude = [ast.parse("tmp_path = pathlib.Path(tempfile.mkdtemp())").body[0]]
    attrs = _class_values(tree, owner) if isinstance(owner, ast.ClassDef) else {}
    found: list[Repro] = []
    for i, raw in enumerate(func.body):
        stmt, raises, prior = raw, "", list(func.body[:i])
        if isinstance(raw, ast.With) and len(raw.items) == 1 and len(raw.body) == 1:
            ctx = raw.items[0].context_expr
            if isinstance(ctx, ast.Name) and ctx.id in module_values:
                ctx = module_values[ctx.id]  # `SE = raises(SchemaError)` at module level, `with SE:` in tests
            if isinstance(ctx, ast.Call) and callee_name(ctx) in ("raises", "assertRaises") and ctx.args:
                stmt, raises = raw.body[0], ast.unparse(ctx.args[0])
        if isinstance(raw, DEFINITIONS):
            continue  # a definition the test makes: setup of what follows
        loop = _failing_cases(raw)
        if loop is None and not isinstance(stmt, SIMPLE):
            break  # a branch, `try` or another loop: what follows may depend on it
        stmt = from_unittest(Substitute(subst).visit(_SelfAttrs(attrs).visit(copy.deepcopy(loop or stmt))))
        prior = [from_unittest(Substitute(subst).visit(_SelfAttrs(attrs).visit(copy.deepcopy(s)))) for s in prior]
        expected_node: ast.expr | None = None
        if loop is not None:
            subject = stmt.value  # type: ignore[attr-defined]
        elif isinstance(stmt, ast.Assert) and not raises:
            test = stmt.test
            if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Eq, ast.Is)):
                left, right = test.left, test.comparators[0]
                swap = not involves_call_or_local(left, imports, prior) and involves_call_or_local(
                    right, imports, prior
                )
                subject, expected_node = (right, left) if swap else (left, right)
            else:
                subject = test  # `x in y`, `not f(x)`, `f(x)`: its truth value is what the test checks
        elif raises and isinstance(stmt, (ast.Expr, ast.Assign)):
            subject = stmt.value
        else:
            continue  # a plain statement: setup of the ones after it
        alone = standalone(tree, subject, expected_node, [*prelude, *prior], imports, STATIC_HELPER_LINES)
        if isinstance(alone, str):
            continue
        setup, helpers, bound = alone
        call = ast.unparse(subject)
        lines = [ast.unparse(s) + ("\n" if isinstance(s, DEFINITIONS) else "") for s in setup]
        if (
            len(call) > MAX_VALUE_CHARS
            or sum(x.count("\n") + 1 for x in lines) > STATIC_SETUP_LINES
            or sum(map(len, lines)) > 2 * MAX_SETUP_CHARS
        ):
            break  # the later ones only grow
        needed = sorted({imports[u] for node in [subject, *setup] for u in all_loads(node) if u in imports})
        args = "" if loop else input_of(subject, setup, imports, bound | {h.name for h in helpers})
        found.append(Repro(tuple(needed), call, args, f"{raises} to be raised" if raises else "", "", "", tuple(lines)))
        if len(found) >= limit:
            break
    return found


def _failing_cases(stmt: ast.stmt) -> ast.Expr | None:
    """A loop whose body is one assertion (`for k, v in items: assert f(v) == k`)
    as the list of the cases that fail it (`[(k, v) for k, v in items if not
    f(v) == k]`): empty on the fixed library, the failing cases on the buggy one."""
    if not (isinstance(stmt, ast.For) and not stmt.orelse and len(stmt.body) == 1):
        return None
    check = from_unittest(stmt.body[0])
    if not isinstance(check, ast.Assert):
        return None
    cases = ast.ListComp(
        elt=stmt.target,
        generators=[
            ast.comprehension(target=stmt.target, iter=stmt.iter, ifs=[ast.UnaryOp(ast.Not(), check.test)], is_async=0)
        ],
    )
    return ast.copy_location(ast.Expr(value=cases), stmt)


def _class_line(tree: ast.Module, cls: ast.ClassDef) -> list[ast.ClassDef]:
    """`cls` and the classes of the module it derives from, nearest first."""
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    line: list[ast.ClassDef] = []
    todo = [cls]
    while todo:
        c = todo.pop(0)
        if c not in line:
            line.append(c)
            todo += [classes[b.id] for b in c.bases if isinstance(b, ast.Name) and b.id in classes]
    return line


def _class_values(tree: ast.Module, cls: ast.ClassDef) -> dict[str, ast.expr]:
    """The plain class attributes (`D = dict`) a test class and the classes of
    the module it derives from set, the test's own class first."""
    values: dict[str, ast.expr] = {}
    for c in _class_line(tree, cls):
        for item in c.body:
            if isinstance(item, ast.Assign) and len(item.targets) == 1 and isinstance(item.targets[0], ast.Name):
                values.setdefault(item.targets[0].id, item.value)
    return values


class _SelfAttrs(ast.NodeTransformer):
    """`self.NAME` as the class attribute's value."""

    def __init__(self, values: dict[str, ast.expr]):
        self.values = values

    def visit_Attribute(self, node: ast.Attribute) -> ast.expr:
        if isinstance(node.value, ast.Name) and node.value.id == "self" and node.attr in self.values:
            return copy.deepcopy(self.values[node.attr])
        self.generic_visit(node)
        return node


def _star_names(
    tree: ast.Module, func: ast.FunctionDef | ast.AsyncFunctionDef, imports: dict[str, str], values: dict[str, ast.expr]
) -> dict[str, str]:
    """name -> the `from lib import *` lines of the test module, for each name the
    test reads that nothing else binds (a name the library lacks raises NameError
    on both sides, so such a reproduction tells nothing apart and is dropped)."""
    stars = [
        f"from {n.module} import *"
        for n in tree.body
        if isinstance(n, ast.ImportFrom) and n.level == 0 and n.module and not test_helper(n.module)
        if any(a.name == "*" for a in n.names)
    ]
    if not stars:
        return {}
    defined = {n.name for n in tree.body if isinstance(n, DEFINITIONS)}
    local = names_in(func, ast.Store) | {a.arg for a in ast.walk(func) if isinstance(a, ast.arg)}
    local |= {n.name for n in ast.walk(func) if isinstance(n, DEFINITIONS)}
    free = all_loads(func) - local - defined - set(imports) - set(values) - BUILTIN_NAMES
    return {name: "\n".join(stars) for name in free}
