"""Task-spec models and loading (sandgym.specs), and the plain-value codec
that carries arguments and results across the verifier boundary."""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Mapping
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandgym.specs import TaskSet, TaskSetMeta, TaskSpecError, json_schemas
from sandgym.specs.code_function import CodeHidden, CodeTask, CodeTaskPair
from sandgym.verifiers.code_function.boundary import plainvalues

# -- building task sets on disk --------------------------------------------------

META = {"name": "mini", "family": "code_function", "version": 1, "description": "tests"}


def visible(tid: str, entry: str = "add", **extra) -> dict:
    return {
        "id": tid,
        "prompt": f"Write {entry}(a, b) returning a + b.",
        "entry_point": entry,
        "examples": [{"args": [1, 2], "expected": 3}],
        **extra,
    }


def hidden(tid: str, entry: str = "add", **extra) -> dict:
    data = {
        "id": tid,
        "tests": [{"args": [2, 3], "expected": 5}, {"args": [-1, 1], "expected": 0}],
        "reference_solution": f"def {entry}(a, b):\n    return a + b\n",
    }
    data.update(extra)
    return data


def write_yaml(path: Path, data) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def make_set(
    root: Path, tasks: Mapping[str, tuple[dict | None, dict | None]] | None = None, meta: dict | None = None
) -> Path:
    """A task-set folder: `tasks` maps a file slug to (visible, hidden) data
    (a half that is None is left out)."""
    if tasks is None:
        tasks = {"add": (visible("add"), hidden("add")), "plus": (visible("plus", "plus"), hidden("plus", "plus"))}
    write_yaml(root / "taskset.yaml", META if meta is None else meta)
    (root / "tasks").mkdir(parents=True, exist_ok=True)
    (root / "hidden").mkdir(parents=True, exist_ok=True)
    for slug, (vis, hid) in tasks.items():
        if vis is not None:
            write_yaml(root / "tasks" / f"{slug}.yaml", vis)
        if hid is not None:
            write_yaml(root / "hidden" / f"{slug}.yaml", hid)
    return root


def load_error(root: Path) -> str:
    with pytest.raises(TaskSpecError) as e:
        TaskSet.load(root)
    return str(e.value)


# -- a good task set ---------------------------------------------------------------


def test_load_good_set(tmp_path):
    ts = TaskSet.load(make_set(tmp_path / "ts"))
    assert ts.ids == ["add", "plus"]
    assert len(ts) == 2
    assert ts.meta.name == "mini"
    assert ts.root == tmp_path / "ts"
    pair = CodeTaskPair.of(ts.get("plus"))
    assert pair.id == "plus"
    assert pair.visible.entry_point == "plus"
    assert pair.hidden.tests[0].expected == 5
    assert ts.hash.startswith("sha256:") and len(ts.hash) == len("sha256:") + 64


def test_json_and_yml_files_are_read(tmp_path):
    root = make_set(tmp_path / "ts", {"add": (visible("add"), None)})
    (root / "hidden" / "add.json").write_text(json.dumps(hidden("add")))
    (root / "tasks" / "add.yaml").rename(root / "tasks" / "add.yml")
    assert TaskSet.load(root).ids == ["add"]


def test_check_code_alone_is_enough(tmp_path):
    hid = hidden("add", tests=[], check_code="def check(candidate):\n    assert candidate(1, 2) == 3\n")
    del hid["tests"]
    ts = TaskSet.load(make_set(tmp_path / "ts", {"add": (visible("add"), hid)}))
    check_code = CodeTaskPair.of(ts.get("add")).hidden.check_code
    assert check_code is not None and check_code.startswith("def check")


# -- malformed specs: the error names the file and the field -----------------------


def _drop(key):
    def f(d):
        del d[key]

    return f


def _set(key, value):
    def f(d):
        d[key] = value

    return f


