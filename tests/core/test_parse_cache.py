"""The parse cache (sandgym/specs/parse_cache.py): a large task set loaded
again is read from its cached parse, gives the same tasks and hash, and
every change of a file's bytes is seen; what the cache cannot hold exactly,
or a cache that is damaged or not the user's own, changes nothing."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sandgym.specs import TaskSet, bundled_task_set, parse_cache, yaml_text


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv(parse_cache.CACHE_ENV, str(folder))
    return folder


@pytest.fixture
def big_set(tmp_path, monkeypatch) -> Path:
    """A code-function set of MIN_FILES files or more (the bundled one, 39 tasks, written out)."""
    ts = uncached(bundled_task_set("code_function"), monkeypatch)
    assert 2 * len(ts) + 1 >= parse_cache.MIN_FILES
    return ts.write(tmp_path / "big")


def no_parsing(monkeypatch) -> None:
    def refuse(text: str) -> None:
        raise AssertionError("a file was parsed that the cache holds")

    monkeypatch.setattr(yaml_text, "load_yaml_text", refuse)


def uncached(folder: Path, monkeypatch) -> TaskSet:
    with monkeypatch.context() as m:
        m.setenv(parse_cache.CACHE_ENV, "off")
        return TaskSet.load(folder)


def test_a_large_set_loaded_again_is_not_parsed_and_is_the_same(cache, big_set, monkeypatch):
    first = TaskSet.load(big_set)
    files = list(cache.glob("*.json"))
    assert len(files) == 1 and files[0].stat().st_mode & 0o777 == 0o600
    assert cache.stat().st_mode & 0o777 == 0o700
    no_parsing(monkeypatch)
    again = TaskSet.load(big_set)
    assert again.hash == first.hash
    assert [(t.visible, t.hidden) for t in again.tasks] == [(t.visible, t.hidden) for t in first.tasks]
    assert TaskSet.load_meta(big_set) == first.meta


def test_a_cached_load_does_not_import_the_yaml_parser(cache, big_set):
    code = "import sys; from sandgym.specs import TaskSet; TaskSet.load(sys.argv[1]); print('yaml' in sys.modules)"
    env = {**os.environ, parse_cache.CACHE_ENV: str(cache)}
    runs = [
        subprocess.run([sys.executable, "-c", code, str(big_set)], capture_output=True, text=True, env=env, check=True)
        for _ in range(2)
    ]
    assert [r.stdout.strip() for r in runs] == ["True", "False"]


def test_a_changed_file_is_parsed_again(cache, big_set, monkeypatch):
    first = TaskSet.load(big_set)
    path = sorted((big_set / "tasks").iterdir())[0]
    before = path.stat()
    text = path.read_text()
    assert "Write a Python function" in text
    # Same size and timestamp as before: only the bytes decide.
    path.write_text(text.replace("Write a Python function", "Write a python function", 1))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_size == before.st_size
    changed = TaskSet.load(big_set)
    assert any("Write a python function" in t.visible.model_dump()["prompt"] for t in changed.tasks)
    assert changed.hash != first.hash
    assert changed.hash == uncached(big_set, monkeypatch).hash


@pytest.mark.parametrize(
    "data",
    [{"day": datetime.date(2020, 1, 2)}, {1: "a"}, {"x": float("nan")}, {"b": b"\x00"}, {"s": {1, 2}}],
    ids=["date", "int-key", "nan", "binary", "set"],
)
def test_what_json_cannot_give_back_exactly_is_not_kept(cache, data, monkeypatch):
    # The spec models refuse such values in task files today; the cache
    # does not rely on it.
    monkeypatch.setattr(parse_cache, "MIN_FILES", 1)
    cache.mkdir(mode=0o700)
    keep = parse_cache.ParseCache(cache / "x.json")
    plain = {"a": [1, 2.5, None, True, "t"]}
    keep.put(b"raw", data)
    keep.put(b"plain", plain)
    keep.save()
    read = parse_cache.ParseCache(cache / "x.json")
    assert read.get(b"raw") is None and read.get(b"plain") == plain


@pytest.mark.parametrize(
    "damage",
    [
        b"not json {",
        b'{"format": 999, "files": {}}',
        b"[" * 100_000 + b"]" * 100_000,
        b'{"format": 1, "files": []}',
    ],
    ids=["garbage", "other-format", "deep", "wrong-shape"],
)
def test_a_damaged_cache_counts_as_empty(cache, big_set, monkeypatch, damage):
    first = TaskSet.load(big_set)
    cache_file = next(cache.glob("*.json"))
    cache_file.write_bytes(damage)
    again = TaskSet.load(big_set)
    assert again.hash == first.hash
    assert json.loads(cache_file.read_text())["format"] == parse_cache.FORMAT  # written whole again


def test_a_cache_folder_others_may_write_is_not_used(cache, big_set, monkeypatch):
    cache.mkdir(mode=0o700)
    os.chmod(cache, 0o777)
    TaskSet.load(big_set)
    assert list(cache.iterdir()) == []


def test_off_writes_nothing_and_a_small_set_is_not_kept(cache, big_set, tmp_path, monkeypatch):
    monkeypatch.setenv(parse_cache.CACHE_ENV, "off")
    TaskSet.load(big_set)
    assert not cache.exists()
    monkeypatch.setenv(parse_cache.CACHE_ENV, str(cache))
    ts = TaskSet.load(big_set)
    small = TaskSet(ts.meta, ts.tasks[:3]).write(tmp_path / "small")
    TaskSet.load(small)
    assert len(list(cache.glob("*.json"))) == 1


def test_the_least_recently_loaded_sets_go_first(cache, big_set, tmp_path, monkeypatch):
    monkeypatch.setattr(parse_cache, "MAX_SETS", 2)
    ts = TaskSet.load(big_set)
    copies = [ts.write(tmp_path / f"copy{i}") for i in range(2)]
    names = {p: parse_cache.ParseCache.of(p).path.name for p in (big_set, *copies)}  # type: ignore[union-attr]
    os.utime(cache / names[big_set], ns=(10**9, 10**9))  # loaded long ago
    for p in copies:
        TaskSet.load(p)
    assert {f.name for f in cache.glob("*.json")} == {names[p] for p in copies}
