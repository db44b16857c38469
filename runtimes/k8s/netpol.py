"""A sandbox's egress allowlist as a NetworkPolicy.

The namespace's default deny (`pods.network_policy`) shuts every pod in
both ways. A spec with an allowlist (`SandboxSpec.egress`) gets one more
policy, selecting pods by a hash of the allowlist, that lets them reach
exactly those addresses and ports; policies add up, so everything else
stays denied. A runtime's pods with the same allowlist share one policy (a
kernel holds few ipsets, 256 here, and kube-router makes some per policy).
The policy is the runtime's own (its name ends in the runtime's tag, it
carries the owner label as pods do): `close` deletes it, and `sandgym gc`
deletes those whose owner process is gone, as it does their pods.
Replies come back through the enforcer's connection tracking, so no
ingress rule is needed."""

from __future__ import annotations

import hashlib
import json

from ..base import Egress
from .pods import OWNER_LABEL

EGRESS_LABEL = "sandgym.egress"  # the allowlist's hash, on pods and on their policy
POLICY_PREFIX = "sandgym-egress-"


def egress_key(rules: tuple[Egress, ...]) -> str:
    """The allowlist's name: the same rules in any order give the same key."""
    canon = sorted(json.dumps(r.model_dump(mode="json"), sort_keys=True) for r in rules)
    return hashlib.sha256("\n".join(canon).encode()).hexdigest()[:16]


def policy_name(rules: tuple[Egress, ...], tag: str) -> str:
    """The name of the policy a runtime (tagged `tag`) makes for this allowlist."""
    return f"{POLICY_PREFIX}{egress_key(rules)}-{tag}"


def egress_policy(rules: tuple[Egress, ...], tag: str, owner: str) -> dict:
    """The NetworkPolicy that lets the pods labelled with this allowlist's key reach its destinations."""
    key = egress_key(rules)
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": policy_name(rules, tag), "labels": {EGRESS_LABEL: key, OWNER_LABEL: owner}},
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
