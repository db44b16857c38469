"""A fleet of many nodes planned from the per-node figures of a Ray run
(`sandgym capacity RUN --fleet N`).

From the run's records (each names its node: `executor.node`): each node's
episodes per minute, the most episodes it ran at once, and the occupancy
of its episodes. The fleet is N such nodes behind SPREAD placement: its
arrival rate is N times the mean node's, every node gets 1/N of it. The
simulation (`capacity.simulate`, seeded) gives the fleet's concurrent
sandboxes and, for one node at its share of the rate, the per-node tail;
node failures (`node_loss_per_h`, Poisson per node) cost the episodes
running there, played again elsewhere. The one writer of records is the
eval process: its load is the fleet's records per second against the
appends per second `RecordWriter` manages here (measured: one fsynced
append a record, as in a run).
"""

from __future__ import annotations

import math
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from .capacity import measured_from_records, simulate
from .records import EpisodeRecord, RecordWriter


def busiest(intervals: list[tuple[float, float]]) -> int:
    """The most intervals open at once."""
    edges = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def node_figures(records: list[EpisodeRecord], wall_s: float) -> dict[str, Any]:
    """Per-node figures of a run: episodes per minute, most at once, by Ray node."""
    by_node: dict[str, list[EpisodeRecord]] = {}
    for r in records:
        node = (r.executor or {}).get("node")
        if node:
            by_node.setdefault(node, []).append(r)
    if not by_node:
        raise ValueError("--fleet needs a run made with --executor ray: its records name their nodes")
    nodes = {}
    for node, recs in by_node.items():
        spans = []
        for r in recs:
            start = datetime.fromisoformat(r.started_at).timestamp()
            spans.append((start, start + r.timings.total_s))
        nodes[node] = {"episodes": len(recs), "per_min": len(recs) / wall_s * 60.0, "at_once": busiest(spans)}
    rates = [n["per_min"] for n in nodes.values()]
    return {
        "nodes": nodes,
        "node_rate_per_min": float(np.mean(rates)),
        "node_rate_min_per_min": float(min(rates)),
        "seats_per_node": max(n["at_once"] for n in nodes.values()),
    }


def writer_appends_per_s(sample: EpisodeRecord, n: int = 200) -> float:
    """Records `RecordWriter` appends per second here (each fsynced), of a record like `sample`."""
    with tempfile.TemporaryDirectory(prefix="sandgym-writer-") as d:
        with RecordWriter(Path(d) / "trajectories.jsonl") as w:
            t0 = time.perf_counter()
            for _ in range(n):
                w.write(sample)
            return n / (time.perf_counter() - t0)


def fleet_plan(
    records: list[EpisodeRecord],
    wall_s: float,
    fleet_nodes: int,
    node_loss_per_h: float = 0.0,
    seed: int = 0,
    n_arrivals: int = 20000,
) -> dict[str, Any]:
    """The plan for `fleet_nodes` nodes like the run's (see the module's docstring)."""
    fig = node_figures(records, wall_s)
    measured = measured_from_records(records, wall_s)
    occupancy = measured["occupancy_s"]
    fleet_rate = fig["node_rate_per_min"] * fleet_nodes
    fleet = simulate(
        fleet_rate,
        occupancy,
        n_arrivals=n_arrivals,
        seed=seed,
        retry_p=measured["retry_p"],
        node_loss_per_h=node_loss_per_h * fleet_nodes,
        nodes=fleet_nodes,
    )
    one = simulate(fig["node_rate_per_min"], occupancy, n_arrivals=min(n_arrivals, 5000), seed=seed)
    records_per_s = fleet["effective_rate_per_min"] / 60.0 * (1.0 + measured["retry_p"])
    appends = writer_appends_per_s(records[0])
    mean_per_node = fleet["mean"] / fleet_nodes
    return {
        "fleet_nodes": fleet_nodes,
        "measured_nodes": len(fig["nodes"]),
        "node_rate_per_min": fig["node_rate_per_min"],
        "node_rate_min_per_min": fig["node_rate_min_per_min"],
        "seats_per_node_measured": fig["seats_per_node"],
        "occupancy_mean_s": float(np.mean(occupancy)),
        "fleet_rate_per_min": fleet_rate,
        "fleet_sandboxes_mean": fleet["mean"],
        "fleet_sandboxes_p99": fleet["p99"],
        "node_sandboxes_p99": one["p99"],
        "node_seats_needed": max(1, math.ceil(one["p99"])),
        "node_loss_per_h_per_node": node_loss_per_h,
        "episodes_lost_per_h": node_loss_per_h * fleet_nodes * mean_per_node,
        "records_per_s": records_per_s,
        "writer_appends_per_s": appends,
        "writer_load": records_per_s / appends,
        "per_node": fig["nodes"],
    }
