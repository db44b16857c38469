"""Soak: many browser-form episodes on one env, and what they leave behind.

One `BrowserFormEnv` (one Chromium in one sandbox of the local runtime)
plays N episodes over the bundled tasks in turn, oracle and null actions
alternating; every `--every` episodes it prints the episodes per second so
far, this process's resident memory and open descriptors, the resident
memory and count of the sandbox user's processes under us (Chromium, the
web app, the agent), and any wrong outcome. After `env.close()` it prints
what is left: processes of the sandbox user under us, and descriptors
beyond the count before the first episode (once the Playwright driver,
which outlives its last browser by SANDGYM_PLAYWRIGHT_LINGER_S, is gone). At the end: the memory growth
per 1000 episodes (least squares over the readings after warm-up), the
time 10,000 episodes would take at the measured rate, and the load average.

    .venv/bin/python benchmarks/soak_browser.py [--episodes 10000] [--every 500]

tests/browser_form/test_soak.py runs the same loop (`soak`) on a bounded
sample, and the whole 10,000 with SANDGYM_SLOW=1.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass, field

SANDBOX_UID = int(os.environ.get("SANDGYM_SANDBOX_UID", 65534))


def descendants_of_user(uid: int = SANDBOX_UID) -> set[int]:
    """Our descendants running as `uid`."""
    found, frontier = set(), [os.getpid()]
    while frontier:
        pid = frontier.pop()
        try:
            if pid != os.getpid() and os.stat(f"/proc/{pid}").st_uid == uid:
                found.add(pid)
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as f:
                    frontier.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return found


def rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@dataclass
class Reading:
    episodes: int
    seconds: float
    rss_mb: float
    fds: int
    sandbox_procs: int
    sandbox_rss_mb: float


@dataclass
class SoakResult:
    readings: list[Reading] = field(default_factory=list)
    # (episode, task, policy, outcome, the verdict's detail)
    wrong: list[tuple[int, str, str, str, str]] = field(default_factory=list)
    fds_before: int = 0
    fds_after: int = 0
    procs_left: int = 0


def reading(episodes: int, start: float) -> Reading:
    procs = descendants_of_user()
    return Reading(
        episodes,
        time.monotonic() - start,
        rss_mb(os.getpid()),
        open_fds(),
        len(procs),
        sum(rss_mb(p) for p in procs),
    )


def soak(episodes: int, every: int, report=None) -> SoakResult:
    """Play `episodes` episodes on one env; a reading every `every` (passed to `report`)."""
    from sandgym.envs.browser_form.env import BrowserFormEnv
    from sandgym.runtimes.browser import LINGER_S

    out = SoakResult(fds_before=open_fds())
    procs_before = descendants_of_user()
    env = BrowserFormEnv()
    start = time.monotonic()
    try:
        tasks = [t.id for t in env.task_set.tasks]
        for i in range(episodes):
            task_id = tasks[(i // 2) % len(tasks)]
            env.reset(options={"task_id": task_id})
            policy = "oracle" if i % 2 == 0 else "null"
            actions = env.oracle_actions() if policy == "oracle" else env.null_actions()
            info: dict = {}
            for a in actions:
                _, _, terminated, truncated, info = env.step(a)
                if terminated or truncated:
                    break
            expected = "passed" if policy == "oracle" else "failed"
            if info.get("outcome") != expected:
                detail = str(getattr(env.last_verdict, "detail", ""))[:300]
                out.wrong.append((i, task_id, policy, str(info.get("outcome")), detail))
            if (i + 1) % every == 0 or i + 1 == episodes:
                out.readings.append(reading(i + 1, start))
                if report:
                    report(out.readings[-1], out)
    finally:
        env.close()
    deadline = time.monotonic() + 10
    while descendants_of_user() - procs_before and time.monotonic() < deadline:
        time.sleep(0.05)
    out.procs_left = len(descendants_of_user() - procs_before)
    # The Playwright driver outlives its last browser by LINGER_S (for the next one), by design.
    deadline = time.monotonic() + LINGER_S + 10
    while open_fds() > out.fds_before and time.monotonic() < deadline:
        time.sleep(0.2)
    out.fds_after = open_fds()
    return out


def slope_per_1000(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (episodes, MB), per 1000 episodes."""
    if len(points) < 2:
        return 0.0
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    den = sum((x - mx) ** 2 for x, _ in points)
    return 1000 * sum((x - mx) * (y - my) for x, y in points) / den if den else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=10_000)
    ap.add_argument("--every", type=int, default=500)
    ap.add_argument("--warmup", type=int, default=1, help="readings left out of the memory slope")
    args = ap.parse_args()

    def report(r: Reading, res: SoakResult) -> None:
        print(
            f"{r.episodes:6d} episodes  {r.episodes / r.seconds:5.2f}/s  host RSS {r.rss_mb:7.1f} MB  "
            f"fds {r.fds:4d}  sandbox procs {r.sandbox_procs:3d} ({r.sandbox_rss_mb:7.1f} MB)  "
            f"wrong {len(res.wrong)}  load {os.getloadavg()[0]:.2f}",
            flush=True,
        )

    res = soak(args.episodes, args.every, report)
    last = res.readings[-1]
    kept = res.readings[args.warmup :] or res.readings
    rate = last.episodes / last.seconds
    print(f"wrong outcomes: {len(res.wrong)} {res.wrong[:5]}")
    print(
        f"after close: {res.procs_left} sandbox-user processes left; fds {res.fds_before} before, {res.fds_after} after"
    )
    print(
        f"memory growth per 1000 episodes: host {slope_per_1000([(r.episodes, r.rss_mb) for r in kept]):+.1f} MB, "
        f"sandbox {slope_per_1000([(r.episodes, r.sandbox_rss_mb) for r in kept]):+.1f} MB"
    )
    print(f"rate {rate:.2f} episodes/s: 10,000 episodes would take {10_000 / rate / 3600:.2f} h at this rate")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cpus")


if __name__ == "__main__":
    main()
