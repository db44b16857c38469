"""Reproductions of a failing test read from its source alone
(`static_reproductions`), for when pytest's report gives none; each one is
run on the buggy and the fixed library before it is shown
(`repro_check.run_outcomes`).
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from sandgym.envs.swe_repo.parametrize import callee_name
from sandgym.envs.swe_repo.repro_ast import (
    BUILTIN_NAMES,
    DEFINITIONS,
    MAX_VALUE_CHARS,
    SIMPLE,
    Substitute,
    all_loads,
    binds,
    calls_import,
    from_unittest,
    id_parts,
    input_of,
    module_scope,
    names_in,
    standalone,
    substitutions,
    test_helper,
)
from sandgym.envs.swe_repo.repro_context import self_to_local, test_context
from sandgym.envs.swe_repo.reproduction import Repro

STATIC_HELPER_LINES = 20  # read from the source, a reproduction may carry a longer helper (or a small class)
# A reproduction read from the source shows the test's own code, which a person reads top to bottom:
# 30 lines (and 1,600 characters) is a long bug report, not an unreadable one. Past that the code is
# mostly earlier checks, which are left out first (`_without_checks`).
STATIC_SETUP_LINES = 30
STATIC_SETUP_CHARS = 1600
RESULT = "result"  # the local a check inside a `with` or `if` block stores its value in
FAILING = "failing"  # the cases a loop of several statements fails
# Test helpers imported from a test package that read as an equality assertion.
ASSERT_HELPERS = {"assert_equal", "assert_equals", "assert_eq", "eq_", "assertEqual", "assert_equal_"}


@dataclass
class _Check:
    setup: list[ast.stmt]
    stmt: ast.stmt  # the checking statement (after `setup`, at the top level)
    raises: str  # the exception a `pytest.raises` (or an `except` that checks) expects, or ""
    nest: Callable[[list[ast.stmt]], list[ast.stmt]] | None = None  # puts statements back in their block
    loop: bool = False  # the subject is the list of the cases a loop fails


def static_reproductions(
    test_id: str, test_source: str, limit: int = 3, why: list[str] | None = None, conftests: list[str] | None = None
) -> list[Repro]:
    """Reproductions of a test read from its source alone, for when pytest's
    report gives none (its module failed to import on the start state, the
    failing line is in a helper, pytest cut a value short): each checking
    statement of the test body in order (an assertion, a call under
    `pytest.raises`, a test helper that asserts), with every statement before
    it as setup. A check inside a `with` or `if` block keeps the block (its
    value stored in `result`), one in a `try` is read as if the `try` were not
    there (an `except` that checks expects the `try`'s last call to raise),
    one in a loop gives the list of the cases that fail it. The test's
    fixtures (from its module or `conftests`, the text of the conftest.py
    files on its path) and its class's `setUp` come first as plain statements
    (`repro_context`). What comes back is not known here: each one is run on
    the buggy and the fixed library and its outcome and expectation filled in
    from those runs (`repro_check.run_outcomes`), or dropped. Why a statement
    gives none goes to `why` (the run's notes)."""
    notes = why if why is not None else []
    noted = len(notes)
    parts = id_parts(test_id)
    if parts is None:
        notes.append("the id names no test")
        return []
    _, scope, func_name, idpart = parts
    try:
        tree = ast.parse(test_source)
    except SyntaxError:
        notes.append("the test file does not parse")
        return []
    imports, module_values = module_scope(tree)
    owner = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name in scope[:-1]), tree)
    line = [] if isinstance(owner, ast.Module) else _class_line(tree, owner)
    bodies = [owner.body] if isinstance(owner, ast.Module) else [c.body for c in line]
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
        notes.append("no test function of that name")
        return []
    subst = substitutions(func, module_values, imports, idpart, test_source)
    if isinstance(subst, str):
        notes.append(subst)
        return []
    ctx = test_context(tree, line, func, set(subst), conftests or [])
    if isinstance(ctx, str):
        notes.append(ctx)
        return []
    imports = ctx.imports | dict(imports) | _star_names(tree, func, imports, module_values)
    attrs = _class_values(tree, owner) if isinstance(owner, ast.ClassDef) else {}
    attrs = {k: v for k, v in attrs.items() if k not in ctx.self_names}  # setUp's value wins

    def plain(node: ast.stmt) -> ast.stmt:
        done = self_to_local(copy.deepcopy(node), ctx.self_names)
        return _Plain().visit(Substitute(subst).visit(_SelfAttrs(attrs).visit(done)))

    prelude = [plain(s) for s in ctx.prelude]
    body = [plain(s) for s in func.body]
    checkers = _check_helpers(tree, [*prelude, *body])
    found: list[Repro] = []
    for c in _checks(body, [], None, checkers, module_values):
        found += _made(c, tree, prelude, imports, checkers, notes)
        if len(found) >= limit:
            break
    if not found and len(notes) == noted:  # e.g. a body of bare comparisons, or checks it cannot take apart
        notes.append(
            "the test holds no check it can read (an assertion, a call under pytest.raises, a helper that asserts)"
        )
    return found[:limit]


