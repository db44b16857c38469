"""The static reading of a test function shared by both reproduction makers
(`reproduction.explain_reproduction`, from pytest's report, and
`static_repro.static_reproductions`, from the source alone): a test
module's imports and constants, the names a statement reads and binds, the
earlier statements and small module helpers a statement needs to run on its
own, parametrize substitutions, and unittest's assertions read as plain ones.
Nothing here runs the code it reads.
"""

from __future__ import annotations

import ast
import builtins

from sandgym.envs.swe_repo.parametrize import param_sources

MAX_VALUE_CHARS = 160
BUILTIN_NAMES = set(dir(builtins))


def module_scope(tree: ast.Module) -> tuple[dict[str, str], dict[str, ast.expr]]:
    """(name -> the import line that binds it, name -> module-level value node)."""
    imports: dict[str, str] = {}
    values: dict[str, ast.expr] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Import):
            for a in stmt.names:
                if not test_helper(a.name):
                    bound = a.asname or a.name.split(".")[0]
                    imports[bound] = f"import {a.name}" + (f" as {a.asname}" if a.asname else "")
        elif isinstance(stmt, ast.ImportFrom) and stmt.level == 0 and stmt.module and not test_helper(stmt.module):
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


def test_helper(module: str) -> bool:
    parts = module.split(".")
    return parts[0] in ("pytest", "_pytest", "unittest", "hypothesis", "mock", "conftest") or any(
        p in ("test", "tests", "testing", "conftest") or p.startswith("test_") for p in parts
    )


class Substitute(ast.NodeTransformer):
    def __init__(self, values: dict[str, ast.expr]):
        self.values = values

    def visit_Name(self, node: ast.Name) -> ast.expr:
        return self.values.get(node.id, node)


SIMPLE = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Expr, ast.Assert)
MAX_SETUP_CHARS = 640


def names_in(node: ast.AST, ctx: type) -> set[str]:
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


def setup_statements(prior: list[ast.stmt]) -> list[ast.stmt] | str:
    """Every statement the test runs before the failing one, verbatim, so the
    reproduction does what the test did (a subset could leave out a call
    whose side effect matters)."""
    for stmt in prior:
        if any(isinstance(n, (ast.Return, ast.Yield, ast.YieldFrom, ast.Await)) for n in own_nodes(stmt)):
            return "the setup returns or yields"
    # docstrings are no code
    return [x for x in prior if not (isinstance(x, ast.Expr) and isinstance(x.value, ast.Constant))]


DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def own_nodes(stmt: ast.stmt):
    """The nodes of `stmt` outside the functions it defines."""
    if isinstance(stmt, DEFINITIONS):
        return  # a definition runs none of its body
    todo: list[ast.AST] = [stmt]
    while todo:
        node = todo.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                todo.append(child)


def free_names(stmt: ast.stmt) -> set[str]:
    """Names `stmt` reads that it does not bind itself (its own functions'
    arguments and locals, comprehension variables, imports, definitions)."""
    bound: set[str] = set()
    for n in ast.walk(stmt):
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            bound.add(n.id)
        elif isinstance(n, ast.arg):
            bound.add(n.arg)
        elif isinstance(n, DEFINITIONS):
            bound.add(n.name)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            bound |= {(a.asname or a.name).split(".")[0] for a in n.names}
        elif isinstance(n, ast.ExceptHandler) and n.name:
            bound.add(n.name)
    return all_loads(stmt) - bound


