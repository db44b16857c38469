"""Capacity planning: how many sandboxes a target throughput needs.

The mean comes from Little's law: active sandboxes L = arrival rate x
occupancy (120 tasks/min x 30 s = 2/s x 30 s = 60). The tail comes from a
discrete-event simulation (numpy, seeded) that replays the measured
occupancy distribution (each episode's create + exec + verify seconds,
drawn with replacement from a run's records, or exponential around
`--occupancy-s` when only rates are given).

What it assumes:
- arrivals are Poisson at the target rate, except during bursts: a burst
  multiplies the rate by `burst_factor` for `burst_s` seconds, and bursts
  start as a Poisson process `bursts_per_h` an hour (the mean rate is
  raised accordingly and reported);
- every task gets a sandbox at once (no queue: the count is what must be
  provisioned so nothing waits); a task that ends in `env_error`
  (probability `retry_p`, measured from the records) is played again at
  once, holding a sandbox again;
- nodes fail as a Poisson process (`node_loss_per_h`); a failure kills
  each running sandbox with probability 1/`nodes`, and that task starts
  over on a fresh sandbox (its work lost);
- the warm pool must cover the creates asked for within one cold-create
  time (P99 of the arrivals in any window that long), so no task waits
  for a cold create. The cold-create time is the P95 of the run's records,
  or, given a Prometheus exposition of a run or server (`--metrics`), of
  its `sandgym_sandbox_creation_seconds` histogram: with a warm pool on,
  the records hold claims (fast) and only the metrics hold what creating
  a sandbox costs;
- CPU and memory are the sandboxes' limits (cpus, memory_mb), times the
  P99 count.
"""

from __future__ import annotations

import heapq
import html
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


@dataclass
class Plan:
    rate_per_min: float
    occupancy_s: float  # mean
    littles_law: float  # mean active sandboxes
    sim_mean: float
    sim_p50: float
    sim_p95: float
    sim_p99: float
    sim_max: float
    warm_pool: int
    cpus: float  # at the P99 count
    memory_gb: float
    create_s: float
    retry_p: float
    source: str
    assumptions: dict[str, Any] = field(default_factory=dict)
    measured: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def littles_law(rate_per_min: float, occupancy_s: float) -> float:
    """Mean active sandboxes: L = lambda x W."""
    return rate_per_min / 60.0 * occupancy_s


def measured_from_records(records: list[Any], wall_s: float | None = None) -> dict[str, Any]:
    """Occupancy samples, create times, retry probability and the measured rate of a run."""
    occ = [float(r.timings.create_s + r.timings.exec_s + r.timings.verify_s) for r in records]
    occ = [o if o > 0 else float(r.timings.total_s) for o, r in zip(occ, records, strict=True)]
    creates = [float(r.timings.create_s) for r in records if r.timings.create_s > 0]
    tries = sum(1 + len(r.retries) for r in records)
    errors = sum(len(r.retries) + (r.outcome == "env_error") for r in records)
    out: dict[str, Any] = {
        "n_episodes": len(records),
        "occupancy_s": occ,
        "create_s": creates,
        "retry_p": errors / tries if tries else 0.0,
    }
    if wall_s and wall_s > 0:
        out["rate_per_min"] = len(records) / wall_s * 60.0
    return out


def _arrivals(rate_s: float, horizon_s: float, rng: np.random.Generator, burst: dict[str, float]) -> np.ndarray:
    """Poisson arrivals on [0, horizon), the rate multiplied during bursts (thinning)."""
    factor, burst_s, per_h = burst["burst_factor"], burst["burst_s"], burst["bursts_per_h"]
    starts = np.sort(rng.uniform(0, horizon_s, rng.poisson(per_h * horizon_s / 3600.0))) if per_h > 0 else np.array([])
    peak = rate_s * max(1.0, factor)
    n = rng.poisson(peak * horizon_s)
    t = np.sort(rng.uniform(0, horizon_s, n))
    if factor <= 1.0 or not len(starts):
        keep = rng.uniform(size=n) < rate_s / peak
        return t[keep]
    i = np.searchsorted(starts, t, side="right") - 1
    in_burst = (i >= 0) & (t - starts[np.maximum(i, 0)] < burst_s)
    p = np.where(in_burst, 1.0, 1.0 / factor)
    return t[rng.uniform(size=n) < p]


