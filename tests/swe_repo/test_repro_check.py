"""Reproductions run on the buggy and the fixed library (in real sandboxes)
before a symptom or minimal text shows them."""

from __future__ import annotations

from pathlib import Path

from sandgym.envs.swe_repo.repro_check import CHECK_FILE, check_module, outcome_of, tells_apart
from sandgym.envs.swe_repo.reproduction import Repro
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
    assert check_module(_repro("double(")) is None
    assert check_module(_repro("x = double(2)")) is None
    module = check_module(_repro("double(2)"))
    assert module is not None and "def test_reproduction" in module
    assert outcome_of("E   AssertionError: SANDGYM-REPRO returned 4\nmore") == "returned 4"
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
