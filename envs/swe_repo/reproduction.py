"""A standalone reproduction of a failing test, for the `symptom` and
`minimal` issue texts.

`explain_reproduction` takes the test's failing statement (found by the
line pytest reported in the test's own frame), substitutes parametrize
values and module constants, keeps the earlier statements it depends on
and the small helpers of the test module it calls, and reads what went
wrong from pytest's report; fixtures, test helpers and `self` make a test
not standalone.
"""

from __future__ import annotations

import ast
import builtins
import copy
import re
from dataclasses import dataclass

from sandgym.envs.swe_repo.parametrize import callee_name, param_sources

# A traceback frame of pytest's `--tb=short` report: `path.py:12: in func`.
FRAME_LINE = re.compile(r"^(?P<path>[^\s:][^:]*\.py):(?P<line>\d+): in (?P<func>\S+)")
MAX_VALUE_CHARS = 160
_BUILTINS = set(dir(builtins))


@dataclass(frozen=True)
class Repro:
    """A standalone reproduction: imports, a call, and what came back."""

    imports: tuple[str, ...]
    call: str  # an expression calling the library
    args: str  # the call's argument text
    expected: str  # the value the test expects (source text), or ""
    actual: str  # the value it got (repr as pytest printed it), or ""
    error: str  # "TypeError: message" when the call raised, or ""
    setup: tuple[str, ...] = ()  # the test's earlier statements the call needs
    no_raise: bool = False  # the call returned where an exception was expected

    def block(self) -> str:
        body = [*self.setup, self.call]
        return "\n".join([*self.imports, "", *body] if self.imports else body)


def _test_frame(detail: str, test_path: str, func: str) -> tuple[str, int] | None:
    """(source line, line number) pytest showed for the test function's own frame."""
    lines = detail.splitlines()
    found = None
    for i, raw in enumerate(lines):
        m = FRAME_LINE.match(raw)
        if m and m.group("path") == test_path and m.group("func") == func and i + 1 < len(lines):
            nxt = lines[i + 1]
            if nxt.startswith("    ") and nxt.strip():
                found = (nxt.strip(), int(m.group("line")))
    return found


def _error_line(detail: str) -> str:
    for line in detail.splitlines():
        if line.startswith("E ") and line[1:].strip():
            return line[1:].strip()
    return ""


def _module_scope(tree: ast.Module) -> tuple[dict[str, str], dict[str, ast.expr]]:
    """(name -> the import line that binds it, name -> module-level value node)."""
    imports: dict[str, str] = {}
    values: dict[str, ast.expr] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Import):
            for a in stmt.names:
                if not _test_helper(a.name):
                    bound = a.asname or a.name.split(".")[0]
                    imports[bound] = f"import {a.name}" + (f" as {a.asname}" if a.asname else "")
        elif isinstance(stmt, ast.ImportFrom) and stmt.level == 0 and stmt.module and not _test_helper(stmt.module):
            for a in stmt.names:
                if a.name != "*":
                    imports[a.asname or a.name] = f"from {stmt.module} import {a.name}" + (
                        f" as {a.asname}" if a.asname else ""
                    )
        elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            values[stmt.targets[0].id] = stmt.value
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            values[stmt.target.id] = stmt.value
    return imports, values


def _test_helper(module: str) -> bool:
    parts = module.split(".")
    return parts[0] in ("pytest", "_pytest", "unittest", "hypothesis", "mock", "conftest") or any(
        p in ("test", "tests", "testing", "conftest") or p.startswith("test_") for p in parts
    )


class _Substitute(ast.NodeTransformer):
    def __init__(self, values: dict[str, ast.expr]):
        self.values = values

    def visit_Name(self, node: ast.Name) -> ast.expr:
        return self.values.get(node.id, node)


