"""Run a reproduction on the buggy and the fixed library before a text shows it.

A symptom or minimal text is only as good as its reproduction: one that is
not valid Python, or that gives the same outcome with and without the bug,
sends the agent after nothing. The factory (version 3) runs each candidate
reproduction in a sandbox twice, on the start state and on the pristine
tree, and shows it only if the two outcomes differ.

The reproduction runs as a one-test module written next to the package (the
test runner imports the package as the suite does); the test records the
outcome (the value's repr, or the exception's type) in its failure message,
where the runner's report carries it back.
"""

from __future__ import annotations

import ast
import re
from dataclasses import replace
from pathlib import Path

from sandgym.envs.swe_repo.reproduction import Repro

CHECK_FILE = "test_sandgym_reproduction_check.py"
MARK = "SANDGYM-REPRO "
MESSAGE_MARK = " SANDGYM-MESSAGE "

# A reproduction that hangs is stopped after HANG_S (its outcome "timed out") so
# the others run in the same sandbox give theirs.
HANG_S = 5
_HEAD = f"""\
import ast as _ast
import re as _re
import signal as _signal


class _Hang(BaseException):
    pass


def _stop(signum, frame):
    raise _Hang()


def _outcome(source):
    tree = _ast.parse(source)
    last = tree.body.pop()
    ns = {{"__name__": "reproduction"}}
    message = ""
    _signal.signal(_signal.SIGALRM, _stop)
    _signal.alarm({HANG_S})
    try:
        exec(compile(tree, "<reproduction>", "exec"), ns)
        value = eval(compile(_ast.Expression(last.value), "<reproduction>", "eval"), ns)
        outcome = "returned " + repr(value)
    except _Hang:
        outcome = "timed out"
    except BaseException as e:  # noqa: BLE001 - the outcome is what is compared
        outcome, message = "raised " + type(e).__name__, str(e)
    finally:
        _signal.alarm(0)
    clean = lambda text: _re.sub(r" at 0x[0-9a-fA-F]+", "", text).replace("\\n", " ")[:400]
    return clean(outcome), clean(message)
"""

# One test per reproduction: its outcome, then (after a second mark) the exception's message.
_CASE = """

def test_reproduction{i}():
    outcome, message = _outcome({source!r})
    assert False, {mark!r} + outcome + {sep!r} + message
"""


def runnable(r: Repro) -> bool:
    """Whether the reproduction is valid Python ending in an expression."""
    try:
        tree = ast.parse(r.block())
    except SyntaxError:
        return False
    return bool(tree.body) and isinstance(tree.body[-1], ast.Expr)


def check_module(repros: list[Repro]) -> str:
    """The test module whose test `test_reproduction<i>` records the outcome of `repros[i]` (each runnable)."""
    cases = [_CASE.format(i=i, source=r.block(), mark=MARK, sep=MESSAGE_MARK) for i, r in enumerate(repros)]
    return _HEAD + "".join(cases)


def outcome_of(detail: str) -> tuple[str, str] | None:
    """(outcome, exception message) recorded in the runner's report of a check test."""
    found = re.findall(re.escape(MARK) + r"(.*)", detail)
    if not found:
        return None
    outcome, _, message = found[-1].partition(MESSAGE_MARK)
    return outcome.strip(), message.strip()


def run_outcomes(
    repros: list[Repro],
    tree: Path,
    mutated: dict[str, str],
    environment,
    runtime,
    timeout_s: float = 120.0,
    fixed_twice: bool = False,
) -> list[tuple[tuple[str, str] | None, tuple[str, str] | None]]:
    """Per reproduction (each runnable), its (outcome, message) on the buggy
    library (`tree` with the `mutated` files in) and on the fixed one (`tree`
    as it is), None where none was recorded: one sandbox run per side for all
    of them. With `fixed_twice` the fixed side runs again and an outcome that
    changed between the two runs (time, randomness, a temporary path) is None.
    The tree is left as it was found."""
    from sandgym.verifiers.swe_repo.sandbox import run_tests

    check = tree / CHECK_FILE
    ids = [f"{CHECK_FILE}::test_reproduction{i}" for i in range(len(repros))]
    originals = {p: (tree / p).read_text(encoding="utf-8") for p in mutated}
    seen: dict[str, list[tuple[str, str] | None]] = {}
    try:
        check.write_text(check_module(repros), encoding="utf-8")
        for state in ("buggy", "fixed", "again") if fixed_twice else ("buggy", "fixed"):
            for p, text in (mutated if state == "buggy" else originals).items():
                (tree / p).write_text(text, encoding="utf-8")
            run = run_tests(runtime, tree, environment, ids, max(timeout_s, (HANG_S + 1) * len(ids)))
            seen[state] = [None if run.timed_out else outcome_of(run.details.get(t, "")) for t in ids]
    finally:
        for p, text in originals.items():
            (tree / p).write_text(text, encoding="utf-8")
        check.unlink(missing_ok=True)
    fixed = seen["fixed"]
    if fixed_twice:
        fixed = [a if a == b else None for a, b in zip(fixed, seen["again"], strict=True)]
    return list(zip(seen["buggy"], fixed, strict=True))