VISIBLE_CASES = [
    # Optional for stdio tasks; a function task without one is told it is no identifier.
    ("missing entry_point", _drop("entry_point"), ["`entry_point`", "'' is not a Python identifier"]),
    ("missing prompt", _drop("prompt"), ["`prompt`"]),
    ("empty prompt", _set("prompt", ""), ["`prompt`"]),
    ("bad id", _set("id", "bad id!"), ["`id`", "bad id!"]),
    ("id with leading dot", _set("id", ".hidden"), ["`id`"]),
    ("unknown field", _set("colour", "red"), ["`colour`", "Extra inputs"]),
    ("entry point not an identifier", _set("entry_point", "add-two"), ["`entry_point`", "identifier"]),
    ("entry point a keyword", _set("entry_point", "class"), ["`entry_point`", "identifier"]),
    ("timeout zero", _set("timeout_s", 0), ["`timeout_s`"]),
    ("examples args not a list", _set("examples", [{"args": 5, "expected": 1}]), ["`examples.0.args`"]),
    ("unknown field in an example", _set("examples", [{"args": [], "expect": 1}]), ["`examples.0.expect`"]),
    ("wrong schema version", _set("schema_version", 2), ["`schema_version`"]),
    ("wrong family", _set("family", "swe_repo"), ["`family`"]),
]


@pytest.mark.parametrize("mutate,needles", [c[1:] for c in VISIBLE_CASES], ids=[c[0] for c in VISIBLE_CASES])
def test_malformed_visible_spec_names_file_and_field(tmp_path, mutate, needles):
    vis = visible("add")
    mutate(vis)
    root = make_set(tmp_path / "ts", {"add": (vis, hidden("add"))})
    msg = load_error(root)
    assert str(root / "tasks" / "add.yaml") in msg
    for needle in needles:
        assert needle in msg


HIDDEN_CASES = [
    ("no tests and no check_code", _set("tests", []), ["tests", "check_code"]),
    ("missing reference", _drop("reference_solution"), ["`reference_solution`"]),
    ("unknown field", _set("answer", 3), ["`answer`"]),
    (
        "test case with an unknown field",
        _set("tests", [{"args": [1], "expected": 1, "weight": 2}]),
        ["`tests.0.weight`"],
    ),
]


@pytest.mark.parametrize("mutate,needles", [c[1:] for c in HIDDEN_CASES], ids=[c[0] for c in HIDDEN_CASES])
def test_malformed_hidden_spec_names_file_and_field(tmp_path, mutate, needles):
    hid = hidden("add")
    mutate(hid)
    root = make_set(tmp_path / "ts", {"add": (visible("add"), hid)})
    msg = load_error(root)
    assert str(root / "hidden" / "add.yaml") in msg
    for needle in needles:
        assert needle in msg


@pytest.mark.parametrize("yaml_value", ["2024-01-01", "!!binary aGVsbG8=", "!!set {a, b}"])
def test_non_json_value_in_a_test_case(tmp_path, yaml_value):
    root = make_set(tmp_path / "ts")
    path = root / "hidden" / "add.yaml"
    path.write_text(
        "id: add\n"
        f"tests:\n  - args: [2, 3]\n    expected: {yaml_value}\n"
        "reference_solution: |\n  def add(a, b):\n      return a + b\n"
    )
    msg = load_error(root)
    assert str(path) in msg and "`tests.0.expected`" in msg


def test_yaml_syntax_error_names_file(tmp_path):
    root = make_set(tmp_path / "ts")
    bad = root / "tasks" / "add.yaml"
    bad.write_text("id: add\nprompt: [unclosed\nentry_point: add\n")
    msg = load_error(root)
    assert str(bad) in msg
    assert "not valid YAML" in msg


@pytest.mark.parametrize("text", ["- id: add\n- prompt: x\n", "just a string\n", ""])
def test_spec_file_that_is_not_a_mapping(tmp_path, text):
    root = make_set(tmp_path / "ts")
    bad = root / "hidden" / "plus.yaml"
    bad.write_text(text)
    msg = load_error(root)
    assert str(bad) in msg
    assert "mapping" in msg


