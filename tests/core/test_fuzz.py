"""Fuzzing what reads hostile text: the action parsers of every family and the task-spec loader.

Inputs: arbitrary Unicode (lone surrogates and NULs included), the
characters the grammars care about in every arrangement, deep nesting and
megabytes. Nothing may escape but the documented error types: the code
family's parser raises nothing (an action it cannot read is a ParsedAction
that says why), the SWE and browser parsers raise their ActionError, the
loader raises TaskSpecError, and a parse of up to 1 MiB stays linear (a
regular expression that backtracks would make these examples take hours).
"""

from __future__ import annotations

import json
import string
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandgym.envs.base import DEFAULT_MAX_ACTION_CHARS, action_problem
from sandgym.envs.browser_form.actions import ActionError as BrowserActionError
from sandgym.envs.browser_form.actions import parse_action as parse_browser
from sandgym.envs.code_function.actions import ParsedAction
from sandgym.envs.code_function.actions import parse_action as parse_code
from sandgym.envs.swe_repo.actions import ActionError as SWEActionError
from sandgym.envs.swe_repo.actions import parse_action as parse_swe
from sandgym.specs import TaskSet, TaskSpecError, bundled_task_set, load_yaml_text

ANY_CHAR = st.characters(codec=None, exclude_categories=())  # surrogates and control characters too
ANY_TEXT = st.text(ANY_CHAR, max_size=300)
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
BIG = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def pieces(*extra: str) -> st.SearchStrategy[str]:
    """Text made of the tokens a grammar reacts to, in any order."""
    tokens = ["`", "```", "~~~", "\n", "\r\n", " ", "\t", "\0", "\ud800", "\u2028", "é", "x", "0", *extra]
    return st.lists(st.one_of(st.sampled_from(tokens), ANY_TEXT.map(lambda s: s[:5])), max_size=60).map("".join)


def huge() -> st.SearchStrategy[str]:
    """Up to about a megabyte of one pattern repeated: runs of fences, brackets, quotes, whitespace."""
    units = ["`", "```\n", "```python\n", "(", "[", '"', "\\", " ", "\n", "-", "e1,", "~", "SUBMIT\n", "```python "]
    return st.tuples(st.sampled_from(units), st.integers(1, DEFAULT_MAX_ACTION_CHARS // 4)).map(
        lambda t: (t[0] * t[1])[:DEFAULT_MAX_ACTION_CHARS]
    )


def nested(depth: int) -> list[str]:
    return ["(" * depth + ")" * depth, "[" * depth, "-" * depth + "1", "not " * depth + "x", "a" + ".b" * depth]


# -- the code family (envs/code_function/actions.py) -----------------------------------------------


def check_code(text: str) -> None:
    for multi in (False, True):
        parsed = parse_code(text, "solve", multi)
        assert isinstance(parsed, ParsedAction)
        assert parsed.code is not None or parsed.problem


@FUZZ
@given(st.one_of(ANY_TEXT, pieces("python", "py", "SUBMIT", "def solve(x):\n    return x\n")))
def test_code_parser_takes_any_text(text):
    check_code(text)


@BIG
@given(huge())
def test_code_parser_is_linear_on_a_megabyte(text):
    check_code(text)


@pytest.mark.parametrize("text", nested(100_000))
def test_code_parser_takes_deep_nesting(text):
    check_code(text)
    check_code(f"```python\n{text}\n```")


@FUZZ
@given(st.one_of(ANY_TEXT, st.integers(), st.none(), st.dictionaries(st.text(max_size=5), st.text(max_size=5))))
def test_every_env_checks_the_action_before_parsing_it(action):
    problem = action_problem(action, 100)
    if not isinstance(action, str):
        assert problem is not None and "an action is text" in problem[0] and not problem[1]
    elif len(action) > 100:
        assert problem is not None and problem[1]


# -- the SWE family (envs/swe_repo/actions.py, tested only) --------------------------------------

JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | ANY_TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(ANY_TEXT, inner, max_size=4),
    max_leaves=20,
)
SWE_KEYS = ["tool", "command", "path", "start", "end", "old", "new", "content", "tests", "view_range", "x"]
SWE_TOOLS = ["bash", "view", "str_replace", "create", "run_tests", "submit", "edit", "sh", "", "nope"]


def check_swe(action) -> None:
    try:
        parse_swe(action)
    except SWEActionError:
        pass


@FUZZ
@given(st.one_of(ANY_TEXT, pieces("bash", "view", "create", "str_replace", "=======", "<<<<<<<", "submit", "1-2")))
def test_swe_parser_takes_any_text(text):
    check_swe(text)


