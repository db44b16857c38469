"""Which `pytest.mark.parametrize` case a test id names.

pytest ids a parametrized test by its case (`test_f[1-2]`); `param_sources`
finds that case in the test's decorator (a literal table, a module-level
name bound to one, or a sum of those) the way pytest's IdMaker builds ids,
and returns the source text of each argument, for a reproduction.
"""

from __future__ import annotations

import ast
import re


def callee_name(call: ast.Call) -> str:
    """The name a call calls: `f` of `f(...)` and of `x.f(...)`."""
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def _cases_of(node: ast.expr | None, values: dict[str, ast.expr]) -> list[ast.expr] | None:
    """The case nodes of a parametrize table: a literal list, a module-level
    name bound to one, or a sum of those."""
    if isinstance(node, ast.Name):
        node = values.get(node.id)
    if isinstance(node, (ast.List, ast.Tuple)):
        return list(node.elts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _cases_of(node.left, values), _cases_of(node.right, values)
        return None if left is None or right is None else left + right
    return None


def _id_of(name: str, index: int, node: ast.expr) -> str | None:
    """pytest's id for one parameter value (the same rules as its IdMaker),
    or None when it depends on a value known only when the tests run (a
    string built from the library's constants)."""
    value: object
    try:
        value = ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError, RecursionError, MemoryError):
        literal = isinstance(node, (ast.List, ast.Tuple, ast.Dict, ast.Set, ast.Lambda, ast.ListComp, ast.DictComp))
        return f"{name}{index}" if literal else None
    if isinstance(value, str):
        return value.encode("unicode_escape").decode("ascii")
    if value is None or isinstance(value, (bool, int, float, complex)):
        return str(value)
    return f"{name}{index}"


def _unique_ids(ids: list[str]) -> list[str]:
    """pytest's suffixes for duplicate ids: `a0`, `a1` (`1_0` after a digit)."""
    counts = {i: ids.count(i) for i in ids}
    seen: dict[str, int] = {}
    out = []
    for i in ids:
        if counts[i] > 1:
            n = seen.get(i, 0)
            seen[i] = n + 1
            out.append(f"{i}{'_' if i and i[-1].isdigit() else ''}{n}")
        else:
            out.append(i)
    return out


def param_sources(func: ast.FunctionDef | ast.AsyncFunctionDef, values: dict[str, ast.expr], idpart: str, source: str):
    """{argname: value source} of the parametrize case whose pytest id is `idpart`, or None."""
    decos = [
        d
        for d in func.decorator_list
        if isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute) and d.func.attr == "parametrize"
    ]
    if len(decos) != 1 or not decos[0].args:
        return None
    deco = decos[0]
    kw = {k.arg: k.value for k in deco.keywords if k.arg}
    names_node = deco.args[0] if deco.args else kw.get("argnames")
    cases_node = deco.args[1] if len(deco.args) > 1 else kw.get("argvalues")
    if isinstance(names_node, ast.Constant) and isinstance(names_node.value, str):
        names = [n.strip() for n in names_node.value.split(",") if n.strip()]
    elif isinstance(names_node, (ast.Tuple, ast.List)) and all(
        isinstance(e, ast.Constant) and isinstance(e.value, str) for e in names_node.elts
    ):
        names = [e.value for e in names_node.elts]  # type: ignore[attr-defined]
    else:
        return None
    cases = _cases_of(cases_node, values)
    if cases is None:
        return None
    given_ids: list[str | None] | None = None
    if "ids" in kw:
        ids_node = kw["ids"]
        if not (
            isinstance(ids_node, (ast.List, ast.Tuple))
            and len(ids_node.elts) == len(cases)
            and all(isinstance(e, ast.Constant) and isinstance(e.value, (str, type(None))) for e in ids_node.elts)
        ):
            return None  # ids from a function: not worked out here
        given_ids = [e.value for e in ids_node.elts]  # type: ignore[attr-defined]
    rows: list[list[ast.expr]] = []
    ids: list[str] = []
    for index, case in enumerate(cases):
        own_id: str | None = given_ids[index] if given_ids else None
        if isinstance(case, ast.Call) and callee_name(case) == "param":
            for k in case.keywords:
                if k.arg == "id" and isinstance(k.value, ast.Constant) and isinstance(k.value.value, str):
                    own_id = k.value.value
            elts = list(case.args)
        elif len(names) > 1 and isinstance(case, (ast.Tuple, ast.List)):
            elts = list(case.elts)
        else:
            elts = [case]
        if len(elts) != len(names) or any(isinstance(e, ast.Starred) for e in elts):
            return None
        rows.append(elts)
        if own_id is not None:
            ids.append(re.escape(own_id))
        else:
            parts = [_id_of(n, index, e) for n, e in zip(names, elts, strict=True)]
            ids.append("-".join(".*?" if p is None else re.escape(p) for p in parts))
    if len(set(ids)) != len(ids):
        ids = _unique_ids(ids)
    hits = [
        {n: ast.get_source_segment(source, e) or "" for n, e in zip(names, row, strict=True)}
        for row, pattern in zip(rows, ids, strict=True)
        if re.fullmatch(pattern, idpart, re.DOTALL)
    ]
    return hits[0] if len(hits) == 1 and all(hits[0].values()) else None
