"""Helpers of the fault-injection tests: `sandgym eval` subprocesses, their
process trees, and what they leave behind.

Leak checks look only at what one run started (the processes seen in its
own tree, by pid and start time; temporary folders named with its pid), so
other runs on the same machine cannot trip them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from sandgym.records import EpisodeRecord
from sandgym.runtimes.host_processes import environs
from sandgym.specs import TaskSet, bundled_task_set

SANDBOX_UID = 65534 if os.geteuid() == 0 else os.geteuid()
SAFETY_S = 300.0  # a bound on waits, so that a hang fails the test instead of the CI job


def _stat(pid: int) -> tuple[int, int, str] | None:
    """(ppid, start time, state) of a process, or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[1]), int(fields[19]), fields[0]
    except (OSError, ValueError, IndexError):
        return None


def process_table() -> dict[int, tuple[int, int, int]]:
    """pid -> (ppid, uid, start time) of every live process."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        st = _stat(int(entry))
        if st is None or st[2] == "Z":
            continue
        try:
            uid = os.stat(f"/proc/{entry}").st_uid
        except OSError:
            continue
        table[int(entry)] = (st[0], uid, st[1])
    return table


def descendants(root: int, table: dict[int, tuple[int, int, int]] | None = None) -> dict[int, tuple[int, int]]:
    """pid -> (uid, start time) of every descendant of `root`."""
    table = table if table is not None else process_table()
    kids: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        kids.setdefault(ppid, []).append(pid)
    found, todo = {}, [root]
    while todo:
        for pid in kids.get(todo.pop(), []):
            found[pid] = table[pid][1:]
            todo.append(pid)
    return found


def alive(pid: int, start: int) -> bool:
    st = _stat(pid)
    return st is not None and st[1] == start and st[2] != "Z"


def marked_by(owner: int) -> list[int]:
    """Live processes that carry `owner`'s mark in their environment: its
    local sandboxes' bubblewrap processes (SANDGYM_OWNER) and its browser
    sandboxes' (SANDGYM_BROWSER_ID), even those left to init so fast that no
    walk of its process tree saw them."""
    prefixes = (f"SANDGYM_OWNER={owner}-".encode(), f"SANDGYM_BROWSER_ID={owner}-".encode())
    found = []
    for pid, env in environs():
        st = _stat(pid)
        if st is not None and st[2] != "Z" and any(item.startswith(prefixes) for item in env):
            found.append(pid)
    return found


def wait_for(check: Callable[[], object], what: str, timeout: float = SAFETY_S, every: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


def temp_dirs_of(pid: int) -> list[Path]:
    """Temporary folders named after process `pid` (sandgym-<kind>-<pid>-*)."""
    root = Path(tempfile.gettempdir())
    return sorted(p for p in root.glob(f"sandgym-*-{pid}-*") if p.is_dir())


class Eval:
    """One `sandgym eval` subprocess; a thread notes every process of its tree while it runs."""

    def __init__(self, cwd: Path, *args: str, env: dict[str, str] | None = None, preexec_fn=None):
        self.cwd = cwd
        self.args = args
        self.log_path = cwd / f"eval-{time.monotonic_ns()}.log"
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sandgym", "eval", *args],
            cwd=cwd,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "COLUMNS": "200", **(env or {})},
            preexec_fn=preexec_fn,
        )
        self.seen: dict[int, tuple[int, int]] = {}
        self._stop = threading.Event()
        self._watcher = threading.Thread(target=self._watch, daemon=True)
        self._watcher.start()

    def _watch(self) -> None:
        while not self._stop.is_set() and self.proc.poll() is None:
            self.seen.update(descendants(self.proc.pid))
            self._stop.wait(0.05)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def sandboxes(self) -> list[int]:
        """Live processes of the sandbox user in this run's tree."""
        return [pid for pid, (uid, _) in descendants(self.pid).items() if uid == SANDBOX_UID]

    def wait(self, timeout: float = SAFETY_S) -> int:
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"sandgym eval did not end in {timeout:.0f} s:\n{self.output()}") from None
        finally:
            self._stop.set()
            self._watcher.join()
            self._log.close()
        return rc

    def signal(self, signum: int) -> None:
        self.seen.update(descendants(self.pid))
        self.proc.send_signal(signum)

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def leftover_processes(self) -> list[int]:
        seen = [pid for pid, (_, start) in self.seen.items() if alive(pid, start)]
        return sorted(set(seen) | set(marked_by(self.pid)))

    def assert_nothing_left(self, timeout: float = 60.0, temp_dirs: bool = True) -> None:
        """Every process this run started has ended, and (unless it was
        killed and gc has not run) no temporary folder of its pid is left."""
        wait_for(lambda: not self.leftover_processes(), f"the processes of run {self.pid} to end", timeout)
        if temp_dirs:
            assert temp_dirs_of(self.pid) == [], temp_dirs_of(self.pid)


