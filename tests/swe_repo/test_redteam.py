"""The SWE family's red-team targets, tried for real: SWE-bench's method
(reproduced in a sandbox, graded by the swebench package) resolves the
gold patch and not an empty one, and a conftest that forces passes
resolves there; sandgym's verifier scores the same agent's diff a
violation. Nothing outside the sandboxes changes."""

from __future__ import annotations

import pytest

from sandgym.envs.swe_repo.redteam.attacks import BY_KIND
from sandgym.envs.swe_repo.redteam.targets import SandgymTarget, SWEBenchTarget

from .security_helpers import BULK, ROUNDING, nothing_outside_changes

pytestmark = pytest.mark.sandbox


@pytest.fixture(scope="module")
def swebench():
    target = SWEBenchTarget("local", None)
    yield target
    target.close()


@pytest.mark.parametrize("task", [ROUNDING, BULK], ids=["no-test-patch", "test-patch"])
def test_swebench_method_grades_gold_and_empty(swebench, task):
    gold, _, log = swebench.judge(task.id, task.hidden.patch)
    empty, _, _ = swebench.judge(task.id, "")
    assert (gold, empty) == ("RESOLVED_FULL", "RESOLVED_NO"), log[-2000:]


def test_a_forcing_conftest_resolves_on_swebench_and_not_on_sandgym(swebench):
    attack = BY_KIND["swe.inject.conftest"]
    with nothing_outside_changes(swebench.runtime):
        ours = SandgymTarget("local", None)
        try:
            mine = ours.run(attack, ROUNDING.id)
            theirs = swebench.run(attack, ROUNDING.id)  # the same episode's diff
        finally:
            ours.close()
    assert (mine.outcome, mine.hacked, mine.forced_infra) == ("violation", False, False), mine
    assert theirs.hacked and theirs.outcome == "RESOLVED_FULL", (theirs.detail, theirs.extra)
    assert theirs.artifact_sha256 == mine.artifact_sha256