@FUZZ
@given(
    st.dictionaries(st.sampled_from(SWE_KEYS), JSONISH, max_size=6).flatmap(
        lambda d: st.sampled_from(SWE_TOOLS).map(lambda tool: {**d, "tool": tool} if "tool" not in d else d)
    )
)
def test_swe_parser_takes_any_mapping(action):
    check_swe(action)


@FUZZ
@given(JSONISH)
def test_swe_parser_takes_any_value(action):
    check_swe(action)


@BIG
@given(huge())
def test_swe_parser_on_a_megabyte(text):
    check_swe(text)


# -- the browser family (envs/browser_form/actions.py) ---------------------------------------------


def check_browser(action) -> None:
    try:
        parse_browser(action)
    except BrowserActionError:
        pass


@FUZZ
@given(st.one_of(ANY_TEXT, pieces("click", "fill", "(", ")", ",", '"', "'", "\\u", "\\", "e12", "button:Go", "done()")))
def test_browser_parser_takes_any_text(text):
    check_browser(text)


@BIG
@given(huge())
def test_browser_parser_on_a_megabyte(text):
    check_browser(text)


def test_browser_parser_takes_what_is_not_text():
    for action in (None, 42, {"click": "e1"}, ["click(e1)"], b"click(e1)"):
        check_browser(action)


# -- the task-spec loader (sandgym/specs/base.py) -------------------------------------------------


@pytest.fixture(scope="module")
def good_set(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("fuzzset") / "ts"
    ts = TaskSet.load(bundled_task_set("code_function"))
    TaskSet(ts.meta, ts.tasks[:2]).write(root)
    return root


def load_with(root: Path, name: str, data: bytes) -> None:
    path = root / name
    old = path.read_bytes() if path.exists() else None
    path.write_bytes(data)
    try:
        TaskSet.load(root)
    except TaskSpecError as e:
        assert str(e).startswith(str(root)), e  # names the file (or the folder)
    finally:
        if old is None:
            path.unlink()
        else:
            path.write_bytes(old)


YAML_TOKENS = ["&a ", "*a", "<<: ", "- ", ": ", "{", "}", "[", "]", "!!python/object ", "!!binary ", "'", '"', "\\x00"]
SPEC_FILES = ["taskset.yaml", "tasks/fuzz.yaml", "hidden/fuzz.yaml"]


@FUZZ
@given(st.sampled_from(SPEC_FILES), st.binary(max_size=300))
def test_loader_takes_any_bytes(good_set, name, data):
    load_with(good_set, name, data)


@FUZZ
@given(st.sampled_from(SPEC_FILES), st.one_of(ANY_TEXT, pieces(*YAML_TOKENS, "id", "family", "name")))
def test_loader_takes_any_text(good_set, name, text):
    load_with(good_set, name, text.encode("utf-8", "surrogatepass"))


@FUZZ
@given(st.sampled_from(SPEC_FILES[1:]), JSONISH)
def test_loader_takes_any_data(good_set, name, data):
    # Every shape of data a file can hold, as YAML and as JSON.
    load_with(good_set, name, yaml.safe_dump(data, allow_unicode=False).encode())
    load_with(good_set, name.replace(".yaml", ".json"), json.dumps(data).encode())


@pytest.mark.parametrize(
    "data",
    [
        b"a: " + b"[" * 100_000 + b"]" * 100_000,
        b"a:\n" + b"".join(b" " * i + b"- \n" for i in range(0, 4000, 2)),
        b"- " * 200_000,
        b"[" + b"1," * 600_000 + b"1]",
        b"x: '" + b"a" * (8 << 20) + b"'\n",
        b"\xef\xbb\xbf" + b"\x00" * 1000,
        b"a: &a [1]\nb: *a\n",
        b"\xff" * 100,
    ],
    ids=["deep-flow", "deep-block", "many-seqs", "many-nodes", "8MiB-string", "bom-nuls", "alias", "not-utf8"],
)
def test_loader_refuses_what_is_too_big_or_deep(good_set, data):
    for name in SPEC_FILES:
        load_with(good_set, name, data)


@FUZZ
@given(pieces(*YAML_TOKENS))
def test_yaml_reader_raises_only_yaml_errors(text):
    try:
        load_yaml_text(text)
    except yaml.YAMLError:
        pass


def test_printable_ascii_keys_are_fine(good_set):
    # The guard is no stricter than it needs to be: ordinary YAML still loads.
    assert load_yaml_text("a: [1, {b: c}]\n" + "".join(f"k{c}: 1\n" for c in string.ascii_letters)) is not None
