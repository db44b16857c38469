"""`sandgym tasks`: list, validate, export, schema and `import jsonl`, the
commands that work on task sets of any family. A family's own task
commands (importers, factories) are mounted from the family table: see
`family_commands.py`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from .shared import console, err_console, fail, load_task_set, shown


def import_jsonl_cmd(
    file: Path = typer.Argument(..., help="A file written by `sandgym tasks export --format jsonl`."),
    out: Path = typer.Option(..., "--out", help="Folder to write the task set to (must not hold one)."),
):
    """Import a task set of any family from sandgym's own JSONL export."""
    from ..specs import TaskSet, TaskSpecError
    from ..specs.portable import read_jsonl

    if not file.exists():
        fail(f"{file}: no such file")
    if (out / "taskset.yaml").exists() or (out / "tasks").exists():
        fail(f"{out}: already holds a task set; choose another --out folder or remove it")
    try:
        ts = read_jsonl(file)
        ts.write(out)
        ts = TaskSet.load(out)
    except TaskSpecError as e:
        fail(str(e))
    except OSError as e:  # a full disk: the set is written aside and renamed, so no half set is left
        fail(f"cannot write {e.filename or out}: {e.strerror or e}; free some space or choose another --out")
    console().print(
        f"imported {len(ts)} {ts.meta.family} tasks into {shown(out)} (task set {ts.hash})", highlight=False
    )


