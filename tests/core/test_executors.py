"""The executor seam without a cluster: seats split over nodes, Ray kept
out of `import sandgym` and of local runs, the CLI's executor options, and
what a Ray node receives of a chat policy. (tests/core/test_ray.py runs
the real cluster.)"""

from __future__ import annotations

import pickle

import pytest
from typer.testing import CliRunner

from sandgym.capacity_fleet import busiest, fleet_plan, node_figures
from sandgym.chat_policy import ChatPolicy
from sandgym.cli import app
from sandgym.cluster.fleet import split_seats
from sandgym.records import EpisodeRecord, Timings

from .test_import_graph import loaded_after


@pytest.mark.parametrize(
    ("cpus", "total", "want"),
    [
        ({"a": 2, "b": 2}, 4, {"a": 2, "b": 2}),
        ({"a": 2, "b": 2, "c": 2}, 4, {"a": 2, "b": 1, "c": 1}),
        ({"a": 4, "b": 2}, 3, {"a": 2, "b": 1}),
        ({"a": 1, "b": 1, "c": 1}, 2, {"a": 1, "b": 1}),
        ({"a": 1, "b": 3}, 8, {"a": 2, "b": 6}),
        ({"a": 0}, 4, {}),
    ],
)
def test_seats_follow_the_nodes_cpus(cpus: dict[str, float], total: int, want: dict[str, int]) -> None:
    got = split_seats(cpus, total)
    assert got == want
    assert sum(got.values()) == (total if any(cpus.values()) else 0)


def test_a_warm_runner_keeps_envs_only_for_the_same_env() -> None:
    from sandgym.cluster.plan import RunPlan
    from sandgym.cluster.runner import env_key
    from sandgym.specs import TaskSet, bundled_task_set

    basic = TaskSet.load(bundled_task_set("code_function"))

    def plan(**kw: object) -> RunPlan:
        base: dict = dict(
            run_id="r1",
            env_id="sandgym/CodeFunction-v0",
            task_set=basic,
            env_kwargs={"mode": "single", "max_turns": 3},
            runtime_name="local",
            policy="oracle",
            seed=0,
        )
        return RunPlan(**{**base, **kw})

    key = env_key(plan())
    # Another run, policy and seed, options in another order: the same env.
    assert env_key(plan(run_id="r2", policy="null", seed=7, env_kwargs={"max_turns": 3, "mode": "single"})) == key
    assert env_key(plan(env_kwargs={"mode": "multi", "max_turns": 3})) != key
    assert env_key(plan(runtime_name="docker")) != key
    assert env_key(plan(env_id="sandgym/SWERepo-v0")) != key
    small = TaskSet(basic.meta, basic.tasks[:2])
    assert small.hash != basic.hash and env_key(plan(task_set=small)) != key


@pytest.mark.parametrize(
    "code",
    [
        "import sandgym",
        "import sandgym.harness, sandgym.cli.evaluate",
        "from sandgym.harness.executor import LocalExecutor",
    ],
)
def test_ray_is_not_imported_by_sandgym_nor_the_local_path(code: str) -> None:
    modules = loaded_after(code + "\nimport sys\nassert 'ray' not in sys.modules, 'ray was imported'")
    assert "sandgym" in modules


def test_the_cli_names_bad_executor_options() -> None:
    runner = CliRunner()
    bad = runner.invoke(app, ["eval", "--executor", "slurm"])
    assert bad.exit_code != 0 and "--executor 'slurm': choose local or ray" in bad.output
    stray = runner.invoke(app, ["eval", "--ray-address", "127.0.0.1:1"])
    assert stray.exit_code != 0 and "--ray-address is for --executor ray" in stray.output


def test_a_chat_policy_travels_without_its_client_and_gets_a_new_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-driver-secret")
    pol = ChatPolicy("m", "http://127.0.0.1:9/v1", temperature=0.5, seed=3)
    data = pickle.dumps(pol)
    assert b"sk-driver-secret" not in data
    monkeypatch.setenv("OPENAI_API_KEY", "sk-node")
    there = pickle.loads(data)
    assert there.config == pol.config and there.client is not pol.client
    assert there.client.api_key == "sk-node" and str(there.client.base_url).startswith("http://127.0.0.1:9/v1")
    again = pol.reseeded(7)
    assert again.client is pol.client and again.seed == 7 and pol.seed == 3


def record(node: str | None, start: str, total_s: float, n: int = 0) -> EpisodeRecord:
    return EpisodeRecord(
        run_id="r",
        episode_id=f"r-{n}",
        task_id=f"t{n}",
        task_version=1,
        task_set="s",
        task_set_hash="h",
        env_id="sandgym/CodeFunction-v0",
        env_version="0",
        runtime={"backend": "local"},
        policy={"name": "oracle"},
        seed=0,
        outcome="passed",
        reward=1.0,
        started_at=start,
        timings=Timings(exec_s=total_s, total_s=total_s),
        executor={"kind": "ray", "node": node} if node else None,
    )


def test_per_node_figures_and_a_fleet_from_them() -> None:
    t = "2026-12-01T00:00:0{}+00:00"
    recs = [
        record("a", t.format(0), 2.0, 0),
        record("a", t.format(1), 2.0, 1),  # overlaps the first: 2 at once on a
        record("a", t.format(4), 1.0, 2),
        record("b", t.format(0), 1.0, 3),
        record("b", t.format(2), 1.0, 4),  # b never runs 2 at once
    ]
    assert busiest([(0, 2), (1, 3), (4, 5)]) == 2 and busiest([(0, 1), (1, 2)]) == 1
    fig = node_figures(recs, wall_s=60.0)
    assert {n: (f["episodes"], f["at_once"]) for n, f in fig["nodes"].items()} == {"a": (3, 2), "b": (2, 1)}
    assert fig["node_rate_per_min"] == pytest.approx(2.5) and fig["seats_per_node"] == 2
    plan = fleet_plan(recs, 60.0, fleet_nodes=1000, node_loss_per_h=0.1, n_arrivals=3000)
    assert plan["fleet_rate_per_min"] == pytest.approx(2500)
    # Little's law: the fleet holds rate x occupancy sandboxes on average (occupancy 1.4 s here).
    assert plan["fleet_sandboxes_mean"] == pytest.approx(2500 / 60 * 1.4, rel=0.15)
    assert plan["episodes_lost_per_h"] == pytest.approx(0.1 * plan["fleet_sandboxes_mean"], rel=1e-6)
    assert plan["writer_appends_per_s"] > 0 and plan["writer_load"] == pytest.approx(
        plan["records_per_s"] / plan["writer_appends_per_s"]
    )
    with pytest.raises(ValueError, match="--executor ray"):
        node_figures([record(None, t.format(0), 1.0)], 60.0)
