"""Soak: the memory of `sandgym serve` over many stateless HTTP resets.

Starts a real `sandgym serve` (uvicorn, the local runtime) in a process of
its own, sends N `POST /reset` requests (openenv's stateless route: a fresh
env per request, closed after it) over keep-alive HTTP connections, and
prints the server's resident memory (VmRSS of its process, from /proc), its
open descriptors and the processes under it every `--every` resets, then
the growth from the first reading after warm-up to the last. Memory that is
flat stays within a few MB of the first reading. Once the server is
stopped, it checks that nothing of it is left: no process it started, no
sandbox carrying its mark, no temporary folder named after it (exit 1 if
there is).

    .venv/bin/python benchmarks/soak_serve_resets.py --resets 10000 --every 1000
"""

from __future__ import annotations

import argparse
import glob
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sandgym.runtimes.host_processes import command_name, descendants, environs, mark_owner  # noqa: E402
from sandgym.runtimes.local.runtime import OWNER_ENV  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def left_behind(pid: int, under: set[int]) -> list[str]:
    """What the stopped server `pid` left: processes seen under it, sandboxes
    marked as its own, temporary folders named after it."""
    out = [f"process {p} ({command_name(p)})" for p in sorted(under) if os.path.exists(f"/proc/{p}")]
    out += [f"sandbox process {p}" for p, env in environs() if mark_owner(env, OWNER_ENV) == pid]
    out += [f"folder {d}" for d in glob.glob(f"/tmp/sandgym-*-{pid}-*")]
    return out


def start_server(env_id: str, port: int, runtime: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "sandgym", "serve", "--env", env_id, "--port", str(port)]
    cmd += ["--runtime", runtime, "--log-level", "warning"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server ended: {proc.stderr.read().decode()[-2000:] if proc.stderr else ''}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/health")
            if conn.getresponse().status == 200:
                conn.close()
                return proc
        except OSError:
            time.sleep(0.3)
    proc.kill()
    raise SystemExit("the server did not answer /health within 120 s")


def reset(conn: http.client.HTTPConnection) -> None:
    conn.request("POST", "/reset", body=b"{}", headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    body = r.read()
    if r.status != 200:
        raise SystemExit(f"/reset answered {r.status}: {body[:500]!r}")
    json.loads(body)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--resets", type=int, default=10_000)
    ap.add_argument("--every", type=int, default=1000, help="print RSS every this many resets")
    ap.add_argument("--warmup", type=int, default=200, help="resets before the first reading")
    ap.add_argument("--env", default="sandgym/CodeFunction-v0")
    ap.add_argument("--runtime", default="local")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # the server is stopped either way
    port = free_port()
    proc = start_server(args.env, port, args.runtime)
    readings: list[tuple[int, float]] = []
    descriptors: list[int] = []
    under: set[int] = set()  # every process seen under the server

    def read(done: int) -> None:
        readings.append((done, rss_mb(proc.pid)))
        descriptors.append(fds(proc.pid))
        under.update(descendants(proc.pid))

    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        for _ in range(args.warmup):
            reset(conn)
        read(0)
        print(f"after {args.warmup} warm-up resets: {readings[0][1]:.1f} MB, {descriptors[0]} fds", flush=True)
        t0 = time.perf_counter()
        done = 0
        try:
            for i in range(1, args.resets + 1):
                reset(conn)
                done = i
                if i % args.every == 0 or i == args.resets:
                    read(i)
                    rate = i / (time.perf_counter() - t0)
                    print(
                        f"{i:>7} resets  rss {readings[-1][1]:7.1f} MB  fds {descriptors[-1]:4}  "
                        f"processes under it {len(descendants(proc.pid))}  ({rate:.1f} resets/s, "
                        f"load {os.getloadavg()[0]:.1f})",
                        flush=True,
                    )
        except KeyboardInterrupt:  # Ctrl-C, or SIGTERM below: the figures so far
            read(done)
            print(f"stopped after {done} resets: rss {readings[-1][1]:.1f} MB", flush=True)
        conn.close()
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
    first, last = readings[0][1], readings[-1][1]
    peak = max(mb for _, mb in readings)
    print(
        f"RSS {first:.1f} -> {last:.1f} MB over {readings[-1][0]} resets "
        f"(growth {last - first:+.1f} MB, peak {peak:.1f} MB); fds {descriptors[0]} -> {descriptors[-1]} "
        f"(peak {max(descriptors)}); load {os.getloadavg()[0]:.2f}"
    )
    # What the server stopped as it ended (a browser sandbox mid-reset, the
    # Playwright driver) may take a few seconds to exit under load.
    deadline = time.monotonic() + 30
    while (left := left_behind(proc.pid, under)) and time.monotonic() < deadline:
        time.sleep(0.5)
    print(f"left after the server stopped: {', '.join(left) if left else 'nothing'}")
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
