"""`sandgym capacity`: sandboxes, warm pool, CPU and memory for a target throughput."""

from __future__ import annotations

from pathlib import Path

import typer

from .shared import console, fail, shown


def capacity_cmd(
    run_dir: Path | None = typer.Argument(None, help="A run folder: its records give the occupancy and rate."),
    rate: float | None = typer.Option(None, "--rate", help="Target tasks per minute (default: the run's own rate)."),
    occupancy_s: float | None = typer.Option(
        None, "--occupancy-s", help="Mean seconds a task holds a sandbox (with a run: rescales its distribution)."
    ),
    cpus: float = typer.Option(1.0, "--cpus", help="CPU share per sandbox (SandboxSpec.cpus)."),
    memory_mb: int = typer.Option(1024, "--memory-mb", help="Memory per sandbox (SandboxSpec.memory_mb)."),
    burst_factor: float = typer.Option(1.0, "--burst-factor", min=1.0, help="Rate multiplier during a burst."),
    burst_s: float = typer.Option(60.0, "--burst-s", min=0.0, help="Length of a burst."),
    bursts_per_h: float = typer.Option(0.0, "--bursts-per-h", min=0.0, help="Bursts per hour (Poisson)."),
    node_loss_per_h: float = typer.Option(0.0, "--node-loss-per-h", min=0.0, help="Node failures per hour (Poisson)."),
    nodes: int = typer.Option(8, "--nodes", min=1, help="Nodes the sandboxes are spread over."),
    retry_p: float | None = typer.Option(
        None, "--retry-p", min=0.0, max=0.99, help="Share of tries that end in env_error (default: measured)."
    ),
    metrics: str | None = typer.Option(
        None,
        "--metrics",
        help="A Prometheus exposition (a file, or the http:// address of --metrics-port or serve's /metrics): "
        "the warm pool covers its sandbox creation P95 and its claim figures are shown.",
    ),
    arrivals: int = typer.Option(20000, "--arrivals", min=100, help="Arrivals to simulate."),
    seed: int = typer.Option(0, "--seed"),
    fleet: int | None = typer.Option(
        None,
        "--fleet",
        min=1,
        help="Plan a fleet of N nodes like those of RUN_DIR (a --executor ray run): per-node rate, seats, "
        "node losses (--node-loss-per-h, per node) and the one writer's load; writes fleet.json.",
    ),
    out: Path | None = typer.Option(
        None, "--out", help="Folder for capacity.json and the plot (default: the run folder, else ./capacity)."
    ),
):
    """Sandboxes, warm pool, CPU and memory for a target throughput.

    The mean is Little's law (active sandboxes = tasks per second x seconds
    each holds one: 120/min x 30 s = 60). The tail (P95/P99 concurrent
    sandboxes) comes from a seeded discrete-event simulation replaying the
    run's create+exec+verify seconds. It assumes Poisson arrivals (with
    --burst-factor bursts), no queueing (every task gets a sandbox at
    once), env_error tries played again at once (--retry-p, measured), and
    node failures (--node-loss-per-h) killing 1/--nodes of the running
    sandboxes, whose tasks start over. The warm pool covers the P99 of the
    creates asked for within one cold-create time (P95 of the run's). CPU
    and memory are the limits per sandbox times the P99 count.
    """
    from ..capacity import plan, pool_figures, write_plan

    if fleet is not None and run_dir is None:
        fail("--fleet needs a run folder (a run made with --executor ray) for its per-node figures")
    figures: dict = {}
    create_s = None
    if metrics is not None:
        figures = pool_figures(_read_exposition(metrics))
        p95s = [f["creation_p95_s"] for f in figures.values() if f.get("creation_p95_s") is not None]
        if not p95s:
            fail(f"--metrics {metrics}: no sandgym_sandbox_creation_seconds samples in it (has a sandbox been made?)")
        create_s = max(p95s)
    records, wall_s = None, None
    if run_dir is not None:
        from ..runs import RunError, load_run

        try:
            loaded = load_run(run_dir)
        except (RunError, OSError) as e:
            fail(str(e))
        records, wall_s = loaded.records, loaded.summary.wall_s
    if fleet is not None:
        assert records is not None and wall_s is not None
        return _fleet(records, wall_s, fleet, node_loss_per_h, seed, arrivals, out or Path(run_dir or "."))
    try:
        p, sim = plan(
            rate,
            occupancy_s,
            records,
            wall_s,
            cpus=cpus,
            memory_mb=memory_mb,
            seed=seed,
            n_arrivals=arrivals,
            burst_factor=burst_factor,
            burst_s=burst_s,
            bursts_per_h=bursts_per_h,
            node_loss_per_h=node_loss_per_h,
            nodes=nodes,
            retry_p=retry_p,
            create_s=create_s,
        )
    except ValueError as e:
        fail(str(e))
    from rich.table import Table

    table = Table(title=f"capacity at {p.rate_per_min:g} tasks/min ({shown(p.source)})")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    for name, value in (
        ("mean occupancy (s)", f"{p.occupancy_s:.2f}"),
        ("sandboxes, mean (Little's law)", f"{p.littles_law:.1f}"),
        ("sandboxes, simulated mean", f"{p.sim_mean:.1f}"),
        ("sandboxes, simulated P95", f"{p.sim_p95:.0f}"),
        ("sandboxes, simulated P99", f"{p.sim_p99:.0f}"),
        ("cold create P95 (s)", f"{p.create_s:.2f}"),
        ("warm pool", f"{p.warm_pool}"),
        ("CPUs (at P99)", f"{p.cpus:g}"),
        ("memory GB (at P99)", f"{p.memory_gb:g}"),
        ("env_error retry share", f"{p.retry_p:.3f}"),
    ):
        table.add_row(name, value)
    console().print(table)
    for backend, f in figures.items():
        ms = lambda v: "n/a" if v is None else f"{1000 * v:.0f} ms"  # noqa: E731
        hit = "n/a" if f["hit_ratio"] is None else f"{f['hit_ratio']:.2f}"
        console().print(
            f"{shown(backend)}: creation P50 {ms(f.get('creation_p50_s'))}, P95 {ms(f.get('creation_p95_s'))}; "
            f"claims warm {f['claims_warm']} (P50 {ms(f['claim_warm_p50_s'])}, P99 {ms(f['claim_warm_p99_s'])}), "
            f"cold {f['claims_cold']} (P50 {ms(f['claim_cold_p50_s'])}); hit ratio {hit}",
            highlight=False,
        )
    folder = out or (Path(run_dir) if run_dir is not None else Path("capacity"))
    data, plot = write_plan(p, sim, folder)
    console().print(f"plan: {shown(data)}  plot: {shown(plot)}", highlight=False)


