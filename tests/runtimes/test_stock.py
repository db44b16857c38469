"""The shared stock's bounds (runtimes/stock.py) without a backend: items
are plain objects, since what is tested is the stock's own bookkeeping
(order, staleness, demand, the refill's token bucket) and its metrics;
every backend's sandboxes go through it in test_k8s_pool.py,
test_conformance_stock.py and test_local.py."""

from __future__ import annotations

import threading
import time
from collections import deque

import pytest

from sandgym.runtimes import SandboxSpec
from sandgym.runtimes.stock import DEMAND_WINDOW_S, Stock, emit


class Item:
    def __init__(self, n: int):
        self.n = n
        self.key = ""
        self.alive = True

    def fresh(self) -> bool:
        return self.alive


def make_stock(**kw) -> tuple[Stock[Item], list[Item], list[Item]]:
    made: list[Item] = []
    discarded: list[Item] = []
    lock = threading.Lock()

    def start(spec: SandboxSpec, variant: str) -> Item:
        with lock:
            item = Item(len(made))
            made.append(item)
            return item

    kw.setdefault("per_key", 0)
    stock: Stock[Item] = Stock(start, discarded.append, name="test", count_in_use=False, **kw)
    return stock, made, discarded


def wait_until(check, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_wanted_fills_and_hands_out_oldest_first_once():
    stock, made, _ = make_stock(max_total=8, starters=2)
    spec = SandboxSpec()
    try:
        stock.wanted(spec, "", 3)
        wait_until(lambda: stock.ready_count(spec) == 3)
        # Oldest ready first: two starters may finish their items in either
        # order, so the order is the one they became ready in.
        ready = [i.n for i in stock._ready[stock.key(spec, "")]]
        got = [stock.take(spec) for _ in range(3)]
        assert all(g is not None for g in got)
        order = [g.n for g in got if g is not None]
        assert order == ready and len(set(order)) == 3
        # The floor holds: the stock refills what was taken.
        wait_until(lambda: stock.ready_count(spec) == 3)
        assert not {g.n for g in got if g is not None} & {i.n for i in stock._ready[stock.key(spec, "")]}
    finally:
        stock.close()


def test_a_dead_item_is_dropped_never_handed_out():
    stock, made, discarded = make_stock(max_total=4, starters=1)
    spec = SandboxSpec()
    try:
        stock.wanted(spec, "", 2)
        wait_until(lambda: stock.ready_count(spec) == 2)
        waiting = list(stock._ready[stock.key(spec, "")])
        for item in waiting:
            item.alive = False
        got = stock.take(spec)
        assert got is None or got not in waiting
        assert set(map(id, waiting)) <= set(map(id, discarded))
        wait_until(lambda: stock.ready_count(spec) == 2)  # replaced
        assert stock.metrics()["discarded"] >= 2
    finally:
        stock.close()


def test_the_refill_is_rate_limited_by_a_token_bucket():
    stock, _, _ = make_stock(starters=2, rate_per_s=0.5)
    with stock._cond:
        waits = [stock._take_token() for _ in range(3)]
    # A burst of `starters`, then one start per 1/rate seconds.
    assert waits[0] == waits[1] == 0.0 and 1.0 < waits[2] <= 2.0
    with pytest.raises(ValueError, match="rate_per_s=0"):
        make_stock(rate_per_s=0)


def test_demand_raises_a_specs_share_up_to_the_cap():
    stock, _, _ = make_stock(per_key=1, max_total=10, demand=True)
    key = stock.key(SandboxSpec(), "")
    with stock._cond:
        assert stock.target(key) == 1
        stock._start_s = 2.0  # a start takes 2 s
        now = time.monotonic()
        # 3 claims a second for the last 2 s: 6 arrive while one pod starts.
        stock._takes[key] = deque(now - 2 + i / 3 for i in range(6))
        assert stock.target(key) == 1 + 6
        stock._takes[key] = deque(now - 2 + i / 30 for i in range(60))
        assert stock.target(key) == 10  # the cap
        stock._takes[key] = deque([now - DEMAND_WINDOW_S - 1])
        assert stock.target(key) == 1  # old claims no longer count


def test_claims_and_creations_reach_the_registry_and_capacity():
    from sandgym.capacity import histogram_quantile, pool_figures
    from sandgym.observability.metrics import SandgymMetrics

    metrics = SandgymMetrics()
    try:
        for s in (0.004, 0.006, 0.02):
            emit("k8s", "claim_warm", s)
        emit("k8s", "claim_cold", 1.2)
        for s in (0.8, 1.0, 1.4, 2.0):
            emit("k8s", "started", s)
        text = metrics.exposition()[0].decode()
    finally:
        metrics.close()
    assert 'sandgym_sandbox_claim_seconds_count{backend="k8s",launch_type="warm"} 3.0' in text
    assert 'sandgym_warm_pool_events_total{backend="k8s",event="started"} 4.0' in text
    fig = pool_figures(text)["k8s"]
    assert fig["claims_warm"] == 3 and fig["claims_cold"] == 1 and fig["hit_ratio"] == 0.75
    assert 1.0 < fig["creation_p95_s"] <= 2.5  # inside the bucket that holds 2.0
    assert histogram_quantile([(1.0, 0.0), (2.0, 10.0), (float("inf"), 10.0)], 0.5) == 1.5
    assert histogram_quantile([(1.0, 0.0), (float("inf"), 0.0)], 0.5) is None


def test_capacity_sizes_the_pool_from_an_exposition(tmp_path):
    """`sandgym capacity --metrics FILE`: the warm pool covers the creation P95 it holds."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    from sandgym.observability.metrics import SandgymMetrics

    metrics = SandgymMetrics()
    try:
        for _ in range(20):
            emit("k8s", "started", 4.0)  # slow creates: 2.5-5 s bucket
        (tmp_path / "metrics.txt").write_bytes(metrics.exposition()[0])
    finally:
        metrics.close()
    sandgym = str(Path(sys.executable).parent / "sandgym")
    args = [sandgym, "capacity", "--rate", "600", "--occupancy-s", "30", "--out", str(tmp_path)]
    slow = subprocess.run([*args, "--metrics", str(tmp_path / "metrics.txt")], capture_output=True, text=True)
    assert slow.returncode == 0, slow.stderr
    plan = json.loads((tmp_path / "capacity.json").read_text())
    assert 2.5 < plan["create_s"] <= 5.0 and plan["warm_pool"] >= 30  # 10/s over > 2.5 s
    assert "k8s: creation P50" in slow.stdout
    bad = subprocess.run([*args, "--metrics", str(tmp_path / "missing.txt")], capture_output=True, text=True)
    assert bad.returncode == 2 and "--metrics" in bad.stderr and "cannot read it" in bad.stderr
