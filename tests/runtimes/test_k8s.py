"""The k8s backend on a real single-node cluster (scripts/k8s-cluster.sh):
what the shared conformance and pool suites do not cover (they run on
`k8s` and `k8s:gvisor` too): the pod's hardening as the API server
itself checks it, the namespace's set-up, the errors, and leaks."""

from __future__ import annotations

import copy
import os
import signal
import socket
import subprocess
import sys
import textwrap

import pytest

from sandgym.runtimes import RuntimeUnavailable, SandboxSpec, get_runtime

pytestmark = pytest.mark.k8s


@pytest.fixture(scope="module")
def k8s(k8s_cluster):
    from sandgym.runtimes.k8s.runtime import KubernetesRuntime

    rt = KubernetesRuntime()
    yield rt
    rt.close()


def manifest(rt, spec: SandboxSpec, sid: str = "sg-k8s-manifest-check") -> dict:
    from sandgym.runtimes.agent_client import agent_config
    from sandgym.runtimes.images import image_for
    from sandgym.runtimes.k8s.pods import pod_manifest

    labels = {"sandgym.owner": "test-1", "sandgym.run": "test", "sandgym.expires": "0"}
    return pod_manifest(spec, sid, image_for(spec.image, rt.image), agent_config(spec), rt.runtime_class, None, labels)


def test_pods_pass_the_api_servers_schema_and_the_restricted_profile(k8s, k8s_cluster, tmp_path):
    """Server-side dry runs against the cluster built here: strict field
    validation is the OpenAPI schema of that version, and the namespace's
    Pod Security admission enforces the restricted profile."""
    (tmp_path / "f.py").write_text("x = 1\n")
    from sandgym.runtimes import Mount

    spec = SandboxSpec(mounts=[Mount(source=str(tmp_path), target="/opt/data")], memory_mb=512, cpus=0.5)
    ns = k8s.core.read_namespace(k8s.namespace)
    assert ns.metadata.labels["pod-security.kubernetes.io/enforce"] == "restricted"
    pod = manifest(k8s, spec)
    assert dry_run(k8s_cluster, k8s.namespace, pod) == (201, "")
    # The checks can fail: an unknown field, and each relaxation the profile forbids.
    typo = copy.deepcopy(pod)
    typo["spec"]["containers"][0]["securityContxt"] = {}
    status, message = dry_run(k8s_cluster, k8s.namespace, typo)
    assert status == 400 and 'unknown field "spec.containers[0].securityContxt"' in message, message

    def as_root(p):
        for ctx in [p["spec"]["securityContext"]] + [c["securityContext"] for c in containers(p)]:
            ctx.update(runAsNonRoot=False, runAsUser=0)

    for relax in (
        lambda p: p["spec"]["containers"][0]["securityContext"].update(allowPrivilegeEscalation=True),
        lambda p: p["spec"]["containers"][0]["securityContext"].update(capabilities={"add": ["NET_RAW"]}),
        lambda p: p["spec"].update(hostPID=True),
        lambda p: p["spec"]["volumes"].append({"name": "host", "hostPath": {"path": "/"}}),
        as_root,
    ):
        bad = copy.deepcopy(pod)
        relax(bad)
        status, message = dry_run(k8s_cluster, k8s.namespace, bad)
        assert status == 403 and "violates PodSecurity" in message, message


def dry_run(kubeconfig: str, namespace: str, pod: dict) -> tuple[int, str]:
    """POST the pod with dryRun=All and strict field validation, straight to
    the API server (the Python client would validate it first, by its own
    models). Returns the status and the server's message."""
    import http.client
    import json
    import ssl

    import yaml

    conf = yaml.safe_load(open(kubeconfig))
    server = conf["clusters"][0]["cluster"]["server"].removeprefix("https://")
    user = conf["users"][0]["user"]
    ctx = ssl.create_default_context(cafile=conf["clusters"][0]["cluster"]["certificate-authority"])
    ctx.load_cert_chain(user["client-certificate"], user["client-key"])
    host, port = server.split(":")
    conn = http.client.HTTPSConnection(host, int(port), context=ctx, timeout=30)
    path = f"/api/v1/namespaces/{namespace}/pods?dryRun=All&fieldValidation=Strict"
    conn.request("POST", path, json.dumps(pod), {"Content-Type": "application/json"})
    reply = conn.getresponse()
    body = json.loads(reply.read())
    conn.close()
    return reply.status, body.get("message", "") if body.get("kind") == "Status" else ""


def containers(pod: dict) -> list[dict]:
    return pod["spec"]["containers"] + pod["spec"].get("initContainers", [])