def test_visible_task_without_hidden_file(tmp_path):
    root = make_set(tmp_path / "ts", {"add": (visible("add"), hidden("add")), "lonely": (visible("lonely"), None)})
    msg = load_error(root)
    assert str(root / "tasks" / "lonely.yaml") in msg
    assert "'lonely'" in msg and "no hidden spec" in msg


def test_hidden_file_without_visible_task(tmp_path):
    root = make_set(tmp_path / "ts", {"add": (visible("add"), hidden("add")), "ghost": (None, hidden("ghost"))})
    msg = load_error(root)
    assert str(root / "hidden" / "ghost.yaml") in msg
    assert "`id`" in msg and "'ghost'" in msg and "no visible spec" in msg


def test_hidden_and_visible_matched_by_id_not_file_name(tmp_path):
    root = make_set(tmp_path / "ts", {"add": (visible("add"), None)})
    write_yaml(root / "hidden" / "zzz-other-name.yaml", hidden("add"))
    assert TaskSet.load(root).ids == ["add"]


def test_duplicate_visible_ids(tmp_path):
    root = make_set(tmp_path / "ts", {"a": (visible("add"), hidden("add")), "b": (visible("add"), None)})
    msg = load_error(root)
    assert str(root / "tasks" / "b.yaml") in msg  # the second file is the culprit
    assert str(root / "tasks" / "a.yaml") in msg  # and the first is named
    assert "`id`" in msg


def test_duplicate_hidden_ids(tmp_path):
    root = make_set(tmp_path / "ts", {"a": (visible("add"), hidden("add"))})
    write_yaml(root / "hidden" / "b.yaml", hidden("add"))
    msg = load_error(root)
    assert str(root / "hidden" / "b.yaml") in msg
    assert "`id`" in msg


def test_taskset_yaml_missing(tmp_path):
    root = make_set(tmp_path / "ts")
    (root / "taskset.yaml").unlink()
    msg = load_error(root)
    assert str(root / "taskset.yaml") in msg


def test_taskset_yaml_bad_field(tmp_path):
    root = make_set(tmp_path / "ts", meta={**META, "family": "nope"})
    msg = load_error(root)
    assert str(root / "taskset.yaml") in msg and "`family`" in msg


def test_missing_subfolder_and_empty_set(tmp_path):
    assert "not a task-set folder" in load_error(tmp_path / "nowhere")
    root = make_set(tmp_path / "empty", {})
    assert "no tasks" in load_error(root)
    (root / "hidden").rmdir()
    msg = load_error(root)
    assert str(root / "hidden") in msg


def test_task_spec_error_is_a_value_error():
    assert issubclass(TaskSpecError, ValueError)


# -- lookup -------------------------------------------------------------------------


def test_get_unknown_id_lists_choices(tmp_path):
    ts = TaskSet.load(make_set(tmp_path / "ts"))
    with pytest.raises(KeyError) as e:
        ts.get("nope")
    msg = e.value.args[0]
    assert "'nope'" in msg
    assert "choices" in msg and "add" in msg and "plus" in msg


def test_get_unknown_id_in_a_large_set_is_truncated(tmp_path):
    tasks = {f"t{i:02d}": (visible(f"t{i:02d}"), hidden(f"t{i:02d}")) for i in range(12)}
    ts = TaskSet.load(make_set(tmp_path / "ts", tasks))
    with pytest.raises(KeyError) as e:
        ts.get("nope")
    msg = e.value.args[0]
    assert "t00" in msg and "t09" in msg and "t11" not in msg and "..." in msg


# -- content hash ---------------------------------------------------------------------


def test_hash_stable_across_write_and_load(tmp_path):
    ts = TaskSet.load(make_set(tmp_path / "ts"))
    again = TaskSet.load(make_set(tmp_path / "ts2"))
    assert again.hash == ts.hash  # same content, other folder
    ts.write(tmp_path / "copy")
    copy = TaskSet.load(tmp_path / "copy")
    assert copy.hash == ts.hash
    assert copy.ids == ts.ids
    copy.write(tmp_path / "copy2")
    assert TaskSet.load(tmp_path / "copy2").hash == ts.hash


