"""Soak: a thousand-odd episodes across the families with faults injected.

Not a CI test (it takes 15-25 minutes on 2 cores). Prints, measured in this
one run on this machine:

- part A, in this process: rounds of `EvalRun` on the bundled code set
  (a replay whose episodes pass, fail or are not executed, two epochs per
  round), faults injected in turn: the sandbox backend killed for seconds
  (every in-sandbox agent and the zygote), an episode deadline that cuts
  slow episodes off, hostile actions (5 MB, lone surrogates, mappings).
  Every round that ends with env_error episodes is resumed until none is
  left. After each round: this process's RSS, open fds, threads and child
  processes, which must stay flat;
- part B, `sandgym eval` subprocesses: SIGKILL at random points and Ctrl-C
  (once and twice) on code runs, then --resume; browser runs with Ctrl-C
  and Chromium killed mid-episode; a few SWE episodes with their sandboxes
  killed for seconds; after each run, its processes and temporary folders
  must be gone (after `sandgym gc` for killed runs);
- for every episode: its final outcome against the outcome the policy
  earns without faults ("misjudged" counts the ones that differ and are not
  env_error; it must be 0), and the outcome counts.

Usage: .venv/bin/python benchmarks/soak_faults.py [--rounds 30] [--epochs 2] [--seed 0] [--browser 40] [--swe 6]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sandgym.harness import EvalRun  # noqa: E402
from sandgym.policies import ReplayPolicy  # noqa: E402
from sandgym.runtimes.local.runtime import LocalRuntime  # noqa: E402
from sandgym.runtimes.tempdirs import reap_tempdirs  # noqa: E402
from sandgym.specs import TaskSet, bundled_task_set  # noqa: E402
from tests.core._faults import (  # noqa: E402
    SANDBOX_UID,
    Eval,
    descendants,
    fence,
    marked_by,
    mixed_replay,
    outcomes,
    read_records,
    slow_replay,
    temp_dirs_of,
    wait_for,
)

CODE = "sandgym/CodeFunction-v0"
BROWSER = "sandgym/BrowserForm-v0"
SWE = "sandgym/SWERepo-v0"


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def kill_own_sandboxes(seconds: float, stop: threading.Event) -> int:
    """SIGKILL every sandbox-user process under this process for `seconds`."""
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end and not stop.is_set():
        for pid, (uid, _) in descendants(os.getpid()).items():
            if uid == SANDBOX_UID:
                try:
                    os.kill(pid, signal.SIGKILL)
                    n += 1
                except OSError:
                    pass
        time.sleep(0.02)
    return n


class Tally:
    def __init__(self) -> None:
        self.episodes = 0
        self.outcomes: collections.Counter[str] = collections.Counter()
        self.misjudged: list[str] = []
        self.resumes = 0
        self.leaks: list[str] = []
        self.faults: collections.Counter[str] = collections.Counter()
        self.families: collections.Counter[str] = collections.Counter()

    def judge(self, got: dict, expected: dict, where: str, family: str = "code_function") -> None:
        for key, want in expected.items():
            have = got.get(key)
            self.episodes += 1
            self.families[family] += 1
            self.outcomes[str(have)] += 1
            if have != want:
                self.misjudged.append(f"{where}: {key} is {have}, expected {want}")


def part_a(args, work: Path, tally: Tally, rng: random.Random) -> list[dict]:
    """EvalRun rounds in this process; returns the per-round resource figures."""
    rt = LocalRuntime()
    ts = TaskSet.load(bundled_task_set("code_function"))
    replay = mixed_replay(work / "mixed.jsonl")
    # What the replay earns without faults (one clean run).
    clean = EvalRun(CODE, ts, ReplayPolicy(replay), rt, "local", work / "clean", concurrency=2, epochs=args.epochs)
    clean.run()
    expected = {(r.task_id, r.epoch): r.outcome for r in clean.records}
    tally.episodes += 0
    slow = work / "deadline.jsonl"
    hostile = work / "hostile.jsonl"
    with open(hostile, "w") as f:
        for i, t in enumerate(ts.tasks[:8]):
            action = ["x" * (5 << 20), fence("def f():\n    return '\ud800'\n"), {"tool": "bash"}, "```\n" * 1000][
                i % 4
            ]
            f.write(json.dumps({"task_id": t.id, "actions": [action]}) + "\n")
    figures = []
    faults = ["sandboxes", "none", "deadline", "hostile", "sandboxes", "none"]
    for n in range(args.rounds):
        fault = faults[n % len(faults)]
        out = work / f"round-{n}"
        stop = threading.Event()
        killer = None
        if fault == "sandboxes":
            delay, seconds = rng.uniform(0.05, 0.5), rng.uniform(2, 5)

            def kill(delay=delay, seconds=seconds, stop=stop):
                if not stop.wait(delay):
                    tally.faults["sandbox kills"] += kill_own_sandboxes(seconds, stop)

            killer = threading.Thread(target=kill)
            killer.start()
        if fault == "deadline":
            slow_replay(slow, 6, sleep_s=30)  # runs that sleep past the 3 s deadline
            run = EvalRun(
                CODE,
                ts,
                ReplayPolicy(slow),
                rt,
                "local",
                out,
                concurrency=2,
                env_kwargs={"mode": "multi"},
                episode_timeout_s=3,
            )
            run.run(task_ids=ts.ids[:6])
            tally.faults["deadlines"] += sum(r.outcome == "env_error" for r in run.records)
            # --resume without the deadline (the same file, now without the sleep)
            # plays the cut-off episodes again: they pass.
            slow_replay(slow, 6, sleep_s=0)
            again = EvalRun(CODE, ts, ReplayPolicy(slow), rt, "local", out, concurrency=2, env_kwargs={"mode": "multi"})
            again.run(task_ids=ts.ids[:6], resume=True)
            tally.resumes += 1
            got = {(r.task_id, r.epoch): r.outcome for r in again.records}
            tally.judge(got, {(t, 0): "passed" for t in ts.ids[:6]}, f"round {n} (deadline, resumed)")
        elif fault == "hostile":
            run = EvalRun(CODE, ts, ReplayPolicy(hostile), rt, "local", out, concurrency=2)
            run.run(task_ids=ts.ids[:8])
            got = {(r.task_id, r.epoch): r.outcome for r in run.records}
            tally.faults["hostile actions"] += 8
            tally.judge(got, {(t, 0): "failed" for t in ts.ids[:8]}, f"round {n} (hostile)")
        else:
            run = EvalRun(CODE, ts, ReplayPolicy(replay), rt, "local", out, concurrency=2, epochs=args.epochs)
            run.run()
            stop.set()
            if killer is not None:
                killer.join()
            got = {(r.task_id, r.epoch): r.outcome for r in run.records}
            while "env_error" in got.values():  # the backend stayed down past the retries: resume
                tally.resumes += 1
                again = EvalRun(CODE, ts, ReplayPolicy(replay), rt, "local", out, concurrency=2, epochs=args.epochs)
                again.run(resume=True)
                got = {(r.task_id, r.epoch): r.outcome for r in again.records}
            tally.judge(got, expected, f"round {n} ({fault})")
            tally.faults["retried episodes"] += sum(1 for r in read_records(out / "trajectories.jsonl") if r.retries)
        stop.set()
        if killer is not None:
            killer.join()
        kids = [p for p, (uid, _) in descendants(os.getpid()).items()]
        # Sandboxes of this process that are no longer under it: left to init.
        orphans = sorted(set(marked_by(os.getpid())) - set(kids))
        if orphans:
            tally.leaks.append(f"round {n}: sandboxes left to init: {orphans}")
        figures.append(
            {
                "round": n,
                "fault": fault,
                "rss_mb": round(rss_mb(), 1),
                "fds": open_fds(),
                "threads": threading.active_count(),
                "children": len(kids),
            }
        )
        print(json.dumps(figures[-1]), flush=True)
    rt.close()
    return figures


def traj_lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def settle(run: Eval, tally: Tally, killed: bool) -> None:
    """The run's processes gone; its temporary folders gone (after gc if it was killed)."""
    try:
        wait_for(lambda: not run.leftover_processes(), "processes to end", 60)
    except AssertionError as e:
        tally.leaks.append(f"{run.args}: {e}")
    if killed:
        subprocess.run(
            [sys.executable, "-m", "sandgym", "gc", "--owner", str(run.pid)], capture_output=True, timeout=300
        )
    if temp_dirs_of(run.pid):
        tally.leaks.append(f"{run.args}: temp folders left: {temp_dirs_of(run.pid)}")


