"""Benchmark: HumanEval-164 oracle episodes through `sandgym eval --executor
ray` on 1, 2 and 3 Ray worker nodes, against the local executor at the
same total concurrency.

Three ways to reach the cluster's runners, each measured:
- cold: the first eval on a cluster (its runners are started for it, through Ray);
- warm via Ray: a later eval that joins Ray and claims the warm runners
  there (the cache of runner addresses hidden from it);
- direct: a later eval that reaches the warm runners over their own RPC
  (`sandgym.cluster.direct`), with no `import ray` in its process.

Each round plays, alternately: local, cold, local, warm via Ray, local,
direct; each Ray eval's ratio is paired with the local eval just before it
(the machine is shared: a paired ratio cancels most of the load that
comes and goes). Printed, per configuration: median command walls and the
medians of the paired ratios (overhead = ratio - 1; the issue-32 target is
<= 10%), of the runs' own walls (`summary.json`) and of their episode spans,
P50/P95 of the episodes' total seconds, and the episodes each node played;
the load average next to each round. Before the rounds, the driver's fixed
costs the direct path avoids: `import ray`, `ray.init` + `ray.shutdown`,
against connecting to the runners directly.

Each Ray configuration gets a fresh cluster from scripts/ray-cluster.sh (a
head with no CPUs and N workers; the -j seats split over the workers by
their declared CPUs, J/N each), started before the clock and stopped
after. The last Ray run folder of each configuration is kept (its path is
printed) for `sandgym capacity RUN --fleet 1000`.

Usage: .venv/bin/python benchmarks/bench_ray.py [--rounds 3] [--concurrency 4] [--nodes 1 2 3] [--episodes]
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
from typing import Any

from humaneval_setup import humaneval_workdir

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = ROOT / "scripts" / "ray-cluster.sh"
SANDGYM = Path(sys.executable).parent / "sandgym"
STATE = "/tmp/sgray-bench"
CLUSTER_ENV = {**os.environ, "SANDGYM_RAY_STATE": STATE, "SANDGYM_RAY_PORT": "17380"}
AUTH = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": f"{STATE}/auth_token"}  # the cluster's token
RUNNERS = f"{STATE}-runners"  # where the evals write down the runners' addresses (direct.py)


def cluster(*args: str) -> str:
    out = subprocess.run(["bash", str(CLUSTER), *args], env=CLUSTER_ENV, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"ray-cluster.sh {' '.join(args)} failed:\n{out.stdout}\n{out.stderr}")
    return out.stdout.strip().splitlines()[-1]


def run_eval(
    tasks: Path | None, out: Path, concurrency: int, address: str | None, *extra: str, direct: bool = True
) -> dict:
    """One `sandgym eval`; `direct` False: the runners' addresses hidden, so it goes through Ray."""
    shutil.rmtree(out, ignore_errors=True)
    runners = RUNNERS if direct else str(out) + "-no-runners"
    cmd = [str(SANDGYM), "eval", "--policy", "oracle", "-j", str(concurrency), "--out", str(out), *extra]
    if tasks is not None:
        cmd += ["--tasks", str(tasks)]
    if address:
        cmd += ["--executor", "ray", "--ray-address", address]
    t0 = time.perf_counter()
    done = subprocess.run(
        cmd, capture_output=True, text=True, env={**os.environ, **AUTH, "SANDGYM_RAY_RUNNERS": runners}
    )
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
        "direct": "reached directly" in done.stdout + done.stderr,
        "load": os.getloadavg()[0],
    }


def warm_runners(output: str) -> tuple[int, int]:
    """(warm, all) runners, as the eval logs them; (0, 0) for a local eval."""
    m = re.search(r"(\d+) of (\d+) runners warm", output)
    return (int(m[1]), int(m[2])) if m else (0, 0)


def paired(pairs: list[tuple[dict, dict]], key: str) -> float:
    """The median of Ray / local over (Ray eval, the local eval just before it)."""
    return statistics.median(r[key] / loc[key] for r, loc in pairs)


