"""The SWE family's CLI commands, mounted by the core CLI from the family
table (`Family.cli_commands`): `sandgym tasks import swebench`,
`sandgym tasks make-swe`, `sandgym tasks make-history`, `sandgym tasks rewrite-history` and
`sandgym tasks audit`.

Bad input is raised (a SandgymError or ValueError: SWEBenchError,
FactoryError, RepoError, RuntimeUnavailable), and the core prints it as
`error: MESSAGE` and exits 2; a runtime opened here is closed on the way
out."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from sandgym.specs import TaskSpecError
from sandgym.terminal import shown


def progress_bar():
    """The progress display both commands show on standard error (a terminal only)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        disable=not sys.stderr.isatty(),
    )


def import_swebench_cmd(
    file: Path = typer.Argument(..., help="SWE-bench / SWE-Gym / SWE-smith instances: JSONL or a JSON list."),
    out: Path = typer.Option(..., "--out", help="Folder to write the task set to (must not hold one)."),
    repos: Path | None = typer.Option(
        None,
        "--repos",
        help="Folder with a git clone (or bare repository) per repo, named owner__name or name; "
        "default: $SANDGYM_GIT_REPOS.",
    ),
    name: str = typer.Option("", "--name", help="Task-set name (default: the --out folder's name)."),
    validate: bool = typer.Option(
        True, "--validate/--no-validate", help="Keep only tasks whose gold patch scores FULL (and the start fails)."
    ),
    limit: int | None = typer.Option(None, "--limit", min=1, help="Only the first N instances of the file."),
    runtime: str = typer.Option("local", "--runtime", help="Sandbox backend for validation."),
    jobs: int = typer.Option(2, "--jobs", "-j", min=1, help="Tasks validated at once."),
):
    """Import SWE-bench-format instances: each repository at base_commit, its own test requirements, validated."""
    from rich.console import Console

    from sandgym.runtimes import get_runtime

    from .swebench import import_swebench

    if not file.exists():
        raise TaskSpecError(f"{file}: no such file")
    rt = get_runtime(runtime) if validate else None
    try:
        with progress_bar() as progress:
            bar = progress.add_task("reading", total=None)

            def on_progress(phase: str, done: int, total: int) -> None:
                progress.update(bar, description=phase, completed=done, total=total)

            ts, dropped = import_swebench(
                file,
                out,
                repos,
                rt,
                name=name,
                validate=validate,
                jobs=jobs,
                limit=limit,
                progress=on_progress,
                log=lambda m: progress.console.print(shown(m), highlight=False),
            )
    finally:
        if rt is not None:
            rt.close()
    Console().print(
        f"imported {len(ts)} tasks into {shown(out)} (task set {ts.hash})"
        + (f"; dropped {len(dropped)}: {shown(', '.join(i for i, _ in dropped[:10]))}" if dropped else ""),
        highlight=False,
    )


