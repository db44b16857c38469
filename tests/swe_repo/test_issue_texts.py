"""Issue texts of factory tasks: standalone reproductions from real pytest
reports (the verifier's runner in a real sandbox), checked by running each
reproduction against the buggy and the fixed library."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from sandgym.envs.swe_repo.assemble import Dropped, issue_text
from sandgym.envs.swe_repo.issues import names_any, write_minimal, write_symptom
from sandgym.envs.swe_repo.reproduction import Repro, explain_reproduction
from sandgym.specs.swe_repo import TestEnvironment as Environment
from sandgym.verifiers.swe_repo.sandbox import run_tests

FIXED = """\
LIMIT = 10


def double(x):
    return x * 2


def parse_pair(text):
    left, right = text.split("=")
    return {left.strip(): int(right)}


def is_even(n):
    return n % 2 == 0


def checked(n):
    if n < 0:
        raise ValueError("negative")
    return n


class Counter:
    def __init__(self):
        self.seen = []

    def add(self, item):
        self.seen.append(item)
        return len(self.seen)
"""

# One bug per function: the factory's kind of change.
BUGGY = (
    FIXED.replace("return x * 2", "return x * 3")
    .replace("int(right)", "int(right) + 1")
    .replace("return n % 2 == 0", "return n % 2 == 1")
    .replace("if n < 0:", "if n < -1:")
    .replace("return len(self.seen)", "return len(self.seen) - 1")
)

TESTS = """\
import unittest

import pytest

from pkg.core import LIMIT, Counter, checked, double, is_even, parse_pair

TWICE = [(1, 2), (-3, -6)]
WORDS = ["caf\\u00e9", "tea"]


@pytest.mark.parametrize(("x", "y"), TWICE)
def test_double_table(x, y):
    assert double(x) == y


@pytest.mark.parametrize("x, y", [pytest.param(5, 10, id="five"), (LIMIT, 20)])
def test_double_param(x, y):
    assert double(x) == y


@pytest.mark.parametrize("word", WORDS, ids=["accented", "plain"])
def test_double_ids(word):
    assert double(word) == word + word


@pytest.mark.parametrize("word", WORDS)
def test_double_unicode(word):
    assert double(word) == word + word


def test_multiline():
    assert parse_pair(
        "a = 1"
    ) == {"a": 1}


def test_setup_locals():
    counter = Counter()
    first = counter.add("x")
    assert first == 1


def test_truth():
    assert is_even(4)


def test_falsity():
    assert not is_even(3)


def test_did_not_raise():
    with pytest.raises(ValueError):
        checked(-1)


def test_fixture(tmp_path):
    assert double(len(str(tmp_path))) == 2 * len(str(tmp_path))


def test_loop():
    for x in (1, 2):
        assert double(x) == 2 * x


def test_long_value():
    assert double("ab" * 40) == "ab" * 80


def twice_of(n):
    return double(n)


def test_helper():
    assert twice_of(2) == 4


class PairTests(unittest.TestCase):
    def test_pair(self):
        self.assertEqual(parse_pair("b=2"), {"b": 2})

    def test_even(self):
        self.assertTrue(is_even(6))

    def test_checked(self):
        with self.assertRaises(ValueError):
            checked(-1)
