"""SWE repo-issue family: reset latency and verify latency per task, printed.

    .venv/bin/python benchmarks/bench_swe.py [--tasks DIR ...] [--resets 20] [--verifies 5] [--runtime local]

By default the bundled billing set, plus the first task of every factory
set found under task_specs/swe_repo/ (other than billing-v1). Reset is
create sandbox + unpack the cached start state (the cache is warmed first);
verify is the gold patch judged in a fresh sandbox.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from sandgym.envs.swe_repo.env import SWERepoEnv
from sandgym.runtimes import get_runtime
from sandgym.specs import TaskSet, bundled_task_set
from sandgym.verifiers.swe_repo import verify


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", action="append", default=None)
    ap.add_argument("--resets", type=int, default=20)
    ap.add_argument("--verifies", type=int, default=5)
    ap.add_argument("--runtime", default="local")
    args = ap.parse_args()
    folders = [Path(p) for p in args.tasks] if args.tasks else [bundled_task_set("swe_repo")]
    if not args.tasks:
        root = bundled_task_set("swe_repo").parent
        folders += [d for d in sorted(root.iterdir()) if (d / "taskset.yaml").exists() and d.name != "billing-v1"]
    runtime = get_runtime(args.runtime)
    try:
        for folder in folders:
            ts = TaskSet.load(folder)
            tasks = ts.tasks if folder == bundled_task_set("swe_repo") else ts.tasks[:1]
            env = SWERepoEnv(tasks=ts, runtime=runtime)
            print(f"\n{ts.meta.name} ({args.runtime}): {len(tasks)} task(s)")
            print(f"{'task':42} {'reset P50':>10} {'P95':>8} {'verify P50':>11} {'P95':>8}  status")
            for task in tasks:
                env.reset(options={"task_id": task.id})  # warms the start-state cache
                resets = []
                for _ in range(args.resets):
                    t0 = time.perf_counter()
                    env.reset(options={"task_id": task.id})
                    resets.append(time.perf_counter() - t0)
                env._close_sandbox()
                verifies, status = [], ""
                for _ in range(args.verifies):
                    t0 = time.perf_counter()
                    status = verify(task, task.hidden.patch, runtime).status
                    verifies.append(time.perf_counter() - t0)
                print(f"{task.id[:42]:42} {pct(resets, 50) * 1000:8.0f}ms {pct(resets, 95) * 1000:6.0f}ms "
                      f"{pct(verifies, 50):10.2f}s {pct(verifies, 95):7.2f}s  {status}")
            env.close()
            print(f"(mean reset {statistics.mean(resets) * 1000:.0f} ms over the last task)")
    finally:
        runtime.close()


if __name__ == "__main__":
    main()
