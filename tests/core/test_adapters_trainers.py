"""Trainer adapters (sandgym/adapters/trainers.py) against real sandboxes.

TRL and verl are not installed: their callables are called here with the
exact shapes those libraries use (TRL GRPOTrainer's reward_funcs contract;
verl's custom_reward_function, loaded from its file path the way verl's
get_custom_reward_fn does, and called as the naive, prime and batch reward
managers call it).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from sandgym.adapters import trainers
from sandgym.adapters.trainers import CodeReward, VerificationUnavailable, compute_score, trl_reward_func
from sandgym.runtimes.local import LocalRuntime
from sandgym.specs import TaskSet, TaskSetMeta
from tests.helpers import make_task

ROOT = Path(__file__).resolve().parents[2]
IDS = ["basic/second-largest", "basic/roman-to-int", "basic/balanced-brackets", "basic/edit-distance"]


def fenced(code: str) -> str:
    return f"Here you go.\n```python\n{code}```\n"


class NoSandboxes(LocalRuntime):
    """A real runtime that fails the test if anything asks it for a sandbox."""

    def create(self, spec=None):
        raise AssertionError("a sandbox was created")


class BrokenRuntime(LocalRuntime):
    """A real runtime whose every sandbox is closed before the verifier gets it."""

    def create(self, spec=None):
        sandbox = super().create(spec)
        sandbox.close()
        return sandbox


@pytest.fixture()
def no_sandboxes():
    rt = NoSandboxes()
    yield rt
    rt.close()


@pytest.fixture(scope="module")
def scorer(runtime):
    s = CodeReward(runtime=runtime, max_workers=4)
    yield s
    s.close()


@pytest.fixture(scope="module")
def tasks(scorer):
    return scorer.tasks


def reference(tasks, tid: str) -> str:
    return fenced(tasks.get(tid).hidden.reference_solution)


def wrong(tasks, tid: str) -> str:
    return fenced(f"def {tasks.get(tid).visible.entry_point}(*args, **kwargs):\n    raise NotImplementedError\n")


@pytest.fixture()
def tiny_task_set(tmp_path):
    task = make_task(
        entry_point="half",
        tests=[{"args": [4], "expected": 2}, {"args": [3], "expected": 1.5}],
        reference="def half(n):\n    return n / 2\n",
        task_id="tiny/half",
    )
    return TaskSet(TaskSetMeta(name="tiny", family="code_function"), [task]).write(tmp_path / "tiny")


def test_references_score_one_and_wrong_answers_zero(scorer, tasks):
    pairs = [(tid, reference(tasks, tid)) for tid in IDS] + [(tid, wrong(tasks, tid)) for tid in IDS]
    assert scorer.score_many(pairs) == [1.0] * len(IDS) + [0.0] * len(IDS)
    assert scorer.score(IDS[0], reference(tasks, IDS[0])) == 1.0


def test_no_code_scores_zero_without_a_sandbox(tasks, no_sandboxes):
    with CodeReward(tasks, runtime=no_sandboxes) as s:
        assert s.score("basic/second-largest", "I am not sure how to do this.") == 0.0
        assert s.score("basic/second-largest", "```python\ndef largest(nums):\n    return max(nums)\n```") == 0.0
        assert s.score("basic/second-largest", "```python\n\n```") == 0.0
        v = s.verdict("basic/second-largest", "no code")
        assert v.outcome == "failed" and "no code found" in v.detail and v.attempts == []
        assert s.counts["no_code"] == 4


def test_pass_rate_scheme_gives_fractions(runtime, tasks):
    half_right = fenced("def second_largest(nums):\n    return sorted(nums)[-2] if len(nums) >= 2 else None\n")
    with CodeReward(tasks, runtime=runtime, reward="pass_rate") as s:
        v = s.verdict("basic/second-largest", half_right)
        rates = s.score_many(
            [
                ("basic/second-largest", half_right),
                ("basic/second-largest", reference(tasks, "basic/second-largest")),
                ("basic/roman-to-int", wrong(tasks, "basic/roman-to-int")),
            ]
        )
    assert 0.0 < rates[0] < 1.0
    assert rates[0] == v.pass_rate == sum(t.status == "passed" for t in v.tests) / len(v.tests)
    assert rates[1:] == [1.0, 0.0]
    with pytest.raises(ValueError, match="reward must be one of"):
        CodeReward(tasks, runtime=runtime, reward="partial")


def test_batch_order_is_kept_under_parallelism(runtime, tasks):
    # The first completion is slow (it sleeps before defining the function), so
    # results finish out of order; the rewards must still come back in order.
    slow = fenced("import time\ntime.sleep(0.6)\n" + tasks.get(IDS[0]).hidden.reference_solution)
    pairs = [(IDS[0], slow)]
    expected = [1.0]
    for i in range(11):
        tid = IDS[i % len(IDS)]
        good = i % 3 != 1
        pairs.append((tid, reference(tasks, tid) if good else wrong(tasks, tid)))
        expected.append(1.0 if good else 0.0)
    with CodeReward(tasks, runtime=runtime, max_workers=6) as s:
        assert s.score_many(pairs) == expected
        assert s.score_many([]) == []


def test_unknown_task_id_names_the_choices_before_any_sandbox(tasks, no_sandboxes):
    with CodeReward(tasks, runtime=no_sandboxes) as s:
        with pytest.raises(KeyError, match="unknown task id 'basic/nope'.*choices: basic/"):
            s.score("basic/nope", "```python\nx = 1\n```")
        with pytest.raises(KeyError, match="choices"):  # checked before the batch runs anything
            s.score_many([("basic/second-largest", reference(tasks, "basic/second-largest")), ("nope", "")])
        f = trl_reward_func(scorer=s)
        with pytest.raises(KeyError, match="no dataset column 'task_id'.*columns passed: problem"):
            f(prompts=["p"], completions=["c"], problem=["basic/second-largest"])
        with pytest.raises(KeyError, match="choices"):
            f(prompts=["p"], completions=["c"], task_id=["nope"])


def test_trl_call_shapes_standard_and_conversational(scorer, tasks):
    f = trl_reward_func(scorer=scorer)
    assert f.__name__ == "sandgym_code_binary"
    assert trl_reward_func(scorer=scorer, name="code_ok").__name__ == "code_ok"
    tid = "basic/second-largest"
    # Standard format: strings; TRL also passes completion_ids and trainer_state.
    out = f(
        prompts=["p1", "p1"],
        completions=[reference(tasks, tid), wrong(tasks, tid)],
        completion_ids=[[1, 2], [3]],
        trainer_state=None,
        task_id=[tid, tid],
        other_column=[0, 1],
    )
    assert out == [1.0, 0.0]
    # Conversational format: each completion is a list of messages.
    rows = trainers.trl_rows(tasks, conversational=True)
    prompt = next(r["prompt"] for r in rows if r["task_id"] == tid)
    assert prompt[0]["role"] == "user" and "second_largest" in prompt[0]["content"]
    completions = [
        [{"role": "assistant", "content": reference(tasks, tid)}],
        [{"role": "assistant", "content": [{"type": "text", "text": reference(tasks, tid)}]}],
        [{"role": "assistant", "content": wrong(tasks, tid)}],
        [{"role": "assistant", "content": "I cannot answer that."}],
    ]
    assert f(prompts=[prompt] * 4, completions=completions, task_id=[tid] * 4) == [1.0, 1.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="2 completions but 1 values"):
        f(prompts=["p", "p"], completions=["a", "b"], task_id=[tid])


def test_env_error_is_none_for_trl_and_never_a_zero(tasks):
    tid = "basic/second-largest"
    broken = BrokenRuntime()  # a runtime passed in is the caller's to close
    try:
        with CodeReward(tasks, runtime=broken, retries=1) as s:
            assert s.score(tid, reference(tasks, tid)) is None
            assert s.counts["env_error"] == 1
            v = s.verdict(tid, reference(tasks, tid))
            assert v.outcome == "env_error" and len(v.attempts) == 2 and "closed" in v.attempts[0].detail
            f = trl_reward_func(scorer=s)
            # No code never reaches the sandbox, so it is still the model's 0.0.
            rewards = f(prompts=["p", "p"], completions=[reference(tasks, tid), "no idea"], task_id=[tid, tid])
            assert rewards == [None, 0.0]
            # verl has no "no score" value: an explicit error, or the score asked for.
            with pytest.raises(VerificationUnavailable, match="env_error.*env_error_score"):
                compute_score("sandgym", reference(tasks, tid), tid, {}, scorer=s)
            assert compute_score("sandgym", reference(tasks, tid), tid, {}, scorer=s, env_error_score=0.0) == 0.0
            assert compute_score(
                "sandgym", reference(tasks, tid), tid, {}, scorer=s, env_error_score=0.0, return_dict=True
            ) == {"score": 0.0, "pass_rate": 0.0, "env_error": 1.0}
    finally:
        broken.close()


def test_verl_compute_score_with_task_id_and_task_set_path(tiny_task_set, tasks):
    # Loaded from its file path and called the way verl does it (trainer/ppo/reward.py,
    # workers/reward_manager/naive.py, prime.py, batch.py).
    spec = importlib.util.spec_from_file_location("custom_module", ROOT / "sandgym" / "adapters" / "trainers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = module.compute_score
    info = {"task_set": str(tiny_task_set), "split": "train", "index": 0, "num_turns": None}
    ok, bad = "```python\ndef half(n):\n    return n / 2\n```", "```python\ndef half(n):\n    return n // 2\n```"
    assert fn(data_source="sandgym/code_function", solution_str=ok, ground_truth="tiny/half", extra_info=info) == 1.0
    assert fn(data_source="sandgym/code_function", solution_str=bad, ground_truth="tiny/half", extra_info=info) == 0.0
    assert fn("sandgym/code_function", bad, "tiny/half", info) == 0.0  # prime: positional
    # custom_reward_function.reward_kwargs arrive as keywords
    assert fn(data_source="x", solution_str=bad, ground_truth="tiny/half", extra_info=info, reward="pass_rate") == 0.5
    assert fn(
        data_source="x",
        solution_str=bad,
        ground_truth="tiny/half",
        extra_info=info,
        reward="pass_rate",
        return_dict=True,
    ) == {"score": 0.5, "pass_rate": 0.5, "env_error": 0.0}
    with pytest.raises(KeyError, match="unknown task id 'basic/second-largest'.*choices: tiny/half"):
        fn(data_source="x", solution_str=ok, ground_truth="basic/second-largest", extra_info=info)
    # The batch reward manager: one call per batch, verified in parallel, order kept.
    scores = module.compute_score_batch(
        data_sources=["x"] * 4,
        solution_strs=[ok, bad, bad, ok],
        ground_truths=["tiny/half"] * 4,
        extra_infos=[info] * 4,
    )
    assert scores == [1.0, 0.0, 0.0, 1.0]
    # Task sets may differ row by row (extra_info per row).
    tid = "basic/second-largest"
    mixed = trainers.compute_score_batch(
        data_sources=["a", "b", "c"],
        solution_strs=[ok, wrong(tasks, tid), reference(tasks, tid)],
        ground_truths=["tiny/half", tid, tid],
        extra_infos=[info, None, {"task_set": str(tasks.root)}],
    )
    assert mixed == [1.0, 0.0, 1.0]
    # verl_rows: the parquet layout, ground_truth = task id, extra_info carries the folder.
    row = module.verl_rows(str(tiny_task_set))[0]
    assert row["reward_model"] == {"style": "rule", "ground_truth": "tiny/half"}
    assert row["extra_info"]["task_set"] == str(Path(tiny_task_set).resolve()) and row["prompt"][0]["role"] == "user"
    module._close_verl_scorers()
    trainers._close_verl_scorers()


def test_example_scripts_run_and_print_the_rewards():
    procs = {
        name: subprocess.Popen(
            [sys.executable, str(ROOT / "examples" / name)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("trl_reward.py", "verl_reward.py")
    }
    out = {}
    for name, p in procs.items():
        stdout, stderr = p.communicate(timeout=120)
        assert p.returncode == 0, f"{name} failed:\n{stderr}"
        out[name] = stdout
    assert "sandgym_code_binary [1.0, 1.0, 0.0]" in out["trl_reward.py"]
    assert "basic/second-largest     wrong      reward 0.0" in out["trl_reward.py"]
    assert "batch: [1.0, 1.0, 0.0]" in out["verl_reward.py"]
    assert "basic/roman-to-int       reference  reward 1.0" in out["verl_reward.py"]
