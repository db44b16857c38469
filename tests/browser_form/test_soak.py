"""Soak: many browser-form episodes on one env, then nothing left behind.

The loop is benchmarks/soak_browser.py's (`soak`), which also prints the
figures (rate, memory over time). CI runs a bounded sample; the full
10,000 episodes run with SANDGYM_SLOW=1.
"""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

pytestmark = pytest.mark.chromium

SOAK = runpy.run_path(str(Path(__file__).resolve().parents[2] / "benchmarks" / "soak_browser.py"), run_name="soak")


def check(episodes: int, every: int) -> None:
    res = SOAK["soak"](episodes, every)
    assert not res.wrong, res.wrong[:5]
    assert res.procs_left == 0, "sandbox processes outlived env.close()"
    assert res.fds_after <= res.fds_before + 2, (res.fds_before, res.fds_after)  # no leaked channels
    during = [r.sandbox_procs for r in res.readings]
    # One browser sandbox throughout (Chromium's process count varies by a few), not one per episode.
    assert max(during) <= min(during) + 10, during


def test_soak_sample():
    check(12, 4)


@pytest.mark.slow
def test_soak_full():
    check(10_000, 500)