def make_swe_cmd(
    package: list[str] = typer.Option(
        [], "--package", help="A PyPI release: NAME==VERSION (pure Python, tests in the sdist); repeat for more."
    ),
    packages: Path | None = typer.Option(None, "--packages", help="A file of NAME==VERSION lines (# comments)."),
    out: Path = typer.Option(..., "--out", help="Task-set folder to write or extend (family swe_repo)."),
    max_tasks: int = typer.Option(20, "--max", min=1, help="Validated tasks to make at most, per package."),
    seed: int = typer.Option(0, "--seed", help="Seed of the mutation order and the issue levels."),
    jobs: int = typer.Option(2, "--jobs", "-j", min=1, help="Mutants evaluated at once, spread over packages."),
    issue_level: str = typer.Option(
        "located", "--issue-level", help="located, symptom or minimal, or weights: located=1,symptom=2,minimal=1."
    ),
    combined: float = typer.Option(
        0.0, "--combined", min=0.0, max=1.0, help="Share of tasks with two or three bugs in different functions."
    ),
    state: Path | None = typer.Option(
        None, "--state", help="Folder of the per-package journals (default: in the cache, keyed by --out)."
    ),
    runtime: str = typer.Option("local", "--runtime", help="Sandbox backend for test runs and validation."),
    factory_version: int = typer.Option(
        3,
        "--factory-version",
        help="3 (default): mutants without tells, blind solvers, three validation runs; "
        "2: the mutants of the older sets (pypi-v2, pypi-v3), to make them again.",
    ),
):
    """Make SWE tasks from PyPI packages by injecting bugs (AST mutations), each validated by the verifier.
    Resumable: run the same command again after a kill and it goes on where it stopped."""
    from rich.console import Console
    from rich.progress import TaskID

    from sandgym.runtimes import get_runtime

    from .batch import factory_report, make_many, parse_levels, read_packages
    from .factory import FactoryError

    wanted = list(package) + (read_packages(packages) if packages else [])
    if not wanted:
        raise FactoryError("name at least one --package NAME==VERSION (or --packages FILE)")
    levels = parse_levels(issue_level)
    rt = get_runtime(runtime)
    try:
        with progress_bar() as progress:
            bars: dict[str, TaskID] = {}

            def on_progress(pkg: str, phase: str, done: int, total: int) -> None:
                if pkg not in bars:
                    bars[pkg] = progress.add_task(pkg, total=total)
                progress.update(bars[pkg], description=f"{pkg} · {phase}", completed=done, total=total)

            results = make_many(
                wanted,
                out,
                max_tasks,
                seed,
                rt,
                jobs=jobs,
                levels=levels,
                combined_share=combined,
                state=state,
                log=lambda m: progress.console.print(shown(m), highlight=False),
                progress=on_progress,
                factory_version=factory_version,
            )
    finally:
        rt.close()
    made = sum(r.tasks for r in results)
    for r in results:
        Console().print(shown(r.stats.line() if r.stats else f"{r.package}: left out: {r.error}"), highlight=False)
    Console().print("factory report:", highlight=False)
    for line in factory_report(results):
        Console().print("  " + shown(line), highlight=False)
    if not made:
        raise FactoryError("no task survived validation")
    Console().print(f"wrote {made} tasks from {sum(r.tasks > 0 for r in results)} packages to {shown(out)}")


def make_history_cmd(
    repo: list[str] = typer.Option(
        [], "--repo", help="owner/name=GIT_DIR: a clone or bare repository with the history; repeat for more."
    ),
    out: Path = typer.Option(..., "--out", help="Task-set folder to write or extend (family swe_repo)."),
    max_tasks: int = typer.Option(20, "--max", min=1, help="Validated tasks to make at most, per repository."),
    seed: int = typer.Option(0, "--seed", help="Seed of the issue levels."),
    jobs: int = typer.Option(2, "--jobs", "-j", min=1, help="Commits evaluated at once."),
    issue_level: str = typer.Option(
        "located=1,symptom=2,minimal=1", "--issue-level", help="located, symptom or minimal, or weights."
    ),
    runtime: str = typer.Option("local", "--runtime", help="Sandbox backend for test runs and validation."),
):
    """Make SWE tasks from real fix commits (tag `history`): the parent commit as start state, the
    commit's source change as gold, its test change hidden; the history ships as bundles."""
    import json

    from rich.console import Console

    from sandgym.runtimes import get_runtime

    from .batch import parse_levels
    from .factory import FactoryError
    from .history import make_history, parse_repo_arg

    if not repo:
        raise FactoryError("name at least one --repo owner/name=GIT_DIR")
    repos = [parse_repo_arg(r) for r in repo]
    levels = parse_levels(issue_level)
    rt = get_runtime(runtime)
    try:
        stats = make_history(repos, out, rt, max_tasks, levels, seed, jobs, log=lambda m: Console().print(shown(m)))
    finally:
        rt.close()
    for s in stats:
        Console().print(shown(json.dumps(s.record())), highlight=False)
    if not sum(s.kept for s in stats):
        raise FactoryError("no task survived validation")