def read_records(path: Path, allow_torn: bool = False) -> list[EpisodeRecord]:
    """The records of a trajectories file, each line checked to be one whole
    record; an unterminated last line is allowed (and skipped) only when asked."""
    data = path.read_bytes() if path.exists() else b""
    lines = data.split(b"\n")
    torn = lines.pop()
    assert allow_torn or not torn, f"{path} ends with an unterminated line: {torn[:200]!r}"
    records = []
    for n, line in enumerate(lines, 1):
        raw = json.loads(line.decode("utf-8"))
        assert set(raw) == set(EpisodeRecord.model_fields), f"{path}:{n}"
        records.append(EpisodeRecord.model_validate(raw))
    return records


def outcomes(path: Path) -> dict[tuple[str, int], str]:
    recs = read_records(path)
    got = {(r.task_id, r.epoch): r.outcome for r in recs}
    assert len(got) == len(recs), "one record per episode"
    return got


def code_tasks(n: int | None = None) -> list:
    tasks = TaskSet.load(bundled_task_set("code_function")).tasks
    return tasks[:n] if n else tasks


def fence(code: str) -> str:
    return f"```python\n{code.rstrip()}\n```"


def mixed_replay(path: Path, n: int | None = None) -> Path:
    """A replay file for the bundled code set whose episodes end in every
    outcome a policy can cause: passed, failed, not_executed (no line)."""
    with open(path, "w") as f:
        for i, t in enumerate(code_tasks(n)):
            if i % 4 == 2:
                continue  # no line: not_executed
            if i % 4 == 1:
                code = f"def {t.visible.entry_point}(*args, **kwargs):\n    return None\n"
            else:
                code = t.hidden.reference_solution
            f.write(json.dumps({"task_id": t.id, "actions": [fence(code)]}) + "\n")
    return path


def slow_replay(path: Path, n: int, sleep_s: float) -> Path:
    """Multi-turn replays whose first action runs code that sleeps `sleep_s`
    (in the agent's sandbox), then submit the reference solution."""
    with open(path, "w") as f:
        for t in code_tasks(n):
            ref = t.hidden.reference_solution
            slow = f"import time\ntime.sleep({sleep_s})\n{ref}"
            f.write(json.dumps({"task_id": t.id, "actions": [fence(slow), "SUBMIT\n" + fence(ref)]}) + "\n")
    return path


def kill_sandboxes_for(run: Eval, seconds: float) -> int:
    """SIGKILL every sandbox-user process of the run's tree (in-sandbox agents,
    the zygote) as soon as one appears and for `seconds` after: a sandbox
    backend that is down for a while."""
    wait_for(lambda: run.sandboxes() or run.proc.poll() is not None, "the run's first sandbox")
    end = time.monotonic() + seconds
    killed = 0
    while time.monotonic() < end and run.proc.poll() is None:
        for pid in run.sandboxes():
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
        time.sleep(0.02)
    return killed


@contextlib.contextmanager
def small_tmpfs(path: Path, size_kb: int) -> Iterator[Path]:
    """A tmpfs of `size_kb` KiB mounted at `path` (the test is skipped where mounting is not allowed)."""
    import pytest

    path.mkdir(parents=True, exist_ok=True)
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_kb}k,mode=0755", "tmpfs", str(path)], capture_output=True
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode(errors='replace').strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def remount_read_only(path: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(path)], check=True, capture_output=True)


# The progress line printed per finished episode when stderr is no terminal.
PROGRESS_LINE = re.compile(r"[\w-]+ \d+/\d+( .*)?")


def error_lines(text: str) -> list[str]:
    """What a run printed, without its progress lines."""
    return [line for line in text.splitlines() if line.strip() and not PROGRESS_LINE.fullmatch(line)]