def _made(
    c: _Check, tree: ast.Module, prelude: list[ast.stmt], imports: dict[str, str], checkers: set[str], notes: list[str]
) -> list[Repro]:
    """The reproductions of one check (why there is none goes to `notes`): with
    the earlier checks left out first (shorter, and each passes where this one is
    reached), then with every earlier statement (in case one's side effect matters)."""
    picked = _subject(c, imports, checkers)
    if picked is None:
        return []
    subject, expected_node = picked
    setup = c.setup
    if c.nest is not None and not c.loop:  # the value is taken inside its block
        store = ast.Assign(targets=[ast.Name(id=RESULT, ctx=ast.Store())], value=subject, lineno=0)
        setup, subject, expected_node = c.nest([*setup, store]), ast.Name(id=RESULT, ctx=ast.Load()), None
    elif c.nest is not None:
        setup = c.nest(setup)
    call = ast.unparse(subject)
    if len(call) > MAX_VALUE_CHARS:
        notes.append("the checked expression is too long")
        return []
    shorter = _without_checks(setup, checkers)
    attempts = [shorter, setup] if len(shorter) < len(setup) else [setup]
    # A check inside an earlier block could fail there, before the one shown: not the check the text is about.
    attempts = [a for a in attempts if not any(_runs_check(s, checkers) for s in a if not _is_check(s, checkers))]
    out: list[Repro] = []
    for attempt in attempts:
        alone = standalone(tree, subject, expected_node, [*prelude, *attempt], imports, STATIC_HELPER_LINES, True)
        if isinstance(alone, str):
            notes.append(alone)
            continue
        stmts, helpers, bound = alone
        lines = [ast.unparse(s) + ("\n" if isinstance(s, DEFINITIONS) else "") for s in stmts]
        if sum(x.count("\n") + 1 for x in lines) > STATIC_SETUP_LINES or sum(map(len, lines)) > STATIC_SETUP_CHARS:
            notes.append("the reproduction is too long")
            continue
        needed = sorted({imports[u] for node in [subject, *stmts] for u in all_loads(node) if u in imports})
        # the minimal text's input: the checked call's own arguments, never a call made while setting up
        args = (
            ""
            if c.loop or c.nest or not calls_import(subject, imports)
            else input_of(subject, [], imports, bound | helpers)
        )
        expected = f"{c.raises} to be raised" if c.raises else ""
        repro = Repro(tuple(needed), call, args, expected, "", "", tuple(lines))
        try:  # what parses need not compile (`*n` alone, a misplaced `return`): nor would the test file
            compile(repro.block(), "<reproduction>", "exec", dont_inherit=True)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            notes.append("the reproduction does not compile")
            continue
        out.append(repro)
    return out


def _subject(c: _Check, imports: dict[str, str], checkers: set[str]) -> tuple[ast.expr, ast.expr | None] | None:
    """(what the reproduction evaluates, the value the test compares it with) for a check."""
    stmt = c.stmt
    if c.loop:
        return stmt.value, None  # type: ignore[attr-defined]
    if c.raises:
        return (stmt.value, None) if isinstance(stmt, (ast.Expr, ast.Assign)) else None
    if isinstance(stmt, ast.Expr) and _helper_call(stmt, checkers):
        return stmt.value, None  # a test helper that asserts: it raises on the buggy library
    if not isinstance(stmt, ast.Assert):
        return None
    test = stmt.test
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Eq, ast.Is)):
        left, right = test.left, test.comparators[0]
        lib = _library_locals(c.setup, imports)

        def on_lib(n: ast.expr) -> bool:
            return calls_import(n, imports) or bool(names_in(n, ast.Load) & lib)

        return (right, left) if on_lib(right) and not on_lib(left) else (left, right)
    return test, None  # `x in y`, `not f(x)`, `f(x)`: its truth value is what the test checks