def reproduction(test_id: str, detail: str, test_source: str) -> Repro | None:
    """A standalone reproduction from one failing test, or None when there is none."""
    try:
        r = explain_reproduction(test_id, detail, test_source)
    except (ValueError, TypeError, AttributeError, RecursionError, MemoryError):
        return None  # an odd test file: no reproduction rather than a stopped run
    return r if isinstance(r, Repro) else None


_SIMPLE = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Expr, ast.Assert)
MAX_SETUP_LINES = 12
MAX_SETUP_CHARS = 640


def _failing_statement(
    func: ast.FunctionDef | ast.AsyncFunctionDef, lineno: int
) -> tuple[ast.stmt, str, list[ast.stmt]] | str:
    """(the simple statement at `lineno`, the exception a `pytest.raises` block
    around it expects or "", the statements run before it in the test)."""
    for i, stmt in enumerate(func.body):
        if not stmt.lineno <= lineno <= (stmt.end_lineno or stmt.lineno):
            continue
        if isinstance(stmt, _SIMPLE):
            return stmt, "", list(func.body[:i])
        if isinstance(stmt, ast.With) and len(stmt.items) == 1:
            call = stmt.items[0].context_expr
            if isinstance(call, ast.Call) and callee_name(call) in ("raises", "assertRaises") and call.args:
                for j, inner in enumerate(stmt.body):
                    if inner.lineno <= lineno <= (inner.end_lineno or inner.lineno) and isinstance(inner, _SIMPLE):
                        return inner, ast.unparse(call.args[0]), list(func.body[:i]) + list(stmt.body[:j])
                if len(stmt.body) == 1 and isinstance(stmt.body[0], _SIMPLE):
                    # pytest points at the `with` line when nothing was raised
                    return stmt.body[0], ast.unparse(call.args[0]), list(func.body[:i])
        return f"the failing line is inside a {type(stmt).__name__} block"
    return "the failing line is not in the test function"


def _names(node: ast.AST, ctx: type) -> set[str]:
    """Names `node` loads (those its comprehensions or lambdas bind left
    out) or stores."""
    found = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ctx)}
    if ctx is ast.Load:
        inner: set[str] = set()
        for n in ast.walk(node):
            if isinstance(n, ast.comprehension):
                inner |= {x.id for x in ast.walk(n.target) if isinstance(x, ast.Name)}
            elif isinstance(n, ast.Lambda):
                inner |= {a.arg for a in [*n.args.posonlyargs, *n.args.args, *n.args.kwonlyargs]}
            elif isinstance(n, ast.NamedExpr) and isinstance(n.target, ast.Name):
                inner.add(n.target.id)
        found -= inner
    elif ctx is ast.Store:
        found = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)} - {
            x.id
            for c in ast.walk(node)
            if isinstance(c, ast.comprehension)
            for x in ast.walk(c.target)
            if isinstance(x, ast.Name)
        }
    return found


def _setup(prior: list[ast.stmt]) -> list[ast.stmt] | str:
    """Every statement the test runs before the failing one, verbatim, so the
    reproduction does what the test did (a subset could leave out a call
    whose side effect matters)."""
    for stmt in prior:
        if any(isinstance(n, (ast.Return, ast.Yield, ast.YieldFrom, ast.Await)) for n in _own_nodes(stmt)):
            return "the setup returns or yields"
    # docstrings are no code
    return [x for x in prior if not (isinstance(x, ast.Expr) and isinstance(x.value, ast.Constant))]


_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _own_nodes(stmt: ast.stmt):
    """The nodes of `stmt` outside the functions it defines."""
    if isinstance(stmt, _DEFINITIONS):
        return  # a definition runs none of its body
    todo: list[ast.AST] = [stmt]
    while todo:
        node = todo.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                todo.append(child)


def _free_names(stmt: ast.stmt) -> set[str]:
    """Names `stmt` reads that it does not bind itself (its own functions'
    arguments and locals, comprehension variables, imports, definitions)."""
    bound: set[str] = set()
    for n in ast.walk(stmt):
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            bound.add(n.id)
        elif isinstance(n, ast.arg):
            bound.add(n.arg)
        elif isinstance(n, _DEFINITIONS):
            bound.add(n.name)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            bound |= {(a.asname or a.name).split(".")[0] for a in n.names}
        elif isinstance(n, ast.ExceptHandler) and n.name:
            bound.add(n.name)
    return _all_loads(stmt) - bound


