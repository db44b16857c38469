"""`/run_code` driven by SandboxFusion's real client (its own venv), served
by sandgym on loopback over real sandboxes of the `polyglot` image: the
statuses the client documents for hello world in every language, stdin,
compile errors, run-time errors and time limits; files in and out; and
programs that try to write on the host or reach the server get nowhere."""

from __future__ import annotations

import base64
import json
import os
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator

import pytest

from sandgym.fusion.api import build_run_code_app
from sandgym.fusion.languages import LANGUAGES
from sandgym.fusion.samples import COMPILE_ERROR, HELLO, LOOP, RUNTIME_ERROR, SUM_STDIN, SYNTAX_ERROR
from sandgym.runtimes import get_runtime

from .sandbox_fusion_client import run_client, serving

pytestmark = pytest.mark.sandbox

# Generous: the first Java or Rust compile on a loaded 2-core machine.
COMPILE_S = 60.0


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    rt = get_runtime("local")
    with serving(build_run_code_app(rt, concurrency=2)) as url:
        yield url


def request(language: str, code: str, **kw) -> dict:
    return {"language": language, "code": code, "compile_timeout": COMPILE_S, "run_timeout": 20.0, **kw}


def compiled(language: str) -> bool:
    return LANGUAGES[language].compile is not None


def test_hello_world_in_every_language(endpoint):
    assert len(HELLO) >= 12
    got = run_client(endpoint, [request(lang, code) for lang, code in HELLO.items()])
    for lang, r in zip(HELLO, got, strict=True):
        assert "error" not in r, (lang, r)
        resp = r["response"]
        assert (resp["status"], r["summary"]) == ("Success", "Success"), (lang, resp)
        assert resp["run_result"]["status"] == "Finished"
        assert resp["run_result"]["return_code"] == 0
        assert resp["run_result"]["stdout"] == "hello, world\n", (lang, resp["run_result"])
        assert resp["run_result"]["execution_time"] > 0
        if compiled(lang):
            assert resp["compile_result"]["status"] == "Finished" and resp["compile_result"]["return_code"] == 0
        else:
            assert resp["compile_result"] is None


def test_stdin_reaches_the_program(endpoint):
    got = run_client(endpoint, [request(lang, code, stdin="40 2\n") for lang, code in SUM_STDIN.items()])
    for lang, r in zip(SUM_STDIN, got, strict=True):
        assert r.get("summary") == "Success", (lang, r)
        assert r["response"]["run_result"]["stdout"].strip() == "42", (lang, r)


def test_compile_errors_are_reported_as_compile_failures(endpoint):
    got = run_client(endpoint, [request(lang, code) for lang, code in COMPILE_ERROR.items()])
    for lang, r in zip(COMPILE_ERROR, got, strict=True):
        resp = r["response"]
        assert (resp["status"], r["summary"]) == ("Failed", "CompileFailed"), (lang, resp)
        assert resp["compile_result"]["status"] == "Finished"
        assert resp["compile_result"]["return_code"] != 0
        assert resp["compile_result"]["stdout"] + resp["compile_result"]["stderr"], lang  # the compiler said why
        assert resp["run_result"] is None


def test_every_language_fails_a_program_it_cannot_parse(endpoint):
    """Compiled languages at compile time (CompileFailed), the others when
    run (RunFailed); either way with the parser's message."""
    assert set(COMPILE_ERROR) | set(SYNTAX_ERROR) >= set(LANGUAGES) - {"bash", "php", "lua", "nodejs"}
    got = run_client(endpoint, [request(lang, code) for lang, code in SYNTAX_ERROR.items()])
    for lang, r in zip(SYNTAX_ERROR, got, strict=True):
        resp = r["response"]
        assert (resp["status"], r["summary"]) == ("Failed", "RunFailed"), (lang, resp)
        assert resp["run_result"]["return_code"] != 0 and resp["run_result"]["stderr"], (lang, resp)


def test_runtime_errors_are_reported_as_run_failures(endpoint):
    got = run_client(endpoint, [request(lang, code) for lang, code in RUNTIME_ERROR.items()])
    for lang, r in zip(RUNTIME_ERROR, got, strict=True):
        resp = r["response"]
        assert (resp["status"], r["summary"]) == ("Failed", "RunFailed"), (lang, resp)
        assert resp["run_result"]["status"] == "Finished"
        assert resp["run_result"]["return_code"] != 0