def timed(code: str, env: dict[str, str], n: int = 3) -> float:
    """Median seconds of `code` in a fresh interpreter (its own clock, not the interpreter's start)."""
    wrap = f"import time\nt0 = time.perf_counter()\n{code}\nprint(time.perf_counter() - t0)"
    runs = []
    for _ in range(n):
        out = subprocess.run([sys.executable, "-c", wrap], capture_output=True, text=True, env=env, check=True)
        runs.append(float(out.stdout.split()[-1]))
    return statistics.median(runs)


def driver_costs(address: str) -> dict[str, float]:
    """What a driver pays before its first episode, by way of reaching the runners."""
    env = {**os.environ, **AUTH, "SANDGYM_RAY_RUNNERS": RUNNERS}
    join = f"import logging, ray\nray.init(address={address!r}, logging_level=logging.ERROR, log_to_driver=False)"
    hello = (
        "from sandgym.cluster.direct import Link, recall\nfrom sandgym.cluster.wire import cluster_token, connect\n"
        f"for e in recall({address!r}):\n"
        "    Link(connect(e['rpc'], cluster_token()), e['rpc']).request('hello').result(10)"
    )
    return {
        "import_ray_s": timed("import ray", env),
        "ray_join_s": timed(f"{join}\nray.shutdown()", env),  # import ray, ray.init, ray.shutdown
        "direct_hello_s": timed(hello, env),
    }


