"""The factory report: environment build success, gold pass rate over
validation reruns, share of tasks per issue level, per package and overall."""

from __future__ import annotations

import yaml

from sandgym.envs.swe_repo.batch import RUNS_FILE, PackageResult, factory_report, make_many
from sandgym.envs.swe_repo.factory import FactoryStats


def _stats(package: str, gold: tuple[int, int], levels: dict[str, int]) -> FactoryStats:
    s = FactoryStats(package=package, gold_runs=gold[0], gold_full=gold[1], by_level=dict(levels))
    s.finish()
    return s


def test_report_gives_each_package_and_the_whole_run():
    results = [
        PackageResult("a==1", 4, _stats("a==1", (12, 11), {"located": 1, "symptom": 3})),
        PackageResult("b==2", 1, _stats("b==2", (3, 3), {"minimal": 1})),
        PackageResult("c==3", 0, None, "the test suite did not run here", env_built=False),
        PackageResult("d==4", 0, None, "pytest imports its own copy of d"),
    ]
    lines = factory_report(results)
    assert lines[0] == "a==1: environment built; gold FULL 91.7% of 12 runs; levels located 25%, symptom 75%"
    assert lines[1] == "b==2: environment built; gold FULL 100.0% of 3 runs; levels minimal 100%"
    assert lines[2] == "c==3: environment not built: the test suite did not run here"
    assert lines[3].startswith("d==4: left out:")
    assert lines[4] == (
        "all: environments built 3 of 4 (75%); gold FULL 93.3% of 15 runs; levels located 20%, minimal 20%, symptom 60%"
    )
    rec = results[0].stats.record()  # type: ignore[union-attr]
    assert rec["gold_pass_rate"] == round(11 / 12, 4) and rec["level_share"] == {"located": 0.25, "symptom": 0.75}


def test_a_package_whose_environment_cannot_be_built_is_reported_so(tmp_path):
    """A release PyPI does not have: nothing to build the environment from
    (one PyPI lookup, no sandbox)."""
    out = tmp_path / "set"
    results = make_many(["inflection==99.0.0"], out, 1, 0, runtime=None, state=tmp_path / "state", log=lambda m: None)
    assert [r.env_built for r in results] == [False]
    runs = yaml.safe_load((out / RUNS_FILE).read_text())["packages"]
    assert runs["inflection==99.0.0"]["env_built"] is False and runs["inflection==99.0.0"]["tasks"] == 0
    assert "environments built 0 of 1" in factory_report(results)[-1]