def _binds(stmt: ast.stmt) -> set[str]:
    """Names `stmt` binds for the statements after it."""
    out = {n.id for n in _own_nodes(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    for n in _own_nodes(stmt):
        if isinstance(n, (ast.Import, ast.ImportFrom)):
            out |= {(a.asname or a.name).split(".")[0] for a in n.names}
    if isinstance(stmt, _DEFINITIONS):
        out.add(stmt.name)
    return out


def _needs_fixtures(func: ast.FunctionDef | ast.AsyncFunctionDef, tree: ast.Module, params: set[str]) -> bool:
    """Whether pytest or unittest prepares something for the test: a
    fixture argument, `usefixtures`, or a class with set-up methods."""
    args = [a.arg for a in [*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs]]
    if any(a not in params and a not in ("self", "cls") for a in args):
        return True
    if any("usefixtures" in ast.unparse(d) or "fixture" in ast.unparse(d) for d in func.decorator_list):
        return True
    for cls in ast.walk(tree):
        if isinstance(cls, ast.ClassDef) and func in cls.body:
            for item in cls.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
                    item.name.lower().startswith(("setup", "teardown"))
                    or any("fixture" in ast.unparse(d) for d in item.decorator_list)
                ):
                    return True
    return False


_ASSERT_LINE = re.compile(r"^(?:AssertionError: )?assert (.+)$")


def _assert_values(detail: str) -> ast.expr | None:
    """pytest's rewritten assertion (`assert 3 == 2`), or unittest's message
    (`'a' != 'b'`, `False is not true`), as an expression of values."""
    for line in detail.splitlines():
        if not line.startswith("E "):
            continue
        text = line[1:].strip()
        m = _ASSERT_LINE.match(text)
        if m:
            text = m.group(1)
        elif text.startswith("AssertionError: "):
            text = text.removeprefix("AssertionError: ")
        else:
            continue
        try:
            return ast.parse(text, mode="eval").body
        except SyntaxError:
            return None
    return None


def _truncated(value: str) -> bool:
    return "..." in value


def _id_parts(test_id: str) -> tuple[str, list[str], str, str] | None:
    """(file, the names after it, the test function's name, the parametrize id) of a
    pytest node id ("tests/t.py::Cls::test_f[a-1]"), or None when it names no test."""
    path, *scope = test_id.split("::")
    if not scope:
        return None
    func_name, _, idpart = scope[-1].partition("[")
    return path, scope, func_name, idpart.removesuffix("]")


def explain_reproduction(test_id: str, detail: str, test_source: str) -> Repro | str:
    """A standalone reproduction from one failing test, or why there is none.

    The failing statement of the test (found by its line number in the test
    file, so a statement over several lines counts) with the parametrize
    values and module constants substituted, and the earlier statements of
    the test it depends on; fixtures, test helpers and `self` make it not
    standalone. What went wrong comes from pytest's report: the values of a
    failed `==`, `is`, or truth assertion, the exception raised, or a
    `pytest.raises` that saw nothing raised."""
    parts = _id_parts(test_id)
    if parts is None:
        return "the id names no test function"
    path, _, func_name, idpart = parts
    detail = _ANSI.sub("", detail)
    frame = _test_frame(detail, path, func_name)
    if not frame:
        return "the report shows no frame of the test function"
    _, lineno = frame
    # The error the test saw: the first `E` line after its own frame (a chained
    # exception's first block is the one the library caught).
    tail = detail[detail.rfind(f"{path}:{lineno}: in {func_name}") :]
    try:
        tree = ast.parse(test_source)
    except SyntaxError:
        return "the test file does not parse"
    imports, module_values = _module_scope(tree)
    func = next(
        (
            n
            for n in ast.walk(tree)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            and n.name == func_name
            and n.lineno <= lineno <= (n.end_lineno or n.lineno)
        ),
        None,
    )
    if func is None:
        return "the failing line is in no test function of that name"
    subst = _substitutions(func, module_values, imports, idpart, test_source)
    if isinstance(subst, str):
        return subst
    found = _failing_statement(func, lineno)
    if isinstance(found, str):
        return found
    stmt, raises, prior = found
    stmt = _Substitute(subst).visit(copy.deepcopy(stmt))
    prior = [_Substitute(subst).visit(copy.deepcopy(s)) for s in prior]
    stmt = _from_unittest(stmt)
    prior = [_from_unittest(x) for x in prior]
    err = _error_line(tail)
    assertion = err.startswith(("AssertionError", "assert "))
    expected_node: ast.expr | None = None
    subject: ast.expr
    kind = "value"  # value (==, is), truth, falsity
    if isinstance(stmt, ast.Assert):
        test = stmt.test
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Eq, ast.Is)):
            left, right = test.left, test.comparators[0]
            swap = not _involves_call_or_local(left, imports, prior) and _involves_call_or_local(right, imports, prior)
            subject, expected_node = (right, left) if swap else (left, right)
        elif isinstance(test, ast.Compare):
            return "the assertion compares with an operator other than == or is"
        elif isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            subject, kind = test.operand, "falsity"
        else:
            subject, kind = test, "truth"
    elif isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.Expr)) and stmt.value is not None:
        subject = stmt.value
    else:
        return f"the failing statement is a {type(stmt).__name__}"
    if _needs_fixtures(func, tree, set(subst)):
        return "the test uses fixtures or set-up methods"
    alone = _standalone(tree, subject, expected_node, prior, imports)
    if isinstance(alone, str):
        return alone
    setup, helpers, bound = alone
    actual = error = expected = ""
    no_raise = False
    if expected_node is not None and not (_names(expected_node, ast.Load) & bound):
        expected = ast.unparse(expected_node)  # a local's name says nothing: pytest's value or nothing
    if assertion and not raises:
        if not isinstance(stmt, ast.Assert):
            return "an assertion failed inside a helper"
        values = _assert_values(tail)
        if values is None:
            return "pytest did not show the assertion's values"
        if kind == "value":
            if not (isinstance(values, ast.Compare) and len(values.comparators) == 1):
                return "pytest's assertion line is no comparison"
            got, want = (
                (values.left, values.comparators[0])
                if subject is stmt.test.left  # type: ignore[attr-defined]
                else (values.comparators[0], values.left)
            )
            actual, expected = ast.unparse(got), ast.unparse(want)
        else:
            shown = values.operand if isinstance(values, ast.UnaryOp) and isinstance(values.op, ast.Not) else values
            if (
                isinstance(shown, ast.Compare)
                and isinstance(shown.ops[0], ast.IsNot)
                and isinstance(shown.comparators[0], ast.Name)
                and shown.comparators[0].id in ("true", "false")
            ):
                shown = shown.left  # unittest's "False is not true"
            actual = ast.unparse(shown)
            expected = "a true value" if kind == "truth" else "a false value"
        if _truncated(actual) or _truncated(expected):
            return "pytest cut the value short"
    elif raises and err.startswith("AssertionError: Regex pattern did not match"):
        return "the exception was raised with another message (pytest.raises(match=...))"
    elif raises and (err.startswith("Failed: DID NOT RAISE") or re.match(r"AssertionError: [\w.]+ not raised$", err)):
        no_raise = True
        expected = f"{raises} to be raised"
    elif re.match(r"(?:[a-z_][\w]*\.)*[A-Z]\w*(?::|$)", err) and not err.startswith("Failed:"):
        error = err  # an exception class (`module.Name: message`)
        if raises:
            expected = f"{raises} to be raised"
    else:
        return f"the error is not one a reproduction can show: {err[:60]!r}"
    call = ast.unparse(subject)
    lines = [ast.unparse(s) for s in setup]
    if (
        max(len(call), len(expected), len(actual), len(error)) > MAX_VALUE_CHARS
        or sum(x.count("\n") + 1 for x in lines) > MAX_SETUP_LINES
        or sum(map(len, lines)) > MAX_SETUP_CHARS
        or any(len(y) > MAX_VALUE_CHARS for x in lines for y in x.splitlines())
    ):
        return "the reproduction is too long"
    if actual and actual == expected:
        return "pytest shows the same value on both sides"
    needed = sorted({imports[u] for node in [subject, *setup] for u in _all_loads(node) if u in imports})
    if expected_node is not None:
        needed = sorted(set(needed) | {imports[u] for u in _names(expected_node, ast.Load) if u in imports})
    local = bound | {h.name for h in helpers}
    return Repro(
        tuple(needed), call, _input_of(subject, setup, imports, local), expected, actual, error, tuple(lines), no_raise
    )


