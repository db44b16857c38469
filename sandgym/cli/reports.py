"""`sandgym report` and `sandgym leaderboard`: reading finished runs back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from .shared import console, err_console, fail, shown

if TYPE_CHECKING:
    from rich.table import Table


def report_cmd(
    run_dir: Path = typer.Argument(..., help="A folder written by `sandgym eval`."),
    out: Path | None = typer.Option(None, "--out", help="HTML file to write (default RUN_DIR/report.html)."),
):
    """Write a self-contained HTML report of a run."""
    from ..report import write_report
    from ..runs import RunError

    try:
        path = write_report(run_dir, out)
    except RunError as e:
        fail(str(e))
    except OSError as e:  # a full disk, a read-only folder: the old report (if any) stays whole
        fail(f"cannot write {e.filename or out or run_dir}: {e.strerror or e}; free some space or give --out elsewhere")
    console().print(f"report: {shown(path)}", highlight=False)


def leaderboard_cmd(
    run_dirs: list[Path] = typer.Argument(..., help="Run folders made on the same task set."),
    as_json: bool = typer.Option(False, "--json", help="Print rows as JSON instead of a table."),
    allow_subsets: bool = typer.Option(
        False, "--allow-subsets", help="Rank runs that cover different tasks of the set (--task-id, --limit)."
    ),
):
    """Rank runs on the same task_set_hash by mean reward, with 95% confidence intervals."""
    from ..leaderboard import LeaderboardError, rank
    from ..runs import RunError

    try:
        board = rank(run_dirs, allow_subsets=allow_subsets)
    except (LeaderboardError, RunError) as e:
        fail(str(e))
    if as_json:
        console().print_json(
            json.dumps(
                {
                    "task_set": board.task_set,
                    "task_set_hash": board.task_set_hash,
                    "rows": board.to_rows(),
                    "warnings": board.warnings,
                }
            )
        )
        return
    console().print(leaderboard_table(board))
    for row in board.to_rows():
        console().print(f"#{row['rank']} {shown(row['run_dir'])}", highlight=False, soft_wrap=True)
    for w in board.warnings:
        err_console().print(f"[yellow]warning:[/] {shown(w)}", highlight=False)


def leaderboard_table(board) -> Table:
    """The ranking as a table that fits an 80-column terminal: the model's
    name (not the policy's), the mean with its interval, and our own
    counts of env_error and not_executed (which the mean takes as 0)."""
    from rich.table import Table

    rows = board.to_rows()
    show_k = any(r["samples_per_task"] > 1 and r["pass_at_k"] for r in rows)
    table = Table(
        title=f"{shown(board.task_set)} · {shown(board.task_set_hash[:19])}",
        caption="mean: not_executed counts as 0 (as SWE-bench counts a missing prediction); env_error is left out",
        box=None,
        pad_edge=False,
        header_style="bold",
    )
    # Every column but the model's keeps its width; the model's name gets the
    # rest of 80 columns (cut with "…"), two spaces between columns.
    fixed = {
        "#": len(str(len(rows))),
        "mean": 5,
        "95% CI": 11,
        "n": max(len(str(r["n_counted"])) for r in rows),
        **({"pass@k": 10} if show_k else {}),
        "env_err": 7,
        "not_run": 7,
    }
    model_width = max(12, min(40, 80 - sum(fixed.values()) - 2 * len(fixed)))
    for name, width in fixed.items():
        if name == "mean":
            table.add_column("model", no_wrap=True, overflow="ellipsis", max_width=model_width)
        right = name not in ("95% CI", "pass@k")
        table.add_column(name, justify="right" if right else "left", no_wrap=True, min_width=width)
    for row in rows:
        ci = "n/a" if row["ci_low"] is None else f"{row['ci_low']:.3f}-{row['ci_high']:.3f}"
        mean = "n/a" if row["mean_reward"] is None else f"{row['mean_reward']:.3f}"
        cells = [str(row["rank"]), shown(row["model"]), mean, ci, str(row["n_counted"])]
        if show_k:
            ks = row["pass_at_k"] if row["samples_per_task"] > 1 else {}
            top = max(ks, key=int) if ks else None
            cells.append(f"{ks[top]:.3f} @{top}" if top else "")
        cells += [str(row["env_error"]), str(row["not_executed"])]
        table.add_row(*cells)
    return table
