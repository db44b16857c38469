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
from pathlib import Path

from sandgym.envs.swe_repo.reproduction import Repro

CHECK_FILE = "test_sandgym_reproduction_check.py"
MARK = "SANDGYM-REPRO "

_TEMPLATE = """\
import ast as _ast
import re as _re

SOURCE = {source!r}


def test_reproduction():
    tree = _ast.parse(SOURCE)
    last = tree.body.pop()
    ns = {{"__name__": "reproduction"}}
    try:
        exec(compile(tree, "<reproduction>", "exec"), ns)
        value = eval(compile(_ast.Expression(last.value), "<reproduction>", "eval"), ns)
        outcome = "returned " + repr(value)
    except BaseException as e:  # noqa: BLE001 - the outcome is what is compared
        outcome = "raised " + type(e).__name__
    outcome = _re.sub(r" at 0x[0-9a-fA-F]+", "", outcome).replace("\\n", " ")[:400]
    assert False, {mark!r} + outcome
"""


def check_module(r: Repro) -> str | None:
    """The test module that records `r`'s outcome, or None when the
    reproduction is not valid Python ending in an expression."""
    source = r.block()
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    if not tree.body or not isinstance(tree.body[-1], ast.Expr):
        return None
    return _TEMPLATE.format(source=source, mark=MARK)


def outcome_of(detail: str) -> str | None:
    """The recorded outcome in the runner's report of the check test."""
    found = re.findall(re.escape(MARK) + r"(.*)", detail)
    return found[-1].strip() if found else None


def tells_apart(
    r: Repro, tree: Path, mutated: dict[str, str], environment, runtime, timeout_s: float = 120.0
) -> tuple[bool, str]:
    """(does `r` give another outcome on the buggy library (`tree` with the
    `mutated` files in) than on the fixed one (`tree` as it is), why). The
    tree is left as it was found."""
    from sandgym.verifiers.swe_repo.sandbox import run_tests

    module = check_module(r)
    if module is None:
        return False, "not valid Python ending in a call"
    check = tree / CHECK_FILE
    test_id = f"{CHECK_FILE}::test_reproduction"
    originals = {p: (tree / p).read_text(encoding="utf-8") for p in mutated}
    outcomes = {}
    try:
        check.write_text(module, encoding="utf-8")
        for state in ("buggy", "fixed"):
            for p, text in (mutated if state == "buggy" else originals).items():
                (tree / p).write_text(text, encoding="utf-8")
            run = run_tests(runtime, tree, environment, [test_id], timeout_s)
            outcomes[state] = None if run.timed_out else outcome_of(run.details.get(test_id, ""))
    finally:
        for p, text in originals.items():
            (tree / p).write_text(text, encoding="utf-8")
        check.unlink(missing_ok=True)
    buggy, fixed = outcomes["buggy"], outcomes["fixed"]
    if buggy is None or fixed is None:
        return False, f"no outcome recorded (buggy {buggy!r}, fixed {fixed!r})"
    if buggy == fixed:
        return False, f"the same outcome on the buggy and the fixed library: {buggy}"
    return True, f"buggy: {buggy}; fixed: {fixed}"