def _substitutions(
    func: ast.FunctionDef | ast.AsyncFunctionDef,
    module_values: dict[str, ast.expr],
    imports: dict[str, str],
    idpart: str,
    test_source: str,
) -> dict[str, ast.expr] | str:
    """name -> value to put in its place: the parametrize case's values and the
    module's literal constants, or why the case cannot be found."""
    subst: dict[str, ast.expr] = {}
    if idpart:
        params = param_sources(func, module_values, idpart, test_source)
        if params is None:
            return "the parametrize case of the id cannot be found"
        for name, text in params.items():
            try:
                subst[name] = ast.parse(text, mode="eval").body
            except SyntaxError:
                return "a parametrize value does not parse"
    for name, value in module_values.items():
        if name not in subst and name not in imports:
            try:
                ast.literal_eval(value)
            except (ValueError, SyntaxError, TypeError, RecursionError):
                continue
            subst[name] = value
    return subst


def _standalone(
    tree: ast.Module,
    subject: ast.expr,
    expected_node: ast.expr | None,
    prior: list[ast.stmt],
    imports: dict[str, str],
    helper_lines: int = 0,
) -> tuple[list[ast.stmt], list[ast.FunctionDef], set[str]] | str:
    """(the setup with the helpers it needs first, those helpers, the names the
    setup binds) when `subject` and the statements before it run on their own
    (imports, builtins, small helpers of the test module), else why not."""
    setup = _setup(prior)
    if isinstance(setup, str):
        return setup
    line_names = _names(subject, ast.Load) | (_names(expected_node, ast.Load) if expected_node is not None else set())
    used = set(line_names)
    for s in setup:
        used |= _free_names(s)
    helpers = _helpers_needed(tree, used - set(imports) - _BUILTINS, imports, helper_lines or MAX_HELPER_LINES)
    if isinstance(helpers, str):
        return helpers
    known = set(imports) | _BUILTINS | {h.name for h in helpers}
    bound: set[str] = set()
    for s in setup:
        if _free_names(s) - known - bound:
            return "the setup needs a fixture, a helper or a local the test does not define here"
        if any(isinstance(n, ast.ImportFrom | ast.Import) for n in ast.walk(s)) and any(
            _test_helper(m) for m in _modules_of(s)
        ):
            return "the setup imports a test helper"
        bound |= _binds(s)
    if line_names - known - bound:
        return "the failing line needs a fixture, a helper or `self`"
    if not any(_calls_import(node, imports) for node in [subject, *helpers, *setup]):
        return "no library call in the reproduction"
    return [*helpers, *setup], helpers, bound


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
MAX_HELPER_LINES = 6


