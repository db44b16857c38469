"""The `sandgym` command line."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from .outcomes import OUTCOME_NAMES

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Gymnasium environments for LLM agents, run in sandboxes, judged by verifiers.",
)
tasks_app = typer.Typer(no_args_is_help=True, help="Task sets: import, inspect, validate, schema.")
tasks_import_app = typer.Typer(no_args_is_help=True, help="Import task sets from public formats.")
images_app = typer.Typer(no_args_is_help=True, help="Container images for the docker runtimes, built here.")
app.add_typer(tasks_app, name="tasks")
app.add_typer(images_app, name="images")
tasks_app.add_typer(tasks_import_app, name="import")

console = Console()
err_console = Console(stderr=True)


def fail(message: str) -> None:
    err_console.print(f"[bold red]error:[/] {message}", highlight=False)
    raise typer.Exit(2)


def _task_set(path: Path | None):
    from .specs import TaskSet, TaskSpecError, bundled_task_set

    try:
        return TaskSet.load(path or bundled_task_set("code_function"))
    except TaskSpecError as e:
        fail(str(e))


def outcome_table(summary) -> Table:
    table = Table(title=f"{summary.task_set} · {summary.policy['name']} · {summary.runtime}")
    table.add_column("outcome")
    table.add_column("episodes", justify="right")
    table.add_column("share", justify="right")
    for name in OUTCOME_NAMES:
        n = summary.outcomes.get(name, 0)
        share = f"{100 * n / summary.n_episodes:.1f}%" if summary.n_episodes else "-"
        table.add_row(name, str(n), share)
    mean = "n/a" if summary.reward_mean is None else f"{summary.reward_mean:.3f}"
    table.caption = (
        f"reward mean {mean} over {summary.n_scored} scored episodes "
        f"(env_error and not_executed are not scored) · {summary.wall_s:.1f} s · "
        f"task set {summary.task_set_hash[:19]}"
    )
    return table


def env_options(options: list[str] | None, **named) -> dict:
    """Env kwargs from `-o KEY=VALUE` (YAML values) and the named shortcuts
    that were given; what is not given stays the env's default."""
    import yaml

    kwargs = {k: v for k, v in named.items() if v is not None}
    for item in options or []:
        key, sep, raw = item.partition("=")
        if not sep or not key.isidentifier():
            raise ValueError(f"--env-option {item!r}: expected KEY=VALUE, e.g. max_steps=30")
        if key in ("tasks", "runtime"):
            raise ValueError(f"--env-option {key}=...: use --{key} instead")
        try:
            kwargs[key] = yaml.safe_load(raw)
        except yaml.YAMLError as e:
            raise ValueError(f"--env-option {item!r}: the value is not YAML: {e}") from None
    return kwargs


