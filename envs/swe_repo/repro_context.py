"""What a test gets before its body runs, as plain statements for a
reproduction read from the source (`static_repro`).

- pytest fixtures the test takes, defined in its module or a conftest: the
  fixture's body up to its `return` or `yield`, then `name = value`, its own
  fixtures first (`tmp_path` made by hand; teardown after a `yield` left out);
  a parametrized or renamed fixture, or one needing `request`, `monkeypatch`
  and the like, gives none;
- a test class's `setUp` (or `setup_method`): its body with `self.x` read as
  a local `x`, and the class's small helper methods the test calls as
  functions of their own (`self.check(...)` -> `check(...)`).

Like the rest of the static reading, nothing here runs the code it reads.
"""

from __future__ import annotations

import ast
import copy
from dataclasses import dataclass, field

from sandgym.envs.swe_repo.repro_ast import module_scope, own_nodes

TMP_PATH = "tmp_path = pathlib.Path(tempfile.mkdtemp())"
SETUP_METHODS = ("setUp", "setup_method")
CLASS_SETUP = ("setUpClass", "setup_class", "setUpModule", "setup_module")
MAX_FIXTURE_DEPTH = 4
STOPS = (ast.Return, ast.Yield, ast.YieldFrom, ast.Await)


@dataclass
class Context:
    prelude: list[ast.stmt] = field(default_factory=list)
    imports: dict[str, str] = field(default_factory=dict)  # lines a conftest's fixture needs
    self_names: set[str] = field(default_factory=set)  # `self.x` read as `x`


def _decorator_call(d: ast.expr) -> tuple[str, ast.Call | None]:
    call = d if isinstance(d, ast.Call) else None
    f = d.func if isinstance(d, ast.Call) else d
    return (f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""), call


def _fixture_kind(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """ "" (not a fixture), "plain", "autouse" or "odd" (parametrized, renamed, scoped to more than a test)."""
    for d in fn.decorator_list:
        name, call = _decorator_call(d)
        if name != "fixture":
            continue
        words = {k.arg: k.value for k in call.keywords} if call else {}
        if "params" in words or "name" in words:
            return "odd"
        auto = words.get("autouse")
        return "autouse" if isinstance(auto, ast.Constant) and auto.value else "plain"
    return ""


def _fixtures(trees: list[ast.Module]) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    """name -> fixture function, the first tree's first (the test module, then conftests nearest first)."""
    found: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
    for tree in trees:
        for n in tree.body:
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and _fixture_kind(n):
                found.setdefault(n.name, n)
    return found


def _inline(name: str, defs: dict, seen: tuple[str, ...]) -> list[ast.stmt] | str:
    """The statements that give the fixture `name` its value, its own fixtures' first."""
    if name == "tmp_path":
        return [ast.parse(TMP_PATH).body[0]]
    fn = defs.get(name)
    if fn is None or isinstance(fn, ast.AsyncFunctionDef):
        return f"the test takes the fixture {name!r}, defined neither in its module nor a conftest here"
    if _fixture_kind(fn) != "plain" or name in seen or len(seen) > MAX_FIXTURE_DEPTH:
        return f"the fixture {name!r} is parametrized, renamed or recursive"
    out: list[ast.stmt] = []
    for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]:
        more = _inline(a.arg, defs, (*seen, name))
        if isinstance(more, str):
            return more
        out += more
    body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    for i, stmt in enumerate(body):
        value = stmt.value if isinstance(stmt, ast.Return) else None
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, (ast.Yield, ast.YieldFrom)):
            value = stmt.value.value
        if value is not None or isinstance(stmt, ast.Return):
            before = copy.deepcopy(body[:i])
            if any(
                isinstance(n, (ast.Return, ast.Yield, ast.YieldFrom, ast.Await)) for s in before for n in own_nodes(s)
            ):
                return f"the fixture {name!r} returns from inside a block"
            target = ast.Name(id=name, ctx=ast.Store())
            return [*out, *before, ast.Assign(targets=[target], value=value or ast.Constant(None), lineno=0)]
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, (ast.Yield, ast.YieldFrom)):
            break
    return f"the fixture {name!r} gives no value it returns or yields at its top level"


