"""Reproductions run on the buggy and the fixed library (in real sandboxes)
before a symptom or minimal text shows them."""

from __future__ import annotations

from pathlib import Path

from sandgym.envs.swe_repo.repro_check import (
    CHECK_FILE,
    check_module,
    filled,
    outcome_of,
    run_outcomes,
    runnable,
    tells_apart,
)
from sandgym.envs.swe_repo.reproduction import Repro
from sandgym.envs.swe_repo.static_repro import static_reproductions
from sandgym.specs.swe_repo import TestEnvironment as Env

LIB = "def double(x):\n    return x * 2\n\n\ndef name(x):\n    return 'n'\n"
BUGGY = LIB.replace("x * 2", "x * 3")


def _repro(call: str, setup: tuple[str, ...] = ()) -> Repro:
    return Repro(("from mylib import double, name",), call, "", "", "", "", setup)


def _tree(tmp_path: Path) -> Path:
    (tmp_path / "mylib").mkdir()
    (tmp_path / "mylib" / "__init__.py").write_text(LIB)
    return tmp_path


def test_check_module_needs_valid_python_ending_in_a_call():
    assert not runnable(_repro("double("))
    assert not runnable(_repro("x = double(2)"))
    assert runnable(_repro("double(2)"))
    module = check_module([_repro("double(2)"), _repro("name(1)")])
    assert "def test_reproduction0" in module and "def test_reproduction1" in module
    compile(module, "check", "exec")
    assert outcome_of("E   AssertionError: SANDGYM-REPRO returned 4 SANDGYM-MESSAGE \nmore") == ("returned 4", "")
    assert outcome_of("E   AssertionError: SANDGYM-REPRO raised KeyError SANDGYM-MESSAGE 'k'") == (
        "raised KeyError",
        "'k'",
    )
    assert outcome_of("nothing here") is None


def test_a_reproduction_is_kept_only_if_it_tells_buggy_from_fixed(tmp_path, runtime):
    tree = _tree(tmp_path)
    env = Env()
    mutated = {"mylib/__init__.py": BUGGY}
    ok, why = tells_apart(_repro("double(2)"), tree, mutated, env, runtime)
    assert ok, why
    assert "returned 6" in why and "returned 4" in why
    # The same outcome either way (the bug is elsewhere): not shown.
    ok, why = tells_apart(_repro("name(2)"), tree, mutated, env, runtime)
    assert not ok and "same outcome" in why
    # An exception is an outcome too.
    ok, why = tells_apart(_repro("double(y)", ("y = None",)), tree, mutated, env, runtime)
    assert not ok and "raised TypeError" in why
    ok, why = tells_apart(_repro("double("), tree, mutated, env, runtime)
    assert not ok and "not valid Python" in why
    # The tree is left as it was: fixed library, no check module.
    assert (tree / "mylib" / "__init__.py").read_text() == LIB
    assert not (tree / CHECK_FILE).exists()


TESTS = """\
import pytest
from mylib import double, halve

LIMIT = 4


def test_plain():
    x = double(2)
    assert x == LIMIT
    assert halve(x) == 2


def test_raises():
    with pytest.raises(ValueError):
        halve(-1)


SE = pytest.raises(ValueError)


def test_raises_by_name():
    with SE:
        halve(-2)


@pytest.mark.parametrize("n", [1, 2])
def test_table(n):
    assert double(n) == 2 * n


def test_fixture(monkeypatch):
    assert double(1) == 2


def test_file(tmp_path):
    (tmp_path / "n").write_text("2")
    assert double(int((tmp_path / "n").read_text())) == 4


def test_loop():
    for n in range(3):
        assert double(n) == 2 * n
    assert double(5) == 10


def test_branch():
    if LIMIT:
        assert double(1) == 2


class TestBase:
    factor = 2

    def test_scaled(self):
        assert double(3) == self.factor * 3


class TestMore(TestBase):
    factor = 3
"""


def test_reproductions_read_from_a_tests_source():
    got = static_reproductions("tests/test_lib.py::test_plain", TESTS)
    assert [r.call for r in got] == ["x", "halve(x)", "halve(x)"]
    assert got[0].setup == ("x = double(2)",) and got[0].imports == ("from mylib import double",)
    assert got[1].setup == ("x = double(2)",)  # the earlier check left out first, then kept
    assert got[2].setup == ("x = double(2)", "assert x == 4")  # the constant substituted
    [raises] = static_reproductions("tests/test_lib.py::test_raises", TESTS)
    assert raises.call == "halve(-1)" and raises.expected == "ValueError to be raised" and raises.args == "-1"
    [named] = static_reproductions("tests/test_lib.py::test_raises_by_name", TESTS)
    assert named.call == "halve(-2)" and named.expected == "ValueError to be raised"
    [case] = static_reproductions("tests/test_lib.py::test_table[2]", TESTS)
    assert case.call == "double(2)" and case.args == "2"
    # A fixture defined nowhere here makes a test not standalone.
    assert static_reproductions("tests/test_lib.py::test_fixture", TESTS) == []
    [made] = static_reproductions("tests/test_lib.py::test_file", TESTS)  # tmp_path is made by hand
    assert made.setup[0] == "tmp_path = pathlib.Path(tempfile.mkdtemp())" and "import tempfile" in made.imports
    # A loop of one assertion reads as the cases that fail it (none on the fixed library).
    loop, after = static_reproductions("tests/test_lib.py::test_loop", TESTS)
    assert loop.call == "[n for n in range(3) if not double(n) == 2 * n]" and loop.args == ""
    assert after.call == "double(5)" and after.setup == ()  # the loop's checks: not a setup of this one
    [branch] = static_reproductions("tests/test_lib.py::test_branch", TESTS)  # kept in its block
    assert (branch.call, branch.setup) == ("result", ("if 4:\n    result = double(1)",))
    # A class attribute read through `self` is the value the test's class (or its base) sets.
    [base] = static_reproductions("tests/test_lib.py::TestBase::test_scaled", TESTS)
    [more] = static_reproductions("tests/test_lib.py::TestMore::test_scaled", TESTS)
    assert (base.call, base.expected, more.call) == ("double(3)", "", "double(3)")
    assert static_reproductions("tests/test_lib.py::test_missing", TESTS) == []


