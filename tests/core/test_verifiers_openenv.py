"""Prime Intellect's `verifiers` 0.4.0 (from PyPI, in a venv of its own) plays
sandgym's served SWE env with its own engine: examples/verifiers_openenv.py
runs `sandgym serve` (local runtime, real sandboxes and verifier), a scripted
model on loopback, and `vf-eval` with verifiers' OpenEnv env, its `null`
harness and the `sandgym-openenv` taskset. The oracle scores 1.0 on each of
the 5 bundled tasks, the null policy 0.0, read from verifiers' own records;
the server judged them `passed` and `failed` (not `env_error`)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from sandgym.specs import TaskSet, bundled_task_set

pytestmark = pytest.mark.sandbox

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "verifiers_openenv.py"


def example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("verifiers_openenv_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("policy", "reward", "turns"), [("oracle", 1.0, 2), ("null", 0.0, 1)])
def test_verifiers_plays_the_served_swe_env(tmp_path, policy, reward, turns):
    ex = example()
    if not ex.venv_ready():
        pytest.skip(
            f"verifiers {ex.VERSION}'s virtualenv is not at {ex.VENV} ($SANDGYM_VERIFIERS_VENV): "
            f"make it with `.venv/bin/python examples/verifiers_openenv.py --setup` (scripts/setup.sh does)"
        )
    result, out = tmp_path / "result.json", tmp_path / "run"
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "--policy", policy, "--json", str(result), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    assert json.loads(result.read_text()) == {"episodes": 5, "reward_mean": reward}
    # what sandgym's server judged: each null episode a wrong answer, not an env_error
    (line,) = (x for x in done.stdout.splitlines() if x.startswith("outcomes "))
    assert json.loads(line.partition(": ")[2]) == {"passed" if reward else "failed": 5}

    # verifiers' own records: one episode per bundled task, the model's turns
    # through its chat program, each trace scored by the OpenEnv env.
    episodes = [json.loads(line) for line in (out / f"sandgym-{policy}" / "traces.jsonl").read_text().splitlines()]
    ids = {t.id for t in TaskSet.load(bundled_task_set("swe_repo")).tasks}
    assert {e["task"]["data"]["name"] for e in episodes} == ids
    for e in episodes:
        assert e["ok"], e.get("errors")
        (trace,) = e["traces"]
        assert trace["rewards"]["openenv_reward"]["score"] == reward
        assert sum(bool(n.get("sampled")) for n in trace["nodes"]) == turns, trace.get("stop_condition")
