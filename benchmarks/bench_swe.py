"""SWE repo-issue family: reset latency and verify latency per task, printed.

    .venv/bin/python benchmarks/bench_swe.py [--tasks DIR ...] [--resets 20] [--verifies 5] [--runtime local]

By default the bundled billing set, plus the first task of every factory
set found under task_specs/swe_repo/ (other than billing-v1). Reset is
getting a sandbox + unpacking the cached start state (the cache is warmed
first), measured with the warm pool (the env's default: the last episode's
sandbox back after a verified reset) and without it (a new sandbox per
reset); verify is the gold patch judged in a fresh sandbox.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from sandgym.envs.swe_repo.env import SWERepoEnv
from sandgym.runtimes import get_runtime
from sandgym.specs import TaskSet, bundled_task_set
from sandgym.specs.swe_repo import SWETaskPair
from sandgym.verifiers.swe_repo.host import verify


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
            tasks = [SWETaskPair.of(t) for t in (ts.tasks if folder == bundled_task_set("swe_repo") else ts.tasks[:1])]
            warm = SWERepoEnv(tasks=ts, runtime=runtime)  # warm_pool=1, the default
            cold = SWERepoEnv(tasks=ts, runtime=runtime, warm_pool=0)  # a new sandbox per reset
            print(f"\n{ts.meta.name} ({args.runtime}): {len(tasks)} task(s)")
            print(
                f"{'task':42} {'reset warm P50':>15} {'P95':>7} {'cold P50':>9} {'P95':>7} "
                f"{'verify P50':>11} {'P95':>7}  status"
            )
            for task in tasks:
                timed = {}
                for name, env in (("warm", warm), ("cold", cold)):
                    env.reset(options={"task_id": task.id})  # warms the start-state cache (and the pool)
                    resets = []
                    for _ in range(args.resets):
                        t0 = time.perf_counter()
                        env.reset(options={"task_id": task.id})
                        resets.append(time.perf_counter() - t0)
                    env._close_sandbox()
                    timed[name] = resets
                verifies: list[float] = []
                status: str | None = ""
                for _ in range(args.verifies):
                    t0 = time.perf_counter()
                    status = verify(task, task.hidden.patch, runtime).status
                    verifies.append(time.perf_counter() - t0)
                w, c = timed["warm"], timed["cold"]
                print(
                    f"{task.id[:42]:42} {pct(w, 50) * 1000:13.0f}ms {pct(w, 95) * 1000:5.0f}ms "
                    f"{pct(c, 50) * 1000:7.0f}ms {pct(c, 95) * 1000:5.0f}ms "
                    f"{pct(verifies, 50):10.2f}s {pct(verifies, 95):6.2f}s  {status}"
                )
            print(f"(last task: cold/warm reset mean {statistics.mean(c) / statistics.mean(w):.1f}x)")
            warm.close()
            cold.close()
    finally:
        runtime.close()


if __name__ == "__main__":
    main()