def test_time_limits_are_reported_as_timeouts(endpoint):
    reqs = [request(lang, code, run_timeout=1.0) for lang, code in LOOP.items()]
    # A compile that outlives its limit: billions of steps of constant evaluation.
    slow = (
        "constexpr long f() { long s = 0; for (int i = 0; i < 200000; ++i) for (int j = 0; j < 200000; ++j) "
        "s += i ^ j; return s; }\nconstexpr long v = f();\nint main() { return v == 0; }\n"
    )
    reqs.append({**request("cpp", slow), "compile_timeout": 2.0})
    got = run_client(endpoint, reqs)
    for lang, r in zip(LOOP, got, strict=False):
        resp = r["response"]
        assert (resp["status"], r["summary"]) == ("Failed", "RunTimeout"), (lang, resp)
        assert resp["run_result"]["status"] == "TimeLimitExceeded"
    last = got[-1]["response"]
    assert (last["status"], got[-1]["summary"]) == ("Failed", "CompileTimeout"), last
    assert last["compile_result"]["status"] == "TimeLimitExceeded" and last["run_result"] is None


def test_files_go_in_and_come_out(endpoint):
    data = bytes(range(256)) * 4
    code = (
        "import pathlib\n"
        "src = pathlib.Path('in/data.bin').read_bytes()\n"
        "pathlib.Path('out').mkdir()\n"
        "pathlib.Path('out/reversed.bin').write_bytes(src[::-1])\n"
        "print(len(src))\n"
    )
    r = run_client(
        endpoint,
        [
            request(
                "python",
                code,
                files={"in/data.bin": base64.b64encode(data).decode()},
                fetch_files=["out/reversed.bin", "never-written.txt"],
            )
        ],
    )[0]
    resp = r["response"]
    assert r["summary"] == "Success", resp
    assert resp["run_result"]["stdout"] == f"{len(data)}\n"
    assert set(resp["files"]) == {"out/reversed.bin"}
    assert base64.b64decode(resp["files"]["out/reversed.bin"]) == data[::-1]


def test_programs_write_nothing_on_the_host_and_cannot_reach_the_server(endpoint):
    marker = f"sandgym-fusion-{uuid.uuid4().hex}"
    host_paths = [f"/tmp/{marker}", f"/var/tmp/{marker}", os.path.expanduser(f"~/{marker}"), f"/dev/shm/{marker}"]
    port = int(endpoint.rsplit(":", 1)[1])
    writes = "\n".join(
        f"try:\n    open({p!r}, 'w').write('x')\n    print('wrote', {p!r})\n"
        "except OSError as e:\n    print('refused', e)"
        for p in host_paths
    )
    reach = (
        "import socket\ntry:\n"
        f"    socket.create_connection(('127.0.0.1', {port}), timeout=3)\n    print('REACHED the server')\n"
        "except OSError as e:\n    print('no route', e)\n"
    )
    bash = "".join(f"echo x > {p} && echo wrote {p}\n" for p in host_paths)
    cpp = "#include <cstdio>\nint main() {\n"
    cpp += "".join(
        f'  if (FILE* f = std::fopen("{p}", "w")) {{ std::fputs("x", f); std::fclose(f); }}\n' for p in host_paths
    )
    cpp += "}\n"
    got = run_client(
        endpoint,
        [request("python", writes + "\n" + reach), request("bash", bash), request("cpp", cpp)],
    )
    assert "REACHED" not in got[0]["response"]["run_result"]["stdout"], got[0]
    assert "no route" in got[0]["response"]["run_result"]["stdout"], got[0]
    for r in got:
        assert r["response"]["status"] in ("Success", "Failed"), r
    for p in host_paths:
        assert not os.path.exists(p), f"a sandboxed program wrote {p} on the host"