"""

# test id -> what the reproduction must say (None: no reproduction).
EXPECT = {
    "tests/test_core.py::test_double_table[1-2]": ("double(1)", "2", "3"),
    "tests/test_core.py::test_double_table[-3--6]": ("double(-3)", "-6", "-9"),
    "tests/test_core.py::test_double_param[five]": ("double(5)", "10", "15"),
    "tests/test_core.py::test_double_param[10-20]": ("double(LIMIT)", "20", "30"),
    "tests/test_core.py::test_double_ids[accented]": ("double('café')", "'cafécafé'", "'cafécafécafé'"),
    "tests/test_core.py::test_double_unicode[caf\\xe9]": ("double('café')", "'cafécafé'", "'cafécafécafé'"),
    "tests/test_core.py::test_multiline": ("parse_pair('a = 1')", "{'a': 1}", "{'a': 2}"),
    "tests/test_core.py::test_setup_locals": ("first", "1", "0"),
    "tests/test_core.py::test_truth": ("is_even(4)", "a true value", "False"),
    "tests/test_core.py::test_falsity": ("is_even(3)", "a false value", "True"),
    "tests/test_core.py::test_did_not_raise": ("checked(-1)", "ValueError to be raised", ""),
    "tests/test_core.py::test_fixture": None,
    "tests/test_core.py::test_loop[]": None,
    "tests/test_core.py::test_long_value": None,
    # the test module's own small function comes along
    "tests/test_core.py::test_helper": ("twice_of(2)", "4", "6"),
    # unittest's assertions and messages
    "tests/test_core.py::PairTests::test_pair": ("parse_pair('b=2')", "{'b': 2}", "{'b': 3}"),
    "tests/test_core.py::PairTests::test_even": ("is_even(6)", "a true value", "False"),
    "tests/test_core.py::PairTests::test_checked": ("checked(-1)", "ValueError to be raised", ""),
}


@pytest.fixture(scope="module")
def reports(runtime, tmp_path_factory):
    """pytest's reports of the buggy package, from the verifier's runner."""
    root = tmp_path_factory.mktemp("repo")
    (root / "pkg").mkdir()
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "core.py").write_text(BUGGY)
    (root / "tests").mkdir()
    (root / "tests" / "test_core.py").write_text(TESTS)
    run = run_tests(runtime, root, Environment(requirements=[], import_root=".", test_args=[]), None, 120)
    return run


def _run_block(repro: Repro, source: str, tmp: Path) -> str:
    """Run the reproduction against `source` as pkg/core.py; print the repr of
    its last expression, or the exception's type."""
    (tmp / "pkg").mkdir(parents=True, exist_ok=True)
    (tmp / "pkg" / "__init__.py").write_text("")
    (tmp / "pkg" / "core.py").write_text(source)
    tree = ast.parse(repro.block())
    last = tree.body.pop()
    assert isinstance(last, ast.Expr)
    body = ast.unparse(tree)
    script = (
        f"import sys\nsys.path.insert(0, '.')\n{body}\n"
        f"try:\n    print(repr({ast.unparse(last.value)}))\nexcept Exception as e:\n    print(type(e).__name__)\n"
    )
    out = subprocess.run([sys.executable, "-I", "-c", script], cwd=tmp, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_reports_give_the_reproductions_they_should(reports, tmp_path):
    failing = sorted(t for t, s in reports.statuses.items() if s == "failed")
    assert set(failing) >= {t for t in EXPECT if not t.endswith("[]")}, failing
    for test_id, want in EXPECT.items():
        test_id = test_id.removesuffix("[]")
        r = explain_reproduction(test_id, reports.details[test_id], TESTS)
        if want is None:
            assert isinstance(r, str), (test_id, r)
            continue
        assert isinstance(r, Repro), (test_id, r)
        assert (r.call, r.expected, r.actual) == want, test_id
        assert "import pytest" not in r.block() and "self" not in r.block()
        # Run for real: the buggy library shows what the text says, the fixed one what was expected.
        got_buggy = _run_block(r, BUGGY, tmp_path / test_id.replace("/", "_").replace(":", "_"))
        got_fixed = _run_block(r, FIXED, tmp_path / (test_id.replace("/", "_").replace(":", "_") + "-fixed"))
        if r.no_raise:
            assert got_buggy != "ValueError" and got_fixed == "ValueError"
        elif r.expected == "a true value":
            assert got_buggy == r.actual and got_fixed == "True"
        elif r.expected == "a false value":
            assert got_buggy == r.actual and got_fixed == "False"
        else:
            assert got_buggy == r.actual
            assert got_fixed == repr(ast.literal_eval(r.expected))


def test_setup_statements_come_along_and_the_input_is_the_literal_call(reports):
    r = explain_reproduction(
        "tests/test_core.py::test_setup_locals", reports.details["tests/test_core.py::test_setup_locals"], TESTS
    )
    assert isinstance(r, Repro)
    assert r.setup == ("counter = Counter()", "first = counter.add('x')")
    assert r.args == ""  # the call's argument is a local: no minimal text
    assert r.imports == ("from pkg.core import Counter",)
    text = write_symptom("pkg", "1.0", [r])[1]
    assert "counter = Counter()" in text and "This returns `0`; I expected `1`." in text


def test_texts_fall_back_and_never_give_the_place_away(reports):
    details = reports.details
    shown = ["tests/test_core.py::test_setup_locals"]
    r = explain_reproduction(shown[0], details[shown[0]], TESTS)
    assert isinstance(r, Repro)
    patch = "--- a/pkg/core.py\n+++ b/pkg/core.py\n-        return len(self.seen) - 1\n+        return len(self.seen)\n"
    repros: list[Repro | None] = [r]
    args = ("pkg", "1.0", ".", [("pkg/core.py", "Counter.add")], shown, repros, details, patch)
    secret = ["test_setup_locals", "tests/test_core.py", "pkg/core.py"]

    def is_test(p):
        return p.startswith("tests/")

    # minimal needs a literal input: written at symptom instead.
    title, text, level = issue_text(*args, is_test, 3, 2, secret, "minimal")
    assert level == "symptom" and "counter.add('x')" in text
    assert not names_any(f"{title}\n{text}", secret)
    # a reproduction that would name a secret: written at located.
    title, text, level = issue_text(*args, is_test, 3, 2, [*secret, "counter"], "symptom")
    assert level == "located" and "`pkg.core.Counter.add` in `pkg/core.py`" in text
    # no reproduction at all: located.
    title, text, level = issue_text(*args[:5], [None], *args[6:], is_test, 3, 2, secret, "symptom")
    assert level == "located"
    # a reproduction that quotes the changed line: located, whose excerpts leave such lines out.
    quoting = patch.replace("return len(self.seen) - 1", "first = counter.add('x')")
    title, text, level = issue_text(*args[:7], quoting, is_test, 3, 2, secret, "symptom")
    assert level == "located" and "first = counter.add('x')" not in text
    # a located text that would still quote it (here the function's name is the changed line) is dropped.
    with pytest.raises(Dropped):
        issue_text(*args[:7], patch.replace("return len(self.seen) - 1", "Counter.add"), is_test, 3, 2, [], "located")


def test_minimal_sentences_say_input_outcome_and_expectation(reports):
    tid = "tests/test_core.py::test_did_not_raise"
    r = explain_reproduction(tid, reports.details[tid], TESTS)
    assert isinstance(r, Repro) and r.no_raise
    assert (
        write_minimal("pkg", "1.0", [r])[1] == "With pkg 1.0, the input `-1` raises nothing instead of `ValueError`.\n"
    )
    assert "This raises nothing; I expected `ValueError` to be raised." in write_symptom("pkg", "1.0", [r])[1]
    tid = "tests/test_core.py::test_truth"
    r = explain_reproduction(tid, reports.details[tid], TESTS)
    assert isinstance(r, Repro)
    assert write_minimal("pkg", "1.0", [r])[1] == "With pkg 1.0, the input `4` gives `False` instead of a true value.\n"
