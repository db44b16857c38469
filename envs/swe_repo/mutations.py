"""AST mutation operators: the bugs the SWE task factory injects.

Each operator finds nodes in a parsed module and proposes `Mutation`s: a few
text edits on exact source spans (taken from the AST's positions), so a
mutant differs from the original only inside the mutated expression or
statement. Nothing is re-rendered with `ast.unparse`, which would reformat
the whole file and make the patch useless as a task.

Only code inside function bodies is mutated (module-level tables and
constants make poor issues), and never docstrings, annotations, f-strings,
`if TYPE_CHECKING:` or `if __name__ == "__main__":` blocks.

Each mutation says whether it is `typed`: the edited expression keeps its
type (a flipped comparison is still a bool, an off-by-one still an int), so
the mutant fails on wrong values rather than on a TypeError or NameError
nobody would write; and whether its function runs `at_import` (called or
used as a decorator at module or class level), where a bug breaks test
collection instead of a test. The factory tries typed, not-at-import
mutations first.

`style` versions what the operators write, so an older set stays
reproducible from its factory version. Style 2 (sets of factory version 2)
wrote tells no person would: `not (...)` around a condition, `pass` in place
of a dropped statement, `x + 0` from an off-by-one of `x + 1`, `n - 1 + 1`.
Style 3 writes what a person might have: a negated condition is a dropped
`not` or `not name` on a plain name or call (an inverted comparison is
`flip_comparison`'s), a dropped statement is a deleted line (never the only
statement of its block), an off-by-one of `x + 1` is `x`, and a bound that
already ends in a literal is left to `off_by_one`.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field, replace

OPERATORS = (
    "flip_comparison",
    "negate_condition",
    "swap_boolean_operator",
    "swap_arithmetic",
    "off_by_one",
    "shift_bound",
    "change_constant",
    "swap_arguments",
    "drop_statement",
    "return_none",
)

# Comparison operator -> its logical opposite, and the text to find in the source.
_COMPARE_FLIP: dict[type, tuple[str, str]] = {
    ast.Lt: (r"(?<![<>=!])<(?![<=])", ">="),
    ast.LtE: (r"<=", ">"),
    ast.Gt: (r"(?<![<>=!-])>(?![>=])", "<="),
    ast.GtE: (r">=", "<"),
    ast.Eq: (r"==", "!="),
    ast.NotEq: (r"!=", "=="),
    ast.Is: (r"\bis\b(?!\s+not\b)", "is not"),
    ast.IsNot: (r"\bis\s+not\b", "is"),
    ast.In: (r"(?<!not )\bin\b", "not in"),
    ast.NotIn: (r"\bnot\s+in\b", "in"),
}
_ARITH_SWAP: dict[type, tuple[str, str]] = {
    ast.Add: (r"(?<![+*/=])\+(?!=)", "-"),
    ast.Sub: (r"(?<![-*/=])-(?![=>])", "+"),
}
_AUG_SWAP: dict[type, tuple[str, str]] = {ast.Add: (r"\+=", "-="), ast.Sub: (r"-=", "+=")}
_BOOL_SWAP: dict[type, tuple[str, str]] = {ast.And: (r"\band\b", "or"), ast.Or: (r"\bor\b", "and")}
_ATOMIC = (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Constant)
STYLES = (2, 3)
LATEST_STYLE = 3
# Builtins whose two first arguments have different kinds: swapping them is a TypeError.
_TYPED_SIGNATURES = {"isinstance", "issubclass", "getattr", "setattr", "hasattr", "delattr", "map", "filter", "super"}


def _numeric(node: ast.expr) -> bool:
    """An operand that is surely a number: a numeric literal or len(...)."""
    if isinstance(node, ast.UnaryOp):
        node = node.operand
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (int, float)) and not isinstance(node.value, bool)
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "len"


def _same_kind(a: ast.expr, b: ast.expr) -> bool:
    """Two arguments that may stand in for each other: literals of one type, or two names."""
    if isinstance(a, ast.Constant) and isinstance(b, ast.Constant):
        return type(a.value) is type(b.value)
    return isinstance(a, (ast.Name, ast.Attribute)) and isinstance(b, (ast.Name, ast.Attribute))


def _callee(node: ast.Call) -> str:
    f = node.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def import_time_names(tree: ast.Module) -> set[str]:
    """Names of what module and class bodies call or use as decorators:
    functions that run while the module (and the tests) are imported."""
    names: set[str] = set()

    def calls_in(node: ast.AST) -> None:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call):
                name = _callee(sub)
                if name:
                    names.add(name)

    def scan(body: list[ast.stmt]) -> None:
        for stmt in body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for d in stmt.decorator_list:
                    calls_in(d)
                    if isinstance(d, (ast.Name, ast.Attribute)):
                        names.add(d.id if isinstance(d, ast.Name) else d.attr)
                for default in [*stmt.args.defaults, *(d for d in stmt.args.kw_defaults if d is not None)]:
                    calls_in(default)
            elif isinstance(stmt, ast.ClassDef):
                for d in [*stmt.decorator_list, *stmt.bases, *(k.value for k in stmt.keywords)]:
                    calls_in(d)
                scan(stmt.body)
            else:
                calls_in(stmt)

    scan(tree.body)
    return names


@dataclass(frozen=True)
class Edit:
    start: int  # character offsets into the source text
    end: int
    text: str


@dataclass(frozen=True)
class Mutation:
    operator: str
    path: str  # file path relative to the repository root
    lineno: int
    function: str  # qualified name of the enclosing function
    summary: str  # for logs and tags only; never shown to the agent
    edits: tuple[Edit, ...] = field(default_factory=tuple)
    typed: bool = True
    at_import: bool = False

    def apply(self, source: str) -> str:
        out = source
        for e in sorted(self.edits, key=lambda e: e.start, reverse=True):
            out = out[: e.start] + e.text + out[e.end :]
        return out

    @property
    def key(self) -> str:
        return f"{self.path}:{self.lineno}:{self.operator}:{self.summary}"


# The nodes mutations edit: they carry source positions.
_Node = ast.expr | ast.stmt


def _end(node: _Node) -> tuple[int, int]:
    """Where a node ends; ast.parse always sets it (typeshed allows None for hand-made nodes)."""
    assert node.end_lineno is not None and node.end_col_offset is not None
    return node.end_lineno, node.end_col_offset


class Positions:
    """AST positions (1-based lines, UTF-8 byte columns) -> character offsets."""

    def __init__(self, source: str):
        self.source = source
        self.lines = source.splitlines(keepends=True)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))

    def offset(self, lineno: int, col_bytes: int) -> int:
        line = self.lines[lineno - 1] if lineno - 1 < len(self.lines) else ""
        return self.starts[lineno - 1] + len(line.encode("utf-8")[:col_bytes].decode("utf-8", "replace"))

    def span(self, node: _Node) -> tuple[int, int]:
        return (self.offset(node.lineno, node.col_offset), self.offset(*_end(node)))

    def text(self, node: _Node) -> str:
        a, b = self.span(node)
        return self.source[a:b]


def _is_docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


def _skipped_block(node: ast.If) -> bool:
    t = node.test
    if isinstance(t, ast.Name) and t.id == "TYPE_CHECKING":
        return True
    if isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING":
        return True
    return isinstance(t, ast.Compare) and isinstance(t.left, ast.Name) and t.left.id == "__name__"


def _sole_statements(tree: ast.Module) -> set[int]:
    """ids of statements that are the only one of their block (a docstring
    does not count): deleting one would leave an empty block."""
    out: set[int] = set()
    for node in ast.walk(tree):
        for name in ("body", "orelse", "finalbody"):
            block = getattr(node, name, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                real = block[1:] if _is_docstring(block[0]) and len(block) > 1 else block
                if len(real) == 1:
                    out.add(id(real[0]))
    return out


def _zero_terms(tree: ast.Module) -> set[int]:
    """ids of integer literals that are an operand of `+`/`-` (binary or
    unary): an off-by-one that makes one 0 writes `x + 0` or `-0`, which
    nobody writes."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
            out |= {id(x) for x in (node.left, node.right) if isinstance(x, ast.Constant)}
        elif isinstance(node, ast.AugAssign) and isinstance(node.op, (ast.Add, ast.Sub)):
            out.add(id(node.value))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            out.add(id(node.operand))  # `-0`
    return out


