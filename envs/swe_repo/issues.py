"""Issue texts for factory-made SWE tasks, written from failing tests' output.

No model is involved. Three levels:

- `located` names the package and the function whose behaviour changed,
  lists failing tests, and quotes what pytest said (the assertion or
  exception, expected vs actual, and the test's own lines);
- `symptom` is a standalone reproduction taken from one failing test: the
  imports and the call (the test's failing line with its parameters and
  module constants substituted), the expected and the actual result or
  error; no file, test or location named;
- `minimal` is one sentence: the input, what came back, what was expected.

No level quotes the patch: traceback frames outside test files are dropped,
and any line that contains a line the mutation changed is removed.
"""

from __future__ import annotations

import ast
import builtins
import re
import shlex
from dataclasses import dataclass

MAX_TESTS_SHOWN = 8
MAX_EXCERPTS = 3
MAX_EXCERPT_LINES = 14

_FRAME = re.compile(r"^(?P<path>[^\s:][^:]*\.py):(?P<line>\d+): in (?P<func>\S+)")


def changed_lines(patch: str) -> list[str]:
    """Stripped text of every line a unified diff adds or removes."""
    out = []
    for line in patch.splitlines():
        if line.startswith(("+++", "---")):
            continue
        if line[:1] in "+-" and line[1:].strip():
            out.append(line[1:].strip())
    return out


def _leaks(line: str, secrets: list[str]) -> bool:
    text = line.strip()
    return any(s in text or (len(text) > 3 and text in s) for s in secrets)


def test_excerpt(detail: str, is_test_file, secrets: list[str]) -> list[str]:
    """The lines of a pytest `--tb=short` report worth showing: frames in test
    files with their source line, and the `E` lines (the error itself)."""
    keep: list[str] = []
    in_test_frame = False
    for raw in detail.splitlines():
        m = _FRAME.match(raw)
        if m:
            in_test_frame = bool(is_test_file(m.group("path")))
            if in_test_frame:
                keep.append(raw)
            continue
        if raw.startswith("E "):
            in_test_frame = False
            if raw[1:].strip():
                keep.append(raw)
            continue
        if in_test_frame and raw.startswith("    "):
            keep.append(raw)
    keep = [line for line in keep if not _leaks(line, secrets)]
    return keep[:MAX_EXCERPT_LINES]


def _error_kind(detail: str) -> str:
    for line in detail.splitlines():
        if line.startswith("E "):
            text = line[1:].strip()
            m = re.match(r"([A-Za-z_][\w.]*(Error|Exception|Warning|Exit|Interrupt))\b", text)
            if m:
                return m.group(1)
            if text.startswith("assert"):
                return "AssertionError"
    return "a failure"


def write_issue(
    package: str,
    version: str,
    function: str,
    module_path: str,
    failing: list[str],
    details: dict[str, str],
    patch: str,
    is_test_file,
    total: int | None = None,
    hidden: bool = False,
) -> tuple[str, str]:
    """(title, problem statement) for a task whose FAIL_TO_PASS tests are
    `failing` (or, with `total`, of which `failing` are the ones to show)."""
    secrets = changed_lines(patch)
    kinds = [_error_kind(details.get(t, "")) for t in failing]
    main_kind = max(set(kinds), key=kinds.count) if kinds else "a failure"
    short = function.split(".")[-1]
    n = total or len(failing)
    title = f"{package}: `{short}` misbehaves ({n} failing test{'s' * (n != 1)})"
    lines = [
        f"After installing {package} {version} from source, `{function}` in `{module_path}` "
        f"no longer behaves as its tests expect.",
        "",
        f"Failing tests ({n}), mostly with {main_kind}{'; some of them' if n > len(failing) else ''}:",
        "",
    ]
    lines += [f"- `{t}`" for t in failing[:MAX_TESTS_SHOWN]]
    if len(failing) > MAX_TESTS_SHOWN:
        lines.append(f"- ... and {len(failing) - MAX_TESTS_SHOWN} more")
    shown = 0
    for t in failing:
        excerpt = test_excerpt(details.get(t, ""), is_test_file, secrets)
        if not excerpt:
            continue
        if shown == 0:
            lines += ["", "What pytest reports (expected vs actual):"]
        lines += ["", f"`{t}`:", "", "```", *excerpt, "```"]
        shown += 1
        if shown >= MAX_EXCERPTS:
            break
    if hidden:
        # The tests are out of the agent's checkout: the verifier adds them back.
        lines += ["", "These tests are not in your checkout; they run when your fix is checked."]
    else:
        lines += [
            "",
            "To reproduce:",
            "",
            "```",
            "python -m pytest " + " ".join(shlex.quote(t) for t in failing[:3]),
            "```",
        ]
    lines += ["", "The tests are right; the library code needs fixing."]
    return title, "\n".join(lines) + "\n"


# -- symptom and minimal texts: a reproduction taken from one failing test ------------

