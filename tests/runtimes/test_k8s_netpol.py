"""NetworkPolicy enforced on the real test cluster (kube-router's firewall,
scripts/k8s-cluster.sh): a service pod in a namespace of its own, reached
by a sandbox pod of a namespace with no policy (the positive control),
not reached once the namespace's default deny is in place, and, from the
sandbox namespace, reached on exactly what a spec's egress allowlist
names. The service counts the connections it accepts: a blocked try must
not have reached it. Every address is a pod's, on the node's own bridge."""

from __future__ import annotations

import re
import subprocess
import uuid

import pytest

from sandgym.runtimes import Egress, SandboxSpec
from tests.conftest import K8S_SCRIPT
from tests.helpers import wait_until

pytestmark = pytest.mark.k8s

SPEC = SandboxSpec(memory_mb=128, cpus=0.25, wall_timeout_s=300)
# kube-router serves node 0 only; other nodes' pods reach nothing at all.
NODE0 = {"kubernetes.io/hostname": "sandgym-node"}
# Namespaces of their own per run: a deleted one lingers while it ends.
SERVICE_NS = f"sandgym-netpol-svc-{uuid.uuid4().hex[:6]}"
OPEN_NS = f"sandgym-netpol-open-{uuid.uuid4().hex[:6]}"
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


@pytest.fixture(scope="module")
def service(k8s_cluster):
    """(ip of the service pod, a reader of the source addresses it accepted)."""
    from kubernetes import client

    from sandgym.runtimes.k8s.runtime import KubernetesRuntime

    if (
        "kube-router: running"
        not in subprocess.run(["bash", K8S_SCRIPT, "status"], capture_output=True, text=True).stdout
    ):
        pytest.skip("the test cluster runs no NetworkPolicy enforcer (SANDGYM_K8S_NETPOL=0)")
    rt = KubernetesRuntime(pool=0)
    core = rt.core
    try:
        core.create_namespace({"metadata": {"name": SERVICE_NS}})
    except client.ApiException as e:
        assert e.status == 409, e
    name = f"netpol-svc-{uuid.uuid4().hex[:6]}"
    pod = {
        "metadata": {"name": name, "labels": {"app": "netpol-svc"}},
        "spec": {
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "terminationGracePeriodSeconds": 0,
            "nodeSelector": NODE0,
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
    core.create_namespaced_pod(SERVICE_NS, pod)
    try:
        core.create_namespaced_service(SERVICE_NS, service)
    except client.ApiException as e:
        assert e.status == 409, e

    def ready() -> bool:
        p = core.read_namespaced_pod(name, SERVICE_NS)
        return p.status.phase == "Running" and bool(p.status.pod_ip)

    wait_until(ready, "the service pod to run")
    ip = core.read_namespaced_pod(name, SERVICE_NS).status.pod_ip

    def accepted() -> list[str]:
        log = core.read_namespaced_pod_log(name, SERVICE_NS)
        return re.findall(r"^accepted (\d+) (\S+)$", log, re.M)

    yield ip, accepted
    core.delete_namespace(SERVICE_NS)
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

    ip, accepted = service
    rt = KubernetesRuntime(pool=0, namespace=OPEN_NS, node_selector=NODE0)
    networking = client.NetworkingV1Api(rt.api_client)
    try:
        # The positive control: the same kind of pod, in a namespace with no policy.
        networking.delete_namespaced_network_policy(NETWORK_POLICY, OPEN_NS)
        with rt.create(SPEC) as sb:
            wait_until(lambda: enforced(sb.info.id), "kube-router to take the pod in")
            wait_until(lambda: probe(sb, ip, 8080) == "hello 8080", "the open pod to reach the service")
            own_ip = rt.core.read_namespaced_pod(sb.info.id, OPEN_NS).status.pod_ip
            seen = len(accepted())
            assert ("8080", own_ip) in accepted()

            # The same pod once its namespace denies by default.
            networking.create_namespaced_network_policy(OPEN_NS, network_policy())  # type: ignore[arg-type]
            wait_until(lambda: probe(sb, ip, 8080) != "hello 8080", "the default deny to take effect")
            for port in (8080, 8081):
                assert probe(sb, ip, port) in ("refused", "timeout")
            assert len(accepted()) == seen, "a denied connection reached the service"
    finally:
        rt.close()
        rt.core.delete_namespace(OPEN_NS)


def test_an_egress_allowlist_lets_exactly_that_through(k8s_cluster, service):
    from kubernetes import client

    from sandgym.runtimes.k8s.netpol import EGRESS_LABEL, POLICY_PREFIX, egress_key
    from sandgym.runtimes.k8s.runtime import KubernetesRuntime

    ip, accepted = service
    rt = KubernetesRuntime(pool=0, node_selector=NODE0)
    allow = (Egress(host=ip, ports=(8080,)),)
    try:
        with rt.create(SPEC.model_copy(update={"egress": allow})) as allowed, rt.create(SPEC) as denied:
            wait_until(
                lambda: enforced(allowed.info.id) and enforced(denied.info.id), "kube-router to take the pods in"
            )
            pod = rt.core.read_namespaced_pod(allowed.info.id, rt.namespace)
            assert pod.metadata.labels[EGRESS_LABEL] == egress_key(allow)
            policy = client.NetworkingV1Api(rt.api_client).read_namespaced_network_policy(
                POLICY_PREFIX + egress_key(allow), rt.namespace
            )
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
