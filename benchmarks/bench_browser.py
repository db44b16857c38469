"""Browser-form family: reset and step latency, episodes per minute with 1 and 2 workers, memory per worker.

    .venv/bin/python benchmarks/bench_browser.py [--episodes 12]

Each worker is one env (one sandbox: Chromium + app) in its own thread,
playing the oracle of the bundled tasks in turn. Memory is the sandbox's
process tree (Chromium, its helpers, the app, bubblewrap): RSS summed
(shared pages counted in every process) and PSS (shared pages split).
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

from sandgym.envs.browser_form.env import BrowserFormEnv


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1] if len(values) > 1 else values[0]


def tree_rss(sandbox) -> int:
    import os

    total = 0
    for pid in sandbox.process_ids():
        try:
            with open(f"/proc/{pid}/statm") as f:
                total += int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except OSError:
            pass
    return total


def worker(n: int, start: int, resets: list, steps: list, memory: list, outcomes: list) -> None:
    env = BrowserFormEnv()
    try:
        tasks = env.task_set.tasks
        env.reset(options={"task_id": tasks[0].id})  # launch the browser outside the timings
        for i in range(n):
            task = tasks[(start + i) % len(tasks)]
            t0 = time.perf_counter()
            env.reset(options={"task_id": task.id})
            resets.append(time.perf_counter() - t0)
            for action in env.oracle_actions():
                t0 = time.perf_counter()
                _, _, term, trunc, info = env.step(action)
                steps.append(time.perf_counter() - t0)
                if term or trunc:
                    outcomes.append(info["outcome"])
                    break
        memory.append((tree_rss(env.session.sandbox), env.session.sandbox.memory_bytes()))
    finally:
        env.close()


def run(workers: int, episodes: int) -> dict:
    resets: list[float] = []
    steps: list[float] = []
    memory: list[tuple[int, int]] = []
    outcomes: list[str] = []
    per = episodes // workers
    # Launch time is not episode time: count it apart.
    threads = [
        threading.Thread(target=worker, args=(per, w * per, resets, steps, memory, outcomes)) for w in range(workers)
    ]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return {
        "resets": resets,
        "steps": steps,
        "memory": memory,
        "outcomes": outcomes,
        "wall": wall,
        "episodes": per * workers,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=12)
    args = ap.parse_args()
    for workers in (1, 2):
        r = run(workers, args.episodes)
        ms = lambda v: f"{v * 1000:.0f} ms"  # noqa: E731
        print(
            f"workers={workers}: {r['episodes']} oracle episodes, outcomes "
            f"{ {o: r['outcomes'].count(o) for o in set(r['outcomes'])} }"
        )
        print(f"  reset  P50 {ms(pct(r['resets'], 50))}  P95 {ms(pct(r['resets'], 95))}")
        print(f"  step   P50 {ms(pct(r['steps'], 50))}  P95 {ms(pct(r['steps'], 95))}")
        # wall includes each worker's browser launch
        print(f"  episodes/minute {r['episodes'] / r['wall'] * 60:.1f} (wall {r['wall']:.1f} s, launch included)")
        for rss, pss in r["memory"]:
            print(f"  memory per worker: RSS sum {rss / 2**20:.0f} MiB, PSS {pss / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()
