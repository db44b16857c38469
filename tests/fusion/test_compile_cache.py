"""The `/run_code` compile cache (sandgym/fusion/compile_cache.py): keys,
what an entry holds, eviction; then, on real sandboxes through the real
client, a second request of the same source skips its compile and gets
the same result, a program that rewrites its own binary after the compile
poisons nothing, and requests with `files` are never cached."""

from __future__ import annotations

import base64
import io
import tarfile
from collections.abc import Iterator

import pytest

from sandgym.fusion.api import build_run_code_app
from sandgym.fusion.compile_cache import CompileCache, CompiledEntry, cache_key, produced_files
from sandgym.fusion.languages import LANGUAGES
from sandgym.runtimes import get_runtime

from .sandbox_fusion_client import run_client, serving


def tar_of(files: dict[str, tuple[bytes, int]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, (data, mode) in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_the_key_covers_source_language_and_toolchain():
    cpp, rust = LANGUAGES["cpp"], LANGUAGES["rust"]
    k = cache_key(cpp, "int main() {}", "sandgym/base:polyglot-1")
    assert k == cache_key(cpp, "int main() {}", "sandgym/base:polyglot-1")
    assert k != cache_key(cpp, "int main() { }", "sandgym/base:polyglot-1")
    assert k != cache_key(cpp, "int main() {}", "sandgym/base:polyglot-2")  # another image: other toolchains
    assert k != cache_key(rust, "int main() {}", "sandgym/base:polyglot-1")


def test_an_entry_holds_what_the_compile_added_with_its_modes():
    workspace = tar_of(
        {
            "workspace/main.cpp": (b"src", 0o644),
            "workspace/main": (b"\x7fELF", 0o4755),  # setuid bit: never kept
            "workspace/sub/Helper.class": (b"cafe", 0o644),
        }
    )
    archive = produced_files(workspace, {"main.cpp"})
    assert archive is not None
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        got = {m.name: m.mode for m in tar}
    assert got == {"main": 0o755, "sub/Helper.class": 0o644}


def test_the_least_recently_used_entries_go_first():
    cache = CompileCache(max_bytes=250)
    entry = CompiledEntry(archive=b"x" * 100, stdout="", stderr="", execution_time=1.0)
    cache.put("a", entry)
    cache.put("b", entry)
    assert cache.get("a") is entry  # "b" is now the least recently used
    cache.put("c", entry)
    assert cache.get("b") is None and cache.get("a") is entry and cache.get("c") is entry
    cache.put("huge", CompiledEntry(archive=b"x" * 300, stdout="", stderr="", execution_time=1.0))
    assert cache.get("huge") is None  # over the whole budget: not kept


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, CompileCache]]:
    app = build_run_code_app(get_runtime("local"), concurrency=2)
    with serving(app) as url:
        yield url, app.state.compile_cache


def request(language: str, code: str, **kw) -> dict:
    return {"language": language, "code": code, "compile_timeout": 60.0, "run_timeout": 20.0, **kw}


@pytest.mark.sandbox
@pytest.mark.parametrize("language", ["cpp", "go", "java", "rust", "typescript"])
def test_a_second_request_of_the_same_source_skips_its_compile(served, language):
    url, cache = served
    from sandgym.fusion.samples import SUM_STDIN

    before = cache.hits
    first, second = run_client(url, [request(language, SUM_STDIN[language], stdin="40 2\n")] * 2)
    for r in (first, second):
        assert r["summary"] == "Success" and r["response"]["run_result"]["stdout"].strip() == "42", r
    assert cache.hits == before + 1
    # The compile result is the first compile's, reported again.
    assert second["response"]["compile_result"] == first["response"]["compile_result"]


@pytest.mark.sandbox
def test_a_program_that_rewrites_its_binary_poisons_no_later_request(served):
    url, cache = served
    code = (
        "#include <cstdio>\n#include <sys/stat.h>\nint main() {\n"
        '  std::puts("honest");\n'
        '  std::remove("main");\n'
        '  if (FILE* f = std::fopen("main", "w")) {\n'
        '    std::fputs("#!/bin/sh\\necho poisoned\\n", f);\n'
        "    std::fclose(f);\n"
        '    chmod("main", 0755);\n'
        "  }\n}\n"
    )
    before = cache.hits
    first, second = run_client(url, [request("cpp", code, fetch_files=["main"])] * 2)
    assert first["response"]["run_result"]["stdout"] == "honest\n", first
    # The rewrite happened in the first sandbox...
    assert base64.b64decode(first["response"]["files"]["main"]).startswith(b"#!/bin/sh")
    # ...and the second request still ran the compiler's own binary.
    assert cache.hits == before + 1
    assert second["response"]["run_result"]["stdout"] == "honest\n", second


@pytest.mark.sandbox
def test_requests_with_files_are_never_cached(served):
    url, cache = served
    header = base64.b64encode(b"#define ANSWER 42\n").decode()
    code = '#include <cstdio>\n#include "answer.h"\nint main() { std::printf("%d\\n", ANSWER); }\n'
    other = base64.b64encode(b"#define ANSWER 7\n").decode()
    before = (cache.hits, cache.misses)
    got = run_client(
        url,
        [request("cpp", code, files={"answer.h": header}), request("cpp", code, files={"answer.h": other})],
    )
    assert [r["response"]["run_result"]["stdout"] for r in got] == ["42\n", "7\n"], got
    assert (cache.hits, cache.misses) == before  # never looked up