def simulate(
    rate_per_min: float,
    occupancy: list[float] | float,
    n_arrivals: int = 20000,
    seed: int = 0,
    burst_factor: float = 1.0,
    burst_s: float = 60.0,
    bursts_per_h: float = 0.0,
    retry_p: float = 0.0,
    node_loss_per_h: float = 0.0,
    nodes: int = 8,
    create_s: float = 0.0,
) -> dict[str, Any]:
    """Concurrent sandboxes over time (infinite servers: nobody waits).
    Returns time-weighted mean and percentiles of the count, the sandbox
    intervals and the arrival times."""
    rng = np.random.default_rng(seed)
    rate_s = rate_per_min / 60.0
    horizon = n_arrivals / rate_s
    arrivals = _arrivals(
        rate_s, horizon, rng, {"burst_factor": burst_factor, "burst_s": burst_s, "bursts_per_h": bursts_per_h}
    )
    samples = np.asarray(occupancy if isinstance(occupancy, list) else [], dtype=float)

    def draw(k: int) -> np.ndarray:
        if len(samples):
            return samples[rng.integers(0, len(samples), k)]
        return rng.exponential(float(occupancy), k)  # type: ignore[arg-type]

    losses = np.sort(rng.uniform(0, horizon, rng.poisson(node_loss_per_h * horizon / 3600.0)))
    starts: list[float] = []
    ends: list[float] = []
    service = draw(len(arrivals) * 2 + 16)
    si = 0
    for a in arrivals:
        t = float(a)
        tries_left = 50
        while tries_left:
            tries_left -= 1
            if si >= len(service):
                service, si = draw(len(arrivals) + 16), 0
            end = t + float(service[si])
            si += 1
            # node loss: the first failure inside (t, end) that hits this sandbox
            lo, hi = np.searchsorted(losses, t, side="right"), np.searchsorted(losses, end, side="left")
            hit = None
            for L in losses[lo:hi]:
                if rng.uniform() < 1.0 / max(1, nodes):
                    hit = float(L)
                    break
            if hit is not None:
                starts.append(t)
                ends.append(hit)
                t = hit + create_s  # a fresh sandbox; the task starts over
                continue
            starts.append(t)
            ends.append(end)
            if retry_p > 0 and rng.uniform() < retry_p:
                t = end
                continue
            break
    s = np.asarray(starts)
    e = np.asarray(ends)
    times = np.concatenate([s, e])
    steps = np.concatenate([np.ones(len(s)), -np.ones(len(e))])
    order = np.lexsort((steps, times))  # at a tie, ends first
    times, steps = times[order], steps[order]
    counts = np.cumsum(steps)
    durations = np.diff(np.append(times, times[-1]))
    # Measure after a warm-up (the first 10% of the horizon starts empty).
    warm = times >= 0.1 * horizon
    w = durations[warm]
    c = counts[warm]
    total = w.sum() or 1.0
    order_c = np.argsort(c)
    cum = np.cumsum(w[order_c]) / total

    def q(p: float) -> float:
        return float(c[order_c][min(len(c) - 1, int(np.searchsorted(cum, p)))]) if len(c) else 0.0

    return {
        "mean": float((c * w).sum() / total),
        "p50": q(0.50),
        "p95": q(0.95),
        "p99": q(0.99),
        "max": float(c.max()) if len(c) else 0.0,
        "times": times,
        "counts": counts,
        "arrivals": arrivals,
        "horizon_s": horizon,
        "effective_rate_per_min": len(arrivals) / horizon * 60.0,
    }


