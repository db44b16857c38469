"""Browser families: reset and step latency of form tasks and of MiniWoB pages next to BrowserGym's
on the same pages, episodes per minute with 1 and 2 workers, memory per worker.

    .venv/bin/python benchmarks/bench_browser.py [--episodes 12] [--think 1.0] [--pages click-button enter-text]

Latency: one env, episodes one after another; `--think` seconds pass before
every reset and step, as an agent's turn would (sandgym makes the next
episode's context and page then; BrowserGym waits the same). MiniWoB
episodes alternate between sandgym and BrowserGym (`browsergym-miniwob`,
pages from the same `miniwob` wheel, as file:// URLs, its own Chromium
launch pointed at the same Chromium binary), both solved by the same
script from their own observations. Throughput: each worker is one env in
its own thread playing the form oracles back to back (no think time).
Memory: each worker's sandbox (Chromium, its helpers, the app, bubblewrap)
as RSS summed and PSS (shared pages split), and the Playwright driver
processes (node) of this process.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from sandgym.envs.browser_form.env import BrowserFormEnv
from sandgym.envs.browser_form.miniwob import MiniWoBEnv

CHROMIUM = "/usr/lib/chromium/chromium"


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1] if len(values) > 1 else values[0]


def ms(v: float) -> str:
    return f"{v * 1000:5.0f} ms"


def pss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def tree_rss(sandbox: Any) -> int:
    total = 0
    for pid in sandbox.process_ids():
        try:
            with open(f"/proc/{pid}/statm") as f:
                total += int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except OSError:
            pass
    return total


def driver_pids() -> list[int]:
    """Playwright's node drivers started by this process."""
    me, found = str(os.getpid()), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        comm, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat.rsplit(")", 1)[1].split()
        if comm.startswith("node") and rest[1] == me:
            found.append(int(entry))
    return found


# -- form tasks ---------------------------------------------------------------------------------


def form_latency(episodes: int, think: float) -> tuple[list[float], list[float], list[str]]:
    env = BrowserFormEnv()
    resets: list[float] = []
    steps: list[float] = []
    outcomes: list[str] = []
    try:
        tasks = env.task_set.tasks
        env.reset(options={"task_id": tasks[0].id})  # launch the browser outside the timings
        for i in range(episodes):
            time.sleep(think)
            t0 = time.perf_counter()
            env.reset(options={"task_id": tasks[i % len(tasks)].id})
            resets.append(time.perf_counter() - t0)
            for action in env.oracle_actions():
                time.sleep(think)
                t0 = time.perf_counter()
                _, _, term, trunc, info = env.step(action)
                steps.append(time.perf_counter() - t0)
                if term or trunc:
                    outcomes.append(info["outcome"])
                    break
    finally:
        env.close()
    return resets, steps, outcomes


def form_worker(n: int, start: int, done: list, memory: list, drivers: list, barrier: threading.Barrier) -> None:
    env = BrowserFormEnv()
    try:
        tasks = env.task_set.tasks
        env.reset(options={"task_id": tasks[0].id})
        for i in range(n):
            env.reset(options={"task_id": tasks[(start + i) % len(tasks)].id})
            for action in env.oracle_actions():
                _, _, term, trunc, info = env.step(action)
                if term or trunc:
                    done.append(info["outcome"])
                    break
        sandbox = env.session.sandbox
        assert sandbox is not None  # the episodes above started the browser
        memory.append((tree_rss(sandbox), sandbox.memory_bytes()))
        barrier.wait()  # every worker's browser still up: the drivers are counted with them
        if start == 0:
            drivers.extend(pss(p) for p in driver_pids())
        barrier.wait()
    finally:
        env.close()


def form_throughput(workers: int, episodes: int) -> dict[str, Any]:
    done: list[str] = []
    memory: list[tuple[int, int]] = []
    drivers: list[int] = []
    per = episodes // workers
    barrier = threading.Barrier(workers)
    threads = [
        threading.Thread(target=form_worker, args=(per, w * per, done, memory, drivers, barrier))
        for w in range(workers)
    ]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {
        "wall": time.perf_counter() - t0,
        "episodes": per * workers,
        "outcomes": done,
        "memory": memory,
        "drivers": drivers,
    }


# -- MiniWoB ------------------------------------------------------------------------------------