def _modules_of(stmt: ast.stmt) -> list[str]:
    out = []
    for n in ast.walk(stmt):
        if isinstance(n, ast.Import):
            out += [a.name for a in n.names]
        elif isinstance(n, ast.ImportFrom):
            out.append("conftest" if n.level else n.module or "")  # relative: the test package
    return out


def _all_loads(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _helpers_needed(
    tree: ast.Module, names: set[str], imports: dict[str, str], max_lines: int = MAX_HELPER_LINES
) -> list[ast.FunctionDef] | str:
    """The test module's own small functions the reproduction calls (and
    those they call), to be copied into it: undecorated, not tests, a few
    lines, using only imports, builtins and each other."""
    defs = {
        n.name: n
        for n in tree.body
        if isinstance(n, ast.FunctionDef) and not n.decorator_list and not n.name.startswith("test")
    }
    picked: dict[str, ast.FunctionDef] = {}
    todo = [n for n in names if n in defs]
    while todo:
        name = todo.pop()
        if name in picked:
            continue
        fn = defs[name]
        if (fn.end_lineno or fn.lineno) - fn.lineno + 1 > max_lines:
            return f"the helper {name}() is too long to copy"
        picked[name] = fn
        args = {a.arg for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]}
        args |= {a.arg for a in (fn.args.vararg, fn.args.kwarg) if a is not None}
        inner = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        for u in _all_loads(fn) - args - inner - set(imports) - _BUILTINS:
            if u not in defs:
                return f"the helper {name}() needs {u}"
            todo.append(u)
    return [picked[n] for n in sorted(picked, key=lambda n: defs[n].lineno)]