def export_cmd(
    tasks: str = typer.Argument(..., help="Task-set folder or bundled name (e.g. swe_repo/pypi-v1)."),
    fmt: str = typer.Option(
        "jsonl",
        "--format",
        help="jsonl (sandgym's own, any family; hidden halves included), hf (a Hugging Face `datasets` dataset "
        "of training prompts, any family) or a family's format (swebench).",
    ),
    out: Path = typer.Option(
        ...,
        "--out",
        help="File to write (.jsonl, or .json for a JSON list); hf: a folder (save_to_disk) or a .parquet/.jsonl file.",
    ),
    repos_out: Path | None = typer.Option(
        None,
        "--repos-out",
        help="swebench: folder for a git repository per source whose commits are the tasks' start states.",
    ),
):
    """Write a task set out in a format other harnesses read."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from sandgym.errors import SandgymError
    from sandgym.families import family, load

    from ..specs.portable import write_jsonl

    ts = load_task_set(tasks)
    # The core's own formats for any family (jsonl below, hf), then the family's.
    exporters = {"hf": "sandgym.adapters.hf_dataset:export_dataset", **dict(family(ts.meta.family).exporters)}
    if fmt == "jsonl":
        if repos_out is not None:
            fail("--repos-out belongs to the swebench format; jsonl holds the task specs themselves")
        try:
            write_jsonl(ts, out)
        except OSError as e:  # written aside and renamed: no half file is left
            fail(f"cannot write {out}: {e.strerror or e}; free some space or choose another --out")
        console().print(f"wrote {len(ts)} tasks to {shown(out)} (task set {ts.hash})", highlight=False)
        return
    if fmt not in exporters:
        fail(f"--format {fmt!r}: a {ts.meta.family} task set exports as " + ", ".join(["jsonl", *exporters]))
    options: dict = {} if repos_out is None else {"repos_out": repos_out}
    try:
        with Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=err_console(),
            disable=not sys.stderr.isatty(),
        ) as progress:
            bar = progress.add_task("exporting", total=len(ts))

            def on_progress(phase: str, done: int, total: int) -> None:
                progress.update(bar, description=phase, completed=done, total=total)

            options["progress"] = on_progress
            message = load(exporters[fmt])(ts, out, options)
    except (SandgymError, ValueError) as e:  # every family's errors derive from SandgymError
        fail(str(e))
    except OSError as e:  # a full disk, a read-only folder
        fail(f"cannot write {e.filename or out}: {e.strerror or e}; free some space or choose another --out")
    console().print(f"{shown(message)} (task set {ts.hash})", highlight=False)


def list_cmd(
    tasks: str | None = typer.Argument(
        None, help="Task-set folder or bundled name (e.g. swe_repo/pypi-v1); none: list every bundled set."
    ),
    ids: bool = typer.Option(False, "--ids", help="Print only the task ids, one per line."),
    as_json: bool = typer.Option(False, "--json", help="Print the tasks as a JSON list of objects."),
):
    """List the tasks of a set, or (with no argument) every task set bundled with sandgym.
    Where standard output is no terminal the table is printed whole (no column cut short)."""
    import json
    import sys

    from rich.table import Table

    from sandgym.families import spec_module
    from sandgym.terminal import plain

    if ids and as_json:
        fail("--ids and --json: give one of them")
    if tasks is None:
        if ids or as_json:
            fail("--ids and --json list the tasks of one set: give its folder or bundled name")
        return _list_bundled()
    ts = load_task_set(tasks)
    columns = spec_module(ts.meta.family)
    if ids:  # plain lines for scripts: ids come from task files, so they are made safe to print
        sys.stdout.write("".join(plain(t.id) + "\n" for t in ts.tasks))
        return
    if as_json:  # JSON escapes every control character: the text as it is in the files
        rows = [dict(zip(("id", *columns.LIST_COLUMNS), (t.id, *columns.list_row(t)), strict=True)) for t in ts.tasks]
        sys.stdout.write(json.dumps(rows, ensure_ascii=False, indent=1) + "\n")
        return
    table = Table(
        title=f"{shown(ts.meta.name)} v{ts.meta.version} · {ts.meta.family} · {len(ts)} tasks · {ts.hash[:19]}"
    )
    for col in ("id", *columns.LIST_COLUMNS):
        table.add_column(col)
    for t in ts.tasks:
        row = columns.list_row(t)  # text from the task files: shown, never obeyed
        table.add_row(shown(t.id), *(shown(cell) for cell in row))
    # A terminal gets the table at its width; a pipe or file gets every cell whole.
    if sys.stdout.isatty():
        console().print(table)
    else:
        from rich.console import Console

        Console(width=100_000).print(table)


def _list_bundled() -> None:
    from rich.table import Table

    from sandgym.families import family

    from ..specs import TaskSet, TaskSpecError, bundled_dir, bundled_task_sets

    table = Table(title="task sets bundled with sandgym", caption="sandgym tasks list NAME lists a set's tasks")
    table.add_column("name", no_wrap=True)
    table.add_column("family", no_wrap=True)
    table.add_column("tasks", justify="right")
    table.add_column("hash", no_wrap=True)
    envs = set()
    for name in bundled_task_sets():
        try:
            ts = TaskSet.load(bundled_dir() / name)
        except TaskSpecError as e:
            table.add_row(name, name.split("/")[0], "?", f"[red]{shown(str(e)[:60])}[/]")
            continue
        envs.add(f"{ts.meta.family}: {family(ts.meta.family).env_id}")
        table.add_row(name, ts.meta.family, str(len(ts)), ts.hash[:19])
    console().print(table)
    console().print("envs: " + ", ".join(sorted(envs)), highlight=False)


def validate_cmd(
    tasks: str | None = typer.Argument(None, help="Task-set folder or bundled name (default: bundled code set)."),
    runtime: str = typer.Option("local", "--runtime"),
    concurrency: int = typer.Option(2, "--concurrency", "-j", min=1),
    task_id: list[str] = typer.Option([], "--task-id", help="Only this task; repeat the option for more."),
    repeat: int = typer.Option(
        1, "--repeat", min=1, help="Validate each task K times; a task passes only if all K runs pass (no flaky task)."
    ),
):
    """Check that every task's reference solution passes and an empty one does not."""
    from concurrent.futures import ThreadPoolExecutor

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from sandgym.families import family, load

    from ..runtimes import RuntimeUnavailable, get_runtime

    ts = _only(load_task_set(tasks), task_id)
    try:
        rt = get_runtime(runtime)
    except (ValueError, RuntimeUnavailable) as e:
        fail(str(e))
    # A family may check its tasks directly (faster than playing episodes).
    validator = family(ts.meta.family).validator
    if validator is None:
        return _validate_by_episodes(ts, rt, runtime, concurrency, repeat)
    check = load(validator)
    runs = [(task, i) for i in range(repeat) for task in ts.tasks]
    failed_runs: dict[str, int] = {}

    problems = 0
    try:
        with (
            Progress(
                TextColumn("validating"),
                BarColumn(),
                MofNCompleteColumn(),
                console=err_console(),
                disable=not sys.stderr.isatty(),
            ) as progress,
            ThreadPoolExecutor(concurrency) as pool,
        ):
            bar = progress.add_task("validate", total=len(runs))
            for (task, i), found in zip(runs, pool.map(lambda r: check(r[0], rt), runs), strict=True):
                progress.update(bar, advance=1)
                problems += len(found)
                if found:
                    failed_runs[task.id] = failed_runs.get(task.id, 0) + 1
                for problem in found:
                    run = f" (run {i + 1} of {repeat})" if repeat > 1 else ""
                    console().print(f"[red]{shown(task.id)}[/]{run}: {shown(problem)}", highlight=False)
    finally:
        rt.close()
    _repeat_summary(len(ts), failed_runs, repeat)
    console().print(f"{len(ts)} tasks, {problems} problems · {ts.hash}")
    if problems:
        raise typer.Exit(1)