def tells_apart(
    r: Repro, tree: Path, mutated: dict[str, str], environment, runtime, timeout_s: float = 120.0
) -> tuple[bool, str]:
    """(does `r` give another outcome on the buggy library (`tree` with the
    `mutated` files in) than on the fixed one (`tree` as it is), why). The
    tree is left as it was found."""
    if not runnable(r):
        return False, "not valid Python ending in a call"
    [(buggy_seen, fixed_seen)] = run_outcomes([r], tree, mutated, environment, runtime, timeout_s)
    buggy, fixed = (x[0] if x else None for x in (buggy_seen, fixed_seen))
    if buggy is None or fixed is None:
        return False, f"no outcome recorded (buggy {buggy!r}, fixed {fixed!r})"
    if buggy == fixed:
        return False, f"the same outcome on the buggy and the fixed library: {buggy}"
    return True, f"buggy: {buggy}; fixed: {fixed}"


def setup_asserts(r: Repro) -> bool:
    """Whether running the reproduction's setup runs an assertion: an `assert`
    outside a definition, or a call of a function of the reproduction that asserts."""
    try:
        tree = ast.parse("\n".join(r.setup))
    except SyntaxError:
        return False
    asserting = {
        f.name
        for f in ast.walk(tree)
        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
        and any(isinstance(n, ast.Assert) for n in ast.walk(f))
    }
    todo: list[ast.AST] = [s for s in tree.body if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Assert):
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in asserting:
            return True
        todo += [c for c in ast.iter_child_nodes(node) if not isinstance(c, (ast.FunctionDef, ast.Lambda))]
    return False


MAX_SHOWN = 300  # characters of a value or message a text shows (the check records 400)


def filled(r: Repro, buggy: tuple[str, str] | None, fixed: tuple[str, str] | None) -> Repro | None:
    """`r` (from `static_repro.static_reproductions`) with what came back on
    the buggy library and what the fixed one gives as the expectation, when
    the two outcomes differ and say something a text can show; else None."""
    if buggy is None or fixed is None or buggy == fixed or "timed out" in (buggy[0], fixed[0]):
        return None  # a hang is no outcome a text can show
    if buggy[0] == "raised AssertionError" and setup_asserts(r):
        return None  # a check of the setup failed first: the text would be about another line
    if buggy[0] == fixed[0]:  # the same exception with another message (the fix is in the message)
        if not buggy[0].startswith("raised ") or any("/" in m or len(m) > MAX_SHOWN for m in (buggy[1], fixed[1])):
            return None
        kind = buggy[0].removeprefix("raised ")
        return replace(r, error=f"{kind}: {buggy[1]}", expected=f"{kind}: {fixed[1]}", actual="")
    raises = r.expected.removesuffix(" to be raised") if r.expected.endswith(" to be raised") else ""
    b_kind, _, b_value = buggy[0].partition(" ")
    f_kind, _, f_value = fixed[0].partition(" ")
    if f_kind == "raised" and not raises:
        return None  # the fixed library raises where the test expects a value: not this statement
    if f_kind == "returned" and raises:
        return None
    expected = r.expected if raises else f_value
    if b_kind == "raised" and (len(expected) > MAX_SHOWN or expected == "None"):
        expected = ""  # "it raises X, which I did not expect": the fix's long value (or None) says no more
    changes: dict[str, object]
    if b_kind == "raised":
        message = buggy[1] if "/" not in buggy[1] and len(buggy[1]) <= MAX_SHOWN else ""  # no paths
        changes = {"error": f"{b_value}: {message}" if message else b_value, "actual": ""}
    elif raises:
        changes = {"no_raise": True, "actual": b_value}
    else:
        changes = {"actual": b_value}
    if max(len(expected), len(b_value)) > MAX_SHOWN or "..." in f"{expected}{b_value}":
        return None
    return replace(r, expected=expected, **changes)  # type: ignore[arg-type]