def test_floods_and_fork_bombs_are_bounded_and_the_server_keeps_serving(endpoint):
    flood = "import sys\nchunk = 'x' * (1 << 20)\nfor _ in range(64):\n    sys.stdout.write(chunk)\n"
    bomb = "bomb() { bomb | bomb & }\nbomb\nsleep 5\n"
    node_reach = (
        f"const s = require('net').connect({int(endpoint.rsplit(':', 1)[1])}, '127.0.0.1');\n"
        "s.on('connect', () => { console.log('REACHED'); process.exit(0); });\n"
        "s.on('error', (e) => { console.log('no route', e.code); process.exit(0); });\n"
    )
    got = run_client(
        endpoint,
        [
            request("python", flood),
            request("bash", bomb, run_timeout=3.0),
            request("nodejs", node_reach),
            request("python", 'print("still serving")\n'),
        ],
    )
    flooded = got[0]["response"]["run_result"]
    assert 0 < len(flooded["stdout"]) <= 1 << 20, len(flooded["stdout"])  # 64 MiB written, 1 MiB kept
    assert got[1]["response"]["status"] == "Failed", got[1]  # the bomb hit the pids bound or the time limit
    assert got[2]["response"]["run_result"]["stdout"].startswith("no route"), got[2]
    assert got[3]["response"]["run_result"]["stdout"] == "still serving\n", got[3]


def _post(endpoint: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(
        f"{endpoint}/run_code", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_an_unknown_language_is_a_4xx_naming_the_supported_ones(endpoint):
    status, body = _post(endpoint, {"language": "cobol", "code": "DISPLAY 'hi'."})
    assert status == 400
    assert "cobol" in body["detail"] and all(lang in body["detail"] for lang in LANGUAGES)


@pytest.mark.parametrize(
    "field, value, says",
    [
        ("files", {"../escape.txt": "eA=="}, "relative path"),
        ("files", {"/etc/passwd": "eA=="}, "relative path"),
        ("files", {"data.txt": "not base64!"}, "base64"),
        ("fetch_files", ["/etc/shadow"], "relative path"),
    ],
)
def test_bad_files_are_a_4xx_naming_the_field(endpoint, field, value, says):
    status, body = _post(endpoint, {"language": "python", "code": "print(1)", field: value})
    assert status == 400, body
    assert field in body["detail"] and says in body["detail"], body


def test_out_of_range_timeouts_are_refused(endpoint):
    status, body = _post(endpoint, {"language": "python", "code": "print(1)", "run_timeout": 0})
    assert status == 422 and "run_timeout" in json.dumps(body)


@pytest.mark.docker
@pytest.mark.parametrize("backend", ["docker", "docker:runsc"])
def test_other_runtimes_compile_and_run_in_one_sandbox(backend):
    """Every language on runc and gVisor (its stdin program, D's hello
    world), and the documented statuses of a compile error, a run-time
    error and a time limit in a few. Compiled programs run from the
    workspace, which docker mounts noexec unless the spec says otherwise
    (exec_workspace)."""
    rt = get_runtime(backend)
    langs = list(SUM_STDIN)  # every language with a stdin program: all but D_ut
    assert set(langs) | {"D_ut"} == set(LANGUAGES)
    some = ("python", "cpp", "java")
    reqs = [request(lang, SUM_STDIN[lang], stdin="40 2\n") for lang in langs]
    reqs.append(request("D_ut", HELLO["D_ut"]))
    reqs += [request(lang, COMPILE_ERROR[lang]) for lang in some if lang in COMPILE_ERROR]
    reqs += [request(lang, RUNTIME_ERROR[lang]) for lang in some]
    reqs += [request(lang, LOOP[lang], run_timeout=1.0) for lang in some if lang in LOOP]
    with serving(build_run_code_app(rt, concurrency=1)) as url:
        got = run_client(url, reqs)
    for lang, r in zip(langs, got, strict=False):
        assert r.get("summary") == "Success", (backend, lang, r)
        assert r["response"]["run_result"]["stdout"].strip() == "42"
    rest = got[len(langs) :]
    assert rest[0].get("summary") == "Success" and rest[0]["response"]["run_result"]["stdout"] == "hello, world\n"
    summaries = [r.get("summary") for r in rest[1:]]
    assert summaries == ["CompileFailed"] * 2 + ["RunFailed"] * 3 + ["RunTimeout"] * 2, (backend, rest[1:])


def test_run_code_mounts_beside_the_openenv_routes():
    from sandgym.fusion.api import mount_run_code
    from sandgym.server import build_app

    rt = get_runtime("local")
    app = build_app("sandgym/CodeFunction-v0", {"runtime": rt}, close_runtime=True)
    mount_run_code(app, rt)
    with serving(app) as url:
        with urllib.request.urlopen(f"{url}/health", timeout=60) as resp:
            assert resp.status == 200  # OpenEnv's own route
        got = run_client(url, [request("perl", 'print 6 * 7, "\\n";\n')])
    assert got[0]["response"]["run_result"]["stdout"] == "42\n", got
