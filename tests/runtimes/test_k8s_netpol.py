"""NetworkPolicy enforced on the real test cluster (kube-router's firewall,
scripts/k8s-cluster.sh): a service pod in a namespace of its own, reached
by a sandbox pod of a namespace with no policy (the positive control),
not reached once the namespace's default deny is in place, and, from the
sandbox namespace, reached on exactly what a spec's egress allowlist
names. The service counts the connections it accepts: a blocked try must
not have reached it. Every address is a pod's, on the node's own bridge.
Also: a runtime's egress policies go with its close, or with `sandgym gc`
once its process is killed."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import uuid

import pytest

from sandgym.runtimes import Egress, SandboxSpec
from tests.conftest import K8S_SCRIPT
from tests.helpers import wait_until

pytestmark = pytest.mark.k8s

SPEC = SandboxSpec(memory_mb=128, cpus=0.25, wall_timeout_s=300)
# Each check runs on node 0, and on node 1 when the cluster has it
# (SANDGYM_K8S_NODES=2): one kube-router serves both. The service and the
# sandboxes share a node (the test cluster routes no pod to another node).
NODES = ["sandgym-node", "sandgym-node-1"]
# Namespaces of their own per run and node: a deleted one lingers while it ends.
RUN = uuid.uuid4().hex[:6]
# Two ports on one pod: the allowlist names one, the other must stay shut.
SERVER = """\
import socket, threading, sys
def serve(port):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port)); s.listen(16)
    while True:
        c, addr = s.accept()
        print("accepted", port, addr[0], flush=True)
        c.sendall(b"hello %d\\n" % port); c.close()
for p in (8080, 8081):
    threading.Thread(target=serve, args=(p,)).start()
"""
PROBE = """\
import socket, sys
s = socket.socket(); s.settimeout(3)
try:
    s.connect((sys.argv[1], int(sys.argv[2]))); print(s.recv(64).decode().strip())
except socket.timeout:
    print("timeout")
except OSError as e:
    print("refused" if e.errno == 111 else "error %s" % e.errno)
