"""SWE repo-issue family: gold-patch verification time against bare pytest, per runtime.

    .venv/bin/python benchmarks/bench_swe_verify.py [--runtime local --runtime docker] [--reps 5] [--tasks DIR ...]
        [--prestart 2] [--gap 1.0]

For each task (by default the bundled billing set plus the first task of
every package in pypi-v1) the gold patch, as the env would submit it (a
`git diff` with a/ b/ prefixes), is judged `--reps` times by `verify` on
each runtime; the same pytest selection (FAIL_TO_PASS + PASS_TO_PASS) is
run as often directly on the host: the start tree with the gold and test
patches applied, the task's own venv, `python -m pytest -p no:cacheprovider
-c <the verifier's inifile> --rootdir REPO -q NODE_IDS` (the verifier reads
none of the repository's pytest configuration either; some repositories'
addopts name plugins the venv lacks, which would end a bare run at once),
and must run every listed test. Printed: P50 and P95 of both and their
ratio (verify / bare), per task and over all tasks (the ratio of the sums
of P50s), with the P50 of the verifier sandbox's creation (`create`, as
the verdict records it), then per task the P50 of each phase of a
verification (see PHASES). Each
docker runtime is measured twice: as it is, and with `prestart` (verifier
containers started ahead and removed in the background; `--gap` seconds
between verifications stand for the agent's turn, in which the stock
refills). The test venvs are byte-compiled when cached (sources.py), so
both sides load pytest from bytecode.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import cast

from sandgym.runtimes import get_runtime
from sandgym.specs import TaskSet, bundled_task_set
from sandgym.specs.swe_repo import SWETaskPair
from sandgym.verifiers.swe_repo.checkout import git_env, start_state
from sandgym.verifiers.swe_repo.host import verify
from sandgym.verifiers.swe_repo.sources import test_venv

# The verifier's inifile: the repository's own configuration is not read, on either side.
VERIFIER_INI = Path(__file__).resolve().parents[1] / "verifiers" / "swe_repo" / "boundary" / "pytest.ini"


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def swe_tasks(folder: Path) -> list[SWETaskPair]:
    return [cast(SWETaskPair, t) for t in TaskSet.load(folder).tasks]


def default_tasks() -> list[SWETaskPair]:
    billing = bundled_task_set("swe_repo")
    tasks = swe_tasks(billing)
    pypi = billing.parent / "pypi-v1"
    if (pypi / "taskset.yaml").exists():
        seen = set()
        for t in swe_tasks(pypi):
            if t.visible.repo.name not in seen:
                seen.add(t.visible.repo.name)
                tasks.append(t)
    return tasks


class HostTree:
    """The start tree with the gold patch (and the test patch) applied, on the host."""

    def __init__(self, task: SWETaskPair):
        self.task = task
        self.work = Path(tempfile.mkdtemp(prefix="sg-bench-verify-"))
        with tarfile.open(fileobj=io.BytesIO(start_state(task.visible).tree_tar)) as tar:
            tar.extractall(self.work, filter="data")
        self.repo = self.work / "repo"
        self.env = git_env(str(self.work))

    def git(self, *args: str, stdin: str | None = None) -> str:
        r = subprocess.run(
            ["git", *args], cwd=self.repo, env=self.env, input=stdin, text=True, capture_output=True, check=True
        )
        return r.stdout

    def gold_diff(self) -> str:
        """The gold patch as the env submits a diff: a/ b/ prefixes, whatever the task stores."""
        self.git("init", "-q", "--template=")
        self.git("add", "-A", "-f")
        self.git("-c", "user.name=b", "-c", "user.email=b@b", "commit", "-q", "--no-verify", "-m", "start")
        self.git("apply", "--whitespace=nowarn", "-", stdin=self.task.hidden.patch)
        self.git("add", "-A", "-f")
        diff = self.git(
            "diff", "--cached", "--binary", "--no-color", "--no-ext-diff", "--no-renames", "--src-prefix=a/",
            "--dst-prefix=b/", "HEAD",
        )  # fmt: skip
        if self.task.hidden.test_patch.strip():
            self.git("apply", "--whitespace=nowarn", "-", stdin=self.task.hidden.test_patch)
        shutil.rmtree(self.repo / ".git")
        return diff

    def bare_pytest(self, tests: list[str]) -> float:
        """One bare run of `tests`, timed; it must run them all (a run that stops at a
        usage error, e.g. the repository's addopts naming a plugin the venv lacks, would
        time nothing). The verifier's own inifile, as the verifier runs them."""
        env = self.task.visible.environment
        python = test_venv(env) / "bin" / "python"
        root = self.repo / env.import_root
        t0 = time.perf_counter()
        argv = [str(python), "-m", "pytest", "-p", "no:cacheprovider", "-c", str(VERIFIER_INI)]
        argv += ["--rootdir", str(self.repo), "-q", *env.test_args, *tests]
        r = subprocess.run(
            argv,
            cwd=self.repo,
            env={
                "PATH": "/usr/bin:/bin",
                "HOME": str(self.work),
                "PYTHONPATH": str(root),
                "PYTHONDONTWRITEBYTECODE": "1",
                "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
            },
            capture_output=True,
            text=True,
        )
        elapsed = time.perf_counter() - t0
        last = (r.stdout.strip().splitlines() or [""])[-1]
        ran = sum(int(n) for n in re.findall(r"(\d+) (?:passed|failed)\b", last))
        if r.returncode not in (0, 1) or ran != len(tests):
            raise SystemExit(f"{self.task.id}: bare pytest did not run the selection (exit {r.returncode}): {last!r}")
        return elapsed  # (a test failing now and then under load still ran: its time counts)

    def close(self) -> None:
        shutil.rmtree(self.work, ignore_errors=True)