_UNITTEST: dict[str, type[ast.cmpop]] = {
    "assertEqual": ast.Eq,
    "assertEquals": ast.Eq,
    **{f"assert{kind}Equal": ast.Eq for kind in ("Dict", "List", "Tuple", "Set", "Sequence", "MultiLine")},
    "assertIs": ast.Is,
    "assertNotEqual": ast.NotEq,
    "assertIn": ast.In,
    "assertNotIn": ast.NotIn,
    "assertIsNot": ast.IsNot,
}


def _from_unittest(stmt: ast.stmt) -> ast.stmt:
    """`self.assertEqual(a, b)` as `assert a == b` (and assertTrue,
    assertFalse, assertIsNone, assertIs), so a TestCase test reads like a
    pytest one; anything else as it is."""
    if not (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Call)
        and isinstance(stmt.value.func, ast.Attribute)
        and isinstance(stmt.value.func.value, ast.Name)
        and stmt.value.func.value.id == "self"
        and not stmt.value.keywords
    ):
        return stmt
    method, args = stmt.value.func.attr, stmt.value.args
    test: ast.expr | None = None
    if method in _UNITTEST and len(args) == 2:
        test = ast.Compare(left=args[0], ops=[_UNITTEST[method]()], comparators=[args[1]])
    elif method == "assertIsNone" and len(args) == 1:
        test = ast.Compare(left=args[0], ops=[ast.Is()], comparators=[ast.Constant(None)])
    elif method == "assertTrue" and len(args) == 1:
        test = args[0]
    elif method == "assertFalse" and len(args) == 1:
        test = ast.UnaryOp(op=ast.Not(), operand=args[0])
    if test is None:
        return stmt
    out = ast.Assert(test=test, msg=None)
    return ast.copy_location(out, stmt)


def _involves_call_or_local(node: ast.expr, imports: dict[str, str], prior: list[ast.stmt]) -> bool:
    local = {n for s in prior for n in _names(s, ast.Store)}
    return _calls_import(node, imports) or bool(_names(node, ast.Load) & local)


def _input_of(subject: ast.expr, setup: list[ast.stmt], imports: dict[str, str], local: set[str]) -> str:
    """The arguments of the library call, for the minimal text ("" when
    they are locals of the reproduction)."""
    for node in [subject, *reversed(setup)]:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call) and _calls_import(sub, imports):
                inner = sub
                while isinstance(inner.func, ast.Name) and inner.func.id in _BUILTINS and len(inner.args) == 1:
                    if not isinstance(inner.args[0], ast.Call):
                        break
                    inner = inner.args[0]  # str(f(x)) -> f(x): the library's own arguments
                parts = [*inner.args, *inner.keywords]
                if not parts or any(_names(p, ast.Load) & local for p in parts):
                    return ""
                return ", ".join(ast.unparse(a) for a in parts)
    return ""


