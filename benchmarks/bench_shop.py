"""The generated-data apps (shop-v1, tracker-v1, wiki-v1): reset and step latency next to the form app's (basic-v1),
same runtime, same run.

    .venv/bin/python benchmarks/bench_shop.py [--episodes 20] [--think 0.5] [--runtime local] [--sets ...]

Each app gets one env; episodes play the set's oracles one after another
(tasks in turn), `--think` seconds passing before every reset and step as
an agent's turn would. Reset: env.reset() wall time (the previous context
closed, the database copied from the template and swapped in, a new
context, the start page loaded and snapshotted; each part's P50 is printed too). Step: env.step() of the
oracle's actions that are not the last (the last one verifies). Also: the
template copy alone (the per-episode database) and the template's size,
and the verification (reading the checked tables) per episode.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from sandgym.envs.browser_form.env import BrowserFormEnv

# A reset's parts (env.timings): the database staged (copy + session row), the spare context
# taken (+ cookies), the last episode's context waited for, the start page loaded + snapshotted.
PARTS = ("stage", "context", "wait", "load")


def pct(values: list[float], q: int) -> float:
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def ms(v: float) -> str:
    return f"{v * 1000:7.1f} ms"


def measure(tasks: str, runtime: str, episodes: int, think: float) -> dict[str, list[float]]:
    env = BrowserFormEnv(tasks=tasks, runtime=runtime)
    out: dict[str, list[float]] = {"reset": [], "step": [], "verify": [], "passed": []}
    try:
        ids = env.task_set.ids
        env.reset(options={"task_id": ids[0]})  # warm-up: the sandbox starts, the template is made
        for i in range(episodes):
            task_id = ids[(i * 7) % len(ids)]
            time.sleep(think)
            t0 = time.perf_counter()
            env.reset(options={"task_id": task_id})
            out["reset"].append(time.perf_counter() - t0)
            for part in PARTS:
                out.setdefault(part, []).append(env.timings[f"reset_{part}_s"])
            actions = env.oracle_actions()
            for a in actions:
                time.sleep(think)
                t0 = time.perf_counter()
                _, _, term, trunc, info = env.step(a)
                if term or trunc:
                    out["verify"].append(env.timings["verify_s"])
                    out["passed"].append(float(info["outcome"] == "passed"))
                    break
                out["step"].append(time.perf_counter() - t0)
    finally:
        env.close()
    return out


def copy_cost(app: str, rounds: int = 50) -> tuple[list[float], int]:
    from sandgym.envs.browser_form.env import GENERATED

    with tempfile.TemporaryDirectory(prefix="bench-shop-") as tmp:
        template = Path(tmp) / "template.sqlite"
        GENERATED[app].build_database(template)
        times = []
        for i in range(rounds):
            t0 = time.perf_counter()
            shutil.copyfile(template, Path(tmp) / f"copy-{i}.sqlite")
            times.append(time.perf_counter() - t0)
        return times, template.stat().st_size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--think", type=float, default=0.5)
    ap.add_argument("--runtime", default="local")
    ap.add_argument("--sets", nargs="+", default=["shop-v1", "tracker-v1", "basic-v1"], help="browser_form sets")
    args = ap.parse_args()
    print(f"load before: {os.popen('uptime').read().strip()}")
    from sandgym.envs.browser_form.env import GENERATED

    for app in GENERATED:
        copies, size = copy_cost(app)
        print(
            f"{app} template {size / 1e6:.1f} MB; per-episode copy P50 {ms(pct(copies, 50))}  P95 {ms(pct(copies, 95))}"
        )
    for name in (f"browser_form/{s}" for s in args.sets):
        r = measure(name, args.runtime, args.episodes, args.think)
        print(
            f"{name:21} {args.runtime}: reset P50 {ms(pct(r['reset'], 50))}  P95 {ms(pct(r['reset'], 95))} | "
            f"step P50 {ms(pct(r['step'], 50))}  P95 {ms(pct(r['step'], 95))} ({len(r['step'])} steps) | "
            f"verify P50 {ms(pct(r['verify'], 50))} | oracle passed {sum(r['passed']):.0f}/{len(r['passed'])}"
        )
        print("    reset parts P50: " + "  ".join(f"{p} {ms(pct(r[p], 50))}" for p in PARTS))
    print(f"load after: {os.popen('uptime').read().strip()}")


if __name__ == "__main__":
    main()