def make_runtime(name: str, prestart: int):
    if prestart:
        from sandgym.runtimes.docker.runtime import DockerRuntime

        return DockerRuntime(name.split(":", 1)[1] if ":" in name else "runc", prestart=prestart)
    return get_runtime(name)


# Phases of a verification (P50, ms): the sandbox's creation, the runner's own
# (checks["phases"]: the tree written, the diff and test patch applied and
# hashed, the test process's start-up not hidden behind that, its start after
# its secrets, collection, the tests, its exit), the runner's whole round
# trip, the sandbox's close, and the host's own work (parse, job) plus
# whatever else the total holds.
PHASES = (
    ("create", "create"),
    ("unpack_s", "unpack"),
    ("prepare_s", "prepare"),
    ("setup_s", "setup"),
    ("start_s", "start"),
    ("collect_s", "collect"),
    ("run_s", "run"),
    ("exit_s", "exit"),
    ("host_runner_s", "runner"),
    ("host_close_s", "close"),
    ("host_other_s", "host"),
)
OUTSIDE = ("create", "host_runner_s", "host_close_s")


def print_phases(rows: dict[str, dict[str, float]]) -> None:
    print(f"\n{'phases, P50 ms':36} " + " ".join(f"{label:>7}" for _, label in PHASES))
    for task_id, row in rows.items():
        cells = " ".join(f"{1000 * row[k]:7.1f}" if k in row else f"{'-':>7}" for k, _ in PHASES)
        print(f"{task_id[:36]:36} {cells}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runtime", action="append", default=None, help="local, docker, ... (repeatable)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--tasks", action="append", default=None, help="task-set folder(s); default billing + pypi-v1")
    ap.add_argument("--prestart", type=int, default=2, help="docker: containers started ahead per spec (0: skip)")
    ap.add_argument("--gap", type=float, default=1.0, help="seconds between verifications (the agent's turn)")
    args = ap.parse_args()
    runtimes: list[tuple[str, int]] = []
    for name in args.runtime or ["local", "docker"]:
        runtimes.append((name, 0))
        if name.startswith("docker") and args.prestart:
            runtimes.append((name, args.prestart))
    tasks = [t for d in args.tasks for t in swe_tasks(Path(d))] if args.tasks else default_tasks()

    trees = {task.id: HostTree(task) for task in tasks}
    try:
        diffs = {task.id: trees[task.id].gold_diff() for task in tasks}
        print(f"load average at start: {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs); {args.reps} runs per figure")
        for name, prestart in runtimes:
            rt = make_runtime(name, prestart)
            try:
                print(f"\n{name}{f' (prestart {prestart})' if prestart else ''}:")
                print(
                    f"{'task':36} {'bare P50':>9} {'P95':>6} {'verify P50':>11} {'P95':>6} "
                    f"{'ratio P50':>10} {'P95':>6} {'create P50':>10}  status"
                )
                sum_bare = sum_verify = 0.0
                ratios50, ratios95 = [], []
                phase_rows: dict[str, dict[str, float]] = {}
                for task in tasks:
                    tree = trees[task.id]
                    tests = list(dict.fromkeys([*task.hidden.FAIL_TO_PASS, *task.hidden.PASS_TO_PASS]))
                    for _ in range(2):  # warm: start state, staged mounts, images, page cache, the stock
                        verify(task, diffs[task.id], rt)
                        time.sleep(args.gap if prestart else 0)
                    tree.bare_pytest(tests)
                    times, bare, creates, status = [], [], [], ""
                    phases: dict[str, list[float]] = {}
                    # Interleaved, so that the load of the moment weighs on both alike.
                    for _ in range(args.reps):
                        bare.append(tree.bare_pytest(tests))
                        t0 = time.perf_counter()
                        verdict = verify(task, diffs[task.id], rt)
                        times.append(time.perf_counter() - t0)
                        status = verdict.status or ""
                        creates += [a.create_s for a in verdict.attempts if a.create_s is not None]
                        last = verdict.attempts[-1]
                        got = {**getattr(last, "checks", {}).get("phases", {}), "create": last.create_s or 0.0}
                        got["host_other_s"] = times[-1] - sum(got.get(k, 0.0) for k in OUTSIDE)
                        for k, v in got.items():
                            phases.setdefault(k, []).append(v)
                        # The agent's turn: the background removal and the refill happen here,
                        # not while the next bare run is timed.
                        time.sleep(args.gap if prestart else 0)
                    phase_rows[task.id] = {k: pct(v, 50) for k, v in phases.items()}
                    r50, r95 = pct(times, 50) / pct(bare, 50), pct(times, 95) / pct(bare, 95)
                    ratios50.append(r50)
                    ratios95.append(r95)
                    sum_bare += pct(bare, 50)
                    sum_verify += pct(times, 50)
                    print(
                        f"{task.id[:36]:36} {pct(bare, 50):8.2f}s {pct(bare, 95):5.2f}s {pct(times, 50):10.2f}s "
                        f"{pct(times, 95):5.2f}s {r50:9.2f}x {r95:5.2f}x "
                        f"{1000 * pct(creates, 50) if creates else float('nan'):8.1f}ms  {status}",
                        flush=True,
                    )
                print(
                    f"{'all tasks':36} {sum_bare:8.2f}s {'':6} {sum_verify:10.2f}s {'':6} "
                    f"{sum_verify / sum_bare:9.2f}x (median task ratio {pct(ratios50, 50):.2f}x, "
                    f"P95 task ratio {pct(ratios95, 95):.2f}x)"
                )
                print_phases(phase_rows)
            finally:
                rt.close()
    finally:
        for tree in trees.values():
            tree.close()
    print(f"\nload average at end: {os.getloadavg()[0]:.2f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