def simulate_queue(
    rate_per_min: float, mean_service_s: float, servers: int, n_arrivals: int = 200000, seed: int = 0
) -> dict[str, float]:
    """An M/M/c FIFO queue (c sandboxes, exponential occupancy): the share of
    arrivals that wait and the mean queue length (L_q = lambda x W_q)."""
    rng = np.random.default_rng(seed)
    rate_s = rate_per_min / 60.0
    arrivals = np.cumsum(rng.exponential(1.0 / rate_s, n_arrivals))
    service = rng.exponential(mean_service_s, n_arrivals)
    free = [0.0] * servers
    heapq.heapify(free)
    waits = np.empty(n_arrivals)
    for i in range(n_arrivals):
        earliest = heapq.heappop(free)
        start = max(arrivals[i], earliest)
        waits[i] = start - arrivals[i]
        heapq.heappush(free, start + service[i])
    skip = n_arrivals // 10
    w = waits[skip:]
    return {"p_wait": float((w > 1e-12).mean()), "mean_wait_s": float(w.mean()), "lq": float(rate_s * w.mean())}


def erlang_c(servers: int, offered: float) -> float:
    """Erlang C: the probability an arrival waits in M/M/c (offered load a = lambda/mu < c)."""
    c, a = servers, offered
    term = 1.0
    total = 1.0
    for k in range(1, c):
        term *= a / k
        total += term
    last = term * a / c  # a^c / c!
    top = last * c / (c - a)
    return top / (total + top)


def histogram_quantile(buckets: list[tuple[float, float]], q: float) -> float | None:
    """The q-quantile (0-1) of a Prometheus histogram from its cumulative
    (upper bound, count) buckets, interpolated linearly inside a bucket as
    Prometheus's histogram_quantile does; None when it counted nothing."""
    buckets = sorted(buckets)
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):
                return lower  # past the last finite bound: its bound is all that is known
            inside = count - below
            return lower + (bound - lower) * ((rank - below) / inside if inside else 1.0)
        lower, below = bound, count
    return lower


def pool_figures(exposition: str) -> dict[str, Any]:
    """What a warm pool is sized from, read from a Prometheus exposition
    (`sandgym eval --metrics-port`, `sandgym serve`'s /metrics): per backend,
    the creation P50/P95 (sandgym_sandbox_creation_seconds), the claims and
    their P50/P99 by launch type (sandgym_sandbox_claim_seconds) and the
    share served warm."""
    from prometheus_client.parser import text_string_to_metric_families

    creation: dict[str, list[tuple[float, float]]] = {}
    claims: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            if not sample.name.endswith("_bucket"):
                continue
            le = float(sample.labels.get("le", "inf"))
            backend = sample.labels.get("backend", "?")
            if family.name == "sandgym_sandbox_creation_seconds":
                creation.setdefault(backend, []).append((le, sample.value))
            elif family.name == "sandgym_sandbox_claim_seconds":
                claims.setdefault((backend, sample.labels.get("launch_type", "?")), []).append((le, sample.value))
    out: dict[str, Any] = {}
    for backend in sorted(set(creation) | {b for b, _ in claims}):
        fig: dict[str, Any] = {}
        if backend in creation:
            fig["creation_p50_s"] = histogram_quantile(creation[backend], 0.5)
            fig["creation_p95_s"] = histogram_quantile(creation[backend], 0.95)
        total = 0.0
        for launch in ("warm", "cold"):
            b = claims.get((backend, launch), [])
            n = max((c for _, c in b), default=0.0)
            total += n
            fig[f"claims_{launch}"] = int(n)
            fig[f"claim_{launch}_p50_s"] = histogram_quantile(b, 0.5)
            fig[f"claim_{launch}_p99_s"] = histogram_quantile(b, 0.99)
        fig["hit_ratio"] = fig["claims_warm"] / total if total else None
        out[backend] = fig
    return out