ISSUE_LEVELS = ("located", "symptom", "minimal")
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

    def block(self) -> str:
        return "\n".join([*self.imports, "", self.call] if self.imports else [self.call])


def _test_frame(detail: str, test_path: str, func: str) -> tuple[str, int] | None:
    """(source line, line number) pytest showed for the test function's own frame."""
    lines = detail.splitlines()
    found = None
    for i, raw in enumerate(lines):
        m = _FRAME.match(raw)
        if m and m.group("path") == test_path and m.group("func") == func and i + 1 < len(lines):
            nxt = lines[i + 1]
            if nxt.startswith("    ") and nxt.strip():
                found = (nxt.strip(), int(m.group("line")))
    return found


def _raises_around(func: ast.AST, lineno: int) -> str:
    """The exception a `with pytest.raises(X)` block around `lineno` expects, or ""."""
    for node in ast.walk(func):
        if isinstance(node, ast.With) and node.lineno < lineno <= (node.end_lineno or 0):
            for item in node.items:
                call = item.context_expr
                if isinstance(call, ast.Call) and _callee_name(call) == "raises" and call.args:
                    return ast.unparse(call.args[0])
    return ""


def _callee_name(call: ast.Call) -> str:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


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
    return imports, values


def _test_helper(module: str) -> bool:
    parts = module.split(".")
    return parts[0] in ("pytest", "_pytest", "unittest", "hypothesis", "mock", "conftest") or any(
        p in ("test", "tests", "testing", "conftest") or p.startswith("test_") for p in parts
    )


def _param_sources(func: ast.FunctionDef | ast.AsyncFunctionDef, values: dict[str, ast.expr], idpart: str, source: str):
    """{argname: value source} of the parametrize case whose pytest id is `idpart`, or None."""
    decos = [
        d
        for d in func.decorator_list
        if isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute) and d.func.attr == "parametrize"
    ]
    if len(decos) != 1 or len(decos[0].args) < 2 or any(k.arg == "ids" for k in decos[0].keywords):
        return None
    names_node, cases = decos[0].args[0], decos[0].args[1]
    if isinstance(names_node, ast.Constant) and isinstance(names_node.value, str):
        names = [n.strip() for n in names_node.value.split(",") if n.strip()]
    elif isinstance(names_node, (ast.Tuple, ast.List)) and all(
        isinstance(e, ast.Constant) and isinstance(e.value, str) for e in names_node.elts
    ):
        names = [e.value for e in names_node.elts]  # type: ignore[attr-defined]
    else:
        return None
    if isinstance(cases, ast.Name):
        cases = values.get(cases.id)  # type: ignore[assignment]
    if not isinstance(cases, (ast.List, ast.Tuple)):
        return None
    hits = []
    for index, case in enumerate(cases.elts):
        elts = case.elts if len(names) > 1 and isinstance(case, (ast.Tuple, ast.List)) else [case]
        if len(elts) != len(names):
            return None
        ids = []
        for name, e in zip(names, elts, strict=True):
            if (
                isinstance(e, ast.Constant)
                and isinstance(e.value, (str, int, float, bool))
                or (isinstance(e, ast.Constant) and e.value is None)
            ):
                ids.append(str(e.value))
            else:
                ids.append(f"{name}{index}")
        if "-".join(ids) == idpart:
            hits.append({n: ast.get_source_segment(source, e) or "" for n, e in zip(names, elts, strict=True)})
    return hits[0] if len(hits) == 1 and all(hits[0].values()) else None


class _Substitute(ast.NodeTransformer):
    def __init__(self, values: dict[str, ast.expr]):
        self.values = values

    def visit_Name(self, node: ast.Name) -> ast.expr:
        return self.values.get(node.id, node)