def _repeat_summary(n_tasks: int, failed_runs: dict[str, int], repeat: int) -> None:
    """With --repeat K: how many tasks passed K of K runs, and which failed only some (flaky)."""
    if repeat == 1:
        return
    flaky = sorted(t for t, n in failed_runs.items() if n < repeat)
    console().print(
        f"{n_tasks - len(failed_runs)} of {n_tasks} tasks passed {repeat} of {repeat} runs"
        + (f"; flaky (failed some runs, not all): {', '.join(shown(t) for t in flaky)}" if flaky else ""),
        highlight=False,
    )


def _only(ts, task_ids: list[str]):
    """The set cut down to `task_ids` (all of it when none are given)."""
    if not task_ids:
        return ts
    from ..specs import TaskSet

    known = {t.id for t in ts.tasks}
    unknown = [t for t in task_ids if t not in known]
    if unknown:
        fail(f"--task-id {unknown[0]!r}: no such task in {ts.meta.name} (see `sandgym tasks list`)")
    return TaskSet(ts.meta, [t for t in ts.tasks if t.id in set(task_ids)], ts.root)


def _validate_by_episodes(ts, rt, runtime_name: str, concurrency: int, repeat: int = 1) -> None:
    """Any family: the oracle policy must pass every task, the null policy none."""
    import shutil

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn

    from sandgym.families import family

    from ..harness import EvalRun
    from ..policies import make_policy
    from ..runtimes.tempdirs import owned_tempdir

    problems = 0
    failed_runs: dict[str, set[int]] = {}  # task id -> the runs (of --repeat) it failed
    tmp = owned_tempdir("validate")  # `sandgym gc` removes it if this process is killed
    try:
        for name, want, i in [(n, w, i) for i in range(repeat) for n, w in (("oracle", True), ("null", False))]:
            run = EvalRun(
                family(ts.meta.family).env_id,
                ts,
                make_policy(name),
                rt,
                runtime_name,
                Path(tmp) / f"{name}-{i}",
                concurrency=concurrency,
            )
            with Progress(
                TextColumn(f"{name} episodes"),
                BarColumn(),
                MofNCompleteColumn(),
                console=err_console(),
                disable=not sys.stderr.isatty(),
            ) as progress:
                bar = progress.add_task(name, total=len(ts))

                def advance(_rec: object, bar: TaskID = bar) -> None:  # this loop's bar, bound now
                    progress.update(bar, advance=1)

                run.run(on_record=advance)
            for rec in sorted(run.records, key=lambda r: r.task_id):
                if (rec.outcome == "passed") != want:
                    problems += 1
                    failed_runs.setdefault(rec.task_id, set()).add(i)
                    why = rec.error or "; ".join(t["detail"] for t in rec.tests if t.get("status") != "passed")[:300]
                    console().print(
                        f"[red]{shown(rec.task_id)}[/]: the {name} policy scored {shown(rec.outcome)}"
                        f"{' (' + shown(rec.status) + ')' if rec.status else ''}: {shown(why)}",
                        highlight=False,
                    )
    except ValueError as e:
        fail(str(e))
    finally:
        rt.close()
        shutil.rmtree(tmp, ignore_errors=True)
    _repeat_summary(len(ts), {t: len(runs) for t, runs in failed_runs.items()}, repeat)
    console().print(f"{len(ts)} tasks, {problems} problems · {ts.hash}")
    if problems:
        raise typer.Exit(1)


def schema_cmd(
    out: Path | None = typer.Option(None, "--out", help="Folder to write one JSON Schema per file kind."),
):
    """Print (or write) the JSON Schemas of task-spec files."""
    from ..specs import json_schemas

    schemas = json_schemas()
    if out is None:
        console().print_json(json.dumps(schemas))
        return
    out.mkdir(parents=True, exist_ok=True)
    for kind, schema in schemas.items():
        (out / f"{kind}.schema.json").write_text(json.dumps(schema, indent=2) + "\n")
    console().print(f"wrote {len(schemas)} schemas to {shown(out)}")