@app.command("eval")
def eval_cmd(
    env: str = typer.Option("sandgym/CodeFunction-v0", "--env", help="Registered env id."),
    tasks: Path | None = typer.Option(None, "--tasks", help="Task-set folder (default: the env's bundled set)."),
    policy: str = typer.Option("oracle", "--policy", help="oracle | null | replay:FILE | openai:MODEL@BASE_URL"),
    runtime: str = typer.Option(
        "local", "--runtime", help="Sandbox backend: local | docker | docker:runsc | docker:kata"
    ),
    concurrency: int = typer.Option(2, "--concurrency", "-j", min=1, help="Episodes at once."),
    out: Path = typer.Option(Path("runs/latest"), "--out", help="Folder for trajectories.jsonl and summary.json."),
    seed: int = typer.Option(0, "--seed", help="Seed passed to every reset."),
    mode: str | None = typer.Option(None, "--mode", help="single | multi (code-function family; default single)."),
    max_turns: int | None = typer.Option(
        None, "--max-turns", min=1, help="Turns per episode in multi mode (code-function family; default 5)."
    ),
    reward: str | None = typer.Option(
        None, "--reward", help="binary | pass_rate (code-function family; default binary)."
    ),
    env_option: list[str] | None = typer.Option(
        None,
        "--env-option",
        "-o",
        help="KEY=VALUE passed to the env (repeatable; VALUE is read as YAML), e.g. -o max_steps=30.",
    ),
    task_id: list[str] | None = typer.Option(None, "--task-id", help="Only these tasks (repeatable)."),
    resume: bool = typer.Option(False, "--resume", help="Finish an interrupted run in --out (same settings)."),
    episode_retries: int = typer.Option(
        1, "--episode-retries", min=0, help="Play an episode again when it ends in env_error (every try is kept)."
    ),
    temperature: float = typer.Option(0.0, "--temperature", help="Sampling temperature (openai policy)."),
):
    """Run a policy on every task of a set and record each episode."""
    from sandgym.families import check_env_id

    from .harness import EvalRun
    from .policies import make_policy
    from .runtimes import RuntimeUnavailable, get_runtime

    try:
        check_env_id(env)
        pol = make_policy(policy, seed=seed, temperature=temperature)
        env_kwargs = env_options(env_option, mode=mode, max_turns=max_turns, reward=reward)
        rt = get_runtime(runtime)
    except (ValueError, RuntimeUnavailable) as e:
        fail(str(e))
    task_set = _task_set(tasks) if tasks is not None else None
    try:
        run = EvalRun(
            env,
            task_set,
            pol,
            rt,
            runtime,
            out,
            concurrency=concurrency,
            seed=seed,
            env_kwargs=env_kwargs,
            episode_retries=episode_retries,
        )
        for tid in task_id or []:
            try:
                run.task_set.get(tid)
            except KeyError as e:
                raise ValueError(e.args[0]) from None
        n = len(task_id) if task_id else len(run.task_set)
        with Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[tally]}"),
            TimeElapsedColumn(),
            console=err_console,
            disable=not sys.stderr.isatty(),
        ) as progress:
            bar = progress.add_task("episodes", total=n, tally="")
            tally: dict[str, int] = {}

            def advance(rec):
                tally[rec.outcome] = tally.get(rec.outcome, 0) + 1
                progress.update(bar, advance=1, tally=" ".join(f"{k}={v}" for k, v in sorted(tally.items())))

            summary = run.run(task_id or None, on_record=advance, resume=resume)
    except (ValueError, TypeError, FileExistsError) as e:  # TaskSpecError is a ValueError
        fail(str(e))
    finally:
        rt.close()
    console.print(outcome_table(summary))
    console.print(f"records: {out / 'trajectories.jsonl'}  summary: {out / 'summary.json'}")