def resume_until_done(cwd: Path, args: list[str], tally: Tally) -> None:
    for _ in range(5):
        run = Eval(cwd, *args, "--resume")
        rc = run.wait()
        settle(run, tally, False)
        tally.resumes += 1
        traj = cwd / args[args.index("--out") + 1] / "trajectories.jsonl"
        if rc == 0 and "env_error" not in outcomes(traj).values():
            return


def part_b_code(work: Path, tally: Tally, rng: random.Random, epochs: int) -> None:
    replay = mixed_replay(work / "mixed.jsonl")
    clean_dir = work / "clean"
    ts = TaskSet.load(bundled_task_set("code_function"))
    args = ["--policy", f"replay:{replay}", "--out", "b-code", "-j", "2", "--epochs", str(epochs)]
    clean = Eval(work, "--policy", f"replay:{replay}", "--out", str(clean_dir), "-j", "2", "--epochs", str(epochs))
    assert clean.wait() == 0, clean.output()
    expected = outcomes(clean_dir / "trajectories.jsonl")
    traj = work / "b-code" / "trajectories.jsonl"
    for cycle in range(6):
        run = Eval(work, *args, *(["--resume"] if cycle else []))
        before = traj_lines(traj)
        want = before + rng.randint(1, 12)

        def wrote_more(w: int = want, r: Eval = run) -> bool:
            return traj_lines(traj) >= w or r.proc.poll() is not None

        wait_for(wrote_more, "records")
        kind = ["SIGKILL", "SIGKILL", "SIGINT", "SIGKILL", "SIGINT twice", "SIGKILL"][cycle]
        if run.proc.poll() is None:
            time.sleep(rng.uniform(0, 0.2))
            run.signal(signal.SIGKILL if kind == "SIGKILL" else signal.SIGINT)
            if kind == "SIGINT twice":
                time.sleep(0.1)
                run.signal(signal.SIGINT)
            tally.faults[kind] += 1
        run.wait()
        read_records(traj, allow_torn=True)
        settle(run, tally, kind == "SIGKILL")
    resume_until_done(work, args, tally)
    tally.judge(outcomes(traj), expected, "code CLI")
    del ts