def _calls_import(node: ast.AST, imports: dict[str, str]) -> bool:
    """Whether `node` calls something imported (a decorator is a call too)."""
    for sub in ast.walk(node):
        called = [sub.func] if isinstance(sub, ast.Call) else []
        if isinstance(sub, _DEFINITIONS):
            called = list(sub.decorator_list)
        for root in called:
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in imports:
                return True
    return False


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
    parts = _id_parts(test_id)
    if parts is None:
        return []
    _, scope, func_name, idpart = parts
    try:
        tree = ast.parse(test_source)
    except SyntaxError:
        return []
    imports, module_values = _module_scope(tree)
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
    subst = _substitutions(func, module_values, imports, idpart, test_source)
    if isinstance(subst, str) or _needs_fixtures(func, tree, set(subst) | {"tmp_path"}):
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
        if isinstance(raw, _DEFINITIONS):
            continue  # a definition the test makes: setup of what follows
        loop = _failing_cases(raw)
        if loop is None and not isinstance(stmt, _SIMPLE):
            break  # a branch, `try` or another loop: what follows may depend on it
        stmt = _from_unittest(_Substitute(subst).visit(_SelfAttrs(attrs).visit(copy.deepcopy(loop or stmt))))
        prior = [_from_unittest(_Substitute(subst).visit(_SelfAttrs(attrs).visit(copy.deepcopy(s)))) for s in prior]
        expected_node: ast.expr | None = None
        if loop is not None:
            subject = stmt.value  # type: ignore[attr-defined]
        elif isinstance(stmt, ast.Assert) and not raises:
            test = stmt.test
            if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Eq, ast.Is)):
                left, right = test.left, test.comparators[0]
                swap = not _involves_call_or_local(left, imports, prior) and _involves_call_or_local(
                    right, imports, prior
                )
                subject, expected_node = (right, left) if swap else (left, right)
            else:
                subject = test  # `x in y`, `not f(x)`, `f(x)`: its truth value is what the test checks
        elif raises and isinstance(stmt, (ast.Expr, ast.Assign)):
            subject = stmt.value
        else:
            continue  # a plain statement: setup of the ones after it
        alone = _standalone(tree, subject, expected_node, [*prelude, *prior], imports, STATIC_HELPER_LINES)
        if isinstance(alone, str):
            continue
        setup, helpers, bound = alone
        call = ast.unparse(subject)
        lines = [ast.unparse(s) + ("\n" if isinstance(s, _DEFINITIONS) else "") for s in setup]
        if (
            len(call) > MAX_VALUE_CHARS
            or sum(x.count("\n") + 1 for x in lines) > STATIC_SETUP_LINES
            or sum(map(len, lines)) > 2 * MAX_SETUP_CHARS
        ):
            break  # the later ones only grow
        needed = sorted({imports[u] for node in [subject, *setup] for u in _all_loads(node) if u in imports})
        args = "" if loop else _input_of(subject, setup, imports, bound | {h.name for h in helpers})
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
    check = _from_unittest(stmt.body[0])
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
        if isinstance(n, ast.ImportFrom) and n.level == 0 and n.module and not _test_helper(n.module)
        if any(a.name == "*" for a in n.names)
    ]
    if not stars:
        return {}
    defined = {n.name for n in tree.body if isinstance(n, _DEFINITIONS)}
    local = _names(func, ast.Store) | {a.arg for a in ast.walk(func) if isinstance(a, ast.arg)}
    local |= {n.name for n in ast.walk(func) if isinstance(n, _DEFINITIONS)}
    free = _all_loads(func) - local - defined - set(imports) - set(values) - _BUILTINS
    return {name: "\n".join(stars) for name in free}