def binds(stmt: ast.stmt) -> set[str]:
    """Names `stmt` binds for the statements after it."""
    out = {n.id for n in own_nodes(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    for n in own_nodes(stmt):
        if isinstance(n, (ast.Import, ast.ImportFrom)):
            out |= {(a.asname or a.name).split(".")[0] for a in n.names}
    if isinstance(stmt, DEFINITIONS):
        out.add(stmt.name)
    return out


def needs_fixtures(func: ast.FunctionDef | ast.AsyncFunctionDef, tree: ast.Module, params: set[str]) -> bool:
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


def id_parts(test_id: str) -> tuple[str, list[str], str, str] | None:
    """(file, the names after it, the test function's name, the parametrize id) of a
    pytest node id ("tests/t.py::Cls::test_f[a-1]"), or None when it names no test."""
    path, *scope = test_id.split("::")
    if not scope:
        return None
    func_name, _, idpart = scope[-1].partition("[")
    return path, scope, func_name, idpart.removesuffix("]")


def substitutions(
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


def standalone(
    tree: ast.Module,
    subject: ast.expr,
    expected_node: ast.expr | None,
    prior: list[ast.stmt],
    imports: dict[str, str],
    helper_lines: int = 0,
    definitions: bool = False,
) -> tuple[list[ast.stmt], set[str], set[str]] | str:
    """(the setup with the helpers it needs first, the helpers' names, the names
    the setup binds) when `subject` and the statements before it run on their
    own (imports, builtins, small helpers of the test module: `helpers_needed`),
    else why not."""
    setup = setup_statements(prior)
    if isinstance(setup, str):
        return setup
    line_names = names_in(subject, ast.Load) | (
        names_in(expected_node, ast.Load) if expected_node is not None else set()
    )
    used = set(line_names)
    for s in setup:
        used |= free_names(s)
    helpers = helpers_needed(
        tree, used - set(imports) - BUILTIN_NAMES, imports, helper_lines or MAX_HELPER_LINES, definitions
    )
    if isinstance(helpers, str):
        return helpers
    helper_names = {helper_name(h) for h in helpers}
    known = set(imports) | BUILTIN_NAMES | helper_names
    bound: set[str] = set()
    for s in setup:
        if missing := free_names(s) - known - bound:
            return f"the setup needs a fixture, a helper or a local not defined here: {', '.join(sorted(missing))}"
        if any(isinstance(n, ast.ImportFrom | ast.Import) for n in ast.walk(s)) and any(
            test_helper(m) for m in modules_of(s)
        ):
            return "the setup imports a test helper"
        bound |= binds(s)
    if missing := line_names - known - bound:
        return f"the failing line needs a fixture, a helper or `self`: {', '.join(sorted(missing))}"
    # `f = lib.f` then `f(x)` calls the library too
    aliases = {
        n: "" for s in setup if isinstance(s, ast.Assign) and all_loads(s.value) & set(imports) for n in binds(s)
    }
    if not any(calls_import(node, imports | aliases) for node in [subject, *helpers, *setup]):
        return "no library call in the reproduction"
    return [*helpers, *setup], helper_names, bound


MAX_HELPER_LINES = 6


def modules_of(stmt: ast.stmt) -> list[str]:
    out = []
    for n in ast.walk(stmt):
        if isinstance(n, ast.Import):
            out += [a.name for a in n.names]
        elif isinstance(n, ast.ImportFrom):
            out.append("conftest" if n.level else n.module or "")  # relative: the test package
    return out


def all_loads(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def helpers_needed(
    tree: ast.Module,
    names: set[str],
    imports: dict[str, str],
    max_lines: int = MAX_HELPER_LINES,
    definitions: bool = False,
) -> list[ast.stmt] | str:
    """The test module's own small functions the reproduction calls (and
    those they call), to be copied into it: undecorated, not tests, a few
    lines, using only imports, builtins and each other. With `definitions`,
    its small classes (no test methods) and module-level values built by
    calls (`NOW = datetime(2020, 1, 1)`) count too."""
    defs: dict[str, ast.stmt] = {
        n.name: n
        for n in tree.body
        if isinstance(n, ast.FunctionDef) and not n.decorator_list and not n.name.startswith("test")
    }
    if definitions:
        for n in tree.body:
            if isinstance(n, ast.ClassDef) and not n.decorator_list and not n.name.startswith("Test"):
                if not any(isinstance(m, DEFINITIONS) and m.name.startswith("test") for m in n.body):
                    defs.setdefault(n.name, n)
            elif (name := assigned_name(n)) and name not in defs:
                defs[name] = n
    picked: dict[str, ast.stmt] = {}
    todo = [n for n in names if n in defs]
    while todo:
        name = todo.pop()
        if name in picked:
            continue
        fn = defs[name]
        if (fn.end_lineno or fn.lineno) - fn.lineno + 1 > max_lines:
            return f"the helper {name}() is too long to copy"
        picked[name] = fn
        for u in free_names(fn) - {name} - set(imports) - BUILTIN_NAMES:
            if u not in defs:
                return f"the helper {name}() needs {u}"
            todo.append(u)
    return [picked[n] for n in sorted(picked, key=lambda n: defs[n].lineno)]


def assigned_name(stmt: ast.stmt) -> str:
    """The one name a plain assignment (`X = ...`, `X: T = ...`) binds, or ""."""
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
        return stmt.targets[0].id
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
        return stmt.target.id
    return ""


def helper_name(stmt: ast.stmt) -> str:
    return stmt.name if isinstance(stmt, DEFINITIONS) else assigned_name(stmt)


UNITTEST_ASSERTS: dict[str, type[ast.cmpop]] = {
    "assertEqual": ast.Eq,
    "assertEquals": ast.Eq,
    **{f"assert{kind}Equal": ast.Eq for kind in ("Dict", "List", "Tuple", "Set", "Sequence", "MultiLine")},
    "assertIs": ast.Is,
    "assertNotEqual": ast.NotEq,
    "assertIn": ast.In,
    "assertNotIn": ast.NotIn,
    "assertIsNot": ast.IsNot,
}


def from_unittest(stmt: ast.stmt) -> ast.stmt:
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
    if method in UNITTEST_ASSERTS and len(args) == 2:
        test = ast.Compare(left=args[0], ops=[UNITTEST_ASSERTS[method]()], comparators=[args[1]])
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


def involves_call_or_local(node: ast.expr, imports: dict[str, str], prior: list[ast.stmt]) -> bool:
    local = {n for s in prior for n in names_in(s, ast.Store)}
    return calls_import(node, imports) or bool(names_in(node, ast.Load) & local)


def input_of(subject: ast.expr, setup: list[ast.stmt], imports: dict[str, str], local: set[str]) -> str:
    """The arguments of the library call, for the minimal text ("" when
    they are locals of the reproduction)."""
    for node in [subject, *reversed(setup)]:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call) and calls_import(sub, imports):
                inner = sub
                while isinstance(inner.func, ast.Name) and inner.func.id in BUILTIN_NAMES and len(inner.args) == 1:
                    if not isinstance(inner.args[0], ast.Call):
                        break
                    inner = inner.args[0]  # str(f(x)) -> f(x): the library's own arguments
                parts = [*inner.args, *inner.keywords]
                if not parts or any(names_in(p, ast.Load) & local for p in parts):
                    return ""
                return ", ".join(ast.unparse(a) for a in parts)
    return ""


def calls_import(node: ast.AST, imports: dict[str, str]) -> bool:
    """Whether `node` calls something imported (a decorator is a call too)."""
    for sub in ast.walk(node):
        called = [sub.func] if isinstance(sub, ast.Call) else []
        if isinstance(sub, DEFINITIONS):
            called = list(sub.decorator_list)
        for root in called:
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in imports:
                return True
    return False