def plan(
    rate_per_min: float | None = None,
    occupancy_s: float | None = None,
    records: list[Any] | None = None,
    wall_s: float | None = None,
    cpus: float = 1.0,
    memory_mb: int = 1024,
    seed: int = 0,
    n_arrivals: int = 20000,
    burst_factor: float = 1.0,
    burst_s: float = 60.0,
    bursts_per_h: float = 0.0,
    node_loss_per_h: float = 0.0,
    nodes: int = 8,
    retry_p: float | None = None,
    create_s: float | None = None,
) -> tuple[Plan, dict[str, Any]]:
    """`create_s`: the cold-create seconds the warm pool must cover (default:
    the P95 of the records' create times)."""
    measured: dict[str, Any] = {}
    occupancy: list[float] | float
    if records:
        measured = measured_from_records(records, wall_s)
        occupancy = measured["occupancy_s"]
        if rate_per_min is None:
            rate_per_min = measured.get("rate_per_min")
        shape: list[float] = measured["occupancy_s"]
        mean_occ = float(np.mean(shape)) if shape else 0.0
        if occupancy_s is not None:  # rescale the measured shape to the given mean
            occupancy = [o * occupancy_s / mean_occ for o in shape] if mean_occ else occupancy_s
            mean_occ = occupancy_s
        source = "records"
    else:
        if occupancy_s is None:
            raise ValueError("give a run folder, or --occupancy-s with --rate")
        occupancy, mean_occ, source = occupancy_s, occupancy_s, "rates"
    if rate_per_min is None or rate_per_min <= 0:
        raise ValueError("give --rate (tasks per minute): the run's own rate is unknown")
    if create_s is None:
        creates = measured.get("create_s") or []
        create_s = float(np.percentile(creates, 95)) if creates else 0.0
    rp = retry_p if retry_p is not None else float(measured.get("retry_p", 0.0))
    sim = simulate(
        rate_per_min,
        occupancy,
        n_arrivals=n_arrivals,
        seed=seed,
        burst_factor=burst_factor,
        burst_s=burst_s,
        bursts_per_h=bursts_per_h,
        retry_p=rp,
        node_loss_per_h=node_loss_per_h,
        nodes=nodes,
        create_s=create_s,
    )
    # Warm pool: the creates asked for within one cold-create time, P99 over windows.
    arr = sim["arrivals"]
    if create_s > 0 and len(arr):
        within = np.searchsorted(arr, arr + create_s, side="left") - np.arange(len(arr))
        warm_pool = int(np.percentile(within, 99))
    else:
        warm_pool = 0
    p = Plan(
        rate_per_min=float(rate_per_min),
        occupancy_s=float(mean_occ),
        littles_law=littles_law(rate_per_min, mean_occ),
        sim_mean=sim["mean"],
        sim_p50=sim["p50"],
        sim_p95=sim["p95"],
        sim_p99=sim["p99"],
        sim_max=sim["max"],
        warm_pool=warm_pool,
        cpus=math.ceil(sim["p99"]) * cpus,
        memory_gb=math.ceil(sim["p99"]) * memory_mb / 1024.0,
        create_s=create_s,
        retry_p=rp,
        source=source,
        assumptions={
            "arrivals": "Poisson",
            "burst_factor": burst_factor,
            "burst_s": burst_s,
            "bursts_per_h": bursts_per_h,
            "node_loss_per_h": node_loss_per_h,
            "nodes": nodes,
            "cpus_per_sandbox": cpus,
            "memory_mb_per_sandbox": memory_mb,
            "simulated_arrivals": n_arrivals,
            "seed": seed,
            "effective_rate_per_min": sim["effective_rate_per_min"],
        },
        measured={k: v for k, v in measured.items() if k not in ("occupancy_s", "create_s")}
        | (
            {"occupancy_p50_s": float(np.percentile(measured["occupancy_s"], 50))}
            if measured.get("occupancy_s")
            else {}
        ),
    )
    return p, sim


def fmt_duration(seconds: float) -> str:
    """A duration for a plot's title: milliseconds under a second (0.04 s
    reads "40 ms", not "0.0 s"), seconds with one decimal above."""
    if seconds < 1.0:
        return f"{seconds * 1000:.0f} ms" if seconds >= 0.001 else f"{seconds * 1000:.2f} ms"
    return f"{seconds:.1f} s"


def plot_title(p: Plan) -> str:
    return (
        f"Concurrent sandboxes, simulated at {p.rate_per_min:.1f} tasks/min, "
        f"mean occupancy {fmt_duration(p.occupancy_s)}"
    )


X_TITLE = "simulated time (s)"
Y_TITLE = "concurrent sandboxes"


