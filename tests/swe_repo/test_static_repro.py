"""Reproductions read from a test's source (`static_repro`) where the test is
not a flat list of statements: fixtures, `setUp`, blocks, loops, helpers.
Nothing here runs: the reproductions are only read and compiled."""

from __future__ import annotations

import ast

from sandgym.envs.swe_repo.static_repro import STATIC_SETUP_LINES, static_reproductions

TESTS = (
    """\
import pytest
from mylib import double, halve, load
from helpers import assert_equal


@pytest.fixture
def table():
    rows = [1, 2]
    return [double(r) for r in rows]


@pytest.fixture
def opened(tmp_path):
    path = tmp_path / "t"
    path.write_text("1")
    yield path.open()
    print("closed")


@pytest.fixture(params=["a", "b"])
def kind(request):
    return request.param


class Point:
    def __init__(self, x):
        self.x = x


ORIGIN = Point(double(0))


def test_fixture(table):
    assert halve(table[0]) == 1


def test_nested_fixture(opened):
    assert load(opened) == 1


def test_param_fixture(kind):
    assert double(kind) == kind * 2


def test_monkeypatch(monkeypatch):
    assert double(1) == 2


def test_with():
    with open(__name__) as f:
        got = load(f)
    assert got == 1


def test_try():
    try:
        halve(-1)
    except ValueError as e:
        assert str(e) == "negative"


def test_try_body():
    try:
        x = double(2)
        assert halve(x) == 2
    except ImportError:
        pytest.skip("no lib")


def test_loop():
    for n, want in [(1, 2), (2, 4)]:
        got = double(n)
        assert got == want


def test_loop_raises():
    for n in [-1, -2]:
        with pytest.raises(ValueError):
            halve(n)


def test_helper_assert():
    result = double(2)
    expected = 4
    assert_equal(expected, result)


def test_local_checker():
    def check(n, want):
        assert double(n) == want

    check(1, 2)


def test_definitions():
    assert double(ORIGIN.x) == 0


def test_block_check_before():
    x = double(1)
    for n in [1]:
        if n:
            assert double(n) == 2
    assert halve(x) == 1


def test_long():
    x = double(1)
"""
    + "".join(f"    assert double({i}) == {2 * i}\n" for i in range(40))
    + """    assert halve(x) == 1


class TestCase:
    def setUp(self):
        super().setUp()
        self.lib = load("cfg")
        self.factor = 2

    def check(self, n):
        self.assertEqual(self.lib.double(n), n * self.factor)

    def test_setup(self):
        self.check(3)
        self.assertTrue(self.lib.ok)


class TestClassLevel:
    @classmethod
    def setup_class(cls):
        cls.lib = load("cfg")

    def test_it(self):
        assert self.lib.ok
"""
)

CONFTEST = """\
import pytest
from mylib import load


@pytest.fixture
def db():
    return load("db")
"""


def _one(test: str, limit: int = 5):
    why: list[str] = []
    got = static_reproductions(f"tests/test_lib.py::{test}", TESTS, limit=limit, why=why)
    for r in got:
        ast.parse(r.block())  # each is valid Python
    return got, why


def test_fixtures_are_written_out_as_statements():
    [r], _ = _one("test_fixture")
    assert r.setup == ("rows = [1, 2]", "table = [double(r) for r in rows]") and r.call == "halve(table[0])"
    [r], _ = _one("test_nested_fixture")  # its own fixture first; teardown after the yield left out
    assert r.setup[0] == "tmp_path = pathlib.Path(tempfile.mkdtemp())" and r.setup[-1] == "opened = path.open()"
    assert "import tempfile" in r.imports and not any("closed" in s for s in r.setup)
    got, why = _one("test_param_fixture")
    assert got == [] and "parametrized" in why[-1]
    got, why = _one("test_monkeypatch")
    assert got == [] and "monkeypatch" in why[-1]


def test_a_conftest_fixture_comes_with_its_imports():
    source = "from mylib import double\n\n\ndef test_db(db):\n    assert double(db) == 2\n"
    [r] = static_reproductions("tests/test_x.py::test_db", source, conftests=[CONFTEST])
    assert r.setup == ("db = load('db')",) and "from mylib import load" in r.imports
    assert static_reproductions("tests/test_x.py::test_db", source) == []  # no conftest: no fixture


def test_set_up_methods_become_locals_and_functions():
    got, _ = _one("TestCase::test_setup")
    first = got[0]
    assert first.setup[:2] == ("lib = load('cfg')", "factor = 2")  # super().setUp() left out
    assert first.setup[2].startswith("def check(n):") and "assert lib.double(n) == n * factor" in first.setup[2]
    assert first.call == "check(3)" and "self" not in first.block()
    assert got[1].call == "lib.ok"
    got, why = _one("TestClassLevel::test_it")
    assert got == [] and "class level" in why[-1]


def test_blocks_loops_and_try():
    [r], _ = _one("test_with")  # a block with no check is setup, kept whole
    assert r.setup[0].startswith("with open(__name__) as f:") and r.call == "got"
    [r], _ = _one("test_try")  # an `except` that checks expects the try's last call to raise
    assert r.call == "halve(-1)" and r.expected == "ValueError to be raised"
    [r], _ = _one("test_try_body")  # a check inside `try` reads as if no `try` were there
    assert r.setup == ("x = double(2)",) and r.call == "halve(x)"
    [r], _ = _one("test_loop")  # a loop of several statements: the cases that fail
    assert r.call == "failing" and r.args == ""
    assert r.setup[1] == (
        "for n, want in [(1, 2), (2, 4)]:\n    got = double(n)\n"
        "    if not got == want:\n        failing.append((n, want))"
    )
    [r], _ = _one("test_loop_raises")  # a case that raises nothing fails
    assert "except ValueError:" in r.setup[1] and "else:\n        failing.append(n)" in r.setup[1]


def test_helpers_that_assert_are_checks():
    [r], _ = _one("test_helper_assert")  # assert_equal(expected, result): the library's side is the subject
    assert r.call == "result"
    [r], _ = _one("test_local_checker")
    assert r.call == "check(1, 2)" and r.setup[0].startswith("def check(n, want):")
    [r], _ = _one("test_definitions")  # a module's small class and a value built by a call come along
    assert r.setup[0].startswith("class Point:") and r.setup[1] == "ORIGIN = Point(double(0))"


def test_a_check_inside_an_earlier_block_is_left_out_not_run_before():
    # Kept, it could fail before the check shown: the text would be about another check.
    [r], _ = _one("test_block_check_before")
    assert (r.call, r.setup, r.args) == ("halve(x)", ("x = double(1)",), "")  # the input is a local: no minimal text
    [r], _ = _one("test_fixture")
    assert r.args == ""  # the fixture's calls are no input of the checked call
    [r], _ = _one("test_try")
    assert r.args == "-1"  # the checked call's own argument


def test_a_long_setup_loses_its_earlier_checks():
    got, _ = _one("test_long", limit=200)
    last = got[-1]
    assert last.call == "halve(x)" and last.setup == ("x = double(1)",)
    assert all(len(r.setup) <= STATIC_SETUP_LINES for r in got)
