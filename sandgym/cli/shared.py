"""What every command module shares: the two consoles, `fail`, and reading
a task set or `-o KEY=VALUE` options from the command line.

rich is imported on first use (a console is made when something is
printed), so a command pays for it only when it prints."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import typer

from ..terminal import shown

if TYPE_CHECKING:
    from rich.console import Console

    from ..specs import TaskSet


@cache
def console() -> Console:
    """Standard output (rich writes to whatever sys.stdout is when it prints)."""
    from rich.console import Console

    return Console()


@cache
def err_console() -> Console:
    """Standard error: errors, notes and progress bars."""
    from rich.console import Console

    return Console(stderr=True)


def fail(message: str) -> NoReturn:
    """Print `error: MESSAGE` on standard error and exit 2."""
    # soft_wrap: the message stays one line, whatever the terminal's width.
    err_console().print("[bold red]error:[/] " + shown(message, one_line=False), highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def load_task_set(path: str | Path | None) -> TaskSet:
    """A task set by folder or bundled name (`swe_repo/pypi-v1`); default: the
    first family's default set (the family table's first entry)."""
    from ..families import FAMILIES
    from ..specs import TaskSet, TaskSpecError, bundled_task_set

    try:
        return TaskSet.load(path or bundled_task_set(next(iter(FAMILIES))))
    except TaskSpecError as e:
        fail(str(e))


def env_options(options: list[str] | None, **named) -> dict:
    """Env kwargs from `-o KEY=VALUE` (YAML values, read by the same guarded
    loader as task files) and the named shortcuts that were given; what is
    not given stays the env's default."""
    kwargs = {k: v for k, v in named.items() if v is not None}
    if not options:
        return kwargs  # (PyYAML is imported only to read a value)
    import yaml

    from ..specs import load_yaml_text

    for item in options:
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
