"""Fault injection on real `sandgym eval` runs: nothing lost, nothing misjudged.

Every test drives `python -m sandgym eval` in a subprocess and breaks
something for real: SIGKILL and SIGINT at arbitrary points, a sandbox
backend killed for seconds, an episode past its deadline, a full or
read-only output folder, hostile input. Each checks the outcome, that the
records are valid JSONL (one whole record a line), and that the run left
nothing behind (its processes, its temporary folders). The browser runs
need Chromium (`-m chromium`).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from sandgym.runtimes.tempdirs import owned_tempdir, reap_tempdirs
from sandgym.specs import TaskSet, bundled_task_set

from ._faults import (
    Eval,
    code_tasks,
    descendants,
    error_lines,
    fence,
    kill_sandboxes_for,
    marked_by,
    mixed_replay,
    outcomes,
    read_records,
    remount_read_only,
    slow_replay,
    small_tmpfs,
    temp_dirs_of,
    wait_for,
)

BROWSER = "sandgym/BrowserForm-v0"


def lines_in(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    """The mixed replay over the whole bundled code set, run once without faults."""
    root = tmp_path_factory.mktemp("clean")
    replay = mixed_replay(root / "mixed.jsonl")
    run = Eval(root, "--policy", f"replay:{replay}", "--out", "out", "-j", "2")
    assert run.wait() == 0, run.output()
    run.assert_nothing_left()
    got = outcomes(root / "out" / "trajectories.jsonl")
    assert {"passed", "failed", "not_executed"} <= set(got.values())
    return replay, got


# -- SIGKILL and SIGINT ----------------------------------------------------------------------


# A second seed with SANDGYM_SLOW=1 (CI time).
@pytest.mark.parametrize("seed", [7, pytest.param(23, marks=pytest.mark.slow)])
def test_sigkill_at_random_points_then_resume_matches_a_clean_run(clean, tmp_path, seed):
    replay, expected = clean
    rng = random.Random(seed)
    traj = tmp_path / "out" / "trajectories.jsonl"
    for round_ in range(3):
        before = lines_in(traj)
        args = ["--policy", f"replay:{replay}", "--out", "out", "-j", "2"] + (["--resume"] if round_ else [])
        run = Eval(tmp_path, *args)
        # Kill it at some point after it has written a few more records (or as it starts).
        want = before + rng.randint(0, 6)

        def wrote_more(w: int = want, r: Eval = run) -> bool:
            return lines_in(traj) >= w or r.proc.poll() is not None

        wait_for(wrote_more, "records to appear")
        if run.proc.poll() is None:
            time.sleep(rng.uniform(0, 0.3))
            run.signal(signal.SIGKILL)
        run.wait()
        read_records(traj, allow_torn=True)  # whole records, but for a last line cut off by the kill
        run.assert_nothing_left(temp_dirs=False)
    final = Eval(tmp_path, "--policy", f"replay:{replay}", "--out", "out", "-j", "2", "--resume")
    assert final.wait() == 0, final.output()
    final.assert_nothing_left()
    assert outcomes(traj) == expected
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["n_episodes"] == len(expected)


@pytest.mark.parametrize(
    "env, sig",
    [
        ("sandgym/SWERepo-v0", signal.SIGKILL),
        ("sandgym/SWERepo-v0", signal.SIGINT),
        pytest.param("sandgym/BrowserForm-v0", signal.SIGKILL, marks=pytest.mark.chromium),
    ],
)
def test_other_families_killed_then_resumed_match_a_clean_run(tmp_path, env, sig):
    # Oracle episodes: a clean run, then the same run signalled after its
    # first record and resumed; the records and the summaries must agree.
    common = ["--env", env, "-j", "2", "--limit", "4"]
    clean_run = Eval(tmp_path, *common, "--out", "clean")
    assert clean_run.wait() == 0, clean_run.output()
    expected = outcomes(tmp_path / "clean" / "trajectories.jsonl")
    traj = tmp_path / "out" / "trajectories.jsonl"
    run = Eval(tmp_path, *common, "--out", "out")
    wait_for(lambda: lines_in(traj) >= 1 or run.proc.poll() is not None, "the first record")
    run.signal(sig)
    rc = run.wait()
    assert rc in (0, -signal.SIGKILL, 128 + signal.SIGINT), f"exit {rc}:\n{run.output()}"
    read_records(traj, allow_torn=True)
    run.assert_nothing_left(temp_dirs=sig != signal.SIGKILL)
    if sig == signal.SIGKILL:
        gc = subprocess.run(
            [sys.executable, "-m", "sandgym", "gc", "--owner", str(run.pid)], capture_output=True, timeout=300
        )
        assert gc.returncode == 0, gc.stderr
    again = Eval(tmp_path, *common, "--out", "out", "--resume")
    assert again.wait() == 0, again.output()
    again.assert_nothing_left()
    assert outcomes(traj) == expected
    clean_summary = json.loads((tmp_path / "clean" / "summary.json").read_text())
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    for key in ("n_episodes", "outcomes", "n_scored", "reward_mean", "task_set_hash"):
        assert summary.get(key) == clean_summary.get(key), key


def test_an_unterminated_last_line_is_cut_off_by_resume(clean, tmp_path):
    replay, expected = clean
    traj = tmp_path / "out" / "trajectories.jsonl"
    first = Eval(tmp_path, "--policy", f"replay:{replay}", "--out", "out", "--task-id", code_tasks()[0].id)
    assert first.wait() == 0, first.output()
    whole = traj.read_bytes()
    traj.write_bytes(whole + whole[: len(whole) // 2])  # what a write cut off by a crash leaves
    again = Eval(tmp_path, "--policy", f"replay:{replay}", "--out", "out", "-j", "2", "--resume")
    assert again.wait() == 0, again.output()
    assert "cut off an unterminated last line" in again.output()
    assert outcomes(traj) == expected


def test_ctrl_c_lets_running_episodes_finish_then_resume_completes(tmp_path):
    replay = slow_replay(tmp_path / "slow.jsonl", 6, sleep_s=2)
    traj = tmp_path / "out" / "trajectories.jsonl"
    args = ["--policy", f"replay:{replay}", "--mode", "multi", "--out", "out", "-j", "2", "--limit", "6"]
    run = Eval(tmp_path, *args)
    wait_for(lambda: lines_in(traj) >= 2, "the first records")
    run.signal(signal.SIGINT)
    assert run.wait() == 128 + signal.SIGINT, run.output()
    assert "no new episodes" in run.output() and "--resume" in run.output()
    recs = read_records(traj)
    assert 2 <= len(recs) < 6
    assert all(r.outcome == "passed" and not r.error for r in recs)  # finished, not cut short
    run.assert_nothing_left()
    again = Eval(tmp_path, *args, "--resume")
    assert again.wait() == 0, again.output()
    assert set(outcomes(traj).values()) == {"passed"} and len(outcomes(traj)) == 6
    again.assert_nothing_left()


def test_a_second_ctrl_c_abandons_running_episodes_and_resume_replays_them(tmp_path):
    replay = slow_replay(tmp_path / "slow.jsonl", 6, sleep_s=4)
    traj = tmp_path / "out" / "trajectories.jsonl"
    args = ["--policy", f"replay:{replay}", "--mode", "multi", "--out", "out", "-j", "2", "--limit", "6"]
    # Episodes are known to run by the sandbox processes they start; a
    # zygote started ahead of them (eval's warm-up) would count before any.
    run = Eval(tmp_path, *args, env={"SANDGYM_WARM_UP": "0"})
    wait_for(lambda: len(run.sandboxes()) >= 2, "two episodes running in their sandboxes")
    run.signal(signal.SIGINT)
    wait_for(lambda: "no new episodes" in run.output() or run.proc.poll() is not None, "the first Ctrl-C's note")
    run.signal(signal.SIGINT)
    assert run.wait() == 128 + signal.SIGINT, run.output()
    recs = read_records(traj)
    abandoned = [r for r in recs if r.outcome == "env_error"]
    assert abandoned and all((r.error or "").startswith("interrupted") and r.reward is None for r in abandoned)
    run.assert_nothing_left()
    again = Eval(tmp_path, *args, "--resume")
    assert again.wait() == 0, again.output()
    final = {r.task_id: r for r in read_records(traj)}
    assert len(final) == 6 and {r.outcome for r in final.values()} == {"passed"}
    for r in abandoned:  # played again; the abandoned try is kept
        assert final[r.task_id].retries and final[r.task_id].retries[0]["error"].startswith("interrupted")


def test_an_episode_past_its_deadline_is_env_error_and_its_sandbox_is_killed(tmp_path):
    replay = slow_replay(tmp_path / "slow.jsonl", 2, sleep_s=600)
    traj = tmp_path / "out" / "trajectories.jsonl"
    args = ["--policy", f"replay:{replay}", "--mode", "multi", "--out", "out", "-j", "2", "--limit", "2"]
    run = Eval(tmp_path, *args, "--episode-timeout", "2")
    # Every episode ended in env_error: the run fails and says why.
    assert run.wait() == 1, run.output()
    assert "every one of the 2 episodes ended in env_error" in run.output()
    recs = read_records(traj)
    assert len(recs) == 2
    for r in recs:
        assert r.outcome == "env_error" and r.reward is None and (r.error or "").startswith("deadline")
    assert "--episode-timeout" in run.output()
    run.assert_nothing_left()
    # --resume plays env_error episodes again (here with time enough: passed), the first try kept.
    fast = slow_replay(tmp_path / "slow.jsonl", 2, sleep_s=0)
    assert fast.exists()
    again = Eval(tmp_path, *args, "--resume")
    assert again.wait() == 0, again.output()
    final = read_records(traj)
    assert [r.outcome for r in final] == ["passed", "passed"]
    assert all(r.retries[0]["error"].startswith("deadline") for r in final)


def test_a_sandbox_backend_down_for_seconds_is_retried_not_scored(clean, tmp_path):
    replay, expected = clean
    traj = tmp_path / "out" / "trajectories.jsonl"
    # No warm-up: its zygote, started before any episode, would open the
    # 3 s window while a loaded machine has not yet started an episode.
    run = Eval(tmp_path, "--policy", f"replay:{replay}", "--out", "out", "-j", "2", env={"SANDGYM_WARM_UP": "0"})
    killed = kill_sandboxes_for(run, 3.0)
    assert run.wait() == 0, run.output()
    assert killed > 0
    recs = read_records(traj)
    # The fault hit: some episode needed another verifier attempt or another try.
    assert any(len(r.attempts) > 1 or r.retries for r in recs)
    # Infrastructure is never the model's score: a wrong outcome would differ from the clean run's.
    got = {(r.task_id, r.epoch): r.outcome for r in recs}
    assert all(got[k] == v for k, v in expected.items() if got.get(k) != "env_error")
    run.assert_nothing_left()
    if "env_error" in got.values():  # backed off and still failing: --resume plays them again
        again = Eval(tmp_path, "--policy", f"replay:{replay}", "--out", "out", "-j", "2", "--resume")
        assert again.wait() == 0, again.output()
    assert outcomes(traj) == expected


@pytest.mark.docker
def test_containers_killed_mid_run_are_retried_not_scored(clean, tmp_path):
    # The Docker Engine's containers of the run killed under it for seconds
    # (`docker kill`, as an operator or an OOM would): retried or env_error,
    # never a score that differs from the clean run's.
    import docker

    from sandgym.runtimes.docker.runtime import OWNER_LABEL

    replay, expected = clean
    traj = tmp_path / "out" / "trajectories.jsonl"
    args = ["--policy", f"replay:{replay}", "--out", "out", "-j", "2", "--runtime", "docker", "--limit", "24"]
    run = Eval(tmp_path, *args)
    client = docker.from_env()
    mine: dict[str, str | list[str] | bool] = {"label": f"{OWNER_LABEL}={socket.gethostname()}:{run.pid}"}
    killed = 0
    end = None
    while run.proc.poll() is None and (end is None or time.monotonic() < end):
        for c in client.containers.list(filters=mine, ignore_removed=True):
            with contextlib.suppress(docker.errors.APIError):
                c.kill()
                killed += 1
                end = end or time.monotonic() + 3.0
        time.sleep(0.05)
    assert run.wait() == 0, run.output()
    assert killed > 0
    recs = read_records(traj)
    assert any(len(r.attempts) > 1 or r.retries or r.outcome == "env_error" for r in recs)
    got = {(r.task_id, r.epoch): r.outcome for r in recs}
    assert all(got[k] == expected[k] for k in got if got[k] != "env_error")
    run.assert_nothing_left()
    assert client.containers.list(all=True, filters=mine, ignore_removed=True) == []
    if "env_error" in got.values():
        again = Eval(tmp_path, *args, "--resume")
        assert again.wait() == 0, again.output()
        again.assert_nothing_left()
    final = outcomes(traj)
    assert final == {k: expected[k] for k in final} and len(final) == 24


KILL_WHILE_STARTING = """
import os, signal, sys, threading, time
sys.path.insert(0, {root!r})
from sandgym.runtimes import SandboxError
from sandgym.runtimes.local import runtime
from sandgym.runtimes.local.runtime import LocalRuntime
from tests.core._faults import SANDBOX_UID, descendants
rt = LocalRuntime(zygote={zygote})
stop = threading.Event()
def kill():
    while not stop.is_set():
        for pid, (uid, _) in descendants(os.getpid()).items():
            if uid == SANDBOX_UID:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        time.sleep(0.003)