def one_config(tasks: Path, work: Path, keep: Path, j: int, n: int, rounds: int) -> dict:
    """Per round, alternately: local, cold Ray; local, warm via Ray; local, direct."""
    cpus = max(1, -(-j // n))
    cold: list[tuple[dict, dict]] = []
    warm: list[tuple[dict, dict]] = []
    direct: list[tuple[dict, dict]] = []
    costs: dict[str, float] = {}
    try:
        address = cluster("up", "--workers", str(n), "--cpus", str(cpus))
        for rnd in range(rounds):
            cluster("stop-runners")
            loc = run_eval(tasks, work / "local", j, None)
            cold.append((run_eval(tasks, keep / f"nodes-{n}-cold", j, address), loc))
            loc = run_eval(tasks, work / "local", j, None)
            warm.append((run_eval(tasks, keep / f"nodes-{n}-ray", j, address, direct=False), loc))
            loc = run_eval(tasks, work / "local", j, None)
            direct.append((run_eval(tasks, keep / f"nodes-{n}", j, address), loc))
            if not costs:
                costs = driver_costs(address)
            print(
                f"  nodes {n} round {rnd + 1}: walls local/cold {cold[-1][1]['wall_s']:.1f}/{cold[-1][0]['wall_s']:.1f}"
                f" s, local/warm-ray {warm[-1][1]['wall_s']:.1f}/{warm[-1][0]['wall_s']:.1f} s, local/direct "
                f"{direct[-1][1]['wall_s']:.1f}/{direct[-1][0]['wall_s']:.1f} s; load "
                + "/".join(f"{x['load']:.1f}" for pair in (cold[-1], warm[-1], direct[-1]) for x in pair[::-1]),
                flush=True,
            )
            (c, _), (w, all_), (d, _) = cold[-1][0]["warm"], warm[-1][0]["warm"], direct[-1][0]["warm"]
            assert c == 0 and w == all_ == d > 0, f"runners warm: cold {c}, via Ray {w}, direct {d} of {all_}"
            assert direct[-1][0]["direct"] and not warm[-1][0]["direct"], "the direct eval went through Ray"
    finally:
        cluster("down")
    out: dict[str, Any] = {"nodes": n, "concurrency": j, **costs}
    for name, pairs in (("cold", cold), ("warm_ray", warm), ("direct", direct)):
        out[f"{name}_wall_s"] = statistics.median(r["wall_s"] for r, _ in pairs)
        out[f"{name}_ratio"] = paired(pairs, "wall_s")
        out[f"{name}_run_ratio"] = paired(pairs, "run_wall_s")
        out[f"{name}_span_ratio"] = paired(pairs, "span_s")
    runs = [x for pairs in (cold, warm, direct) for pair in pairs for x in pair]
    locals_ = [loc for pairs in (cold, warm, direct) for _, loc in pairs]
    out["breakdown"] = {
        name: {
            # interpreter start, imports, exit: outside the run's own clock
            "process_s": statistics.median(x["wall_s"] - x["run_wall_s"] for x in xs),
            # the run's start (joining, claiming), its writing and its tail: outside the episodes' span
            "start_tail_s": statistics.median(x["run_wall_s"] - x["span_s"] for x in xs),
            "span_s": statistics.median(x["span_s"] for x in xs),
        }
        for name, xs in (
            ("local", locals_),
            ("cold", [r for r, _ in cold]),
            ("ray", [r for r, _ in warm]),
            ("direct", [r for r, _ in direct]),
        )
    }
    out.update(
        local_wall_s=statistics.median(loc["wall_s"] for pairs in (cold, warm, direct) for _, loc in pairs),
        direct_ratios=[r["wall_s"] / loc["wall_s"] for r, loc in direct],
        local_p50_p95=(direct[-1][1]["p50"], direct[-1][1]["p95"]),
        direct_p50_p95=(direct[-1][0]["p50"], direct[-1][0]["p95"]),
        passed=[x["passed"] for x in runs],
        ray_nodes=direct[-1][0]["nodes"],
        load=[min(x["load"] for x in runs), max(x["load"] for x in runs)],
        run_folder=str(keep / f"nodes-{n}"),
    )
    return out


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
    ap.add_argument("--rounds", type=int, default=3)
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
        shutil.rmtree(RUNNERS, ignore_errors=True)
    print(f"\nHumanEval-164 oracle, -j {j} in all; load after: {os.getloadavg()}")
    print(
        f"{'nodes':>5} {'local s':>8} {'cold s':>7} {'ray s':>6} {'direct s':>8} {'cold x':>6} {'ray x':>6} "
        f"{'direct x':>8} {'run x':>6} {'span x':>6}  episode P50/P95 s (local | direct)"
    )
    for r in rows:
        print(
            f"{r['nodes']:>5} {r['local_wall_s']:>8.1f} {r['cold_wall_s']:>7.1f} {r['warm_ray_wall_s']:>6.1f} "
            f"{r['direct_wall_s']:>8.1f} {r['cold_ratio']:>6.2f} {r['warm_ray_ratio']:>6.2f} "
            f"{r['direct_ratio']:>8.2f} {r['direct_run_ratio']:>6.2f} {r['direct_span_ratio']:>6.2f}  "
            f"{r['local_p50_p95'][0]:.2f}/{r['local_p50_p95'][1]:.2f} | "
            f"{r['direct_p50_p95'][0]:.2f}/{r['direct_p50_p95'][1]:.2f}  per node {sorted(r['ray_nodes'].values())}"
            f"  load {r['load'][0]:.1f}-{r['load'][1]:.1f}; direct/local each round "
            + " ".join(f"{x:.2f}" for x in r["direct_ratios"])
        )
    print(
        "x: Ray / local, medians of paired ratios (each Ray eval over the local eval just before it). cold: the "
        "first eval (runners started for it); ray: a later eval claiming them through Ray; direct: a later eval "
        "reaching them over their own RPC, without Ray. cold/ray/direct x: the whole command's wall; run x, "
        "span x (direct): the runs' own walls (summary.json), first episode start to last episode end"
    )
    print("where the wall goes (medians, s): process start+exit / run start+tail / episodes' span")
    for r in rows:
        print(
            f"  {r['nodes']} node(s): "
            + "; ".join(
                f"{k} {v['process_s']:.2f} / {v['start_tail_s']:.2f} / {v['span_s']:.2f}"
                for k, v in r["breakdown"].items()
            )
        )
    if rows:
        r = rows[0]
        print(
            f"driver costs (median of 3, {rows[0]['nodes']} node(s)): import ray {r['import_ray_s']:.2f} s; import "
            f"ray + ray.init + ray.shutdown {r['ray_join_s']:.2f} s; direct: import sandgym.cluster + connect + "
            f"hello to every runner {r['direct_hello_s']:.2f} s"
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
