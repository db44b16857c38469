"""A sandbox's egress allowlist as a NetworkPolicy.

The namespace's default deny (`pods.network_policy`) shuts every pod in
both ways. A spec with an allowlist (`SandboxSpec.egress`) gets one more
policy, named and selected by a hash of the allowlist, that lets its pods
reach exactly those addresses and ports; policies add up, so everything
else stays denied. Pods with the same allowlist share the policy: a
kernel holds few ipsets (256 here), and kube-router makes some per policy.
Replies come back through the enforcer's connection tracking, so no
ingress rule is needed."""

from __future__ import annotations

import hashlib
import json

from ..base import Egress

EGRESS_LABEL = "sandgym.egress"  # the allowlist's hash, on pods and on their policy
POLICY_PREFIX = "sandgym-egress-"


def egress_key(rules: tuple[Egress, ...]) -> str:
    """The allowlist's name: the same rules in any order give the same key."""
    canon = sorted(json.dumps(r.model_dump(mode="json"), sort_keys=True) for r in rules)
    return hashlib.sha256("\n".join(canon).encode()).hexdigest()[:16]


def egress_policy(rules: tuple[Egress, ...]) -> dict:
    """The NetworkPolicy that lets the pods labelled with this allowlist's key reach its destinations."""
    key = egress_key(rules)
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": POLICY_PREFIX + key, "labels": {EGRESS_LABEL: key}},
        "spec": {
            "podSelector": {"matchLabels": {EGRESS_LABEL: key}},
            "policyTypes": ["Egress"],
            "egress": [
                {
                    "to": [{"ipBlock": {"cidr": r.host}}],
                    "ports": [{"protocol": r.protocol, "port": p} for p in r.ports],
                }
                for r in rules
            ],
        },
    }
