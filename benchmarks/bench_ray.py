"""Benchmark: HumanEval-164 oracle episodes through `sandgym eval --executor
ray` on 1, 2 and 3 Ray worker nodes, against the local executor at the
same total concurrency; the first eval on a cluster (cold: its runners are
started for it) apart from a later one (warm: it claims them).

Prints, measured in this one run on this machine:
- per configuration, the median wall of `sandgym eval` (the whole command:
  interpreter start, connecting to Ray and starting or claiming the node
  runners included), cold and warm, and the warm run's own wall
  (`summary.json`) and episode span, episodes per second, P50/P95 of the
  episodes' total seconds, and the ratio to the local executor's wall
  measured in the same round (overhead = ratio - 1; the issue-32 target is
  <= 10%);
- with --episodes, one SWE and one browser episode (-j 1) locally and
  through Ray, cold and warm;
- the episodes each node played (placement spreads over every node).

Each Ray configuration gets a fresh cluster from scripts/ray-cluster.sh (a
head with no CPUs and N workers; the -j seats split over the workers by
their declared CPUs, J/N each), started before the clock and stopped after.
Each round plays local, then stops the warm runners
(`ray-cluster.sh stop-runners`) and plays Ray cold, then Ray warm. The machine is shared:
compare the ratios of one run, printed next to the load average. The last
Ray run folder of each configuration is kept (its path is printed) for
`sandgym capacity RUN --fleet 1000`.

Usage: .venv/bin/python benchmarks/bench_ray.py [--rounds 2] [--concurrency 4] [--nodes 1 2 3] [--episodes]
       [--no-browser] [--json out.json]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
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


def run_eval(tasks: Path | None, out: Path, concurrency: int, address: str | None, *extra: str) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    cmd = [str(SANDGYM), "eval", "--policy", "oracle", "-j", str(concurrency), "--out", str(out), *extra]
    if tasks is not None:
        cmd += ["--tasks", str(tasks)]
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
        "passed": summary["outcomes"].get("passed", 0),
        "n": len(records),
        "p50": totals[len(totals) // 2],
        "p95": totals[int(len(totals) * 0.95)],
        "nodes": dict(nodes),
        "warm": warm_runners(done.stdout + done.stderr),
    }


def warm_runners(output: str) -> tuple[int, int]:
    """(warm, all) runners, as the eval logs them; (0, 0) for a local eval."""
    m = re.search(r"(\d+) of (\d+) runners warm", output)
    return (int(m[1]), int(m[2])) if m else (0, 0)


def ratio(ray: list[dict], local: list[dict], key: str) -> float:
    return statistics.median(r[key] / loc[key] for r, loc in zip(ray, local, strict=True))


def one_config(tasks: Path, work: Path, keep: Path, j: int, n: int, rounds: int) -> dict:
    """Per round: local, then a cold Ray eval (its runners just stopped), then a warm one (claiming them)."""
    cpus = max(1, -(-j // n))
    local, cold, warm = [], [], []
    try:
        address = cluster("up", "--workers", str(n), "--cpus", str(cpus))
        for rnd in range(rounds):
            local.append(run_eval(tasks, work / "local", j, None))
            cluster("stop-runners")
            cold.append(run_eval(tasks, keep / f"nodes-{n}-cold", j, address))
            warm.append(run_eval(tasks, keep / f"nodes-{n}", j, address))
            print(
                f"  nodes {n} round {rnd + 1}: local {local[-1]['wall_s']:.1f} s, ray cold "
                f"{cold[-1]['wall_s']:.1f} s, warm {warm[-1]['wall_s']:.1f} s (episodes {local[-1]['span_s']:.1f}"
                f" | {cold[-1]['span_s']:.1f} | {warm[-1]['span_s']:.1f} s), load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
            (c, _), (w, all_) = cold[-1]["warm"], warm[-1]["warm"]
            assert c == 0 and w == all_ > 0, f"runners warm: cold eval {c}, warm eval {w} of {all_}"
    finally:
        cluster("down")
    return {
        "nodes": n,
        "concurrency": j,
        "local_wall_s": statistics.median(x["wall_s"] for x in local),
        "cold_wall_s": statistics.median(x["wall_s"] for x in cold),
        "warm_wall_s": statistics.median(x["wall_s"] for x in warm),
        "cold_ratio": ratio(cold, local, "wall_s"),
        "warm_ratio": ratio(warm, local, "wall_s"),
        "warm_run_ratio": ratio(warm, local, "run_wall_s"),
        "warm_span_ratio": ratio(warm, local, "span_s"),
        "local_p50_p95": (local[-1]["p50"], local[-1]["p95"]),
        "warm_p50_p95": (warm[-1]["p50"], warm[-1]["p95"]),
        "passed": [x["passed"] for x in local + cold + warm],
        "ray_nodes": warm[-1]["nodes"],
        "run_folder": str(keep / f"nodes-{n}"),
    }


def one_episode_figures(work: Path, rounds: int, browser: bool) -> list[dict]:
    """A SWE (and a browser) episode, -j 1: local, then through Ray on one node, cold and warm."""
    envs = ["sandgym/SWERepo-v0"] + (["sandgym/BrowserForm-v0"] if browser else [])
    rows = []
    try:
        address = cluster("up", "--workers", "1", "--cpus", "1")
        for env in envs:
            local, cold, warm = [], [], []
            for _ in range(rounds):
                extra = ("--env", env, "--limit", "1")
                local.append(run_eval(None, work / "one-local", 1, None, *extra))
                cluster("stop-runners")
                cold.append(run_eval(None, work / "one-cold", 1, address, *extra))
                warm.append(run_eval(None, work / "one-warm", 1, address, *extra))
            rows.append(
                {
                    "env": env,
                    "local_wall_s": statistics.median(x["wall_s"] for x in local),
                    "cold_wall_s": statistics.median(x["wall_s"] for x in cold),
                    "warm_wall_s": statistics.median(x["wall_s"] for x in warm),
                    "local_episode_s": statistics.median(x["p50"] for x in local),
                    "warm_episode_s": statistics.median(x["p50"] for x in warm),
                    "passed": [x["passed"] for x in local + cold + warm],
                }
            )
            print(f"  {env}: {rows[-1]}", flush=True)
    finally:
        cluster("down")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--concurrency", type=int, default=4, help="total episodes at once, local and Ray alike")
    ap.add_argument("--nodes", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--episodes", action="store_true", help="also a SWE and a browser episode through Ray")
    ap.add_argument("--no-browser", action="store_true", help="with --episodes: the SWE episode only")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    work, tasks, _ = humaneval_workdir("sandgym-bench-ray-")
    keep = Path("runs") / "bench-ray"
    j = args.concurrency
    print(f"load before: {os.getloadavg()}  ({os.cpu_count()} cores)", flush=True)
    try:
        rows = [one_config(tasks, work, keep, j, n, args.rounds) for n in args.nodes]
        episodes = one_episode_figures(work, args.rounds, not args.no_browser) if args.episodes else []
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\nHumanEval-164 oracle, -j {j} in all; load after: {os.getloadavg()}")
    head = (
        f"{'nodes':>5} {'local s':>8} {'cold s':>7} {'warm s':>7} {'cold x':>6} {'warm x':>6} "
        f"{'run x':>6} {'span x':>6} {'ep/s warm':>9}"
    )
    print(f"{head}  episode P50/P95 s (local | warm)")
    for r in rows:
        print(
            f"{r['nodes']:>5} {r['local_wall_s']:>8.1f} {r['cold_wall_s']:>7.1f} {r['warm_wall_s']:>7.1f} "
            f"{r['cold_ratio']:>6.2f} {r['warm_ratio']:>6.2f} {r['warm_run_ratio']:>6.2f} "
            f"{r['warm_span_ratio']:>6.2f} {164 / r['warm_wall_s']:>9.2f}  "
            f"{r['local_p50_p95'][0]:.2f}/{r['local_p50_p95'][1]:.2f} | "
            f"{r['warm_p50_p95'][0]:.2f}/{r['warm_p50_p95'][1]:.2f}  per node {sorted(r['ray_nodes'].values())}"
        )
    print(
        "x: Ray / local, medians of the rounds' ratios. cold: the first eval (runners started for it); warm: "
        "the next eval, claiming them. cold x, warm x: the whole command's wall; run x: the runs' own walls "
        "(summary.json); span x: first episode start to last episode end (warm)"
    )
    for e in episodes:
        print(
            f"{e['env']}: one episode, -j 1, command wall local {e['local_wall_s']:.1f} s, Ray cold "
            f"{e['cold_wall_s']:.1f} s, warm {e['warm_wall_s']:.1f} s; episode {e['local_episode_s']:.2f} s "
            f"local, {e['warm_episode_s']:.2f} s warm; passed {e['passed']}"
        )
    if args.json:
        args.json.write_text(json.dumps({"humaneval": rows, "episodes": episodes}, indent=2) + "\n")


if __name__ == "__main__":
    main()