def _library_locals(prior: list[ast.stmt], imports: dict[str, str]) -> set[str]:
    """The names earlier statements bind from a library call (or from such a name)."""
    lib: set[str] = set()
    for s in prior:
        if calls_import(s, imports) or names_in(s, ast.Load) & lib:
            lib |= binds(s)
    return lib


def _checks(
    body: list[ast.stmt],
    prior: list[ast.stmt],
    nest: Callable[[list[ast.stmt]], list[ast.stmt]] | None,
    checkers: set[str],
    module_values: dict[str, ast.expr],
) -> Iterator[_Check]:
    """The checks of a test body in order, each with the statements run before it."""
    prior = list(prior)
    for raw in body:
        under = _under_raises(raw, module_values)
        if under is not None:
            yield _Check([*prior, *under[0]], under[1], under[2], nest)
        elif (loop := _failing_cases(raw)) is not None:
            yield _Check(list(prior), loop, "", nest, loop=True)
        elif isinstance(raw, SIMPLE) and _is_check(raw, checkers):
            yield _Check(list(prior), raw, "", nest)
        elif isinstance(raw, ast.For) and not raw.orelse and _has_check(raw, checkers):
            made = _loop_cases(raw, checkers)
            if made is not None:
                yield _Check([*prior, *made[:-1]], made[-1], "", nest, loop=True)
        elif isinstance(raw, ast.Try) and _has_check(raw, checkers):
            yield from _checks(raw.body, prior, nest, checkers, module_values)  # as if no `try` were there
            last = raw.body[-1] if raw.body else None
            checked = [h for h in raw.handlers if h.type is not None and _has_check(h, checkers)]
            if checked and isinstance(last, (ast.Expr, ast.Assign)):
                kind = ast.unparse(checked[0].type)  # type: ignore[arg-type]
                yield _Check([*prior, *raw.body[:-1]], last, kind, nest)
        elif isinstance(raw, (ast.With, ast.If)) and _has_check(raw, checkers):
            outer = list(prior)

            def inner(stmts: list[ast.stmt], raw: ast.With | ast.If = raw, outer: list[ast.stmt] = outer):
                block = copy.copy(raw)
                block.body = stmts
                if isinstance(block, ast.If):
                    block.orelse = []
                return (nest or list)([*outer, block])

            yield from _checks(raw.body, [], inner, checkers, module_values)
        prior.append(_raising(raw, module_values))


def _raising(stmt: ast.stmt, module_values: dict[str, ast.expr]) -> ast.stmt:
    """A `with pytest.raises(E):` block run before the check as `try: ... except E: pass`
    (a reproduction imports no test framework)."""
    under = _under_raises(stmt, module_values)
    if under is None:
        return stmt
    handler = ast.ExceptHandler(type=ast.parse(under[2], mode="eval").body, name=None, body=[ast.Pass()])
    return ast.Try(body=[*under[0], under[1]], handlers=[handler], orelse=[], finalbody=[])


def _under_raises(stmt: ast.stmt, module_values: dict[str, ast.expr]) -> tuple[list[ast.stmt], ast.stmt, str] | None:
    """(the statements before the last, the last, the exception) of `with pytest.raises(E): ...`:
    the last is the one expected to raise."""
    if not (isinstance(stmt, ast.With) and len(stmt.items) == 1 and stmt.body):
        return None
    if not isinstance(stmt.body[-1], (ast.Expr, ast.Assign)):
        return None
    ctx = stmt.items[0].context_expr
    if isinstance(ctx, ast.Name) and ctx.id in module_values:
        ctx = module_values[ctx.id]  # `SE = raises(SchemaError)` at module level, `with SE:` in tests
    if isinstance(ctx, ast.Call) and callee_name(ctx) in ("raises", "assertRaises") and ctx.args:
        return stmt.body[:-1], stmt.body[-1], ast.unparse(ctx.args[0])
    return None