"""


@pytest.fixture(scope="module", params=NODES)
def service(k8s_cluster, request):
    """(ip of the service pod, a reader of the source addresses it accepted,
    the node selector of its node)."""
    from kubernetes import client

    from sandgym.runtimes.k8s.runtime import KubernetesRuntime

    if (
        "kube-router: running"
        not in subprocess.run(["bash", K8S_SCRIPT, "status"], capture_output=True, text=True).stdout
    ):
        pytest.skip("the test cluster runs no NetworkPolicy enforcer (SANDGYM_K8S_NETPOL=0)")
    rt = KubernetesRuntime(pool=0)
    core = rt.core
    node = {"kubernetes.io/hostname": request.param}
    if not core.list_node(label_selector=f"kubernetes.io/hostname={request.param}").items:
        pytest.skip(f"the test cluster has no node {request.param} (SANDGYM_K8S_NODES=2 adds it)")
    ns = f"sandgym-netpol-svc-{RUN}-{NODES.index(request.param)}"
    try:
        core.create_namespace({"metadata": {"name": ns}})
    except client.ApiException as e:
        assert e.status == 409, e
    name = f"netpol-svc-{uuid.uuid4().hex[:6]}"
    pod = {
        "metadata": {"name": name, "labels": {"app": "netpol-svc"}},
        "spec": {
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "terminationGracePeriodSeconds": 0,
            "nodeSelector": node,
            "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": "server",
                    "image": rt.image,
                    "imagePullPolicy": "Never",
                    "command": ["python3", "-u", "-c", SERVER],
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "readOnlyRootFilesystem": True,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }
    service = {
        "metadata": {"name": "netpol-svc"},
        "spec": {
            "selector": {"app": "netpol-svc"},
            "ports": [{"name": "a", "port": 8080}, {"name": "b", "port": 8081}],
        },
    }
    core.create_namespaced_pod(ns, pod)
    try:
        core.create_namespaced_service(ns, service)
    except client.ApiException as e:
        assert e.status == 409, e

    def ready() -> bool:
        p = core.read_namespaced_pod(name, ns)
        return p.status.phase == "Running" and bool(p.status.pod_ip)

    wait_until(ready, "the service pod to run")
    ip = core.read_namespaced_pod(name, ns).status.pod_ip

    def accepted() -> list[str]:
        log = core.read_namespaced_pod_log(name, ns)
        return re.findall(r"^accepted (\d+) (\S+)$", log, re.M)

    yield ip, accepted, node
    core.delete_namespace(ns)
    rt.close()


def enforced(pod: str) -> bool:
    """kube-router has written the pod's firewall chain (until then our
    fail-closed rule drops its traffic, which would prove nothing)."""
    rules = subprocess.run(["iptables-save", "-t", "filter"], capture_output=True, text=True, check=True).stdout
    return f"POD name:{pod} " in rules


def probe(sandbox, ip: str, port: int) -> str:
    return sandbox.exec(["python3", "-c", PROBE, ip, str(port)], timeout=20).text().strip()


def test_default_deny_blocks_a_service_a_pod_without_policy_reaches(k8s_cluster, service):
    from kubernetes import client

    from sandgym.runtimes.k8s.pods import NETWORK_POLICY, network_policy
    from sandgym.runtimes.k8s.runtime import KubernetesRuntime

    ip, accepted, node = service
    open_ns = f"sandgym-netpol-open-{RUN}-{NODES.index(node['kubernetes.io/hostname'])}"
    rt = KubernetesRuntime(pool=0, namespace=open_ns, node_selector=node)
    networking = client.NetworkingV1Api(rt.api_client)
    try:
        # The positive control: the same kind of pod, in a namespace with no policy.
        networking.delete_namespaced_network_policy(NETWORK_POLICY, open_ns)
        with rt.create(SPEC) as sb:
            wait_until(lambda: enforced(sb.info.id), "kube-router to take the pod in")
            wait_until(lambda: probe(sb, ip, 8080) == "hello 8080", "the open pod to reach the service")
            own_ip = rt.core.read_namespaced_pod(sb.info.id, open_ns).status.pod_ip
            assert ("8080", own_ip) in accepted()

            # The same pod once its namespace denies by default (counted from
            # then on: tries while the policy was being applied may get through).
            networking.create_namespaced_network_policy(open_ns, network_policy())  # type: ignore[arg-type]
            wait_until(lambda: probe(sb, ip, 8080) != "hello 8080", "the default deny to take effect")
            seen = len(accepted())
            for port in (8080, 8081):
                assert probe(sb, ip, port) in ("refused", "timeout")
            assert len(accepted()) == seen, "a denied connection reached the service"
    finally:
        rt.close()
        rt.core.delete_namespace(open_ns)


def test_an_egress_allowlist_lets_exactly_that_through(k8s_cluster, service):
    from kubernetes import client

    from sandgym.runtimes.k8s.netpol import EGRESS_LABEL, POLICY_PREFIX, egress_key
    from sandgym.runtimes.k8s.runtime import KubernetesRuntime

    ip, accepted, node = service
    rt = KubernetesRuntime(pool=0, node_selector=node)
    allow = (Egress(host=ip, ports=(8080,)),)
    try:
        with rt.create(SPEC.model_copy(update={"egress": allow})) as allowed, rt.create(SPEC) as denied:
            wait_until(
                lambda: enforced(allowed.info.id) and enforced(denied.info.id), "kube-router to take the pods in"
            )
            pod = rt.core.read_namespaced_pod(allowed.info.id, rt.namespace)
            assert pod.metadata.labels[EGRESS_LABEL] == egress_key(allow)
            policies = client.NetworkingV1Api(rt.api_client).list_namespaced_network_policy(
                rt.namespace, label_selector=f"{EGRESS_LABEL}={egress_key(allow)}"
            )
            assert [str(p.metadata and p.metadata.name).startswith(POLICY_PREFIX) for p in policies.items] == [True]
            policy = policies.items[0]
            assert policy.spec is not None and policy.spec.policy_types == ["Egress"]
            assert len(policy.spec.egress or []) == 1

            wait_until(lambda: probe(allowed, ip, 8080) == "hello 8080", "the allowlisted port to answer")
            seen = len(accepted())
            # Not the other port of the same host, and nothing for a pod without the allowlist.
            assert probe(allowed, ip, 8081) in ("refused", "timeout")
            assert probe(denied, ip, 8080) in ("refused", "timeout")
            assert len(accepted()) == seen, "a connection the allowlist does not name reached the service"
    finally:
        rt.close()


def test_gc_deletes_the_egress_policies_of_a_killed_run_only(k8s_cluster):
    """A process killed while its sandbox has an allowlist leaves a pod and
    a NetworkPolicy; `sandgym gc` deletes both, not a live runtime's
    policy, which that runtime's close deletes. No enforcer needed: these
    are API objects."""
    from kubernetes import client

    from sandgym.runtimes.k8s.netpol import EGRESS_LABEL
    from sandgym.runtimes.k8s.pods import OWNER_LABEL
    from sandgym.runtimes.k8s.runtime import KubernetesRuntime

    script = textwrap.dedent("""
        import time
        from sandgym.runtimes import Egress, SandboxSpec
        from sandgym.runtimes.k8s.runtime import KubernetesRuntime
        rt = KubernetesRuntime(pool=0)
        spec = SandboxSpec(memory_mb=128, cpus=0.25, egress=(Egress(host="10.96.0.250", ports=(9,)),))
        sb = rt.create(spec)
        print("ready", flush=True)
        time.sleep(600)
    """)
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    live = KubernetesRuntime(pool=0)
    networking = client.NetworkingV1Api(live.api_client)

    def policies(owner_pid: int) -> list[str]:
        items = networking.list_namespaced_network_policy(live.namespace, label_selector=EGRESS_LABEL).items
        return [
            str(p.metadata.name)
            for p in items
            if p.metadata and (p.metadata.labels or {}).get(OWNER_LABEL, "").endswith(f"-{owner_pid}")
        ]

    try:
        live.allow_egress(SPEC.model_copy(update={"egress": (Egress(host="10.96.0.251", ports=(9,)),)}))
        assert child.stdout is not None
        assert child.stdout.readline() == b"ready\n"
        theirs, mine = policies(child.pid), policies(os.getpid())
        assert len(theirs) == 1 and len(mine) == 1
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    try:
        out = subprocess.run(
            [os.path.join(os.path.dirname(sys.executable), "sandgym"), "gc"], capture_output=True, text=True
        )
        assert out.returncode == 0, out.stdout + out.stderr
        assert f"removed 1 egress NetworkPolicy(s): {theirs[0]}" in out.stdout, out.stdout
        assert policies(child.pid) == [] and policies(os.getpid()) == mine
        pods = live.core.list_namespaced_pod(live.namespace, label_selector=f"{OWNER_LABEL}").items
        assert all(
            p.metadata.deletion_timestamp for p in pods if p.metadata.labels[OWNER_LABEL].endswith(f"-{child.pid}")
        )
    finally:
        live.close()
    assert policies(os.getpid()) == []