def test_pod_hardening_as_created(k8s):
    with k8s.create(SandboxSpec(memory_mb=300, cpus=0.5, wall_timeout_s=120, labels={"task": "a/b"})) as sb:
        pod = k8s.core.read_namespaced_pod(sb.info.id, k8s.namespace)
        spec, c = pod.spec, pod.spec.containers[0]
        assert spec.automount_service_account_token is False and not spec.host_network and not spec.host_pid
        assert spec.active_deadline_seconds == 180 and spec.restart_policy == "Never"
        assert c.security_context.read_only_root_filesystem and not c.security_context.allow_privilege_escalation
        assert c.security_context.capabilities.drop == ["ALL"] and c.security_context.run_as_non_root
        assert c.resources.limits == {"cpu": "500m", "memory": "364Mi", "ephemeral-storage": "64Mi"}
        assert pod.metadata.annotations["sandgym.labels"] == '{"task": "a/b"}'
        # Inside: no service-account token, no writable root, no capabilities.
        r = sb.exec(["sh", "-c", "ls /var/run/secrets 2>&1; touch /etc/x 2>&1; grep CapEff /proc/self/status"])
        assert b"No such file" in r.stdout and b"Read-only file system" in r.stdout
        assert r.stdout.rstrip().endswith(b"0000000000000000")


def test_mounts_are_copied_in_read_only(k8s, tmp_path):
    from sandgym.runtimes import Mount

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text("VALUE = 42\n")
    os.symlink("mod.py", tmp_path / "pkg" / "link.py")
    spec = SandboxSpec(mounts=[Mount(source=str(tmp_path), target="/opt/data")])
    with k8s.create(spec) as sb:
        r = sb.exec(
            ["python3", "-c", "import sys; sys.path.insert(0, '/opt/data/pkg'); import link; print(link.VALUE)"]
        )
        assert r.stdout == b"42\n", r
        for attempt in ("echo x > /opt/data/pkg/mod.py", "echo x > /opt/data/new.py", "mkdir /opt/data/d"):
            assert sb.exec(["sh", "-c", attempt]).exit_code != 0, attempt
    with pytest.raises(Exception, match="mount source does not exist"):
        k8s.create(SandboxSpec(mounts=[Mount(source=str(tmp_path / "nope"), target="/x")]))


def test_namespace_set_up_with_default_deny(k8s):
    from kubernetes import client

    from sandgym.runtimes.k8s.pods import NETWORK_POLICY

    policy = client.NetworkingV1Api(k8s.api_client).read_namespaced_network_policy(NETWORK_POLICY, k8s.namespace)
    spec = policy.spec
    assert spec is not None and spec.pod_selector is not None and spec.policy_types is not None
    assert spec.pod_selector.match_labels is None and sorted(spec.policy_types) == ["Egress", "Ingress"]
    assert not spec.ingress and not spec.egress
    sa = k8s.core.read_namespaced_service_account("default", k8s.namespace)
    assert sa.automount_service_account_token is False


@pytest.mark.parametrize("isolation", ["runc", "runsc"])
def test_no_route_to_the_node_or_other_pods(k8s_cluster, isolation):
    """A pod reaches neither another pod nor the node: no gateway, no
    address for the node on the pods' bridge, and either the namespace's
    default deny enforced by kube-router or, where the test cluster runs
    none (SANDGYM_K8S_NETPOL=0), isolated bridge ports
    (scripts/k8s-cluster.sh). gVisor pods have loopback only."""
    from sandgym.runtimes.k8s.runtime import KubernetesRuntime

    rt = KubernetesRuntime(isolation)
    server = socket.socket()
    server.bind(("10.255.255.1", 0))  # the node's address (on lo)
    server.listen(1)
    server.settimeout(0.5)
    port = server.getsockname()[1]
    probe = (
        "import socket, sys\nfor target in sys.argv[1:]:\n"
        "    host, port = target.split(':')\n"
        "    s = socket.socket(); s.settimeout(2)\n"
        "    try:\n        s.connect((host, int(port))); print('connected', host)\n"
        "    except OSError as e:\n        print('no', host)\n"
    )
    listen = "import socket, time\ns = socket.socket(); s.bind(('0.0.0.0', 8000)); s.listen(8); time.sleep(30)"
    wait = "for i in $(seq 100); do grep -q ':1F40 00000000:0000 0A' /proc/net/tcp && exit 0; sleep 0.1; done; exit 1"
    ifaces = "import socket; print(sorted(n for _, n in socket.if_nameindex()))"
    try:
        with rt.create() as a, rt.create() as b:
            b.exec(["sh", "-c", f'python3 -c "{listen}" >/dev/null 2>&1 &'])
            assert b.exec(["sh", "-c", wait]).exit_code == 0  # listening on 8000
            b_ip = rt.core.read_namespaced_pod(b.info.id, rt.namespace).status.pod_ip
            assert b_ip
            if isolation == "runsc":
                assert a.exec(["python3", "-c", ifaces]).stdout == b"['lo']\n"
            else:
                routes = a.exec(["cat", "/proc/net/route"]).text().splitlines()[1:]
                assert routes and not [r for r in routes if r.split()[1] == "00000000"], routes  # no default route
                # Positive control: b reaches its own listener at its address.
                assert b.exec(["python3", "-c", probe, f"{b_ip}:8000"]).stdout == f"connected {b_ip}\n".encode()
            r = a.exec(["python3", "-c", probe, f"{b_ip}:8000", f"10.255.255.1:{port}"])
            assert b"connected" not in r.stdout, r
        with pytest.raises(socket.timeout):
            server.accept()
    finally:
        server.close()
        rt.close()


