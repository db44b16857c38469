"""What a task's sandbox may reach: its egress allowlist.

Sandboxes reach no network by default. A task that needs a service (a
package mirror, a test database) names it here, by address or CIDR and
ports; the k8s runtime turns the list into a NetworkPolicy that lets
exactly that through (runtimes/k8s/netpol.py), and backends that give
sandboxes no network refuse such a task with one line."""

from __future__ import annotations

import ipaddress
from typing import Literal

from pydantic import Field, field_validator

from sandgym.specs.base import StrictModel


class EgressRule(StrictModel):
    host: str = Field(description="An IP address or CIDR (10.0.0.5, 10.0.0.0/24): a NetworkPolicy cannot name hosts.")
    ports: list[int] = Field(min_length=1, description="Destination ports, 1-65535.")
    protocol: Literal["TCP", "UDP"] = "TCP"

    @field_validator("host")
    @classmethod
    def _address(cls, v: str) -> str:
        try:
            ipaddress.ip_network(v, strict=False)
        except ValueError:
            raise ValueError(
                f"egress host must be an IP address or CIDR such as 10.0.0.5 or 10.0.0.0/24 "
                f"(a NetworkPolicy cannot name hosts), got {v!r}"
            ) from None
        return v

    @field_validator("ports")
    @classmethod
    def _ports(cls, v: list[int]) -> list[int]:
        bad = [p for p in v if not 1 <= p <= 65535]
        if bad:
            raise ValueError(f"egress ports must be 1-65535, got {bad[0]}")
        return v
