"""The `sandgym` command line: the command table; each command lives in a
module of this package.

    evaluate.py         eval (policies; --predictions/--samples; metrics and traces)
    serve.py            serve
    reports.py          report, leaderboard
    tasks.py            tasks list|validate|export|schema, tasks import jsonl
    images.py           images build|list
    gc.py               gc
    capacity.py         capacity
    redteam.py          redteam (the attack catalogue against any harness)
    shared.py           the consoles, `fail`, task-set and -o option reading
    family_commands.py  the commands families add (Family.cli_commands)

Each module imports at its top only typer and what is light; the rest
(rich, the harness, runtimes, envs, openenv, prometheus) is imported in
the command that uses it, so a command pays only for itself. The console
script is `sandgym_launcher:main`, which answers `--version` without
importing this package (importing `sandgym` registers the envs with
Gymnasium, which imports numpy) and otherwise runs `app`.
"""

from __future__ import annotations

import typer

from . import capacity, evaluate, gc, images, redteam, reports, serve, tasks
from .evaluate import eval_cmd
from .family_commands import family_group
from .reports import leaderboard_table
from .shared import console

__all__ = ["app", "eval_cmd", "leaderboard_table"]

app = typer.Typer(
    cls=family_group(""),
    add_completion=False,
    no_args_is_help=True,
    help="Gymnasium environments for LLM agents, run in sandboxes, judged by verifiers.",
)
tasks_app = typer.Typer(
    cls=family_group("tasks"), no_args_is_help=True, help="Task sets: import, inspect, validate, schema."
)
tasks_import_app = typer.Typer(
    cls=family_group("tasks import"), no_args_is_help=True, help="Import task sets from public formats."
)
images_app = typer.Typer(
    cls=family_group("images"), no_args_is_help=True, help="Container images for the docker runtimes, built here."
)
app.add_typer(tasks_app, name="tasks")
app.add_typer(images_app, name="images")
tasks_app.add_typer(tasks_import_app, name="import")


def _version(value: bool) -> None:
    if value:
        from .. import __version__

        console().print(f"sandgym {__version__}", highlight=False)
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print sandgym's version and exit."
    ),
) -> None:
    """Gymnasium environments for LLM agents, run in sandboxes, judged by verifiers."""


# The core's commands, in the order `--help` lists them; families' follow
# (`family_commands.py`).
app.command("eval")(evaluate.eval_cmd)
app.command("serve")(serve.serve_cmd)
app.command("report")(reports.report_cmd)
app.command("leaderboard")(reports.leaderboard_cmd)
images_app.command("build")(images.images_build_cmd)
images_app.command("list")(images.images_list_cmd)
app.command("redteam")(redteam.redteam_cmd)
app.command("gc")(gc.gc_cmd)
tasks_import_app.command("jsonl")(tasks.import_jsonl_cmd)
tasks_app.command("export")(tasks.export_cmd)
tasks_app.command("list")(tasks.list_cmd)
tasks_app.command("validate")(tasks.validate_cmd)
tasks_app.command("schema")(tasks.schema_cmd)
app.command("capacity")(capacity.capacity_cmd)