def test_bad_input_and_missing_cluster(k8s_cluster, tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="choices: local, docker"):
        get_runtime("k8s:nope")
    with pytest.raises(RuntimeUnavailable, match="no RuntimeClass 'kata'"):
        get_runtime("k8s:kata")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    with pytest.raises(RuntimeUnavailable, match="KUBECONFIG"):
        get_runtime("k8s")
    broken = tmp_path / "down.kubeconfig"
    text = open(k8s_cluster).read().replace("https://127.0.0.1:16443", "https://127.0.0.1:1")
    broken.write_text(text)
    monkeypatch.setenv("KUBECONFIG", str(broken))
    with pytest.raises(RuntimeUnavailable, match="does not answer"):
        get_runtime("k8s")


def test_sigkill_then_gc_leaves_no_pod(k8s):
    """Sandboxes and warm-pool pods alike: after kill -9 `sandgym gc` deletes every pod of the dead process."""
    from sandgym.runtimes.k8s.pods import OWNER_LABEL, POOL_LABEL

    script = textwrap.dedent("""
        import time
        from sandgym.runtimes import SandboxSpec, get_runtime
        rt = get_runtime("k8s")
        boxes = [rt.create() for _ in range(2)]
        rt.warm(SandboxSpec(), 2)
        while rt.pooled(SandboxSpec()) < 2:
            time.sleep(0.1)
        print("ready", flush=True)
        time.sleep(600)
    """)
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)

    def mine(pool: bool | None = None):
        pods = k8s.core.list_namespaced_pod(k8s.namespace, label_selector=OWNER_LABEL).items
        return [
            p.metadata.name
            for p in pods
            if p.metadata.labels[OWNER_LABEL].endswith(f"-{child.pid}")
            and (pool is None or (p.metadata.labels.get(POOL_LABEL) == "1") == pool)
        ]

    try:
        assert child.stdout is not None
        assert child.stdout.readline() == b"ready\n"
        assert len(mine(pool=False)) == 2 and len(mine(pool=True)) >= 2
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    out = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "sandgym"), "gc"], capture_output=True, text=True
    )
    assert out.returncode == 0 and "sandbox pod(s)" in out.stdout, out.stdout + out.stderr
    assert not [n for n in mine() if n not in out.stdout]
    remaining = k8s.core.list_namespaced_pod(k8s.namespace, label_selector=OWNER_LABEL).items
    assert all(p.metadata.deletion_timestamp for p in remaining if p.metadata.name in out.stdout)


@pytest.mark.parametrize("backend", ["k8s", "k8s:gvisor"])
@pytest.mark.parametrize(
    "env_id,tasks,task_ids",
    [
        ("sandgym/CodeFunction-v0", None, ["basic/add-months", "basic/balanced-brackets"]),
        # One SWE task (its pods, venv and repository are the slow part: 84 s for two on
        # gVisor); test_conformance's SWE test covers the family's sandboxes on each backend.
        ("sandgym/SWERepo-v0", "swe_repo/billing-v1", ["billing/round-half-even"]),
    ],
)
def test_eval_every_docker_family_on_k8s(k8s_cluster, tmp_path, backend, env_id, tasks, task_ids):
    """`sandgym eval` of each family that runs on docker (code and SWE; the
    browser family runs on local only): the oracle passes, the null policy
    fails, with the k8s backend named in every record."""
    import json

    from typer.testing import CliRunner

    from sandgym.cli import app

    for policy, reward in (("oracle", 1.0), ("null", 0.0)):
        out = tmp_path / f"{policy}"
        args = ["eval", "--env", env_id, "--runtime", backend, "--policy", policy, "--out", str(out), "-j", "2"]
        args += ["--tasks", tasks] if tasks else []
        for task_id in task_ids:
            args += ["--task-id", task_id]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        records = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
        got = [(r["task_id"], r["reward"]) for r in records]
        assert len(records) == len(task_ids) and all(r["reward"] == reward for r in records), got
        assert {r["runtime"]["backend"] for r in records} == {"k8s"}, records[0]["runtime"]


def test_registry_prefixes_sandgyms_images(k8s_cluster):
    """On a real cluster the nodes pull sandgym's images from where the user
    pushed them (nothing is pulled here: only the names are checked)."""
    from sandgym.runtimes.images import default_image
    from sandgym.runtimes.k8s.runtime import KubernetesRuntime

    rt = KubernetesRuntime(registry="registry.example/")
    assert rt.image == f"registry.example/{default_image()}"
    assert KubernetesRuntime(image="mine:1", registry="registry.example").image == "mine:1"