def reproduction(test_id: str, detail: str, test_source: str) -> Repro | None:
    """A standalone reproduction from one failing test, or None when the
    failing line needs more than literals, parameters and imported names."""
    path, *scope = test_id.split("::")
    if not scope:
        return None
    func_name, _, idpart = scope[-1].partition("[")
    idpart = idpart[:-1] if idpart.endswith("]") else idpart
    frame = _test_frame(detail, path, func_name)
    if not frame:
        return None
    line, lineno = frame
    try:
        tree = ast.parse(test_source)
        stmt = ast.parse(line).body[0]
    except (SyntaxError, IndexError):
        return None
    imports, module_values = _module_scope(tree)
    func = next(
        (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == func_name),
        None,
    )
    if func is None:
        return None
    subst: dict[str, ast.expr] = {}
    if idpart:
        params = _param_sources(func, module_values, idpart, test_source)
        if params is None:
            return None
        for name, text in params.items():
            try:
                subst[name] = ast.parse(text, mode="eval").body
            except SyntaxError:
                return None
    for name, value in module_values.items():
        if name not in subst and name not in imports:
            try:
                ast.literal_eval(value)
            except (ValueError, SyntaxError, TypeError, RecursionError):
                continue
            subst[name] = value
    stmt = _Substitute(subst).visit(stmt)
    # The library call: the expression that calls an imported name.
    expected_node: ast.expr | None = None
    left: ast.expr | None = None
    if isinstance(stmt, ast.Assert):
        test = stmt.test
        if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
            return None
        left, right = test.left, test.comparators[0]
        call_node, expected_node = (left, right) if _calls_import(left, imports) else (right, left)
    elif isinstance(stmt, (ast.Assign, ast.Expr)):
        call_node = stmt.value
    else:
        return None
    if not isinstance(call_node, ast.Call) or not _calls_import(call_node, imports):
        return None
    nodes = [call_node] + ([expected_node] if expected_node is not None else [])
    used = {n.id for node in nodes for n in ast.walk(node) if isinstance(n, ast.Name)}
    if any(u not in imports and u not in _BUILTINS for u in used):
        return None  # a local of the test: not standalone
    call = ast.unparse(call_node)
    inner = call_node
    while isinstance(inner.func, ast.Name) and inner.func.id in _BUILTINS and len(inner.args) == 1:
        if not isinstance(inner.args[0], ast.Call):
            break
        inner = inner.args[0]  # str(f(x)) -> f(x): the library's own arguments
    args = ", ".join(ast.unparse(a) for a in [*inner.args, *inner.keywords])
    err = _error_line(detail)
    actual = error = expected = ""
    if expected_node is not None and not _calls_import(expected_node, imports):
        expected = ast.unparse(expected_node)
    if err.startswith("AssertionError") or err.startswith("assert "):
        m = re.match(r"(?:AssertionError: )?assert (.+)$", err)
        if not m or expected_node is None:
            return None
        try:
            cmp_node = ast.parse(m.group(1), mode="eval").body
        except SyntaxError:
            return None
        if not (isinstance(cmp_node, ast.Compare) and len(cmp_node.comparators) == 1):
            return None
        got, want = (
            (cmp_node.left, cmp_node.comparators[0]) if call_node is left else (cmp_node.comparators[0], cmp_node.left)
        )
        actual, expected = ast.unparse(got), ast.unparse(want)
    elif re.match(r"[A-Za-z_][\w.]*(Error|Exception|Warning|Timeout)\b", err):
        error = err
        wanted = _raises_around(func, lineno)
        if wanted:
            expected = f"{wanted} to be raised"
    else:
        return None
    if max(len(call), len(expected), len(actual), len(error)) > MAX_VALUE_CHARS or (actual and actual == expected):
        return None
    needed = sorted({imports[u] for u in used if u in imports})
    return Repro(tuple(needed), call, args, expected, actual, error)


def _calls_import(node: ast.expr, imports: dict[str, str]) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            root = sub.func
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in imports:
                return True
    return False


def _outcome(r: Repro) -> str:
    if r.error:
        kind = r.error.split(":", 1)[0].rsplit(".", 1)[-1]
        return f"raises `{kind}`" + (f" (`{r.error}`)" if ":" in r.error else "")
    return f"returns `{r.actual}`"


def _expectation(r: Repro) -> str:
    if r.expected.endswith(" to be raised"):
        return f"`{r.expected.removesuffix(' to be raised')}` to be raised"
    return f"`{r.expected}`"


def write_symptom(package: str, version: str, repros: list[Repro]) -> tuple[str, str]:
    """(title, text): what a user would report: reproductions, expected vs actual."""
    title = f"{package} {version}: wrong result" + (" in several places" if len(repros) > 1 else "")
    lines = [f"I am seeing wrong behaviour from {package} {version} (run from a source checkout).", ""]
    for i, r in enumerate(repros):
        if len(repros) > 1:
            lines += [f"Problem {i + 1}:", ""]
        lines += ["```python", r.block(), "```", ""]
        lines.append(
            f"This {_outcome(r)}" + (f"; I expected {_expectation(r)}." if r.expected else ", which I did not expect.")
        )
        lines.append("")
    lines.append("Other inputs may be affected too; please fix the library, not just these examples.")
    return title, "\n".join(lines) + "\n"


def write_minimal(package: str, version: str, repros: list[Repro]) -> tuple[str, str]:
    """(title, one sentence): the symptom without the call."""
    r = repros[0]
    got = f"raises {r.error.split(':', 1)[0].rsplit('.', 1)[-1]}" if r.error else f"gives `{r.actual}`"
    want = f" instead of {_expectation(r).removesuffix(' to be raised')}" if r.expected else ""
    more = " (and it is not the only input that goes wrong)" if len(repros) > 1 else ""
    return f"{package}: wrong result", f"With {package} {version}, the input `{r.args}` {got}{want}{more}.\n"


def names_any(text: str, words: list[str]) -> list[str]:
    """Which of `words` appear in `text` as whole identifiers."""
    return [w for w in words if re.search(rf"(?<![\w.]){re.escape(w)}(?!\w)", text)]