# An element in each side's text of the page: sandgym's aria snapshot, BrowserGym's flattened axtree.
PATTERNS = {
    "sandgym": r"- {role}{name} \[ref=(\w+)\]",
    "browsergym": r"\[(\w+)\] {role}{name}",
}


def find(tree: str, side: str, role: str, name: str | None) -> str:
    quoted = "" if name is None else (f' "{re.escape(name)}"' if side == "sandgym" else f" '{re.escape(name)}'")
    m = re.search(PATTERNS[side].format(role=role, name=quoted), tree)
    if m is None:
        raise AssertionError(f"{side}: no {role} {name!r} in\n{tree[:2000]}")
    return m.group(1)


def solution(page: str, goal: str, tree: str, side: str) -> list[str]:
    """The actions that solve the page, in BrowserGym's syntax (both sides take it)."""
    if page == "click-button":
        label = re.search(r'Click on the "(.*)" button', goal)
        assert label, goal
        return [f"click('{find(tree, side, 'button', label.group(1))}')"]
    if page == "enter-text":
        word = re.search(r'Enter "(.*)" into', goal)
        assert word, goal
        box = find(tree, side, "textbox", None)
        return [f"fill('{box}', {word.group(1)!r})", f"click('{find(tree, side, 'button', 'Submit')}')"]
    raise ValueError(f"no scripted solution for {page}; pages: click-button, enter-text")


class SandgymSide:
    name = "sandgym"

    def __init__(self, page: str):
        self.env = MiniWoBEnv(task=page)

    def reset(self, seed: int) -> tuple[str, str]:
        obs, _ = self.env.reset(seed=seed)
        return self.env.utterance, obs["feedback"]

    def step(self, action: str) -> tuple[float, bool]:
        _, reward, term, trunc, _ = self.env.step(action)
        return float(reward), term or trunc

    def close(self) -> None:
        self.env.close()


# BrowserGym's envs run on a thread of their own: its one sync Playwright instance (global,
# bound to the thread that started it) must not share a thread with another one.
_browsergym_thread = ThreadPoolExecutor(1, thread_name_prefix="browsergym")


class BrowserGymSide:
    name = "browsergym"

    def __init__(self, page: str):
        import gymnasium as gym

        self.pool = _browsergym_thread
        self.env = self.pool.submit(gym.make, f"browsergym/miniwob.{page}", headless=True).result()

    def reset(self, seed: int) -> tuple[str, str]:
        from browsergym.utils.obs import flatten_axtree_to_str

        obs, _ = self.pool.submit(self.env.reset, seed=seed).result()
        return obs["goal"], flatten_axtree_to_str(obs["axtree_object"])

    def step(self, action: str) -> tuple[float, bool]:
        _, reward, term, trunc, _ = self.pool.submit(self.env.step, action).result()
        return float(reward), term or trunc

    def close(self) -> None:
        self.pool.submit(self.env.close).result()


def stop_browsergym() -> None:
    import browsergym.core as core

    if core._PLAYWRIGHT is not None:
        core._PLAYWRIGHT.stop()
        core._PLAYWRIGHT = None


def browsergym_available() -> str | None:
    """None if BrowserGym's MiniWoB envs can run here, else why not."""
    if importlib.util.find_spec("browsergym.miniwob") is None:
        return "browsergym-miniwob is not installed (pip install --no-deps browsergym-miniwob==0.14.3)"
    from sandgym.envs.browser_form.miniwob import miniwob_html

    os.environ.setdefault("MINIWOB_URL", f"file://{miniwob_html()}/miniwob/")
    # BrowserGym launches Playwright's own Chromium build; point its launches (the page's
    # browser and its chat window) at the Chromium installed here instead.
    import playwright.sync_api as sync_api

    launch = sync_api.BrowserType.launch
    if not getattr(launch, "_bench_patched", False):

        def launch_here(self: Any, *args: Any, **kwargs: Any) -> Any:
            kwargs.setdefault("executable_path", CHROMIUM)
            return launch(self, *args, **kwargs)

        launch_here._bench_patched = True  # type: ignore[attr-defined]
        sync_api.BrowserType.launch = launch_here  # type: ignore[method-assign]
    import browsergym.miniwob  # noqa: F401  (registers its envs)

    return None