def _helper_call(stmt: ast.stmt, checkers: set[str]) -> bool:
    return (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Call)
        and isinstance(stmt.value.func, ast.Name)
        and stmt.value.func.id in checkers
    )


def _is_check(stmt: ast.stmt, checkers: set[str]) -> bool:
    return isinstance(stmt, ast.Assert) or _helper_call(stmt, checkers)


def _has_check(node: ast.AST, checkers: set[str]) -> bool:
    return any(
        isinstance(n, ast.Assert)
        or (isinstance(n, ast.Call) and callee_name(n) in ("raises", "assertRaises", "fail"))
        or (isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in checkers)
        for n in ast.walk(node)
    )


def _check_helpers(tree: ast.Module, body: list[ast.stmt]) -> set[str]:
    """The test module's (or the test's own) plain functions that assert something: a call of one is a check."""
    defs = [n for n in [*tree.body, *body] if isinstance(n, ast.FunctionDef) and not n.name.startswith("test")]
    return {d.name for d in defs if not d.decorator_list and any(isinstance(n, ast.Assert) for n in ast.walk(d))}


def _without_checks(setup: list[ast.stmt], checkers: set[str]) -> list[ast.stmt]:
    """`setup` without its checks and the blocks that hold one (each passes where
    the check after it is reached; a name one binds that is needed later makes
    this shorter setup not standalone)."""
    return [s for s in setup if not _runs_check(s, checkers)]


def _runs_check(stmt: ast.stmt, checkers: set[str]) -> bool:
    """Whether running `stmt` runs a check (a definition runs none of its body)."""
    return not isinstance(stmt, DEFINITIONS) and _has_check(stmt, checkers)


class _Plain(ast.NodeTransformer):
    """unittest's assertions (`self.assertEqual(a, b)`) and a test package's
    `assert_equal(a, b)` as plain `assert` statements, at any depth."""

    def visit_Expr(self, node: ast.Expr) -> ast.stmt:
        v = node.value
        if (
            isinstance(v, ast.Call)
            and isinstance(v.func, ast.Name)
            and v.func.id in ASSERT_HELPERS
            and len(v.args) == 2
            and not v.keywords
        ):
            test = ast.Compare(left=v.args[0], ops=[ast.Eq()], comparators=[v.args[1]])
            return ast.copy_location(ast.Assert(test=test, msg=None), node)
        return from_unittest(node)


def _loop_cases(stmt: ast.For, checkers: set[str]) -> list[ast.stmt] | None:
    """A loop of several statements whose first check is a plain assertion in its
    body as `failing = []`, the loop up to that check with the cases that fail it
    appended (`if not (check): failing.append(case)`), then `failing`."""
    for i, s in enumerate(stmt.body):
        if _has_check(s, checkers):
            if any(isinstance(n, (ast.Break, ast.Continue, ast.Return)) for b in stmt.body[:i] for n in ast.walk(b)):
                return None
            record = ast.parse(f"{FAILING}.append({ast.unparse(stmt.target)})").body[0]
            keep: ast.stmt
            under = _under_raises(s, {})
            if isinstance(s, ast.Assert):
                keep = ast.If(test=ast.UnaryOp(op=ast.Not(), operand=s.test), body=[record], orelse=[])
            elif under is not None:  # a case that raises nothing fails
                handler = ast.ExceptHandler(type=ast.parse(under[2], mode="eval").body, name=None, body=[ast.Pass()])
                keep = ast.Try(body=[*under[0], under[1]], handlers=[handler], orelse=[record], finalbody=[])
            else:
                return None
            loop = ast.For(target=stmt.target, iter=stmt.iter, body=[*stmt.body[:i], keep], orelse=[], lineno=0)
            start = ast.parse(f"{FAILING} = []").body[0]
            return [start, loop, ast.Expr(value=ast.Name(id=FAILING, ctx=ast.Load()))]
    return None


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
    # a name a test helper's import binds (`pytest`) is not the library's
    defined |= {name for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)) for name in binds(n)}
    local = names_in(func, ast.Store) | {a.arg for a in ast.walk(func) if isinstance(a, ast.arg)}
    local |= {n.name for n in ast.walk(func) if isinstance(n, DEFINITIONS)}
    free = all_loads(func) - local - defined - set(imports) - set(values) - BUILTIN_NAMES
    return {name: "\n".join(stars) for name in free}