def test_hash_ignores_formatting_and_file_names(tmp_path):
    ts = TaskSet.load(make_set(tmp_path / "ts"))
    root = make_set(tmp_path / "other", {"x1": (visible("add"), None), "x2": (visible("plus", "plus"), None)})
    (root / "hidden" / "h1.json").write_text(json.dumps(hidden("add"), indent=4))
    (root / "hidden" / "h2.yaml").write_text(yaml.safe_dump(hidden("plus", "plus"), default_flow_style=True))
    assert TaskSet.load(root).hash == ts.hash


def test_hash_changes_when_a_hidden_test_changes(tmp_path):
    base = TaskSet.load(make_set(tmp_path / "ts")).hash
    hid = hidden("add")
    hid["tests"][1]["expected"] = 1
    changed = TaskSet.load(
        make_set(
            tmp_path / "ts2", {"add": (visible("add"), hid), "plus": (visible("plus", "plus"), hidden("plus", "plus"))}
        )
    )
    assert changed.hash != base
    hid = hidden("add")
    hid["reference_solution"] += "\n"
    changed2 = TaskSet.load(
        make_set(
            tmp_path / "ts3", {"add": (visible("add"), hid), "plus": (visible("plus", "plus"), hidden("plus", "plus"))}
        )
    )
    assert changed2.hash not in (base, changed.hash)


def test_hash_ignores_cosmetic_meta_and_changes_with_visible(tmp_path):
    base = TaskSet.load(make_set(tmp_path / "ts")).hash
    cosmetic = {**META, "version": 2, "name": "renamed", "description": "other words"}
    assert TaskSet.load(make_set(tmp_path / "a", meta=cosmetic)).hash == base
    tasks = {
        "add": (visible("add", title="Add"), hidden("add")),
        "plus": (visible("plus", "plus"), hidden("plus", "plus")),
    }
    assert TaskSet.load(make_set(tmp_path / "b", tasks)).hash != base


def test_write_keeps_ids_that_slugify_alike(tmp_path):
    tasks = {"one": (visible("a/b"), hidden("a/b")), "two": (visible("a_b"), hidden("a_b"))}
    ts = TaskSet.load(make_set(tmp_path / "ts", tasks))
    assert ts.ids == ["a/b", "a_b"]
    ts.write(tmp_path / "copy")
    copy = TaskSet.load(tmp_path / "copy")
    assert copy.ids == ts.ids and copy.hash == ts.hash


json_leaf = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
json_value = st.recursive(
    json_leaf,
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3),
    max_leaves=8,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    prompt=st.text(min_size=1, max_size=60).filter(lambda s: s.strip()),
    context=st.text(max_size=60),
    args=st.lists(json_value, max_size=3),
    expected=json_value,
)
def test_write_load_round_trip_keeps_content(prompt, context, args, expected):
    vis = CodeTask(
        id="t/1", prompt=prompt, entry_point="f", context_code=context, examples=[{"args": args, "expected": expected}]
    )
    hid = CodeHidden(
        id="t/1",
        tests=[{"args": args, "expected": expected, "name": prompt[:10]}],
        reference_solution="def f(*a):\n    return None\n",
    )
    ts = TaskSet(TaskSetMeta(name="prop", family="code_function"), [CodeTaskPair(visible=vis, hidden=hid)])
    with tempfile.TemporaryDirectory() as d:
        ts.write(d)
        back = TaskSet.load(d)
    assert back.hash == ts.hash
    task = CodeTaskPair.of(back.get("t/1"))
    assert task.visible.prompt == prompt and task.visible.context_code == context


# -- schemas --------------------------------------------------------------------------


