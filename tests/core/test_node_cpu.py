"""benchmarks/node_cpu.py: reading acct(2) records, naming components, and
counting a process that ended during the run (only acct sees it)."""

from __future__ import annotations

import runpy
import struct
import sys
from pathlib import Path

import pytest

NODE_CPU = runpy.run_path(str(Path(__file__).resolve().parents[2] / "benchmarks" / "node_cpu.py"), run_name="node_cpu")


def record(pid: int, name: bytes, utime: int, stime: int) -> bytes:
    """One struct acct_v3 as the kernel writes it (64 bytes)."""
    head = struct.pack("=BBHIIIIIIf", 0, 3, 0, 0, 0, 0, pid, 1, 0, 0.0)
    times = struct.pack("=HHHHHHHH", utime, stime, 0, 0, 0, 0, 0, 0)
    return head + times + name.ljust(16, b"\0")


def test_comp_t_has_a_base_8_exponent():
    assert NODE_CPU["comp_t"](250) == 250
    assert NODE_CPU["comp_t"]((1 << 13) | 100) == 800  # 100 * 8


def test_acct_records_are_read_in_seconds(tmp_path):
    f = tmp_path / "acct"
    f.write_bytes(record(42, b"runc", 3, 2) + record(43, b"containerd-shim", (1 << 13) | 10, 0))
    assert NODE_CPU["acct_records"](str(f)) == [(42, "runc", 0.05), (43, "containerd-shim", 0.8)]


def test_components_tell_dockers_containerd_from_the_clusters():
    component = NODE_CPU["component"]
    assert component("containerd", "/usr/bin/containerd") == "containerd (Docker's)"
    assert component("containerd", "/var/cache/sandgym/k8s/bin/containerd") == "containerd (cluster)"
    assert component("iptables-restor") == component("kube-router") == "kube-router (+iptables, ipset)"
    assert component("kube-controller") == "kube-controller-manager"
    assert component("host-local") == "CNI plugins"
    assert component("something") == "other"


def test_a_child_that_ended_during_the_run_is_counted():
    res = NODE_CPU["measure"]([sys.executable, "-c", "sum(i * i for i in range(3 * 10**6))"], False)
    if not res["acct"]:
        pytest.skip(f"no process accounting here: {res['acct_error']}")
    assert res["rc"] == 0
    spent = sum(s for key, s in res["by_name"].items() if key.startswith("python"))
    assert spent > 0.05  # the child exited before the second snapshot: only acct saw it