def plot_svg(p: Plan, sim: dict[str, Any], path: Path, width: int = 720, height: int = 300) -> Path:
    """Concurrent sandboxes over (simulated) time, with the Little's-law mean
    and the P95/P99 lines: a hand-written SVG (matplotlib is not a dependency)."""
    times, counts = sim["times"], sim["counts"]
    n = len(times)
    stride = max(1, n // 2000)
    xs, ys = times[::stride], counts[::stride]
    x_max = float(times[-1]) if n else 1.0
    y_max = max(float(counts.max()) if n else 1.0, p.sim_p99, p.littles_law) * 1.1 or 1.0
    L, R, T, B = 50, 130, 20, 40

    def X(t: float) -> float:
        return L + (width - L - R) * t / x_max

    def Y(v: float) -> float:
        return height - B - (height - T - B) * v / y_max

    pts = " ".join(f"{X(float(x)):.1f},{Y(float(y)):.1f}" for x, y in zip(xs, ys, strict=True))
    lines = [
        (p.littles_law, "#2a7", f"Little's law {p.littles_law:.1f}"),
        (p.sim_p95, "#c80", f"P95 {p.sim_p95:.0f}"),
        (p.sim_p99, "#c22", f"P99 {p.sim_p99:.0f}"),
    ]
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        'font-family="sans-serif" font-size="11">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{L}" y="14" id="title">{html.escape(plot_title(p))}</text>',
        f'<line x1="{L}" y1="{height - B}" x2="{width - R}" y2="{height - B}" stroke="#444"/>',
        f'<line x1="{L}" y1="{T}" x2="{L}" y2="{height - B}" stroke="#444"/>',
        f'<text x="{L}" y="{height - 10}">0</text><text x="{width - R - 60}" y="{height - 10}">{x_max:.0f} s</text>',
        f'<text x="{L - 4}" y="{Y(0):.0f}" text-anchor="end">0</text>'
        f'<text x="{L - 4}" y="{Y(y_max / 1.1):.0f}" text-anchor="end">{y_max / 1.1:.0f}</text>',
        f'<text x="{(L + width - R) / 2:.0f}" y="{height - 10}" text-anchor="middle" id="x-title">{X_TITLE}</text>',
        f'<text transform="translate(14,{(T + height - B) / 2:.0f}) rotate(-90)" text-anchor="middle" '
        f'id="y-title">{Y_TITLE}</text>',
        f'<polyline fill="none" stroke="#36c" stroke-width="1" points="{pts}"/>',
    ]
    for value, color, label in lines:
        parts.append(
            f'<line x1="{L}" y1="{Y(value):.1f}" x2="{width - R}" y2="{Y(value):.1f}" stroke="{color}" '
            f'stroke-dasharray="4 3"/><text x="{width - R + 4}" y="{Y(value) + 4:.1f}" fill="{color}">{label}</text>'
        )
    parts.append("</svg>")
    path.write_text("\n".join(parts) + "\n")
    return path


def write_plan(p: Plan, sim: dict[str, Any], folder: Path) -> tuple[Path, Path]:
    """capacity.json and a plot (capacity.png with matplotlib when installed, else capacity.svg) in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    data = folder / "capacity.json"
    data.write_text(json.dumps(p.as_dict(), indent=2) + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return data, plot_svg(p, sim, folder / "capacity.svg")
    fig, ax = plt.subplots(figsize=(8, 3.2))
    ax.step(sim["times"], sim["counts"], where="post", lw=0.7)
    for value, color, label in (
        (p.littles_law, "g", "Little's law"),
        (p.sim_p95, "orange", "P95"),
        (p.sim_p99, "r", "P99"),
    ):
        ax.axhline(value, color=color, ls="--", label=f"{label} {value:.1f}")
    ax.set_title(plot_title(p), fontsize=9)
    ax.set_xlabel(X_TITLE)
    ax.set_ylabel(Y_TITLE)
    ax.legend(loc="upper right")
    fig.tight_layout()
    out = folder / "capacity.png"
    fig.savefig(out)
    plt.close(fig)
    return data, out