def test_json_schemas_cover_every_file_kind():
    schemas = json_schemas()
    assert set(schemas) == {"taskset"} | {
        f"{family}.{half}" for family in ("code_function", "swe_repo", "browser_form") for half in ("task", "hidden")
    }
    for schema in schemas.values():
        json.dumps(schema)  # serialisable
        assert schema["type"] == "object"
        assert schema.get("additionalProperties") is False
    assert "entry_point" in schemas["code_function.task"]["properties"]  # function tasks only
    assert "io_tests" in schemas["code_function.hidden"]["properties"]
    assert "reference_solution" in schemas["code_function.hidden"]["required"]
    assert "check_code" in schemas["code_function.hidden"]["properties"]
    assert "family" in schemas["taskset"]["required"]


# -- plain values across the verifier boundary ------------------------------------------


def canon(x) -> str:
    """A strict, type-exact description: floats by repr (nan, -0.0), sets unordered, dicts ordered."""
    t = type(x)
    if t is float:
        return f"float:{x!r}"
    if t is complex:
        return f"complex:{x.real!r},{x.imag!r}"
    if t in (list, tuple):
        return f"{t.__name__}[{','.join(canon(v) for v in x)}]"
    if t is dict:
        return "dict{" + ",".join(f"{canon(k)}:{canon(v)}" for k, v in x.items()) + "}"
    if t in (set, frozenset):
        return f"{t.__name__}{{" + ",".join(sorted(canon(v) for v in x)) + "}"
    return f"{t.__name__}:{x!r}"