STAR = """\
from mylib.decorators import *


def test_decorated():
    @decorator
    def add(call, n=1):
        return call() + n

    def ten():
        return 10

    assert add(ten)() == 11
"""


def test_a_star_import_and_the_tests_own_definitions_come_along():
    [r] = static_reproductions("tests/test_d.py::test_decorated", STAR)
    assert r.imports == ("from mylib.decorators import *",) and r.call == "add(ten)()"
    assert r.setup[0].startswith("@decorator\ndef add(call, n=1):") and r.setup[1].startswith("def ten():")
    compile(r.block(), "repro", "exec")


def test_outcomes_fill_a_read_reproduction_or_drop_it():
    r = _repro("double(2)")
    got = filled(r, ("returned 6", ""), ("returned 4", ""))
    assert got is not None and (got.actual, got.expected, got.error) == ("6", "4", "")
    got = filled(r, ("raised ImportError", "cannot import name 'x' (/workspace/repo/mylib.py)"), ("returned 4", ""))
    assert got is not None and got.error == "ImportError" and got.expected == "4"  # no path shown
    got = filled(r, ("raised KeyError", "'k'"), ("returned 4", ""))
    assert got is not None and got.error == "KeyError: 'k'"
    assert filled(r, ("returned 4", ""), ("returned 4", "")) is None  # tells nothing apart
    got = filled(r, ("raised KeyError", "'k'"), ("returned " + "x" * 400, ""))
    assert got is not None and got.expected == ""  # a value too long to show: no expectation
    assert filled(r, ("returned " + "y" * 400, ""), ("returned 4", "")) is None
    assert filled(r, ("returned 4", ""), ("raised KeyError", "")) is None  # the fix raises: not this line
    assert filled(r, None, ("returned 4", "")) is None
    assert filled(r, ("timed out", ""), ("returned 4", "")) is None  # a hang: no outcome to show
    got = filled(r, ("raised KeyError", "'a'"), ("raised KeyError", "'b'"))  # the message is what the fix changed
    assert got is not None and (got.error, got.expected) == ("KeyError: 'a'", "KeyError: 'b'")
    assert filled(r, ("raised KeyError", "'a'"), ("raised KeyError", "'a'")) is None
    # An assertion of the setup failed first: the text would be about another line than the one it shows.
    checked = _repro("double(2)", ("x = double(1)", "assert x == 2"))
    assert filled(checked, ("raised AssertionError", ""), ("returned 4", "")) is None
    helper = _repro("double(2)", ("def check(n):\n    assert double(n) == 2 * n\n", "check(1)"))
    assert filled(helper, ("raised AssertionError", ""), ("returned 4", "")) is None
    own = _repro("check(1)", ("def check(n):\n    assert double(n) == 2 * n\n",))  # the line shown asserts: kept
    assert filled(own, ("raised AssertionError", ""), ("returned None", "")) is not None
    raising = Repro(r.imports, "double(2)", "2", "ValueError to be raised", "", "", ())
    got = filled(raising, ("returned 4", ""), ("raised ValueError", ""))
    assert got is not None and got.no_raise and got.expected == "ValueError to be raised"
    assert filled(raising, ("returned 4", ""), ("returned 5", "")) is None


def test_many_reproductions_run_in_one_sandbox_per_side(tmp_path, runtime):
    tree = _tree(tmp_path)
    mutated = {"mylib/__init__.py": BUGGY}
    repros = [_repro("double(2)"), _repro("name(2)"), _repro("double(y)", ("y = {}",))]
    repros.append(_repro("double(random.random())", ("import random",)))
    repros.append(_repro("time.sleep(60)", ("import time",)))  # stopped after HANG_S, the others still run
    outcomes = run_outcomes(repros, tree, mutated, Env(), runtime, fixed_twice=True)
    assert outcomes[0] == (("returned 6", ""), ("returned 4", ""))
    assert outcomes[1] == (("returned 'n'", ""), ("returned 'n'", ""))
    buggy, fixed = outcomes[2]
    assert buggy is not None and buggy[0] == "raised TypeError" and "dict" in buggy[1]
    assert outcomes[3][1] is None  # the fixed library gave two answers: it tells nothing
    assert outcomes[4] == (("timed out", ""), ("timed out", ""))
    assert (tree / "mylib" / "__init__.py").read_text() == LIB and not (tree / CHECK_FILE).exists()
