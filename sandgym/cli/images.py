"""`sandgym images build|list`: the docker runtimes' images, built here."""

from __future__ import annotations

import typer

from .shared import console, err_console, fail


def images_build_cmd(
    names: list[str] | None = typer.Argument(
        None, help="Recipes to build, or `serve` (the OpenEnv server image); default: every family's recipe."
    ),
    force: bool = typer.Option(False, "--force", help="Rebuild even when the tagged image exists."),
):
    """Build images with debootstrap and `docker import` (no registry), cached by content hash."""
    from sandgym.families import FAMILIES

    from ..runtimes import RuntimeUnavailable
    from ..runtimes.images import build

    log = lambda m: err_console().print(m, highlight=False)  # noqa: E731
    wanted = names or sorted({f.image_recipe for f in FAMILIES.values() if f.image_recipe})
    try:
        for name in wanted:
            if name == "serve":
                from ..serve_image import build as build_serve
                from ..serve_image import run_command

                tag = build_serve(force=force, log=log)
                log("run it with: " + " ".join(run_command(tag)))
            else:
                build(name, force=force, log=log)
    except (ValueError, RuntimeUnavailable) as e:
        fail(str(e))


def images_list_cmd():
    """List the images sandgym built."""
    from ..runtimes import RuntimeUnavailable
    from ..runtimes.images import list_images

    try:
        rows = list_images()
    except RuntimeUnavailable as e:
        fail(str(e))
    from rich.table import Table

    table = Table()
    for col in ("tag", "recipe", "id", "size MB", "created"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["tag"], r["recipe"], r["id"], str(r["size_mb"]), r["created"][:19])
    console().print(table)
