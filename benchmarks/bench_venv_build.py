"""SWE test venv build: pip in a build sandbox against pip on the host, and what each makes.

    .venv/bin/python benchmarks/bench_venv_build.py [--reps 3] [--requirement NAME==VERSION ...]

Each round builds the same venv twice, from scratch, in turn:

- host: the way venvs were built before issue 37, as the peer: the host's
  pip, run by us, installs the pinned wheels into a fresh venv
  (`pip --python VENV install --only-binary :all: --no-compile`), then
  `compileall` on the host;
- sandbox: `sources.test_venv` in a fresh cache: an unprivileged download,
  the wheels' checks, pip and compileall in build sandboxes, the tree's
  check (verifiers/swe_repo/wheels.py).

Both download from the index (no pip cache on either side). Printed: P50
and P95 of each and their ratio, the load average, then how the two
venvs of the last round differ: every path, its type and mode, and the
content of every file but the bytecode (which embeds the source's path and
mtime), with the build path masked where a file names it (scripts,
activate files, pyvenv.cfg, the scripts' hashes in RECORD).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import cast

from sandgym.runtimes.rootfs import rootfs_cache
from sandgym.specs import TaskSet, bundled_task_set
from sandgym.specs.swe_repo import SWETaskPair, TestEnvironment
from sandgym.verifiers.swe_repo.sources import SANDBOX_PYTHON, all_requirements, test_venv


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def host_build(reqs: list[str], dest: Path) -> None:
    subprocess.run([SANDBOX_PYTHON, "-m", "venv", "--without-pip", str(dest)], check=True, capture_output=True)
    pip = [sys.executable, "-m", "pip", "--python", str(dest / "bin" / "python"), "install", "--quiet"]
    pip += ["--disable-pip-version-check", "--no-cache-dir", "--no-compile", "--only-binary", ":all:", "--", *reqs]
    subprocess.run(pip, check=True, capture_output=True)
    lib = str(dest / "lib")
    compileall = [SANDBOX_PYTHON, "-m", "compileall", "-q", "-j", "0", "--invalidation-mode", "timestamp", lib]
    subprocess.run(compileall, capture_output=True)


def sandbox_build(reqs: list[str], cache: Path) -> Path:
    cache.mkdir()
    (cache / "rootfs").symlink_to(rootfs_cache())
    os.environ["SANDGYM_CACHE"] = str(cache)
    try:
        return test_venv(TestEnvironment(requirements=reqs))
    finally:
        del os.environ["SANDGYM_CACHE"]


# Where a venv was built, as its scripts, activate files and pyvenv.cfg name it:
# the host build's folder, the sandbox build's random name on the host
# (venv's own files) or /opt/venv (pip's scripts, written in the sandbox);
# the activate files' prompt is the folder's name.
BUILD_PATH = re.compile(rb"(?:/(?:[^\s'\"/:]+/)*|\b)(?:host-\d+|[0-9a-f]{32}|venv)(?=[/\s'\":)]|$)")


def tree(root: Path) -> dict[str, tuple[str, int, str]]:
    """path -> (kind, mode, content digest: '' for bytecode, the build path masked where it is named)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = Path(dirpath) / n
            rel = p.relative_to(root).as_posix()
            if rel in (".complete", ".compiled-1"):
                continue
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", 0, os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", stat.S_IMODE(st.st_mode), "")
            else:
                data = p.read_bytes()
                if rel.endswith(".pyc"):
                    digest = ""
                elif rel.startswith("bin/") or rel == "pyvenv.cfg":  # they name the build path
                    digest = hashlib.sha256(BUILD_PATH.sub(b"VENV", data)).hexdigest()
                elif rel.endswith(".dist-info/RECORD"):  # the hashes of the scripts, which name it
                    lines = [
                        re.sub(rb",sha256=[^,]*,\d*$", b"", ln) if b"/bin/" in ln else ln for ln in data.splitlines()
                    ]
                    digest = hashlib.sha256(b"\n".join(lines)).hexdigest()
                else:
                    digest = hashlib.sha256(data).hexdigest()
                out[rel] = ("file", stat.S_IMODE(st.st_mode), digest)
    return out


def differences(a: dict, b: dict) -> list[str]:
    lines = [f"only in host build: {p}" for p in sorted(a.keys() - b.keys())]
    lines += [f"only in sandbox build: {p}" for p in sorted(b.keys() - a.keys())]
    lines += [f"differs: {p}: {a[p]} != {b[p]}" for p in sorted(a.keys() & b.keys()) if a[p] != b[p]]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--requirement", action="append", default=[], help="NAME==VERSION (default: billing-v1's)")
    args = ap.parse_args()
    if args.requirement:
        reqs = all_requirements(TestEnvironment(requirements=args.requirement))
    else:
        task = cast(SWETaskPair, TaskSet.load(bundled_task_set("swe_repo")).tasks[0])
        reqs = all_requirements(task.visible.environment)
    print(f"requirements: {reqs}; {args.reps} rounds")
    times: dict[str, list[float]] = {"host": [], "sandbox": []}
    last: dict[str, Path] = {}
    work = Path(tempfile.mkdtemp(prefix="bench-venv-"))
    try:
        for i in range(args.reps):
            t0 = time.perf_counter()
            host_build(reqs, work / f"host-{i}")
            times["host"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            last["sandbox"] = sandbox_build(reqs, work / f"cache-{i}")
            times["sandbox"].append(time.perf_counter() - t0)
            last["host"] = work / f"host-{i}"
            print(f"round {i + 1}: host {times['host'][-1]:.2f} s, sandbox {times['sandbox'][-1]:.2f} s", flush=True)
        for k, xs in times.items():
            print(f"{k:8s} P50 {pct(xs, 50):6.2f} s  P95 {pct(xs, 95):6.2f} s")
        print(f"ratio sandbox/host (P50): {pct(times['sandbox'], 50) / pct(times['host'], 50):.2f}")
        print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cpus")
        diff = differences(tree(last["host"]), tree(last["sandbox"]))
        n = len(tree(last["host"]))
        print(
            f"venv trees: {n} entries in the host build; {len(diff)} differences"
            " (bytecode aside, the build path masked)"
        )
        for line in diff[:40]:
            print("  " + line)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
