"""Commands a family adds to the CLI, mounted from the family table.

`Family.cli_commands` names, as import strings, a family's command
functions and where each mounts ("tasks import humaneval": the command
`humaneval` of the group `tasks import`). The core names no family: every
group of the CLI is a `FamilyGroup`, which lists the table's commands for
its place beside its own and imports a family's module only when one of
its commands is run or listed in help, so `sandgym eval` never loads the
SWE factory.

A family command is a plain typer command function in the family's own
folder (`envs/<name>/cli.py`). It cannot import the core CLI (envs import
only the floor), so it reports bad input by raising: a `SandgymError` or a
`ValueError` ends it as the core's commands end, `error: MESSAGE` on
standard error and exit 2.
"""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

from .shared import fail


class FamilyCommand(TyperCommand):
    """A family's command: its SandgymError or ValueError becomes `fail`."""

    def invoke(self, ctx: Any) -> Any:
        from ..errors import SandgymError

        try:
            return super().invoke(ctx)
        except (SandgymError, ValueError) as e:
            fail(str(e))


def commands_at(place: str) -> dict[str, str]:
    """{command name: "module:function"} of every family command mounted at `place` ("tasks import")."""
    from ..families import FAMILIES

    found = {}
    for fam in FAMILIES.values():
        for where, ref in fam.cli_commands:
            group, _, name = where.rpartition(" ")
            if group == place:
                found[name] = ref
    return found


def family_command(name: str, ref: str) -> Any:
    """The click command typer makes of the function `ref` names."""
    from ..families import load

    one = typer.Typer()
    one.command(name, cls=FamilyCommand)(load(ref))
    return typer.main.get_command(one)  # a lone command, not a group


class FamilyGroup(TyperGroup):
    """A command group that also holds the family table's commands for its
    `place`; subclassed per place by `family_group`."""

    place = ""

    def list_commands(self, ctx: Any) -> list[str]:
        own = super().list_commands(ctx)
        return own + [n for n in commands_at(self.place) if n not in own]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in self.commands:  # the core's own commands need no table
            ref = commands_at(self.place).get(cmd_name)
            if ref is not None:
                self.add_command(family_command(cmd_name, ref), cmd_name)
        return super().get_command(ctx, cmd_name)


def family_group(place: str) -> type[FamilyGroup]:
    """The group class for `place` ("" for the top level, "tasks", "tasks import")."""
    return type(f"FamilyGroup[{place}]", (FamilyGroup,), {"place": place})
