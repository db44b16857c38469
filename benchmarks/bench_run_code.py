"""`/run_code` hello world, warm, per language: P50/P95 latency of one
request (compile + run in a fresh sandbox) and throughput at concurrency
2, against the same program compiled and run bare on the host, in the
same run.

The server is sandgym's SandboxFusion app (sandgym/fusion/) on loopback,
over the chosen runtime; requests are plain HTTP posts. The host peer runs
the language table's own commands in a fresh temporary folder per run,
with the host's toolchains: where the host has none for a language, that
language's host columns say so. The host's toolchain versions are not the
image's (Debian bookworm's): the ratio compares sandgym's whole path with
the host's, not two builds of one compiler.

The main table runs with the compile cache off (every request compiles,
as the host peer does); a second table gives each compiled language's
P50/P95 with the cache on (the same source again: its compile reused),
against the cache off, in the same run.

    .venv/bin/python benchmarks/bench_run_code.py [--runtime local] [-n 10] [--languages python,cpp] [--no-cache-table]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import uvicorn

from sandgym.fusion.api import build_run_code_app
from sandgym.fusion.languages import BASE_ENV, LANGUAGES
from sandgym.fusion.samples import HELLO
from sandgym.runtimes import get_runtime


@contextlib.contextmanager
def serving(app) -> Iterator[str]:
    """`app` on a free loopback port, served from a thread."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            raise SystemExit("the /run_code server did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def post(url: str, lang: str) -> float:
    body = json.dumps({"language": lang, "code": HELLO[lang], "compile_timeout": 60, "run_timeout": 20}).encode()
    req = urllib.request.Request(f"{url}/run_code", data=body, headers={"Content-Type": "application/json"})
    t = time.perf_counter()
    with urllib.request.urlopen(req, timeout=300) as resp:
        got = json.loads(resp.read())
    took = time.perf_counter() - t
    if got["status"] != "Success" or got["run_result"]["stdout"] != "hello, world\n":
        raise SystemExit(f"{lang}: /run_code answered {got}")
    return took


# The host's PATH without version-manager shims (pyenv's `python3` is a
# shell script that finds the interpreter at every start: not the toolchain).
HOST_PATH = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if "shims" not in p.split(os.sep))


def host_missing(lang: str) -> str | None:
    """The first program of the language's commands the host lacks."""
    spec = LANGUAGES[lang]
    for cmd in (spec.compile, spec.run):
        if cmd and not cmd[0].startswith("./") and shutil.which(cmd[0], path=HOST_PATH) is None:
            return cmd[0]
    return None


def host_run(lang: str, go_cache: str) -> float:
    """The same commands, bare on the host, in a fresh folder."""
    spec = LANGUAGES[lang]
    # The host's own HOME: rustup finds its toolchains there.
    env = {**os.environ, **BASE_ENV, **spec.env, "PATH": HOST_PATH, "HOME": os.environ.get("HOME", "/root")}
    if lang == "go":
        # The host's own build cache: a recent Go builds its standard library
        # from source into it (once), where Debian's 1.19 ships it built.
        env["GOCACHE"] = go_cache
    t = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-run-code-") as d:
        for name, text in {**spec.extra_files, spec.source: HELLO[lang]}.items():
            Path(d, name).write_text(text)
        if spec.compile:
            subprocess.run(spec.compile, cwd=d, env=env, check=True, capture_output=True, timeout=900)
        out = subprocess.run(spec.run, cwd=d, env=env, check=True, capture_output=True, timeout=60).stdout
    took = time.perf_counter() - t
    if out != b"hello, world\n":
        raise SystemExit(f"{lang} on the host printed {out!r}")
    return took


def measure(fn: Callable[[], float], n: int) -> tuple[float, float, float]:
    """P50, P95 of `n` sequential calls (after one warm-up), and calls/s
    with 2 at once."""
    fn()
    lat = [fn() for _ in range(n)]
    t = time.perf_counter()
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda _: fn(), range(n)))
    return pct(lat, 0.5), pct(lat, 0.95), n / (time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runtime", default="local")
    ap.add_argument("-n", type=int, default=10, help="requests per language and mode")
    ap.add_argument("--languages", default=",".join(HELLO))
    ap.add_argument("--no-cache-table", action="store_true", help="skip the compile-cache table")
    args = ap.parse_args()
    langs = [x for x in args.languages.split(",") if x]
    print(f"load: {os.getloadavg()} · runtime {args.runtime} · n={args.n}", flush=True)
    rt = get_runtime(args.runtime)
    rows: list[tuple] = []
    go = shutil.which("go", path=HOST_PATH)
    go_cache = subprocess.run([go, "env", "GOCACHE"], capture_output=True, text=True).stdout.strip() if go else ""
    try:
        with serving(build_run_code_app(rt, concurrency=2, close_runtime=False, compile_cache=False)) as url:
            for lang in langs:
                s50, s95, sthr = measure(functools.partial(post, url, lang), args.n)
                missing = host_missing(lang)
                if missing:
                    h = None
                else:
                    h = measure(functools.partial(host_run, lang, go_cache), args.n)
                rows.append((lang, s50, s95, sthr, h, missing))
                host = f"{h[0] * 1e3:8.0f} {h[1] * 1e3:8.0f} {h[2]:7.2f}  x{s50 / h[0]:5.1f}" if h else f"no {missing}"
                print(f"{lang:11s} {s50 * 1e3:8.0f} {s95 * 1e3:8.0f} {sthr:7.2f}   {host}", flush=True)
    finally:
        rt.close()
    print()
    print("language    sandgym /run_code ms     req/s@2 | host bare ms          req/s@2  P50 ratio")
    print("            P50      P95                     | P50      P95")
    for lang, s50, s95, sthr, h, missing in rows:
        host = f"{h[0] * 1e3:8.0f} {h[1] * 1e3:8.0f} {h[2]:7.2f}  x{s50 / h[0]:5.1f}" if h else f"(no {missing})"
        print(f"{lang:11s} {s50 * 1e3:8.0f} {s95 * 1e3:8.0f}     {sthr:7.2f}  | {host}")
    if not args.no_cache_table:
        cache_table(args.runtime, [r for r in rows if LANGUAGES[r[0]].compile], args.n)
    print(f"load after: {os.getloadavg()}")


def cache_table(runtime: str, rows: list[tuple], n: int) -> None:
    """Compiled languages with the compile cache on, against the rows
    measured with it off."""
    rt = get_runtime(runtime)
    print(f"\ncompile cache on (load {os.getloadavg()})")
    print("language    cache off ms       cache on ms        P50 ratio")
    print("            P50      P95       P50      P95")
    try:
        with serving(build_run_code_app(rt, concurrency=2, close_runtime=False)) as url:
            for lang, s50, s95, *_ in rows:
                on50, on95, _ = measure(functools.partial(post, url, lang), n)
                off = f"{s50 * 1e3:8.0f} {s95 * 1e3:8.0f}"
                print(f"{lang:11s} {off}  {on50 * 1e3:8.0f} {on95 * 1e3:8.0f}    x{s50 / on50:5.1f}")
    finally:
        rt.close()


if __name__ == "__main__":
    main()