big_ints = st.sampled_from([2**53 - 1, 2**53, -(2**53), -(2**53) + 1, 2**64, -(2**200), 10**400])
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | big_ints
    | st.floats()
    | st.sampled_from([float("nan"), float("inf"), float("-inf"), -0.0, 5e-324])
    | st.text()
    | st.binary()
    | st.complex_numbers()
)
hashables = st.recursive(
    scalars,
    lambda c: st.lists(c, max_size=3).map(tuple) | st.frozensets(c, max_size=3),
    max_leaves=6,
)
plain = st.recursive(
    scalars,
    lambda c: (
        st.lists(c, max_size=4)
        | st.lists(c, max_size=4).map(tuple)
        | st.dictionaries(hashables, c, max_size=4)
        | st.sets(hashables, max_size=4)
        | st.frozensets(hashables, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None)
@given(plain)
def test_plainvalues_round_trip(value):
    wire = json.loads(json.dumps(plainvalues.encode(value)))
    back = plainvalues.decode(wire)
    assert canon(back) == canon(value)
    assert canon(plainvalues.loads(plainvalues.dumps(value))) == canon(value)


@pytest.mark.parametrize(
    "value",
    [
        -0.0,
        float("nan"),
        float("inf"),
        float("-inf"),
        2**53,
        -(2**53),
        10**100,
        0.1,
        1e308,
        5e-324,
        b"\x00\xff",
        (),
        frozenset(),
        {(1, "a"): {2}},
    ],
)
def test_plainvalues_round_trip_examples(value):
    back = plainvalues.loads(plainvalues.dumps(value))
    assert canon(back) == canon(value)
    assert type(back) is type(value)


def test_plainvalues_wire_is_strict_json():
    text = plainvalues.dumps([float("nan"), float("inf"), 2**60])
    assert "NaN" not in text and "Infinity" not in text
    json.loads(text)


class MyInt(int):
    def __eq__(self, other):
        return True

    __hash__ = int.__hash__


class MyStr(str):
    pass


class Custom:
    def __eq__(self, other):
        return True


@pytest.mark.parametrize(
    "value",
    [
        MyInt(3),
        Custom(),
        MyStr("x"),
        [1, MyInt(2)],
        {"k": Custom()},
        {MyStr("k"): 1},
        (1, (2, MyStr("y"))),
        {MyInt(1)},
        len,
        object(),
    ],
)
def test_plainvalues_encode_rejects_non_builtins(value):
    with pytest.raises(plainvalues.NotPlain):
        plainvalues.encode(value)


def test_plainvalues_depth_limit():
    deep: list = []
    for _ in range(plainvalues.MAX_DEPTH + 5):
        deep = [deep]
    with pytest.raises(plainvalues.NotPlain):
        plainvalues.encode(deep)
    ok: list = []
    for _ in range(20):
        ok = [ok]
    assert plainvalues.loads(plainvalues.dumps(ok)) == ok


@pytest.mark.parametrize("wire", [1.5, {"x": 1}, {"i": 5}, {"t": 3}, {"a": 1, "b": 2}, {"d": [[1]]}])
def test_plainvalues_decode_rejects_foreign_json(wire):
    with pytest.raises(plainvalues.NotPlain):
        plainvalues.decode(wire)


@pytest.mark.parametrize(
    "expected,actual,tol,result",
    [
        (True, 1, None, False),
        (1, True, None, False),
        (False, 0, None, False),
        (0.0, False, None, False),
        (True, True, None, True),
        (1, 1.0, None, True),
        (2**60, 2**60, None, True),
        ([1, 2], (1, 2), None, True),
        ((1, [2, 3]), [1, (2, 3)], None, True),
        ([1, 2], [1, 2, 3], None, False),
        ({"a": [1]}, {"a": (1,)}, None, True),
        ({"a": 1}, {"a": 1, "b": 2}, None, False),
        (0.3, 0.1 + 0.2, None, False),
        (0.3, 0.1 + 0.2, 1e-9, True),
        (1.0, 1.1, 1e-9, False),
        (100.0, 100.5, 0.01, True),
        (0.0, 1e-12, 1e-9, True),
        (0.3, 0.1 + 0.2, 0.0, False),
        ([0.3], (0.1 + 0.2,), 1e-9, True),
        (float("nan"), float("nan"), None, True),
        (float("nan"), 1.0, None, False),
        (1.0, float("nan"), 1e-3, False),
        (float("inf"), float("inf"), None, True),
        ("1", 1, None, False),
        (None, None, None, True),
        (None, 0, None, False),
        ({1, 2}, {2, 1}, None, True),
        ({1, 2}, frozenset({1, 2}), None, False),
        (b"a", "a", None, False),
        (1, 1 + 0j, None, True),
        (1j, 1j, None, True),
        ("x", "x", None, True),
    ],
)
def test_plainvalues_same(expected, actual, tol, result):
    assert plainvalues.same(expected, actual, tol) is result


def test_same_nan_inside_containers():
    nan = float("nan")
    assert plainvalues.same([nan, 1], (math.nan, 1))
    assert plainvalues.same({"x": nan}, {"x": float("nan")})


def test_shipped_json_schemas_are_current():
    """task_specs/schema/ is what `sandgym tasks schema --out task_specs/schema` writes."""
    from sandgym.specs import bundled_dir

    for kind, schema in json_schemas().items():
        shipped = json.loads((bundled_dir() / "schema" / f"{kind}.schema.json").read_text())
        assert shipped == schema, f"regenerate with: sandgym tasks schema --out task_specs/schema ({kind})"


def test_bundled_task_set_loads():
    from sandgym.specs import bundled_task_set

    ts = TaskSet.load(bundled_task_set("code_function"))
    assert len(ts) >= 30 and ts.meta.family == "code_function"
    assert all(t.visible.examples and t.hidden.tests for t in map(CodeTaskPair.of, ts.tasks))


def test_a_task_set_is_shared_by_the_envs_made_from_it_not_copied():
    """gymnasium.make deep-copies the env's kwargs into env.spec (at make and
    at every `env.spec`); a loaded task set is read-only, so the copy is the
    set itself (copying HumanEval-164 took tens of ms per env made)."""
    import copy

    import gymnasium

    import sandgym  # noqa: F401  (registers the envs)
    from sandgym.specs import bundled_task_set

    ts = TaskSet.load(bundled_task_set("code_function"))
    assert copy.deepcopy(ts) is ts
    assert copy.deepcopy({"tasks": [ts]})["tasks"][0] is ts
    env = gymnasium.make("sandgym/CodeFunction-v0", tasks=ts, runtime="local")
    try:
        assert getattr(env.unwrapped, "task_set", None) is ts
        assert env.spec is not None and env.spec.kwargs["tasks"] is ts
    finally:
        env.close()