class _Finder(ast.NodeVisitor):
    def __init__(self, source: str, path: str, style: int = LATEST_STYLE, tree: ast.Module | None = None):
        self.pos = Positions(source)
        self.path = path
        self.style = style
        self.sole = _sole_statements(tree) if tree is not None and style >= 3 else set()
        self.zero_terms = _zero_terms(tree) if tree is not None and style >= 3 else set()
        self.stack: list[str] = []
        self.returns: list[list[ast.Return]] = []
        self.found: list[Mutation] = []

    # -- helpers -----------------------------------------------------------
    def _add(self, operator: str, node: _Node, summary: str, *edits: Edit, typed: bool = True) -> None:
        if self.stack and edits:
            fn = ".".join(self.stack)
            self.found.append(Mutation(operator, self.path, node.lineno, fn, summary, edits, typed))

    def _gap_edit(self, left: _Node, right: _Node, pattern: str, new: str) -> Edit | None:
        """Replace the one operator token between two operand nodes."""
        a = self.pos.span(left)[1]
        b = self.pos.span(right)[0]
        gap = self.pos.source[a:b]
        if "#" in gap or "\\" in gap:
            return None
        hits = list(re.finditer(pattern, gap))
        if len(hits) != 1:
            return None
        m = hits[0]
        return Edit(a + m.start(), a + m.end(), new)

    # -- scopes --------------------------------------------------------------
    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.stack.append(node.name)
        self.returns.append([])
        body = node.body[1:] if node.body and _is_docstring(node.body[0]) else node.body
        for stmt in body:
            self.visit(stmt)
        rets = [
            r
            for r in self.returns.pop()
            if r.value is not None and not (isinstance(r.value, ast.Constant) and r.value.value is None)
        ]
        if len(rets) >= 2:  # one path of several returns None: a subtle wrong answer
            for r in rets:
                assert r.value is not None  # kept above only with a value
                a, b = self.pos.span(r.value)
                self._add("return_none", r, "return None", Edit(a, b, "None"), typed=False)
        self.stack.pop()

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.stack.append(node.name)
        for stmt in node.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.visit(stmt)
        self.stack.pop()

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self.visit(node.body)

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        return  # positions inside f-strings are unreliable before 3.12

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.visit(node.value)
        self._drop(node)

    def visit_arguments(self, node: ast.arguments) -> None:
        return  # defaults and annotations

    # -- statements ----------------------------------------------------------
    def _drop(self, stmt: ast.stmt, typed: bool = True) -> None:
        a, b = self.pos.span(stmt)
        line_start = self.pos.starts[stmt.lineno - 1]
        line_end = self.pos.starts[_end(stmt)[0]]
        before = self.pos.source[line_start:a]
        after = self.pos.source[b:line_end]
        if before.strip() or (after.strip() and not after.strip().startswith("#")):
            return  # shares its line with other code (`;`, a one-line if)
        if stmt.lineno != stmt.end_lineno:
            return  # a one-line edit reads as a bug; a vanished block reads as a deletion
        if self.style < 3:
            self._add("drop_statement", stmt, f"drop {type(stmt).__name__}", Edit(a, b, "pass"), typed=typed)
        elif id(stmt) not in self.sole:  # the whole line goes; a `pass` in its place is a tell
            self._add(
                "drop_statement", stmt, f"drop {type(stmt).__name__}", Edit(line_start, line_end, ""), typed=typed
            )

    def visit_Assign(self, node: ast.Assign) -> None:
        self.generic_visit(node)
        if not any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            # Dropping `x = ...` mostly leaves `x` unbound (a NameError); an attribute
            # or item store that is skipped reads as a real bug.
            self._drop(node, typed=not any(isinstance(t, ast.Name) for t in node.targets))

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self.generic_visit(node)
        self._drop(node)
        swap = _AUG_SWAP.get(type(node.op))
        if swap:
            e = self._gap_edit(node.target, node.value, *swap)
            if e:
                self._add("swap_arithmetic", node, f"augmented {swap[1]}", e, typed=_numeric(node.value))

    def visit_Expr(self, node: ast.Expr) -> None:
        self.generic_visit(node)
        if isinstance(node.value, ast.Call):
            self._drop(node)

    def visit_Return(self, node: ast.Return) -> None:
        if self.returns:
            self.returns[-1].append(node)
        self.generic_visit(node)

    def visit_If(self, node: ast.If) -> None:
        if _skipped_block(node):
            return
        self._negate(node.test)
        self.generic_visit(node)

    def visit_While(self, node: ast.While) -> None:
        self._negate(node.test)
        self.generic_visit(node)

    def visit_IfExp(self, node: ast.IfExp) -> None:
        self._negate(node.test, whole_test=False)
        self.generic_visit(node)

    def _negate(self, test: ast.expr, whole_test: bool = True) -> None:
        a, b = self.pos.span(test)
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            inner = self.pos.text(test.operand)
            if not whole_test and not isinstance(test.operand, _ATOMIC):
                inner = f"({inner})"
            self._add("negate_condition", test, "drop not", Edit(a, b, inner))
        elif self.style < 3:
            self._add("negate_condition", test, "add not", Edit(a, b, f"not ({self.pos.text(test)})"))
        elif isinstance(test, (ast.Name, ast.Attribute, ast.Call, ast.Subscript)) and "\n" not in self.pos.text(test):
            self._add("negate_condition", test, "add not", Edit(a, b, f"not {self.pos.text(test)}"))

    # -- expressions ---------------------------------------------------------
    def visit_Compare(self, node: ast.Compare) -> None:
        operands = [node.left, *node.comparators]
        for i, op in enumerate(node.ops):
            flip = _COMPARE_FLIP.get(type(op))
            if flip:
                e = self._gap_edit(operands[i], operands[i + 1], *flip)
                if e:
                    self._add("flip_comparison", node, f"{type(op).__name__} -> {flip[1]}", e)
        self.generic_visit(node)

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        swap = _BOOL_SWAP[type(node.op)]
        e = self._gap_edit(node.values[0], node.values[1], *swap)
        if e:
            self._add("swap_boolean_operator", node, f"-> {swap[1]}", e)
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        swap = _ARITH_SWAP.get(type(node.op))
        textual = (ast.JoinedStr, ast.List, ast.Tuple, ast.ListComp)
        is_text = any(
            isinstance(x, textual) or (isinstance(x, ast.Constant) and isinstance(x.value, (str, bytes)))
            for x in (node.left, node.right)
        )
        if swap and not is_text:
            e = self._gap_edit(node.left, node.right, *swap)
            if e:
                typed = _numeric(node.left) or _numeric(node.right)
                self._add("swap_arithmetic", node, f"-> {swap[1]}", e, typed=typed)
        if self.style >= 3 and swap:
            self._drop_unit_term(node)
        self.generic_visit(node)

    def _drop_unit_term(self, node: ast.BinOp) -> None:
        """`x + 1` -> `x` (and `x - 1`): the off-by-one a person writes, where
        making the literal 0 would leave `x + 0`."""
        r = node.right
        if not (isinstance(r, ast.Constant) and r.value == 1 and not isinstance(r.value, bool)):
            return
        a = self.pos.span(node.left)[1]
        b = self.pos.span(r)[1]
        gap = self.pos.source[a : self.pos.span(r)[0]]
        m = re.fullmatch(r"(\)*)(\s*[+-]\s*)", gap)
        if m is None:
            return
        self._add("off_by_one", node, "drop 1", Edit(a + len(m.group(1)), b, ""))

    def visit_Constant(self, node: ast.Constant) -> None:
        a, b = self.pos.span(node)
        v = node.value
        if isinstance(v, bool):
            self._add("change_constant", node, f"{v} -> {not v}", Edit(a, b, str(not v)))
        elif isinstance(v, int) and abs(v) < 10**6 and self.pos.source[a:b].isdigit():
            for new in (v + 1, v - 1):
                if new == 0 and id(node) in self.zero_terms:
                    continue  # `x + 0`: visit_BinOp drops the term instead
                if not (new < 0 and self.pos.source[a - 1 : a] in ("-", "+")):  # no `x - -1`
                    self._add("off_by_one", node, f"{v} -> {new}", Edit(a, b, str(new)))

    def visit_Call(self, node: ast.Call) -> None:
        args = node.args
        if (
            len(args) >= 2
            and not any(isinstance(x, ast.Starred) for x in args[:2])
            and self.pos.text(args[0]) != self.pos.text(args[1])
        ):
            a0, b0 = self.pos.span(args[0])
            a1, b1 = self.pos.span(args[1])
            if b0 <= a1 and args[0].lineno == args[1].end_lineno:
                self._add(
                    "swap_arguments",
                    node,
                    "swap first two arguments",
                    Edit(a0, b0, self.pos.text(args[1])),
                    Edit(a1, b1, self.pos.text(args[0])),
                    typed=_same_kind(args[0], args[1]) and _callee(node) not in _TYPED_SIGNATURES,
                )
        if (
            isinstance(node.func, ast.Name)
            and node.func.id == "range"
            and args
            and not isinstance(args[-1], ast.Starred)
        ):
            self._shift(args[-1])
        self.generic_visit(node)

    def visit_Slice(self, node: ast.Slice) -> None:
        for bound in (node.lower, node.upper):
            if bound is not None:
                self._shift(bound)
        self.generic_visit(node)

    def _shift(self, bound: ast.expr) -> None:
        if isinstance(bound, ast.Constant):
            return  # off_by_one covers literal bounds
        a, b = self.pos.span(bound)
        text = self.pos.text(bound)
        if "\n" in text:
            return
        additive = isinstance(bound, ast.BinOp) and isinstance(bound.op, (ast.Add, ast.Sub))
        if self.style >= 3 and additive:
            assert isinstance(bound, ast.BinOp)
            if isinstance(bound.right, ast.Constant):
                return  # `n - 1 + 1`: off_by_one changes the literal instead
        elif not isinstance(bound, _ATOMIC):
            text = f"({text})"
        for sign in ("+", "-"):
            self._add("shift_bound", bound, f"bound {sign} 1", Edit(a, b, f"{text} {sign} 1"))


def find_mutations(source: str, path: str = "<string>", style: int = LATEST_STYLE) -> list[Mutation]:
    """Every mutation the operators propose for one module, in source order,
    written in `style` (see the module docstring). Each one still parses
    (checked here); a module that does not parse yields none."""
    if style not in STYLES:
        raise ValueError(f"mutation style {style!r}: expected one of {STYLES}")
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    finder = _Finder(source, path, style, tree)
    for stmt in tree.body:
        if isinstance(stmt, ast.If) and _skipped_block(stmt):
            continue
        finder.visit(stmt)
    at_import = import_time_names(tree)
    out = []
    seen = set()
    for m in finder.found:
        if m.function.split(".")[-1] in at_import or m.function.split(".")[0] in at_import:
            m = replace(m, at_import=True)
        if m.key in seen:
            continue
        seen.add(m.key)
        try:
            mutant = m.apply(source)
            compile(mutant, path, "exec", dont_inherit=True)
        except (SyntaxError, ValueError):
            continue
        if mutant != source:
            out.append(m)
    return out