def miniwob_compare(page: str, episodes: int, think: float, with_browsergym: bool) -> dict[str, dict[str, list]]:
    sides: list[Any] = [SandgymSide(page)] + ([BrowserGymSide(page)] if with_browsergym else [])
    out: dict[str, dict[str, list]] = {s.name: {"resets": [], "steps": [], "rewards": []} for s in sides}
    try:
        for side in sides:
            side.reset(seed=10_000)  # launch outside the timings
        for i in range(episodes):
            for side in sides:  # interleaved: both see the same load
                rec = out[side.name]
                time.sleep(think)
                t0 = time.perf_counter()
                goal, tree = side.reset(seed=i)
                rec["resets"].append(time.perf_counter() - t0)
                reward = 0.0
                for action in solution(page, goal, tree, side.name):
                    time.sleep(think)
                    t0 = time.perf_counter()
                    reward, ended = side.step(action)
                    rec["steps"].append(time.perf_counter() - t0)
                    if ended:
                        break
                rec["rewards"].append(reward)
    finally:
        for side in sides:
            side.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--episodes", type=int, default=12)
    ap.add_argument("--think", type=float, default=1.0, help="seconds of agent turn before each reset and step")
    ap.add_argument("--pages", nargs="*", default=["click-button", "enter-text"])
    ap.add_argument("--no-browsergym", action="store_true")
    ap.add_argument("--skip-throughput", action="store_true")
    args = ap.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs); think {args.think:.1f} s")
    print(f"code: {Path(__file__).resolve().parents[1]}")

    resets, steps, outcomes = form_latency(args.episodes, args.think)
    counts = {o: outcomes.count(o) for o in sorted(set(outcomes))}
    print(f"\nform tasks, 1 worker, {len(resets)} oracle episodes, outcomes {counts}")
    print(f"  reset  P50 {ms(pct(resets, 50))}  P95 {ms(pct(resets, 95))}")
    print(f"  step   P50 {ms(pct(steps, 50))}  P95 {ms(pct(steps, 95))}")

    why_not = None if args.no_browsergym else browsergym_available()
    if why_not:
        print(f"\nBrowserGym: skipped: {why_not}")
    with_bg = not args.no_browsergym and why_not is None
    for page in args.pages:
        r = miniwob_compare(page, args.episodes, args.think, with_bg)
        print(f"\nMiniWoB {page}, {args.episodes} episodes each, interleaved")
        print(f"  {'':10s} {'reset P50':>10s} {'P95':>8s}   {'step P50':>9s} {'P95':>8s}   mean reward")
        for name, rec in r.items():
            print(
                f"  {name:10s} {ms(pct(rec['resets'], 50)):>10s} {ms(pct(rec['resets'], 95)):>8s}   "
                f"{ms(pct(rec['steps'], 50)):>9s} {ms(pct(rec['steps'], 95)):>8s}   "
                f"{statistics.mean(rec['rewards']):.2f}"
            )
        if "browsergym" in r:
            sg, bg = r["sandgym"], r["browsergym"]
            print(
                f"  browsergym/sandgym: reset P50 {pct(bg['resets'], 50) / pct(sg['resets'], 50):.1f}x, "
                f"step P50 {pct(bg['steps'], 50) / pct(sg['steps'], 50):.1f}x"
            )

    if with_bg:  # its driver is not this process's to count below
        _browsergym_thread.submit(stop_browsergym).result()
    _browsergym_thread.shutdown()
    if args.skip_throughput:
        return
    for workers in (1, 2):
        tp = form_throughput(workers, args.episodes)
        print(f"\nform tasks, workers={workers}: {tp['episodes']} oracle episodes, no think time")
        # wall includes each worker's browser launch
        print(f"  episodes/minute {tp['episodes'] / tp['wall'] * 60:.1f} (wall {tp['wall']:.1f} s, launch included)")
        for rss, tree_pss in tp["memory"]:
            print(f"  memory per worker: sandbox RSS sum {rss / 2**20:.0f} MiB, PSS {tree_pss / 2**20:.0f} MiB")
        drivers = tp["drivers"]
        print(
            f"  Playwright drivers (node) of the process: {len(drivers)}, PSS {sum(drivers) / 2**20:.0f} MiB "
            f"({sum(drivers) / workers / 2**20:.0f} MiB per worker)"
        )
        per_worker = (sum(p for _, p in tp["memory"]) + sum(drivers)) / workers
        print(f"  per worker, sandbox and driver share: PSS {per_worker / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()
