"""Benchmark: HumanEval-164 oracle episodes through `sandgym eval --executor
ray` on 1, 2 and 3 Ray worker nodes, against the local executor at the
same total concurrency.

Prints, measured in this one run on this machine:
- per configuration, the median wall of `sandgym eval` (the whole command:
  interpreter start, connecting to Ray and starting the node runners
  included) and the run's own wall (`summary.json`), episodes per second,
  P50/P95 of the episodes' total seconds, and the ratio to the local
  executor's wall measured right before it (overhead = ratio - 1; the
  issue-32 target is <= 10%);
- the episodes each node played (placement spreads over every node).

Each Ray configuration gets a fresh cluster from scripts/ray-cluster.sh (a
head with no CPUs and N workers; the -j seats split over the workers by
their declared CPUs, J/N each), started before the clock and stopped after.
The local and Ray runs alternate within each round. The machine is shared:
compare the ratios of one run, printed next to the load average. The last
Ray run folder of each configuration is kept (its path is printed) for
`sandgym capacity RUN --fleet 1000`.

Usage: .venv/bin/python benchmarks/bench_ray.py [--rounds 2] [--concurrency 4] [--nodes 1 2 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

from humaneval_setup import humaneval_workdir

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = ROOT / "scripts" / "ray-cluster.sh"
SANDGYM = Path(sys.executable).parent / "sandgym"
STATE = "/tmp/sgray-bench"
CLUSTER_ENV = {**os.environ, "SANDGYM_RAY_STATE": STATE, "SANDGYM_RAY_PORT": "17380"}
AUTH = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": f"{STATE}/auth_token"}  # the cluster's token


def cluster(*args: str) -> str:
    out = subprocess.run(["bash", str(CLUSTER), *args], env=CLUSTER_ENV, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"ray-cluster.sh {' '.join(args)} failed:\n{out.stdout}\n{out.stderr}")
    return out.stdout.strip().splitlines()[-1]


def run_eval(tasks: Path, out: Path, concurrency: int, address: str | None) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    cmd = [str(SANDGYM), "eval", "--tasks", str(tasks), "--policy", "oracle", "-j", str(concurrency), "--out", str(out)]
    if address:
        cmd += ["--executor", "ray", "--ray-address", address]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **AUTH})
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    summary = json.loads((out / "summary.json").read_text())
    records = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    totals = sorted(r["timings"]["total_s"] for r in records)
    starts = [datetime.fromisoformat(r["started_at"]).timestamp() for r in records]
    # From the first episode's start to the last one's end: the run without its start-up.
    span = max(s + r["timings"]["total_s"] for s, r in zip(starts, records, strict=True)) - min(starts)
    nodes = collections.Counter((r.get("executor") or {}).get("node", "local")[:8] for r in records)
    return {
        "wall_s": wall,
        "run_wall_s": summary["wall_s"],
        "span_s": span,
        "passed": summary["outcomes"]["passed"],
        "n": len(records),
        "p50": totals[len(totals) // 2],
        "p95": totals[int(len(totals) * 0.95)],
        "nodes": dict(nodes),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--concurrency", type=int, default=4, help="total episodes at once, local and Ray alike")
    ap.add_argument("--nodes", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    work, tasks, _ = humaneval_workdir("sandgym-bench-ray-")
    keep = Path("runs") / "bench-ray"
    j = args.concurrency
    rows = []
    print(f"load before: {os.getloadavg()}  ({os.cpu_count()} cores)", flush=True)
    try:
        for n in args.nodes:
            cpus = max(1, -(-j // n))
            local, ray = [], []
            try:
                address = cluster("up", "--workers", str(n), "--cpus", str(cpus))
                for rnd in range(args.rounds):
                    local.append(run_eval(tasks, work / "local", j, None))
                    ray.append(run_eval(tasks, keep / f"nodes-{n}", j, address))
                    print(
                        f"  nodes {n} round {rnd + 1}: local {local[-1]['wall_s']:.1f} s, "
                        f"ray {ray[-1]['wall_s']:.1f} s (episodes {local[-1]['span_s']:.1f} s | "
                        f"{ray[-1]['span_s']:.1f} s), load {os.getloadavg()[0]:.1f}",
                        flush=True,
                    )
            finally:
                cluster("down")
            ratios = [r["wall_s"] / loc["wall_s"] for r, loc in zip(ray, local, strict=True)]
            run_ratios = [r["run_wall_s"] / loc["run_wall_s"] for r, loc in zip(ray, local, strict=True)]
            span_ratios = [r["span_s"] / loc["span_s"] for r, loc in zip(ray, local, strict=True)]
            rows.append(
                {
                    "nodes": n,
                    "concurrency": j,
                    "local_wall_s": statistics.median(x["wall_s"] for x in local),
                    "ray_wall_s": statistics.median(x["wall_s"] for x in ray),
                    "ratio": statistics.median(ratios),
                    "run_ratio": statistics.median(run_ratios),
                    "span_ratio": statistics.median(span_ratios),
                    "local_span_s": statistics.median(x["span_s"] for x in local),
                    "ray_span_s": statistics.median(x["span_s"] for x in ray),
                    "local_p50_p95": (local[-1]["p50"], local[-1]["p95"]),
                    "ray_p50_p95": (ray[-1]["p50"], ray[-1]["p95"]),
                    "passed": [x["passed"] for x in local + ray],
                    "ray_nodes": ray[-1]["nodes"],
                    "run_folder": str(keep / f"nodes-{n}"),
                }
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\nHumanEval-164 oracle, -j {j} in all; load after: {os.getloadavg()}")
    head = f"{'nodes':>5} {'local s':>8} {'ray s':>8} {'ratio':>6} {'run ratio':>9} {'span ratio':>10} {'ep/s ray':>8}"
    print(f"{head}  episode P50/P95 s (local | ray)")
    for r in rows:
        print(
            f"{r['nodes']:>5} {r['local_wall_s']:>8.1f} {r['ray_wall_s']:>8.1f} {r['ratio']:>6.2f} "
            f"{r['run_ratio']:>9.2f} {r['span_ratio']:>10.2f} "
            f"{164 / r['ray_wall_s']:>8.2f}  {r['local_p50_p95'][0]:.2f}/{r['local_p50_p95'][1]:.2f} | "
            f"{r['ray_p50_p95'][0]:.2f}/{r['ray_p50_p95'][1]:.2f}  per node {sorted(r['ray_nodes'].values())}"
        )
    print(
        "ratio: the whole command's wall, Ray / local; run ratio: the runs' own walls (summary.json, joining "
        "the cluster and starting the runners included); span ratio: first episode start to last episode end"
    )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