@app.command("serve")
def serve_cmd(
    env: str = typer.Option(..., "--env", help="Registered env id to serve."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind (the default accepts local clients only)."),
    port: int = typer.Option(8000, "--port", min=0, max=65535, help="Port to bind."),
    max_sessions: int = typer.Option(8, "--max-sessions", min=1, help="Concurrent WebSocket sessions (one env each)."),
    session_timeout: float = typer.Option(
        600.0,
        "--session-timeout",
        min=0.0,
        help="Seconds without a reset/step after which a session is closed (0: never). "
        "Keep it above the longest step plus the agent's thinking time.",
    ),
    tasks: Path | None = typer.Option(None, "--tasks", help="Task-set folder (default: the env's bundled set)."),
    mode: str | None = typer.Option(None, "--mode", help="single | multi (code-function family; default single)."),
    max_turns: int | None = typer.Option(
        None, "--max-turns", min=1, help="Turns per episode in multi mode (code-function family)."
    ),
    reward: str | None = typer.Option(None, "--reward", help="binary | pass_rate (code-function family)."),
    env_option: list[str] | None = typer.Option(
        None, "--env-option", "-o", help="KEY=VALUE passed to the env (repeatable; VALUE is read as YAML)."
    ),
    runtime: str = typer.Option(
        "local", "--runtime", help="Sandbox backend: local | docker | docker:runsc | docker:kata"
    ),
    log_level: str = typer.Option("info", "--log-level", help="uvicorn log level."),
):
    """Serve an env to OpenEnv clients (WebSocket /ws; /health, /schema, /metadata)."""
    from sandgym.families import check_env_id

    from .runtimes import RuntimeUnavailable, get_runtime

    try:
        check_env_id(env)
        env_kwargs = env_options(env_option, mode=mode, max_turns=max_turns, reward=reward)
        rt = get_runtime(runtime)
    except (ValueError, RuntimeUnavailable) as e:
        fail(str(e))
    # openenv imports its Gradio web UI eagerly (seconds, ~80 MB) even though
    # build_app never mounts it; this process does without it.
    if "gradio" not in sys.modules:
        sys.modules["gradio"] = None  # type: ignore[assignment]
    try:
        import uvicorn

        from .server import build_app
    except ImportError as e:
        rt.close()
        fail(f"sandgym serve needs OpenEnv ({e}): pip install 'sandgym[serve]'")

    env_kwargs["runtime"] = rt
    if tasks is not None:
        env_kwargs["tasks"] = tasks
    try:
        api = build_app(
            env, env_kwargs, max_sessions=max_sessions, session_timeout=session_timeout or None, close_runtime=True
        )
    except (ValueError, TypeError, RuntimeUnavailable) as e:  # TaskSpecError is a ValueError
        rt.close()
        fail(str(e))
    err_console.print(
        f"serving {env} on http://{host}:{port} (WebSocket /ws) · max {max_sessions} sessions · "
        f"session timeout {session_timeout or 'none'} s · runtime {runtime}",
        highlight=False,
    )
    try:
        uvicorn.run(api, host=host, port=port, log_level=log_level)
    finally:
        rt.close()  # normally closed already at app shutdown; closing twice is harmless


@app.command("report")
def report_cmd(
    run_dir: Path = typer.Argument(..., help="A folder written by `sandgym eval`."),
    out: Path | None = typer.Option(None, "--out", help="HTML file to write (default RUN_DIR/report.html)."),
):
    """Write a self-contained HTML report of a run."""
    from .report import write_report
    from .runs import RunError

    try:
        path = write_report(run_dir, out)
    except RunError as e:
        fail(str(e))
    console.print(f"report: {path}")


@app.command("leaderboard")
def leaderboard_cmd(
    run_dirs: list[Path] = typer.Argument(..., help="Run folders made on the same task set."),
    as_json: bool = typer.Option(False, "--json", help="Print rows as JSON instead of a table."),
):
    """Rank runs on the same task_set_hash by mean reward, with 95% confidence intervals."""
    from .leaderboard import LeaderboardError, rank
    from .runs import RunError

    try:
        board = rank(run_dirs)
    except (LeaderboardError, RunError) as e:
        fail(str(e))
    if as_json:
        console.print_json(
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
    table = Table(title=f"{board.task_set} · {board.task_set_hash[:19]}")
    for col in ("rank", "policy", "mean reward", "95% CI", "scored", "episodes", "env_error", "not_executed", "run"):
        table.add_column(col)
    for row in board.to_rows():
        ci = "n/a" if row["ci_low"] is None else f"[{row['ci_low']:.3f}, {row['ci_high']:.3f}]"
        mean = "n/a" if row["mean_reward"] is None else f"{row['mean_reward']:.3f}"
        table.add_row(
            str(row["rank"]),
            row["policy"],
            mean,
            ci,
            str(row["n_scored"]),
            str(row["n_episodes"]),
            str(row["env_error"]),
            str(row["not_executed"]),
            str(row["run_dir"]),
        )
    console.print(table)
    for w in board.warnings:
        err_console.print(f"[yellow]warning:[/] {w}", highlight=False)


@images_app.command("build")
def images_build_cmd(
    names: list[str] | None = typer.Argument(
        None, help="Recipes to build, or `serve` (the OpenEnv server image); default: every family's recipe."
    ),
    force: bool = typer.Option(False, "--force", help="Rebuild even when the tagged image exists."),
):
    """Build images with debootstrap and `docker import` (no registry), cached by content hash."""
    from sandgym.families import FAMILIES

    from .runtimes import RuntimeUnavailable
    from .runtimes.images import build

    log = lambda m: err_console.print(m, highlight=False)  # noqa: E731
    wanted = names or sorted({f.image_recipe for f in FAMILIES.values() if f.image_recipe})
    try:
        for name in wanted:
            if name == "serve":
                from .serve_image import build as build_serve
                from .serve_image import run_command

                tag = build_serve(force=force, log=log)
                log("run it with: " + " ".join(run_command(tag)))
            else:
                build(name, force=force, log=log)
    except (ValueError, RuntimeUnavailable) as e:
        fail(str(e))


@images_app.command("list")
def images_list_cmd():
    """List the images sandgym built."""
    from .runtimes import RuntimeUnavailable
    from .runtimes.images import list_images

    try:
        rows = list_images()
    except RuntimeUnavailable as e:
        fail(str(e))
    table = Table()
    for col in ("tag", "recipe", "id", "size MB", "created"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["tag"], r["recipe"], r["id"], str(r["size_mb"]), r["created"][:19])
    console.print(table)


@app.command("gc")
def gc_cmd(all_: bool = typer.Option(False, "--all", help="Also remove sandboxes of live processes.")):
    """Remove leaked sandboxes: containers whose owner died or whose expiry passed.

    Local (namespace) sandboxes die with the process that made them; they
    never need collecting.
    """
    from .runtimes import RuntimeUnavailable
    from .runtimes.docker import reap

    try:
        removed = reap(include_live_owners=all_)
    except RuntimeUnavailable as e:
        fail(str(e))
    console.print(f"removed {len(removed)} sandbox container(s)" + (f": {', '.join(removed)}" if removed else ""))


@tasks_import_app.command("humaneval")
def import_humaneval_cmd(
    file: Path = typer.Argument(..., help="HumanEval JSONL or JSONL.gz file."),
    out: Path = typer.Option(..., "--out", help="Folder to write the task set to."),
    name: str = typer.Option("humaneval", "--name", help="Task-set name."),
    timeout_s: float = typer.Option(10.0, "--timeout", help="Seconds to verify one submission."),
):
    """Import HumanEval-format problems (task_id, prompt, entry_point, test, canonical_solution)."""
    from sandgym.envs.code_function.humaneval import import_humaneval

    from .specs import TaskSpecError

    if not file.exists():
        fail(f"{file}: no such file")
    try:
        ts = import_humaneval(file, out, name=name, timeout_s=timeout_s)
    except TaskSpecError as e:
        fail(str(e))
    console.print(f"imported {len(ts)} tasks into {out} (task set {ts.hash})")


@tasks_app.command("list")
def list_cmd(tasks: Path | None = typer.Argument(None, help="Task-set folder (default: bundled).")):
    """List the tasks of a set."""
    from sandgym.families import spec_module

    ts = _task_set(tasks)
    table = Table(title=f"{ts.meta.name} v{ts.meta.version} · {ts.meta.family} · {len(ts)} tasks · {ts.hash[:19]}")
    columns = spec_module(ts.meta.family)
    for col in ("id", *columns.LIST_COLUMNS):
        table.add_column(col)
    for t in ts.tasks:
        row = columns.list_row(t)
        table.add_row(t.id, *row)
    console.print(table)


@tasks_app.command("validate")
def validate_cmd(
    tasks: Path | None = typer.Argument(None, help="Task-set folder (default: bundled)."),
    runtime: str = typer.Option("local", "--runtime"),
    concurrency: int = typer.Option(2, "--concurrency", "-j", min=1),
):
    """Check that every task's reference solution passes and an empty one does not."""
    from concurrent.futures import ThreadPoolExecutor

    from sandgym.families import family, load

    from .runtimes import RuntimeUnavailable, get_runtime

    ts = _task_set(tasks)
    try:
        rt = get_runtime(runtime)
    except (ValueError, RuntimeUnavailable) as e:
        fail(str(e))
    # A family may check its tasks directly (faster than playing episodes).
    validator = family(ts.meta.family).validator
    if validator is None:
        return _validate_by_episodes(ts, rt, runtime, concurrency)
    check = load(validator)

    problems = 0
    try:
        with (
            Progress(
                TextColumn("validating"),
                BarColumn(),
                MofNCompleteColumn(),
                console=err_console,
                disable=not sys.stderr.isatty(),
            ) as progress,
            ThreadPoolExecutor(concurrency) as pool,
        ):
            bar = progress.add_task("validate", total=len(ts))
            for task, found in zip(ts.tasks, pool.map(lambda t: check(t, rt), ts.tasks), strict=True):
                progress.update(bar, advance=1)
                problems += len(found)
                for problem in found:
                    console.print(f"[red]{task.id}[/]: {problem}")
    finally:
        rt.close()
    console.print(f"{len(ts)} tasks, {problems} problems · {ts.hash}")
    if problems:
        raise typer.Exit(1)


def _validate_by_episodes(ts, rt, runtime_name: str, concurrency: int) -> None:
    """Any family: the oracle policy must pass every task, the null policy none."""
    import tempfile

    from sandgym.families import family

    from .harness import EvalRun
    from .policies import make_policy

    problems = 0
    try:
        with tempfile.TemporaryDirectory(prefix="sandgym-validate-") as tmp:
            for name, want in (("oracle", True), ("null", False)):
                run = EvalRun(
                    family(ts.meta.family).env_id,
                    ts,
                    make_policy(name),
                    rt,
                    runtime_name,
                    Path(tmp) / name,
                    concurrency=concurrency,
                )
                with Progress(
                    TextColumn(f"{name} episodes"),
                    BarColumn(),
                    MofNCompleteColumn(),
                    console=err_console,
                    disable=not sys.stderr.isatty(),
                ) as progress:
                    bar = progress.add_task(name, total=len(ts))

                    def advance(_rec: object, bar: TaskID = bar) -> None:  # this loop's bar, bound now
                        progress.update(bar, advance=1)

                    run.run(on_record=advance)
                for rec in sorted(run.records, key=lambda r: r.task_id):
                    if (rec.outcome == "passed") != want:
                        problems += 1
                        why = (
                            rec.error or "; ".join(t["detail"] for t in rec.tests if t.get("status") != "passed")[:300]
                        )
                        console.print(
                            f"[red]{rec.task_id}[/]: the {name} policy scored {rec.outcome}"
                            f"{' (' + rec.status + ')' if rec.status else ''}: {why}",
                            highlight=False,
                        )
    except ValueError as e:
        fail(str(e))
    finally:
        rt.close()
    console.print(f"{len(ts)} tasks, {problems} problems · {ts.hash}")
    if problems:
        raise typer.Exit(1)


@tasks_app.command("make-swe")
def make_swe_cmd(
    package: str = typer.Option(
        ..., "--package", help="A PyPI release: NAME==VERSION (pure Python, tests in the sdist)."
    ),
    out: Path = typer.Option(..., "--out", help="Task-set folder to write or extend (family swe_repo)."),
    max_tasks: int = typer.Option(20, "--max", min=1, help="Validated tasks to make at most."),
    seed: int = typer.Option(0, "--seed", help="Seed of the mutation order."),
    jobs: int = typer.Option(2, "--jobs", "-j", min=1, help="Mutants evaluated at once."),
    runtime: str = typer.Option("local", "--runtime", help="Sandbox backend for test runs and validation."),
):
    """Make SWE tasks from a PyPI package by injecting bugs (AST mutations), each validated by the verifier."""
    from sandgym.envs.swe_repo.factory import FactoryError, make_swe, write_task_set
    from sandgym.verifiers.swe_repo.sources import RepoError

    from .runtimes import RuntimeUnavailable, get_runtime
    from .specs import TaskSpecError

    try:
        rt = get_runtime(runtime)
    except (ValueError, RuntimeUnavailable) as e:
        fail(str(e))
    try:
        with Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=err_console,
            disable=not sys.stderr.isatty(),
        ) as progress:
            bar = progress.add_task(package, total=max_tasks)

            def on_progress(phase: str, done: int, total: int) -> None:
                progress.update(bar, description=f"{package} · {phase}", completed=done, total=total)

            tasks, stats = make_swe(
                package,
                max_tasks,
                seed,
                rt,
                jobs=jobs,
                progress=on_progress,
                log=lambda m: progress.console.print(m, highlight=False),
            )
        if not tasks:
            fail(f"{package}: no mutant survived validation ({stats.line()})")
        ts = write_task_set(tasks, out)
    except (FactoryError, RepoError, TaskSpecError) as e:
        fail(str(e))
    finally:
        rt.close()
    console.print(stats.line(), highlight=False)
    console.print(f"wrote {len(tasks)} tasks to {out} ({len(ts)} in the set, task set {ts.hash})")


@tasks_app.command("schema")
def schema_cmd(
    out: Path | None = typer.Option(None, "--out", help="Folder to write one JSON Schema per file kind."),
):
    """Print (or write) the JSON Schemas of task-spec files."""
    from .specs import json_schemas

    schemas = json_schemas()
    if out is None:
        console.print_json(json.dumps(schemas))
        return
    out.mkdir(parents=True, exist_ok=True)
    for kind, schema in schemas.items():
        (out / f"{kind}.schema.json").write_text(json.dumps(schema, indent=2) + "\n")
    console.print(f"wrote {len(schemas)} schemas to {out}")


if __name__ == "__main__":
    app()
