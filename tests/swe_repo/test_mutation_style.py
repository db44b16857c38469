"""Mutation style 3 (factory version 3): mutants read like code a person
wrote, with none of style 2's tells; style 2 stays as it was, so the older
sets can be made again."""

from __future__ import annotations

import ast
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandgym.envs.swe_repo.mutations import OPERATORS, find_mutations
from tests.swe_repo.test_factory import SAMPLE, changed

# What no person writes: a new `not (...)`, `pass` before more statements,
# a zero term, a literal shifted back by another literal.
TELLS = {
    "not (...)": re.compile(r"(?<!is )\bnot \("),  # `is not (a + b)` is fine
    "+ 0 / - 0": re.compile(r"[+-] ?0(?![\d.xXoObBeEjJ])"),
    "n - 1 + 1": re.compile(r"[+-] \d+\)? [+-] 1\b"),
}


def _pass_before_statements(source: str) -> bool:
    for node in ast.walk(ast.parse(source)):
        for name in ("body", "orelse", "finalbody"):
            block = getattr(node, name, None)
            if isinstance(block, list) and any(isinstance(s, ast.Pass) for s in block[:-1]):
                return True
    return False


def _new_tells(before: str, after: str) -> list[str]:
    found = [k for k, rx in TELLS.items() if len(rx.findall(after)) > len(rx.findall(before))]
    if _pass_before_statements(after) and not _pass_before_statements(before):
        found.append("pass before statements")
    return found


def _mutants(source: str, style: int) -> list[tuple[str, str]]:
    return [
        (f"{m.operator} {m.summary} line {m.lineno}", m.apply(source)) for m in find_mutations(source, "m.py", style)
    ]


TELLING = """\
def f(xs, n, flag, obj):
    total = 0
    if flag:
        total += n
    for i in range(len(xs) - 1):
        total = total + xs[i] - 1
    obj.count = total
    obj.log(total)
    while obj.ready():
        n -= 1
    return xs[n - 1:] if obj.ok else -1
"""


def test_style_2_still_writes_its_tells():
    """The older sets' mutants are made again unchanged."""
    muts = _mutants(TELLING, 2)
    tells = {t for _, after in muts for t in _new_tells(TELLING, after)}
    assert {"not (...)", "+ 0 / - 0", "pass before statements", "n - 1 + 1"} <= tells


def test_style_3_writes_no_tell():
    muts = _mutants(TELLING, 3)
    assert muts
    for what, after in muts:
        assert _new_tells(TELLING, after) == [], what
    for what, after in _mutants(SAMPLE, 3):
        assert _new_tells(SAMPLE, after) == [], what


def test_style_3_operators_write_what_a_person_might():
    by_op: dict[str, list[str]] = {}
    for m in find_mutations(TELLING, "m.py", style=3):
        by_op.setdefault(m.operator, []).append(m.apply(TELLING))
    assert set(by_op) <= set(OPERATORS)
    negated = [a.splitlines()[2].strip() for a in by_op["negate_condition"]]
    assert "if not flag:" in negated  # `not name`, no parentheses
    # A dropped statement is a deleted line, never `pass`; a sole statement is kept.
    dropped = by_op["drop_statement"]
    assert any("obj.log(total)" not in a and a.count("\n") == TELLING.count("\n") - 1 for a in dropped)
    assert all("pass" not in a for a in dropped)
    assert not any("total += n" not in a for a in dropped)  # the only statement of `if flag:`
    # `x - 1` loses its term instead of becoming `x - 0`.
    assert any("for i in range(len(xs)):" in a for a in by_op["off_by_one"])
    assert any("total = total + xs[i]\n" in a for a in by_op["off_by_one"])


def test_unknown_style_names_the_choices():
    with pytest.raises(ValueError, match="expected one of"):
        find_mutations(TELLING, "m.py", style=7)


_ops = st.sampled_from(["<", "<=", ">", ">=", "==", "!=", "is", "in", "not in"])
_names = st.sampled_from(["a", "b", "xs[0]", "len(xs)", "(a + b)", "f(a, b)", "a - 1", "1 + a"])
_conds = st.sampled_from(["a", "xs[0]", "f(a, b)", "not a", "not f(a)", "a.ok", "a and b", "a < b"])


@settings(max_examples=60, deadline=None)
@given(cmp=_ops, left=_names, right=_names, k=st.integers(1, 3), cond=_conds)
def test_generated_style_3_mutants_parse_change_one_line_and_carry_no_tell(cmp, left, right, k, cond):
    source = (
        f"def g(a, b, xs):\n    y = 0\n    if {cond}:\n        y = len(xs) + {k}\n"
        f"    if {left} {cmp} {right}:\n        return xs[{left} - 1:{k}]\n    return y - {k}\n"
    )
    ast.parse(source)
    for m in find_mutations(source, "m.py", style=3):
        mutant = m.apply(source)
        ast.parse(mutant)
        assert changed(source, mutant) == [m.lineno]
        assert _new_tells(source, mutant) == [], (m, mutant)