class _SelfToLocal(ast.NodeTransformer):
    """`self.x` as the plain name `x`, for the names of `names`."""

    def __init__(self, names: set[str]):
        self.names = names

    def visit_Attribute(self, node: ast.Attribute) -> ast.expr:
        if isinstance(node.value, ast.Name) and node.value.id == "self" and node.attr in self.names:
            return ast.copy_location(ast.Name(id=node.attr, ctx=node.ctx), node)
        self.generic_visit(node)
        return node


def self_to_local(node: ast.AST, names: set[str]) -> ast.AST:
    return _SelfToLocal(names).visit(node)


def _self_reads(node: ast.AST) -> set[str]:
    return {
        n.attr
        for n in ast.walk(node)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"
    }


def _class_part(line: list[ast.ClassDef], func: ast.FunctionDef | ast.AsyncFunctionDef) -> Context | str:
    """setUp's statements and the helper methods `func` needs, `self` taken out."""
    methods: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
    for cls in line:  # nearest class first, as Python looks methods up
        for m in cls.body:
            if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)):
                methods.setdefault(m.name, m)
    if any(n in methods for n in CLASS_SETUP):
        return "the test class sets up at class level"
    if any(_fixture_kind(m) == "autouse" for m in methods.values()):
        return "the test class has an autouse fixture"
    setup = next((methods[n] for n in SETUP_METHODS if n in methods), None)
    body: list[ast.stmt] = []
    attrs: set[str] = set()
    if setup is not None:
        for s in setup.body:
            if isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant):
                continue
            if "super()" in ast.unparse(s):
                continue  # TestCase's own setUp does nothing a reproduction needs
            body.append(copy.deepcopy(s))
            for n in ast.walk(s):
                if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store) and ast.unparse(n.value) == "self":
                    attrs.add(n.attr)
    helpers: dict[str, ast.FunctionDef] = {}
    todo = sorted(_self_reads(func) | {a for s in body for a in _self_reads(s)})
    while todo:
        name = todo.pop()
        method = methods.get(name)
        if name in helpers or not isinstance(method, ast.FunctionDef) or method.decorator_list:
            continue
        if name.startswith(("test", "tearDown", "teardown")) or name in SETUP_METHODS or not method.args.args:
            continue
        fn = copy.deepcopy(method)
        fn.args.args = fn.args.args[1:]  # no `self`
        helpers[name] = fn
        todo += sorted(_self_reads(method) - set(helpers))
    names = attrs | set(helpers)
    prelude = [self_to_local(s, names) for s in body]
    prelude += [self_to_local(helpers[n], names) for n in sorted(helpers, key=lambda n: methods[n].lineno)]
    return Context(prelude=prelude, self_names=names)  # type: ignore[arg-type]


def test_context(
    tree: ast.Module,
    line: list[ast.ClassDef],
    func: ast.FunctionDef | ast.AsyncFunctionDef,
    params: set[str],
    conftests: list[str],
) -> Context | str:
    """The statements a test's fixtures and its class's set-up amount to, or
    why they cannot be written out (`line`: the test's class and the classes
    of its module it derives from, nearest first; none for a module test)."""
    if any("usefixtures" in ast.unparse(d) for d in func.decorator_list):
        return "the test uses fixtures by name (usefixtures)"
    trees = [tree]
    for text in conftests:
        try:
            trees.append(ast.parse(text))
        except SyntaxError:
            continue
    defs = _fixtures(trees)
    ctx = Context()
    for a in [*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs]:
        if a.arg in params or a.arg in ("self", "cls"):
            continue
        got = _inline(a.arg, defs, ())
        if isinstance(got, str):
            return got
        ctx.prelude += got
    if any(isinstance(n, ast.Name) and n.id == "tmp_path" for s in ctx.prelude for n in ast.walk(s)):
        ctx.imports |= {"tempfile": "import tempfile", "pathlib": "import pathlib"}
    for extra in trees[1:]:  # a conftest fixture's body reads the conftest's imports
        for name, line_ in module_scope(extra)[0].items():
            ctx.imports.setdefault(name, line_)
    if line:
        part = _class_part(line, func)
        if isinstance(part, str):
            return part
        ctx.prelude += part.prelude
        ctx.self_names = part.self_names
    return ctx
