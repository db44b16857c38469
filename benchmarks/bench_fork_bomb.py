"""Benchmark: how a fork bomb ends, per backend, over many runs.

The conformance suite's fork-bomb case (a candidate that forks until the
sandbox refuses, judged by the code family's verifier) run N times on each
backend, one verification attempt each (no retries: a retry would hide
exactly what is measured here). Prints, per backend, how many runs ended as
the expected outcome (timeout or failed) and how many as env_error (the
sandbox itself died), with the peak of host tasks the sandbox's pids cgroup
counted for the docker backends.

Usage: .venv/bin/python benchmarks/bench_fork_bomb.py [--runs 20] [--backends local docker docker:runsc]
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import threading
import time

FORK_BOMB = "import os\ndef solve(x):\n    while True:\n        try: os.fork()\n        except OSError: pass\n"


class PidsPeak:
    """The highest pids.current of this process's sandbox containers (found
    by their owner label; cgroup v1 or v2 layout) while it runs; None where
    there is none to read (the local backend has no cgroup of its own)."""

    PATTERNS = ("/sys/fs/cgroup/pids/docker/*/pids.current", "/sys/fs/cgroup/system.slice/docker-*.scope/pids.current")

    def __init__(self, client) -> None:
        from sandgym.runtimes.docker.runtime import OWNER_LABEL, owner_label

        self._client, self._label, self._owner = client, OWNER_LABEL, owner_label()
        self._mine: dict[str, bool] = {}
        self.peak: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _is_mine(self, path: str) -> bool:
        cid = path.rsplit("/", 2)[-2].removeprefix("docker-").removesuffix(".scope")
        if cid not in self._mine:
            try:
                labels = self._client.api.inspect_container(cid)["Config"]["Labels"] or {}
                self._mine[cid] = labels.get(self._label) == self._owner
            except Exception:
                return False  # gone, or not a container: ask again next time
        return self._mine[cid]

    def _watch(self) -> None:
        while not self._stop.is_set():
            for pattern in self.PATTERNS:
                for path in glob.glob(pattern):
                    if not self._is_mine(path):
                        continue
                    try:
                        with open(path) as f:
                            value = int(f.read())
                    except (OSError, ValueError):
                        continue
                    self.peak = value if self.peak is None else max(self.peak, value)
            self._stop.wait(0.05)

    def __enter__(self) -> PidsPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def fork_bomb_task(i: int):
    """A task only reading the hidden answer could pass; 3 s to run."""
    from sandgym.specs.code_function import CodeHidden, CodeTask, CodeTaskPair

    tid = f"bench/fork-bomb-{i}"
    return CodeTaskPair(
        visible=CodeTask(id=tid, prompt="Write solve.", entry_point="solve", timeout_s=3),
        hidden=CodeHidden(
            id=tid,
            tests=[{"args": [1], "expected": "unreachable"}],
            reference_solution="def solve(x):\n    return 'unreachable'\n",
        ),
    )


def bench(name: str, runs: int) -> dict:
    from sandgym.runtimes import get_runtime
    from sandgym.verifiers.code_function.host import verify

    rt = get_runtime(name)
    client = getattr(rt, "client", None)
    outcomes: collections.Counter[str] = collections.Counter()
    details: list[str] = []
    durations = []
    peaks = []
    try:
        for i in range(runs):
            t0 = time.perf_counter()
            if client is None:
                v = verify(fork_bomb_task(i), FORK_BOMB, rt, retries=0)
            else:
                with PidsPeak(client) as watch:
                    v = verify(fork_bomb_task(i), FORK_BOMB, rt, retries=0)
                if watch.peak is not None:
                    peaks.append(watch.peak)
            durations.append(time.perf_counter() - t0)
            outcomes[str(v.outcome)] += 1
            if v.outcome == "env_error":
                details.append(v.detail[:200])
    finally:
        rt.close()
    expected = outcomes["timeout"] + outcomes["failed"]
    return {
        "backend": name,
        "runs": runs,
        "expected (timeout or failed)": expected,
        "env_error": outcomes["env_error"],
        "outcomes": dict(outcomes),
        "seconds per run (mean)": round(sum(durations) / len(durations), 2),
        "peak host tasks": max(peaks) if peaks else None,
        "env_error details": details[:3],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--backends", nargs="+", default=["docker:runsc", "local", "docker"])
    args = parser.parse_args()
    results = [bench(name, args.runs) for name in args.backends]
    for r in results:
        print(
            f"{r['backend']:>13}: {r['expected (timeout or failed)']}/{r['runs']} expected outcome, "
            f"{r['env_error']} env_error  ({r['seconds per run (mean)']} s/run; "
            f"peak host tasks in its pids cgroup: {r['peak host tasks']})"
        )
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