def part_b_browser(work: Path, tally: Tally, rng: random.Random, n: int) -> None:
    args = ["--env", BROWSER, "--out", "b-browser", "-j", "2", "--limit", str(max(1, n // 2)), "--epochs", "2"]
    traj = work / "b-browser" / "trajectories.jsonl"
    # 1: Ctrl-C after a few episodes.
    run = Eval(work, *args)
    wait_for(lambda: traj_lines(traj) >= 3 or run.proc.poll() is not None, "browser records")
    run.signal(signal.SIGINT)
    rc = run.wait()
    tally.faults["browser Ctrl-C"] += 1
    if rc not in (0, 130):
        tally.leaks.append(f"browser run exited {rc} after Ctrl-C (a crash?)")
    settle(run, tally, False)
    # 2: Chromium killed mid-episode, twice.
    run = Eval(work, *args, "--resume")
    for _ in range(2):
        time.sleep(rng.uniform(2, 5))
        for pid in descendants(run.pid):
            try:
                with open(f"/proc/{pid}/comm") as f:
                    if f.read().startswith("chrom"):
                        os.kill(pid, signal.SIGKILL)
                        tally.faults["Chromium kills"] += 1
            except OSError:
                pass
    run.wait()
    settle(run, tally, False)
    resume_until_done(work, args, tally)
    got = outcomes(traj)
    tally.judge(got, {k: "passed" for k in got}, "browser CLI", "browser_form")


def part_b_swe(work: Path, tally: Tally, n: int) -> None:
    args = ["--env", SWE, "--out", "b-swe", "-j", "2", "--limit", str(n), "--epochs", "2"]
    traj = work / "b-swe" / "trajectories.jsonl"
    run = Eval(work, *args)
    wait_for(lambda: run.sandboxes() or run.proc.poll() is not None, "")
    end = time.monotonic() + 4
    while time.monotonic() < end and run.proc.poll() is None:
        for pid in run.sandboxes():
            try:
                os.kill(pid, signal.SIGKILL)
                tally.faults["SWE sandbox kills"] += 1
            except OSError:
                pass
        time.sleep(0.05)
    run.wait()
    settle(run, tally, False)
    resume_until_done(work, args, tally)
    got = outcomes(traj)
    tally.judge(got, {k: "passed" for k in got}, "SWE CLI", "swe_repo")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--browser", type=int, default=40, help="browser episodes, two epochs per task (0: none)")
    ap.add_argument("--swe", type=int, default=5, help="SWE tasks, two epochs each (0: none)")
    ap.add_argument("--work", type=Path, default=None)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    work = a.work or Path(tempfile.mkdtemp(prefix="soak-faults-"))
    work.mkdir(parents=True, exist_ok=True)
    tally = Tally()
    t0 = time.perf_counter()
    print(f"work folder: {work}", flush=True)
    (work / "a").mkdir(exist_ok=True)
    (work / "b").mkdir(exist_ok=True)
    figures = part_a(a, work / "a", tally, rng)
    part_b_code(work / "b", tally, rng, a.epochs)
    if a.browser:
        part_b_browser(work / "b", tally, rng, a.browser)
    if a.swe:
        part_b_swe(work / "b", tally, a.swe)
    left = [p for p in reap_tempdirs() if "soak" not in p.name]
    wall = time.perf_counter() - t0
    first, last = figures[1] if len(figures) > 1 else figures[0], figures[-1]
    report = {
        "episodes": tally.episodes,
        "episodes_by_family": dict(tally.families),
        "outcomes": dict(tally.outcomes),
        "misjudged": len(tally.misjudged),
        "misjudged_examples": tally.misjudged[:10],
        "resumes": tally.resumes,
        "faults": dict(tally.faults),
        "leaks": tally.leaks,
        "temp_folders_gc_found_at_the_end": [str(p) for p in left],
        "rss_mb_round_1_to_last": [first["rss_mb"], last["rss_mb"]],
        "fds_round_1_to_last": [first["fds"], last["fds"]],
        "threads_round_1_to_last": [first["threads"], last["threads"]],
        "children_after_each_round": sorted({f["children"] for f in figures}),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "wall_s": round(wall, 1),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