def _fleet(records, wall_s: float, nodes: int, node_loss_per_h: float, seed: int, arrivals: int, folder: Path) -> None:
    """`capacity RUN --fleet N`: the table and fleet.json."""
    import json

    from rich.table import Table

    from ..capacity_fleet import fleet_plan
    from ..safe_files import write_atomic

    try:
        f = fleet_plan(records, wall_s, nodes, node_loss_per_h, seed, arrivals)
    except ValueError as e:
        fail(str(e))
    table = Table(title=f"a fleet of {nodes} nodes, from {f['measured_nodes']} measured node(s)")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    for name, value in (
        ("episodes/min per node (measured mean)", f"{f['node_rate_per_min']:.1f}"),
        ("episodes at once per node (measured)", f"{f['seats_per_node_measured']}"),
        ("mean occupancy (s)", f"{f['occupancy_mean_s']:.2f}"),
        ("fleet episodes/min", f"{f['fleet_rate_per_min']:.0f}"),
        ("fleet sandboxes, simulated mean", f"{f['fleet_sandboxes_mean']:.0f}"),
        ("fleet sandboxes, simulated P99", f"{f['fleet_sandboxes_p99']:.0f}"),
        ("sandboxes per node, simulated P99", f"{f['node_sandboxes_p99']:.0f}"),
        ("episodes lost to node failures per hour", f"{f['episodes_lost_per_h']:.1f}"),
        ("records/s to the one writer", f"{f['records_per_s']:.0f}"),
        ("writer appends/s (measured here)", f"{f['writer_appends_per_s']:.0f}"),
        ("writer load", f"{100 * f['writer_load']:.0f}%"),
    ):
        table.add_row(name, value)
    console().print(table)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "fleet.json"
    write_atomic(path, json.dumps(f, indent=2) + "\n")
    console().print(f"plan: {shown(path)}", highlight=False)


def _read_exposition(where: str) -> str:
    if where.startswith(("http://", "https://")):
        import urllib.request

        try:
            with urllib.request.urlopen(where, timeout=10) as reply:
                return str(reply.read().decode("utf-8", "replace"))
        except OSError as e:
            fail(f"--metrics {where}: cannot read it: {e}")
    try:
        return Path(where).read_text()
    except OSError as e:
        fail(f"--metrics {where}: cannot read it: {e}")