killer = threading.Thread(target=kill)
killer.start()
# A start whose processes were killed can keep bubblewrap waiting: it fails at the
# ready timeout, 3 s here rather than 30 while the killer runs (the test's time).
ready_timeout, runtime.READY_TIMEOUT_S = runtime.READY_TIMEOUT_S, 3.0
made = failed = 0
end = time.monotonic() + 4
while time.monotonic() < end:
    try:
        rt.create().close()
        made += 1
    except SandboxError:
        failed += 1
stop.set()
killer.join()
runtime.READY_TIMEOUT_S = ready_timeout
rt.create().close()  # the runtime recovers
rt.close()
print(made, failed)
"""


@pytest.mark.parametrize("zygote", [True, False])
def test_sandboxes_killed_while_starting_leave_nothing(tmp_path, zygote):
    # bubblewrap killed while it sets a sandbox up leaves its child to init,
    # waiting forever; the runtime finds it by the mark it gave it.
    root = str(Path(__file__).resolve().parents[2])
    child = subprocess.Popen(
        [sys.executable, "-c", KILL_WHILE_STARTING.format(root=root, zygote=zygote)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = child.communicate(timeout=300)
    assert child.returncode == 0, err[-3000:]
    made, failed = map(int, out.split())
    assert failed > 0 and made + failed > 0  # the fault hit
    wait_for(lambda: not marked_by(child.pid), "the sandboxes it started to end", 30)


# -- the output folder -------------------------------------------------------------------------


def test_a_full_output_disk_is_one_line_and_exit_2_and_resume_finishes(clean, tmp_path):
    replay, expected = clean
    with small_tmpfs(tmp_path / "small", 24) as small:
        run = Eval(tmp_path, "--policy", f"replay:{replay}", "--out", str(small / "out"), "-j", "2")
        assert run.wait() == 2, run.output()
        lines = error_lines(run.output())
        assert len(lines) == 1, run.output()
        assert "cannot write" in lines[0] and str(small / "out" / "trajectories.jsonl") in lines[0]
        assert "ENOSPC" in lines[0] and "Traceback" not in run.output()
        recs = read_records(small / "out" / "trajectories.jsonl")  # whole lines only
        assert 0 < len(recs) < len(expected)
        run.assert_nothing_left()
        kept = (small / "out" / "trajectories.jsonl").read_bytes()
    (tmp_path / "big").mkdir()
    (tmp_path / "big" / "trajectories.jsonl").write_bytes(kept)
    again = Eval(tmp_path, "--policy", f"replay:{replay}", "--out", "big", "-j", "2", "--resume")
    assert again.wait() == 0, again.output()
    assert outcomes(tmp_path / "big" / "trajectories.jsonl") == expected


def test_a_file_size_limit_is_one_line_and_exit_2(clean, tmp_path):
    replay, expected = clean

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (16_000, resource.RLIM_INFINITY))

    run = Eval(tmp_path, "--policy", f"replay:{replay}", "--out", "out", "-j", "2", preexec_fn=limit)
    assert run.wait() == 2, run.output()
    lines = error_lines(run.output())
    assert len(lines) == 1 and "cannot write" in lines[0] and "EFBIG" in lines[0], run.output()
    recs = read_records(tmp_path / "out" / "trajectories.jsonl")
    assert 0 < len(recs) < len(expected)
    run.assert_nothing_left()


def test_a_read_only_output_is_one_line_and_exit_2(clean, tmp_path):
    replay, _ = clean
    with small_tmpfs(tmp_path / "ro", 64) as ro:
        (ro / "out").mkdir()
        remount_read_only(ro)
        for out in (ro / "out", ro / "new" / "out"):
            run = Eval(tmp_path, "--policy", f"replay:{replay}", "--out", str(out))
            assert run.wait() == 2, run.output()
            lines = error_lines(run.output())
            assert len(lines) == 1 and str(ro) in lines[0] and "EROFS" in lines[0], run.output()
            run.assert_nothing_left()


# -- hostile input, refused up front ---------------------------------------------------------------

BOMB = """\
id: bomb
family: code_function
prompt: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
"""


def task_set_with(root: Path, name: str, content: bytes) -> Path:
    """A copy of two bundled code tasks plus one file `name` holding `content`."""
    ts = TaskSet.load(bundled_task_set("code_function"))
    small = TaskSet(ts.meta, ts.tasks[:2])
    small.write(root)
    (root / name).write_bytes(content)
    return root


@pytest.mark.parametrize(
    "name,content,needles",
    [
        ("tasks/bomb.yaml", BOMB.encode(), ["tasks/bomb.yaml", "anchor", "not allowed"]),
        ("tasks/alias.yaml", b"x: &a 1\ny: *a\n", ["tasks/alias.yaml", "anchor (&a)"]),
        ("tasks/latin1.yaml", "id: caf\xe9\n".encode("latin-1"), ["tasks/latin1.yaml", "not UTF-8", "byte offset 7"]),
        ("tasks/deep.yaml", b"x: " + b"[" * 200 + b"]" * 200 + b"\n", ["tasks/deep.yaml", "nesting deeper"]),
        ("tasks/deeper.yaml", b"x: " + b"[" * 50_000 + b"]" * 50_000 + b"\n", ["tasks/deeper.yaml", "depth"]),
        ("tasks/nul.yaml", b"id: a\x00b\n", ["tasks/nul.yaml", "not valid YAML"]),
        ("tasks/surrogate.yaml", b'id: "\\ud800"\n', ["tasks/surrogate.yaml"]),
        ("taskset.yaml", b"name: x\nfamily: [code_function\n", ["taskset.yaml", "not valid YAML"]),
    ],
)
def test_a_hostile_task_file_is_refused_in_one_line(tmp_path, name, content, needles):
    ts = task_set_with(tmp_path / "ts", name, content)
    commands = [["tasks", "list", str(ts)]]
    if "bomb" in name or "latin1" in name:  # the same loader; eval once for the record
        commands.append(["eval", "--tasks", str(ts), "--out", str(tmp_path / "out")])
    for cmd in commands:
        proc = subprocess.run(
            [sys.executable, "-m", "sandgym", *cmd], capture_output=True, text=True, timeout=120, cwd=tmp_path
        )
        assert proc.returncode == 2, proc.stdout + proc.stderr
        lines = error_lines(proc.stderr)
        assert len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in proc.stderr, proc.stderr
        assert all(n in lines[0] for n in needles), lines[0]
    assert not (tmp_path / "out").exists()


def test_a_task_file_over_the_size_limit_is_refused_unread(tmp_path):
    ts = task_set_with(tmp_path / "ts", "tasks/huge.yaml", b"")
    with open(ts / "tasks" / "huge.yaml", "wb") as f:
        f.truncate(64 << 20)  # sparse: refused by its size, never read
    proc = subprocess.run(
        [sys.executable, "-m", "sandgym", "tasks", "list", str(ts)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2 and "at most 16,777,216" in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    "env,option,needles",
    [
        ("sandgym/CodeFunction-v0", "verifier_retries=abc", ["verifier_retries='abc'", "valid integer"]),
        ("sandgym/CodeFunction-v0", "verifier_retries=-1", ["verifier_retries=-1", "greater than or equal to 0"]),
        ("sandgym/CodeFunction-v0", "max_turns=[1, 2]", ["max_turns=[1, 2]", "valid integer"]),
        ("sandgym/CodeFunction-v0", "max_action_chars=0", ["max_action_chars=0"]),
        ("sandgym/CodeFunction-v0", "mode=&a [*a]", ["not YAML", "anchor"]),
        ("sandgym/CodeFunction-v0", "no_such_option=1", ["no_such_option"]),
        (BROWSER, "screenshot=abc", ["screenshot='abc'", "valid boolean"]),
        (BROWSER, "max_steps=0", ["max_steps=0"]),
    ],
)
def test_a_bad_env_option_is_refused_before_any_episode(tmp_path, env, option, needles):
    proc = subprocess.run(
        [sys.executable, "-m", "sandgym", "eval", "--env", env, "-o", option, "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = error_lines(proc.stderr)
    assert len(lines) == 1 and all(n in lines[0] for n in needles), proc.stderr
    assert not (tmp_path / "out" / "trajectories.jsonl").exists()


def test_a_replay_line_with_an_unknown_task_is_refused_naming_the_line(tmp_path):
    replay = tmp_path / "r.jsonl"
    t = code_tasks(1)[0]
    replay.write_text(
        json.dumps({"task_id": t.id, "actions": ["x"]}) + "\n" + json.dumps({"task_id": "basic/nope", "actions": []})
    )
    proc = subprocess.run(
        [sys.executable, "-m", "sandgym", "eval", "--policy", f"replay:{replay}", "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    lines = error_lines(proc.stderr)
    assert len(lines) == 1 and "line 2" in lines[0] and "'basic/nope'" in lines[0], proc.stderr


def test_hostile_actions_are_the_policys_failures_and_the_run_goes_on(tmp_path):
    tasks = code_tasks(5)
    ok = tasks[4]
    rows = [
        (tasks[0], "x" * (5 << 20), "the limit is 1,048,576"),  # 5 MB: over the default limit
        (tasks[1], fence("def f():\n    return '\ud800'\n"), "not valid Unicode"),  # a lone surrogate
        (tasks[2], {"tool": "bash", "command": "ls"}, "an action is text (a str), not dict"),
        (tasks[3], {"code": fence(tasks[3].hidden.reference_solution)}, "an action is text (a str), not dict"),
        (ok, fence(ok.hidden.reference_solution), None),
    ]
    replay = tmp_path / "r.jsonl"
    with open(replay, "w") as f:
        for t, action, _ in rows:
            f.write(json.dumps({"task_id": t.id, "actions": [action]}) + "\n")
    run = Eval(
        tmp_path,
        "--policy",
        f"replay:{replay}",
        "--out",
        "out",
        "-j",
        "2",
        *[x for t, _, _ in rows for x in ("--task-id", t.id)],
    )
    assert run.wait() == 0, run.output()
    traj = tmp_path / "out" / "trajectories.jsonl"
    recs = {r.task_id: r for r in read_records(traj)}
    for t, _, why in rows:
        r = recs[t.id]
        if why is None:
            assert r.outcome == "passed"
            continue
        assert r.outcome == "failed" and r.reward == 0.0 and r.error is None, r
        assert why in r.steps[0].observation
    assert traj.stat().st_size < 200_000  # the 5 MB action is not copied into the record
    run.assert_nothing_left()


# -- browser runs ---------------------------------------------------------------------------------


@pytest.mark.chromium
def test_browser_run_ctrl_c_ends_cleanly_and_resume_completes(tmp_path):
    traj = tmp_path / "out" / "trajectories.jsonl"
    args = ["--env", BROWSER, "--out", "out", "-j", "2", "--limit", "6"]
    for attempt in range(2):
        run = Eval(tmp_path, *args, *(["--resume"] if attempt else []))
        before = lines_in(traj)

        def episode_ended(b: int = before, r: Eval = run) -> bool:
            return lines_in(traj) > b or r.proc.poll() is not None

        wait_for(episode_ended, "a browser episode to end")
        run.signal(signal.SIGINT)
        rc = run.wait()
        assert rc in (0, 128 + signal.SIGINT), f"exit {rc} (a crash?):\n{run.output()}"
        read_records(traj)
        run.assert_nothing_left()
    final = Eval(tmp_path, *args, "--resume")
    assert final.wait() == 0, final.output()
    assert set(outcomes(traj).values()) == {"passed"} and len(outcomes(traj)) == 6
    final.assert_nothing_left()


@pytest.mark.chromium
def test_chromium_killed_mid_episode_is_retried_not_scored(tmp_path):
    traj = tmp_path / "out" / "trajectories.jsonl"
    run = Eval(tmp_path, "--env", BROWSER, "--out", "out", "-j", "1", "--limit", "4")

    def chromium() -> list[int]:
        table = descendants(run.pid)
        found = []
        for pid in table:
            try:
                with open(f"/proc/{pid}/comm") as f:
                    if f.read().strip().startswith("chrom"):
                        found.append(pid)
            except OSError:
                pass
        return found

    wait_for(lambda: chromium() or run.proc.poll() is not None, "Chromium to start")
    for pid in chromium():
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    assert run.wait() == 0, run.output()
    recs = read_records(traj)
    assert len(recs) == 4 and all(r.outcome == "passed" for r in recs), [(r.outcome, r.error) for r in recs]
    run.assert_nothing_left()


@pytest.mark.chromium
def test_browser_episode_past_its_deadline_kills_the_browser(tmp_path):
    ts = TaskSet.load(bundled_task_set("browser_form"))
    t = ts.tasks[0]
    replay = tmp_path / "r.jsonl"
    replay.write_text(json.dumps({"task_id": t.id, "actions": ['press("Tab")'] * 2000}) + "\n")
    run = Eval(
        tmp_path,
        *("--env", BROWSER, "--policy", f"replay:{replay}", "--out", "out", "--task-id", t.id),
        *("-o", "max_steps=5000", "--episode-timeout", "8"),
    )
    assert run.wait() == 1, run.output()  # its one episode ended in env_error
    (rec,) = read_records(tmp_path / "out" / "trajectories.jsonl")
    # (How many steps it took before the deadline depends on how fast Chromium started.)
    assert rec.outcome == "env_error" and (rec.error or "").startswith("deadline") and len(rec.steps) < 2000
    run.assert_nothing_left()


@pytest.mark.chromium
def test_gc_removes_what_a_killed_browser_run_left(tmp_path):
    traj = tmp_path / "out" / "trajectories.jsonl"
    run = Eval(tmp_path, "--env", BROWSER, "--out", "out", "-j", "2", "--limit", "6")
    wait_for(lambda: lines_in(traj) >= 1 or run.proc.poll() is not None, "a browser episode to finish")
    run.signal(signal.SIGKILL)
    run.wait()
    left = temp_dirs_of(run.pid)
    assert any("sandgym-browser-" in p.name for p in left), left
    run.assert_nothing_left(temp_dirs=False)  # the processes die with their owner
    gc = subprocess.run(
        [sys.executable, "-m", "sandgym", "gc", "--owner", str(run.pid)], capture_output=True, text=True, timeout=120
    )
    assert gc.returncode == 0, gc.stderr
    assert temp_dirs_of(run.pid) == [] and marked_by(run.pid) == []


def test_gc_removes_temp_folders_of_dead_processes_only(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    mine = owned_tempdir("faults")  # this live process's: kept
    theirs = Path(tempfile.mkdtemp(prefix=f"sandgym-browser-{pid}-"))
    (theirs / "state").mkdir()
    (theirs / "state" / "app.sqlite").write_bytes(b"x")
    again = theirs
    try:
        removed = reap_tempdirs()
        assert theirs in removed and not theirs.exists() and mine.exists()
        again = Path(tempfile.mkdtemp(prefix=f"sandgym-form-snapshots-{pid}-"))
        gc = subprocess.run(
            [sys.executable, "-m", "sandgym", "gc", "--owner", str(pid)], capture_output=True, text=True, timeout=120
        )
        assert gc.returncode == 0 and not again.exists(), gc.stdout + gc.stderr
        assert "removed 1 temporary folder" in gc.stdout
    finally:
        for path in (mine, theirs, again):
            shutil.rmtree(path, ignore_errors=True)


def test_yaml_helper_refuses_what_task_files_refuse():
    from sandgym.specs import load_yaml_text

    assert load_yaml_text("a: [1, 2]\n") == {"a": [1, 2]}
    for text in ("a: &x 1\nb: *x\n", "[" * 100 + "]" * 100):
        with pytest.raises(yaml.YAMLError):
            load_yaml_text(text)
