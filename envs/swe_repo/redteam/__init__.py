"""The SWE family's red team (`sandgym redteam`): its attack catalogue
(attacks.py: the agent's actions; payloads.py: the hostile code) and the
harnesses it scores (targets.py: sandgym's verifier, SWE-bench's method)."""

from __future__ import annotations

from sandgym.specs.redteam import RedteamSuite

from .attacks import ATTACKS, FAMILY


def suite() -> RedteamSuite:
    from .targets import SandgymTarget, SWEBenchTarget

    return RedteamSuite(family=FAMILY, attacks=ATTACKS, targets={"sandgym": SandgymTarget, "swebench": SWEBenchTarget})
