"""Browser envs per backend (local, docker, docker:runsc, k8s, k8s:gvisor), in the same run:
launch, reset and step P50/P95, episodes per minute and memory per sandbox.

    .venv/bin/python benchmarks/bench_browser_backends.py [--episodes 8] [--think 0.5] [--rounds 2]
        [--backends local docker docker:runsc k8s k8s:gvisor]

The k8s backends run on the cluster KUBECONFIG names (for the test cluster:
`scripts/k8s-cluster.sh up` and `eval $(scripts/k8s-cluster.sh env)`).

One env per backend, each with its own Chromium sandbox; `--rounds` passes
over the backends in turn (so a noisy minute hits all of them). A round
plays `--episodes` form tasks (oracle actions; `--think` seconds before every
reset and step, as an agent's turn) and as many MiniWoB click-button
episodes (scripted). Episodes per minute: form oracles back to back without
think time. Memory: the sandbox's PSS on local (Chromium, its helpers, the
app, bubblewrap), the container's memory cgroup usage on docker (page cache
included, so it reads higher for the same processes), the pod's working set
from the kubelet's summary API on k8s (cgroup usage less inactive file pages;
under gVisor the whole sandbox's, its kernel included).
"""

from __future__ import annotations

import argparse
import re
import statistics
import time
from typing import Any

from sandgym.envs.browser_form.env import BrowserFormEnv
from sandgym.envs.browser_form.miniwob import MiniWoBEnv


def pct(values: list[float], q: int) -> float:
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def click_button(goal: str, tree: str) -> str:
    label = re.search(r'Click on the "(.*)" button', goal)
    assert label, goal
    for line in tree.splitlines():
        m = re.search(r'- button "([^"]*)".*\[ref=(\w+)\]', line)
        if m and m.group(1) == label.group(1):
            return f"click({m.group(2)})"
    raise AssertionError(f"no button {label.group(1)!r}")


class Backend:
    def __init__(self, name: str):
        self.name = name
        t0 = time.perf_counter()
        self.form = BrowserFormEnv(runtime=name)
        self.form.reset(options={"task_id": "forms/login-alice"})
        self.launch_s = time.perf_counter() - t0
        self.miniwob = MiniWoBEnv("click-button", runtime=name)
        self.miniwob.reset(seed=0)
        self.figures: dict[str, list[float]] = {k: [] for k in ("form_reset", "form_step", "mw_reset", "mw_step")}
        self.rates: list[float] = []
        self.memory = 0

    def play(self, episodes: int, think: float, seed: int) -> None:
        tasks = [t.id for t in self.form.task_set.tasks]
        for i in range(episodes):
            time.sleep(think)
            t0 = time.perf_counter()
            self.form.reset(options={"task_id": tasks[(seed + i) % len(tasks)]})
            self.figures["form_reset"].append(time.perf_counter() - t0)
            for action in self.form.oracle_actions():
                time.sleep(think)
                t0 = time.perf_counter()
                *_, term, trunc, info = self.form.step(action)
                self.figures["form_step"].append(time.perf_counter() - t0)
            assert info["outcome"] == "passed", (self.name, info)
            time.sleep(think)
            t0 = time.perf_counter()
            obs, _ = self.miniwob.reset(seed=seed + i)
            self.figures["mw_reset"].append(time.perf_counter() - t0)
            time.sleep(think)
            t0 = time.perf_counter()
            *_, info = self.miniwob.step(click_button(obs["task"].split("\n")[0], obs["feedback"]))
            self.figures["mw_step"].append(time.perf_counter() - t0)
            assert info["outcome"] == "passed", (self.name, info)
        sandbox = self.form.session.sandbox
        assert sandbox is not None
        self.memory = max(self.memory, sandbox.memory_bytes())

    def throughput(self, episodes: int) -> None:
        tasks = [t.id for t in self.form.task_set.tasks]
        t0 = time.perf_counter()
        for i in range(episodes):
            self.form.reset(options={"task_id": tasks[i % len(tasks)]})
            for action in self.form.oracle_actions():
                self.form.step(action)
        self.rates.append(episodes / (time.perf_counter() - t0) * 60)

    def close(self) -> None:
        self.form.close()
        self.miniwob.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--episodes", type=int, default=8)
    ap.add_argument("--think", type=float, default=0.5)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument(
        "--backends",
        nargs="*",
        default=["local", "docker", "docker:runsc"],
        choices=["local", "docker", "docker:runsc", "k8s", "k8s:gvisor"],
    )
    args = ap.parse_args()
    backends = [Backend(name) for name in args.backends]
    try:
        for r in range(args.rounds):
            for b in backends:
                b.play(args.episodes, args.think, seed=r * args.episodes)
                b.throughput(args.episodes)
    finally:
        for b in backends:
            b.close()
    base: dict[str, Any] = {}
    print(f"{args.rounds} rounds x {args.episodes} episodes per backend, think {args.think} s")
    head = f"{'backend':<14}{'launch':>8}" + "".join(
        f"{k + ' P50/P95':>22}" for k in ("form reset", "form step", "miniwob reset", "miniwob step")
    )
    print(head + f"{'form ep/min':>13}{'memory':>10}")
    for b in backends:
        cells = []
        for key in ("form_reset", "form_step", "mw_reset", "mw_step"):
            values = b.figures[key]
            p50 = pct(values, 50)
            base.setdefault(key, p50)
            cells.append(f"{p50 * 1000:6.0f}/{pct(values, 95) * 1000:4.0f} ms {p50 / base[key]:4.1f}x")
        rate = statistics.median(b.rates)
        print(
            f"{b.name:<14}{b.launch_s:7.1f}s"
            + "".join(f"{c:>22}" for c in cells)
            + f"{rate:13.1f}{b.memory / 2**20:8.0f} MiB"
        )
    print("(x: P50 against the first backend's, measured in the same run)")


if __name__ == "__main__":
    main()
