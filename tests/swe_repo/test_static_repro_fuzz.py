"""Hostile test sources against the static reproduction code: whatever a test
file holds, reading it runs none of it on the host and ends in a list of
reproductions or a reason, never an exception."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sandgym.envs.swe_repo.static_repro import static_reproductions

# Every place a test file can hold code that would run if anything executed it.
SENTINEL = "open({path!r}, 'w').write('ran')"
HOSTILE = """\
import pytest
from mylib import double
{run}


@pytest.fixture
def made():
    {run}
    return double(1)


@pytest.fixture(autouse=True)
def every():
    {run}
    yield


def helper(n):
    {run}
    assert double(n) == 2 * n


class Base:
    value = {run}

    def setUp(self):
        {run}
        self.x = double(2)

    def check(self, n):
        {run}
        self.assertEqual(double(n), 2 * n)


class TestIt(Base):
    def test_it(self):
        self.check(self.x)
        with open(__file__) as f:
            {run}
            assert double(self.x) == 8
        for i in [{run}]:
            assert double(i) == i


@pytest.mark.parametrize("n", [{run}, 2])
def test_param(n, made):
    helper(n)
    try:
        {run}
    except Exception:
        assert double(made) == 2
    if {run}:
        assert double(n) == 4
"""
IDS = [
    "tests/test_h.py::TestIt::test_it",
    "tests/test_h.py::Base::test_it",
    "tests/test_h.py::test_param[2]",
    "tests/test_h.py::test_param[n0]",
    "tests/test_h.py::test_param",
    "tests/test_h.py::test_missing[",
    "tests/test_h.py",
    "::::",
    "",
]


def _read(test_id: str, source: str, conftests: list[str] | None = None) -> None:
    why: list[str] = []
    got = static_reproductions(test_id, source, limit=50, why=why, conftests=conftests)
    assert got or why, (test_id, source[:200])  # nothing found says why
    for r in got:
        compile(r.block(), "reproduction", "exec")  # only compiled, never run


def test_code_in_every_place_a_test_file_holds_is_read_not_run(tmp_path: Path):
    path = tmp_path / "ran"
    source = HOSTILE.format(run=SENTINEL.format(path=str(path)))
    for test_id in IDS:
        _read(test_id, source, conftests=[source])
    assert not path.exists()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cut=st.integers(0, len(HOSTILE)), length=st.integers(0, 200), junk=st.text(max_size=40), which=st.sampled_from(IDS)
)
# Found by this test: a test body left with a bare comparison and no check
# gave no reason; a helper left with `*n` alone gave a reproduction that
# does not compile.
@example(cut=426, length=150, junk="", which="tests/test_h.py::TestIt::test_it")
@example(cut=185, length=22, junk="", which="tests/test_h.py::test_param[2]")
def test_a_cut_or_garbled_test_file_gives_a_reason(cut, length, junk, which):
    source = HOSTILE.format(run="1")
    _read(which, source[:cut] + junk + source[cut + length :])


@settings(max_examples=100, deadline=None)
@given(source=st.text(max_size=400), which=st.sampled_from(IDS))
def test_any_text_gives_a_reason(source, which):
    _read(which, source)


def test_deep_nesting_and_huge_sources_give_a_reason():
    deep = "def test_deep():\n    assert " + "(" * 5000 + "1" + ")" * 5000 + "\n"
    _read("tests/t.py::test_deep", deep)
    lists = "def test_deep():\n    x = " + "[" * 150 + "]" * 150 + "\n    assert double(x) == 1\n"
    _read("tests/t.py::test_deep", "from mylib import double\n" + lists)
    many = "from mylib import double\n\n\ndef test_many():\n" + "".join(
        f"    assert double({i}) == {2 * i}\n" for i in range(3000)
    )
    _read("tests/t.py::test_many", many)
    recursive = "import pytest\n\n\n@pytest.fixture\ndef a(b):\n    return b\n\n\n@pytest.fixture\ndef b(a):\n"
    recursive += "    return a\n\n\ndef test_loop(a):\n    assert a == 1\n"
    _read("tests/t.py::test_loop", recursive)
