"""Egress allowlists without a cluster: what a spec and a task accept, the
NetworkPolicy the k8s backend makes of one, and the one-line refusal of
backends that give sandboxes no network. (Enforcement on the real test
cluster: test_k8s_netpol.py.)"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from sandgym.runtimes import Egress, RuntimeUnavailable, SandboxSpec
from sandgym.runtimes.base import refuse_egress
from sandgym.runtimes.k8s.netpol import EGRESS_LABEL, egress_key, egress_policy
from sandgym.specs.code_function import CodeTask


def test_bad_hosts_and_ports_are_named():
    with pytest.raises(ValidationError, match="egress host must be an IP address or CIDR.*'pypi.org'"):
        Egress(host="pypi.org", ports=(443,))
    with pytest.raises(ValidationError, match="egress ports must be 1-65535, got 70000"):
        Egress(host="10.0.0.1", ports=(70000,))
    with pytest.raises(ValidationError, match="ports"):
        Egress(host="10.0.0.1", ports=())
    assert Egress(host="10.1.2.3", ports=(80, 22, 80)) == Egress(host="10.1.2.3/32", ports=(22, 80))


def test_policy_lets_exactly_the_allowlist_through():
    rules = (Egress(host="10.254.0.7", ports=(8080,)), Egress(host="10.9.0.0/16", ports=(53,), protocol="UDP"))
    policy = egress_policy(rules, "abcd1234", "host-42")
    key = egress_key(rules)
    assert key == egress_key(tuple(reversed(rules)))  # any order, one policy
    # The runtime's own (its tag in the name), with the owner label gc reads.
    assert policy["metadata"]["name"] == f"sandgym-egress-{key}-abcd1234"
    assert policy["metadata"]["labels"] == {EGRESS_LABEL: key, "sandgym.owner": "host-42"}
    assert key != egress_key(rules[:1])
    spec = policy["spec"]
    assert spec["podSelector"] == {"matchLabels": {EGRESS_LABEL: key}}
    assert spec["policyTypes"] == ["Egress"]  # ingress stays under the namespace's default deny
    assert spec["egress"] == [
        {"to": [{"ipBlock": {"cidr": "10.254.0.7/32"}}], "ports": [{"protocol": "TCP", "port": 8080}]},
        {"to": [{"ipBlock": {"cidr": "10.9.0.0/16"}}], "ports": [{"protocol": "UDP", "port": 53}]},
    ]


def test_backends_without_network_refuse_an_allowlist():
    refuse_egress(SandboxSpec(), "local")  # nothing asked, nothing refused
    spec = SandboxSpec(egress=(Egress(host="10.0.0.5", ports=(80,)),))
    with pytest.raises(RuntimeUnavailable, match="may reach 10.0.0.5/32.*runtime 'local' gives sandboxes no network"):
        refuse_egress(spec, "local")


def test_a_task_declares_its_egress_and_old_dumps_are_unchanged():
    base = {"id": "t/egress", "prompt": "p", "entry_point": "f"}
    task = CodeTask(**base, egress=[{"host": "10.254.0.7", "ports": [8080]}])
    assert task.egress[0].ports == [8080]
    assert "egress" not in CodeTask(**base).model_dump()  # content hashes of existing sets stay
    with pytest.raises(ValidationError, match="egress.0.host"):
        CodeTask(**base, egress=[{"host": "example.com", "ports": [80]}])
