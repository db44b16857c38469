"""The executor seam without a cluster: seats split over nodes, Ray kept
out of `import sandgym` and of local runs, the CLI's executor options, and
what a Ray node receives of a chat policy. (tests/core/test_ray.py runs
the real cluster.)"""

from __future__ import annotations

import pickle

import pytest
from typer.testing import CliRunner

from sandgym.chat_policy import ChatPolicy
from sandgym.cli import app
from sandgym.cluster.fleet import split_seats

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