def rewrite_history_cmd(
    tasks: str = typer.Argument(..., help="SWE task-set folder or bundled name with history tasks."),
    repo: list[str] = typer.Option([], "--repo", help="owner/name=GIT_DIR of the tasks to write again; repeat."),
    out: Path = typer.Option(..., "--out", help="Task-set folder to write or extend (family swe_repo)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the issue levels."),
    issue_level: str = typer.Option("symptom=3,minimal=1", "--issue-level", help="Levels to draw, or weights."),
    runtime: str = typer.Option("local", "--runtime", help="Sandbox backend for test runs."),
):
    """Write the `located` issue texts of history tasks again with the current generator (same
    commit, same start state, patches and test lists) and write every task to --out."""
    from rich.console import Console

    from sandgym.runtimes import get_runtime
    from sandgym.specs import TaskSet
    from sandgym.specs.swe_repo import SWETaskPair

    from .batch import parse_levels
    from .factory import write_task_set
    from .history import parse_repo_arg, rewrite_located

    ts = TaskSet.load(tasks)
    repos = dict(parse_repo_arg(r) for r in repo)
    rt = get_runtime(runtime)
    try:
        pairs = [SWETaskPair.of(t) for t in ts.tasks]
        done = rewrite_located(pairs, repos, rt, parse_levels(issue_level), seed, lambda m: Console().print(shown(m)))
    finally:
        rt.close()
    write_task_set(done, out, description=ts.meta.description)


def audit_cmd(
    tasks: str = typer.Argument(..., help="SWE task-set folder or bundled name (swe_repo/pypi-v1)."),
    runtime: str = typer.Option("local", "--runtime", help="Sandbox backend whose agent sandboxes are searched."),
    task_id: list[str] = typer.Option([], "--task-id", help="Only this task; repeat for more."),
    json_out: Path | None = typer.Option(None, "--json", help="Write the report here as JSON."),
):
    """Search each task's agent sandbox for its answer (the fixed files, in any file, archive or git
    object) and its hidden tests. Exits 1 when anything is within reach."""
    import json

    from rich.console import Console

    from sandgym.runtimes import get_runtime
    from sandgym.specs import TaskSet
    from sandgym.specs.swe_repo import SWETaskPair

    from .audit import audit_tasks

    ts = TaskSet.load(tasks)
    if ts.meta.family != "swe_repo":
        raise TaskSpecError(f"{tasks}: `tasks audit` searches SWE tasks; this set is of family {ts.meta.family!r}")
    chosen = [SWETaskPair.of(ts.get(i)) for i in task_id] if task_id else [SWETaskPair.of(t) for t in ts.tasks]
    rt = get_runtime(runtime)
    try:
        with progress_bar() as progress:
            bar = progress.add_task("auditing", total=len(chosen))
            report = audit_tasks(chosen, rt, lambda done, total: progress.update(bar, completed=done, total=total))
    finally:
        rt.close()
    data = report.to_json()
    if json_out is not None:
        json_out.write_text(json.dumps(data, indent=2) + "\n")
    out = Console()
    for kind in ("reachable_answers", "hidden_tests_visible"):
        for row in data[kind]:
            out.print(
                f"[red]{shown(row['task'])}[/]: {kind.replace('_', ' ')}: {shown(row['where'])} ({shown(row['file'])})"
            )
    found = len(data["reachable_answers"]) + len(data["hidden_tests_visible"])
    out.print(
        f"{data['tasks']} tasks audited on {runtime}: {len(data['reachable_answers'])} reachable answers, "
        f"{len(data['hidden_tests_visible'])} hidden tests visible · {ts.hash}",
        highlight=False,
    )
    if found:
        raise typer.Exit(1)
