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
import copy
import re
from dataclasses import dataclass

from sandgym.envs.swe_repo.parametrize import callee_name
from sandgym.envs.swe_repo.repro_ast import (
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
)

# A traceback frame of pytest's `--tb=short` report: `path.py:12: in func`.
FRAME_LINE = re.compile(r"^(?P<path>[^\s:][^:]*\.py):(?P<line>\d+): in (?P<func>\S+)")


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


def reproduction(test_id: str, detail: str, test_source: str) -> Repro | None:
    """A standalone reproduction from one failing test, or None when there is none."""
    try:
        r = explain_reproduction(test_id, detail, test_source)
    except (ValueError, TypeError, AttributeError, RecursionError, MemoryError):
        return None  # an odd test file: no reproduction rather than a stopped run
    return r if isinstance(r, Repro) else None


MAX_SETUP_LINES = 12


def _failing_statement(
    func: ast.FunctionDef | ast.AsyncFunctionDef, lineno: int
) -> tuple[ast.stmt, str, list[ast.stmt]] | str:
    """(the simple statement at `lineno`, the exception a `pytest.raises` block
    around it expects or "", the statements run before it in the test)."""
    for i, stmt in enumerate(func.body):
        if not stmt.lineno <= lineno <= (stmt.end_lineno or stmt.lineno):
            continue
        if isinstance(stmt, SIMPLE):
            return stmt, "", list(func.body[:i])
        if isinstance(stmt, ast.With) and len(stmt.items) == 1:
            call = stmt.items[0].context_expr
            if isinstance(call, ast.Call) and callee_name(call) in ("raises", "assertRaises") and call.args:
                for j, inner in enumerate(stmt.body):
                    if inner.lineno <= lineno <= (inner.end_lineno or inner.lineno) and isinstance(inner, SIMPLE):
                        return inner, ast.unparse(call.args[0]), list(func.body[:i]) + list(stmt.body[:j])
                if len(stmt.body) == 1 and isinstance(stmt.body[0], SIMPLE):
                    # pytest points at the `with` line when nothing was raised
                    return stmt.body[0], ast.unparse(call.args[0]), list(func.body[:i])
        return f"the failing line is inside a {type(stmt).__name__} block"
    return "the failing line is not in the test function"


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


def explain_reproduction(test_id: str, detail: str, test_source: str) -> Repro | str:
    """A standalone reproduction from one failing test, or why there is none.

    The failing statement of the test (found by its line number in the test
    file, so a statement over several lines counts) with the parametrize
    values and module constants substituted, and the earlier statements of
    the test it depends on; fixtures, test helpers and `self` make it not
    standalone. What went wrong comes from pytest's report: the values of a
    failed `==`, `is`, or truth assertion, the exception raised, or a
    `pytest.raises` that saw nothing raised."""
    parts = id_parts(test_id)
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
    imports, module_values = module_scope(tree)
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
    subst = substitutions(func, module_values, imports, idpart, test_source)
    if isinstance(subst, str):
        return subst
    found = _failing_statement(func, lineno)
    if isinstance(found, str):
        return found
    stmt, raises, prior = found
    stmt = Substitute(subst).visit(copy.deepcopy(stmt))
    prior = [Substitute(subst).visit(copy.deepcopy(s)) for s in prior]
    stmt = from_unittest(stmt)
    prior = [from_unittest(x) for x in prior]
    err = _error_line(tail)
    assertion = err.startswith(("AssertionError", "assert "))
    expected_node: ast.expr | None = None
    subject: ast.expr
    kind = "value"  # value (==, is), truth, falsity
    if isinstance(stmt, ast.Assert):
        test = stmt.test
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Eq, ast.Is)):
            left, right = test.left, test.comparators[0]
            swap = not involves_call_or_local(left, imports, prior) and involves_call_or_local(right, imports, prior)
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
    if needs_fixtures(func, tree, set(subst)):
        return "the test uses fixtures or set-up methods"
    alone = standalone(tree, subject, expected_node, prior, imports)
    if isinstance(alone, str):
        return alone
    setup, helpers, bound = alone
    actual = error = expected = ""
    no_raise = False
    if expected_node is not None and not (names_in(expected_node, ast.Load) & bound):
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
    needed = sorted({imports[u] for node in [subject, *setup] for u in all_loads(node) if u in imports})
    if expected_node is not None:
        needed = sorted(set(needed) | {imports[u] for u in names_in(expected_node, ast.Load) if u in imports})
    local = bound | helpers
    return Repro(
        tuple(needed), call, input_of(subject, setup, imports, local), expected, actual, error, tuple(lines), no_raise
    )


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
