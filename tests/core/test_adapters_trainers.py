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
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest

from sandgym.adapters import trainers
from sandgym.adapters.trainers import CodeReward, VerificationUnavailable, compute_score, trl_reward_func
from sandgym.adapters.trl_env import SandgymToolEnv
from sandgym.runtimes.local.runtime import LocalRuntime
from sandgym.specs import TaskSet, TaskSetMeta, bundled_task_set
from sandgym.specs.swe_repo import SWETaskPair
from tests.helpers import make_task, swe_tasks

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
    assert rates[0] is not None and 0.0 < rates[0] < 1.0
    assert rates[0] == v.pass_rate == sum(t.status == "passed" for t in v.tests) / len(v.tests)
    assert rates[1:] == [1.0, 0.0]
    not_a_scheme: Any = "partial"
    with pytest.raises(ValueError, match="reward must be one of"):
        CodeReward(tasks, runtime=runtime, reward=not_a_scheme)


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
    assert spec is not None and spec.loader is not None
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


def test_the_family_table_hooks_choose_the_reward_and_the_rows(tasks, no_sandboxes):
    """The scorer reaches a family's verifier only through its table hooks:
    the default set is the first family's that has them, and a family
    without them is refused before anything runs."""
    assert tasks.meta.family == trainers.trainer_family().name == "code_function"
    row = trainers.verl_rows(tasks)[0]
    assert row["data_source"] == "sandgym/code_function" and row["ability"] == "code_function"
    with pytest.raises(ValueError, match="family 'swe_repo', which has no single-turn trainer reward.*code_function"):
        CodeReward(bundled_task_set("swe_repo"), runtime=no_sandboxes)
    assert trainers.TaskReward is CodeReward


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


# -- multi-turn adapters (sandgym/adapters/{episodes,trl_env,verl_tools,hf_dataset}.py) ---------------------------

SWE_ENV, SWE_TASK = "sandgym/SWERepo-v0", "billing/bulk-threshold"
BROWSER_ENV, BROWSER_TASK = "sandgym/BrowserForm-v0", "forms/login-alice"


class SWEToolEnv(SandgymToolEnv):
    """An instance of `trl_environment(SWE_ENV)` as mypy sees it: the class
    gets its tool methods at run time, one per tool of the env."""

    bash: Callable[..., str]
    submit: Callable[..., str]


def as_tool_calls(actions, tools) -> list[tuple[str, dict]]:
    """An env's actions as the tool calls a model would emit for them (the
    scripted model's side; the adapter never does this): a dict action
    {"tool": NAME, **ARGS} is that call; a text action `name(a, b)` is the
    tool `name` with its arguments in the schema's order, or the text itself
    for an env whose one tool is `act`."""
    import ast

    by_name = {t.name: t for t in tools}
    calls = []
    for action in actions:
        if isinstance(action, dict):
            args = dict(action)
            calls.append((args.pop("tool"), args))
        elif set(by_name) == {"act"}:
            calls.append(("act", {"action": action}))
        else:
            node = ast.parse(action.strip(), mode="eval").body
            assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name), action
            params = list(by_name[node.func.id].parameters.get("properties", {}))
            args = {params[i]: ast.literal_eval(a) for i, a in enumerate(node.args)}
            args.update({k.arg: ast.literal_eval(k.value) for k in node.keywords})
            calls.append((node.func.id, args))
    return calls


class GRPOShaped:
    """The parts of TRL's GRPOTrainer (1.16: trl/trainer/grpo_trainer.py) that
    touch an environment_factory and a reward function, with a scripted model
    in place of generation (TRL needs torch and a model: not installable
    here). As TRL: one probe instance at init, whose class's public functions
    other than reset/get_reward are the tools; one pooled instance per
    rollout; reset(**row), its string appended to the last user message;
    each tool called by name with keyword arguments, an exception going back
    as {"error": str}; then reward_funcs(prompts=, completions=,
    environments=, **columns)."""

    def __init__(self, environment_factory, reward_funcs):
        import inspect

        self.factory = environment_factory
        self.reward_funcs = reward_funcs
        self.pool = [environment_factory()]
        self.tool_names = [
            n
            for n, _ in inspect.getmembers(type(self.pool[0]), predicate=inspect.isfunction)
            if n not in ("reset", "get_reward") and not n.startswith("_")
        ]
        self.failures = 0

    def step(self, rows, script):
        """One batch: `script(env, prompt)` plays the model, returning its tool calls."""
        while len(self.pool) < len(rows):
            self.pool.append(self.factory())
        envs = self.pool[: len(rows)]
        prompts, completions = [], []
        for env, row in zip(envs, rows, strict=True):
            prompt = list(row["prompt"])
            observation = env.reset(**row)
            if observation is not None:
                prompt[-1] = {**prompt[-1], "content": prompt[-1]["content"] + observation}
            messages = []
            for name, args in script(env, prompt):
                messages.append({"role": "assistant", "tool_calls": [{"function": {"name": name, "arguments": args}}]})
                try:
                    if name not in self.tool_names:
                        raise ValueError(f"Tool {name} not found.")
                    result = getattr(env, name)(**args)
                except Exception as e:
                    self.failures += 1
                    result = {"error": str(e)}
                messages.append({"role": "tool", "name": name, "content": str(result)})
            prompts.append(prompt)
            completions.append(messages)
        columns = {k: [r[k] for r in rows] for k in rows[0] if k != "prompt"}
        return [
            f(prompts=prompts, completions=completions, environments=envs, trainer_state=None, **columns)
            for f in self.reward_funcs
        ]


def oracle_script(env, prompt):
    ep = env.episode  # the scripted model knows the answer, as the harness's oracle policy
    return as_tool_calls(ep.env.unwrapped.oracle_actions(), type(env).tool_specs)


def null_script(env, prompt):
    return as_tool_calls(env.episode.env.unwrapped.null_actions(), type(env).tool_specs)


def silent_script(env, prompt):
    return []  # the model never calls a tool: the adapter submits the untouched repository


@pytest.fixture(scope="module")
def swe_rows():
    from sandgym.adapters.hf_dataset import task_rows
    from sandgym.specs import bundled_task_set

    return task_rows(TaskSet.load(bundled_task_set("swe_repo")))


def test_trl_environment_swe_oracle_scores_one_and_null_zero(runtime, swe_rows):
    from sandgym.adapters.trl_env import trl_environment

    env_cls = trl_environment(SWE_ENV, runtime=runtime)
    try:
        trainer = GRPOShaped(env_cls, [env_cls.reward_func])
        assert {"bash", "submit"} <= set(trainer.tool_names)  # the env's chat tools, nothing of the adapter's
        assert not {"close_all", "episode", "counts", "reward_func"} & set(trainer.tool_names)
        row = next(r for r in swe_rows if r["task_id"] == SWE_TASK)
        [rewards] = trainer.step([row, row], lambda env, p: oracle_script(env, p))
        assert rewards == [1.0, 1.0]
        assert [e.episode.outcome for e in trainer.pool] == ["passed", "passed"]
        [rewards] = trainer.step(
            [row, row, row], lambda env, p: [null_script, silent_script][env is trainer.pool[2]](env, p)
        )
        assert rewards == [0.0, 0.0, 0.0]
        assert trainer.failures == 0 and len(trainer.pool) == 3  # instances are reused, one per rollout
        m = env_cls.counts.metrics()
        assert (m["sandgym/passed"], m["sandgym/failed"], m["sandgym/episodes"]) == (2.0, 3.0, 5.0)
        assert m["sandgym/pass_rate"] == 0.4 and m["sandgym/env_error"] == 0.0
        # Scoring again does not count again.
        assert env_cls.reward_func(environments=trainer.pool[:1]) == [0.0]
        assert env_cls.counts.metrics(reset=True)["sandgym/episodes"] == 5.0
        assert env_cls.counts.metrics()["sandgym/episodes"] == 0.0
    finally:
        env_cls.close_all()
    assert all(e.episode._closed for e in trainer.pool)


def test_trl_environment_tool_errors_reach_the_model(runtime, swe_rows):
    from sandgym.adapters.trl_env import trl_environment

    env_cls = trl_environment(SWE_ENV, runtime=runtime)
    try:
        env = cast(SWEToolEnv, env_cls())
        # A row without a prompt: reset returns the task's text too, as the export's prompt has it.
        row = next(r for r in swe_rows if r["task_id"] == SWE_TASK)
        first = env.reset(task_id=SWE_TASK)
        assert first.startswith(row["prompt"][0]["content"]) and "/workspace/repo" in first
        assert env.reset(task_id=SWE_TASK, prompt=row["prompt"]) == "The repository is ready at /workspace/repo."
        with pytest.raises(ValueError, match="unknown tool 'nope'"):
            env.episode.call("nope", {})
        with pytest.raises(ValueError, match="command"):
            env.bash()  # a missing argument: the env's own check, no step spent
        assert env.episode.turns == 0
        assert "hello" in env.bash(command="echo hello")
        assert "The episode is over (outcome: failed)" in env.submit()
        with pytest.raises(RuntimeError, match="the episode is over"):
            env.bash(command="true")
        with pytest.raises(TypeError, match="environment_factory"):
            env_cls.reward_func(prompts=["p"], completions=["c"])
        with pytest.raises(RuntimeError, match="never reset"):
            env_cls.reward_func(environments=[env_cls()])
    finally:
        env_cls.close_all()


@pytest.mark.parametrize("env_id", [SWE_ENV, BROWSER_ENV])
def test_trl_tool_methods_give_back_the_env_schemas(runtime, env_id):
    # What TRL builds the model's tool list from: transformers' get_json_schema on each
    # method. (Making the browser env starts no browser: that waits for a reset.)
    get_json_schema = pytest.importorskip("transformers.utils").get_json_schema
    from sandgym.adapters.trl_env import trl_environment

    env_cls = trl_environment(env_id, runtime=runtime)
    try:
        env = env_cls()
        assert env_cls.tool_specs
        for spec in env_cls.tool_specs:
            got = get_json_schema(getattr(env, spec.name))["function"]
            assert got["name"] == spec.name and got["description"] == spec.description
            want = spec.parameters.get("properties", {})
            assert set(got["parameters"]["properties"]) == set(want)
            assert set(got["parameters"].get("required", [])) == set(spec.parameters.get("required", []))
            for arg, schema in want.items():
                mine = got["parameters"]["properties"][arg]
                assert mine.get("type") == schema.get("type") and mine.get("enum") == schema.get("enum")
                assert mine.get("items", {}).get("type") == schema.get("items", {}).get("type")
    finally:
        env_cls.close_all()


def test_verl_tool_interface_swe_oracle_and_null(runtime, swe_rows):
    import asyncio

    from sandgym.adapters import verl_tools
    from sandgym.adapters.verl_tools import SandgymTool, outcome_metrics, verl_tool_config

    config = verl_tool_config(SWE_ENV)
    assert all(t["class_name"] == "sandgym.adapters.verl_tools.SandgymTool" for t in config["tools"])
    row = next(r for r in swe_rows if r["task_id"] == SWE_TASK)
    tools_kwargs = row["extra_info"]["tools_kwargs"]

    class Schema:  # verl hands tools a pydantic OpenAIFunctionToolSchema: model_dump() is what is read
        def __init__(self, d):
            self.d = d

        def model_dump(self, **kw):
            return self.d

    tools = {
        t["tool_schema"]["function"]["name"]: SandgymTool(t["config"], Schema(t["tool_schema"]))
        for t in config["tools"]
    }
    assert set(tools) == set(tools_kwargs)

    async def rollout(instance_id, calls, kwargs_style):
        # As verl's multi-turn rollout: every tool created with the request id, calls, rewards, release.
        opened = []
        for name, tool in tools.items():
            ck = tools_kwargs[name]["create_kwargs"]
            args = {"create_kwargs": ck} if kwargs_style else ck
            iid, response = await tool.create(instance_id, **args)
            assert iid == instance_id
            opened.append(response.text)
        assert sum(bool(t) for t in opened) == 1  # the first create started the episode
        metrics = []
        for name, args in calls:
            response, step_reward, m = await tools[name].execute(instance_id, args)
            assert step_reward == 0.0 and isinstance(response.text, str)
            metrics.append(m)
        rewards = [await tool.calc_reward(instance_id) for tool in tools.values()]
        for tool in tools.values():
            await tool.release(instance_id)
        return rewards, metrics

    async def main():
        oracle = [
            (
                "bash",
                {
                    "command": "git apply --whitespace=nowarn <<'EOF'\n"
                    + SWETaskPair.of(TaskSet.load(row["task_set_path"]).get(SWE_TASK)).hidden.patch
                    + "EOF\n"
                },
            ),
            ("view", '{"path": "README.md"}'),  # arguments as a JSON string (older verl)
            ("bash", {"cmd": "x"}),  # a bad call: the error goes back as text
            ("submit", {}),
        ]
        # Two rollouts at once: each instance id has its own episode.
        (good, gm), (bad, bm) = await asyncio.gather(
            rollout("req-oracle", oracle, kwargs_style=False), rollout("req-null", [("submit", {})], kwargs_style=True)
        )
        return good, gm, bad, bm

    good, gm, bad, bm = asyncio.run(main())
    assert good == [1.0] * len(tools) and gm[-1] == {"turns": 3, "done": True, "outcome": "passed"}
    assert gm[2]["error"] == "ToolCallError"
    assert bad == [0.0] * len(tools) and bm[-1]["outcome"] == "failed"
    assert verl_tools._sessions == {}  # every episode closed at its last release
    m = outcome_metrics(SWE_ENV)
    assert m["sandgym/passed"] >= 1.0 and m["sandgym/failed"] >= 1.0
    with pytest.raises(KeyError, match="call create"):
        asyncio.run(tools["bash"].execute("req-oracle", {"command": "true"}))
    with pytest.raises(ValueError, match="env_id"):
        SandgymTool({}, None)


@pytest.mark.chromium
def test_trl_environment_browser_episode():
    from sandgym.adapters.hf_dataset import task_rows
    from sandgym.adapters.trl_env import trl_environment
    from sandgym.specs import bundled_task_set

    ts = TaskSet.load(bundled_task_set("browser_form"))
    sub = TaskSet(ts.meta, [ts.get(BROWSER_TASK)], root=ts.root)
    env_cls = trl_environment(BROWSER_ENV, tasks=sub)
    try:
        [row] = task_rows(sub)
        assert row["task_id"] == BROWSER_TASK and "alice" in row["prompt"][0]["content"]
        trainer = GRPOShaped(env_cls, [env_cls.reward_func])
        [passed] = trainer.step([row], oracle_script)
        [failed] = trainer.step([row], null_script)
        assert (passed, failed) == ([1.0], [0.0]) and trainer.failures == 0
        m = env_cls.counts.metrics()
        assert (m["sandgym/passed"], m["sandgym/failed"]) == (1.0, 1.0)
    finally:
        env_cls.close_all()


def test_hf_export_loads_with_datasets(tmp_path, swe_rows):
    datasets = pytest.importorskip("datasets")
    from typer.testing import CliRunner

    from sandgym.cli import app

    runner = CliRunner()
    res = runner.invoke(
        app, ["tasks", "export", "swe_repo/billing-v1", "--format", "hf", "--out", str(tmp_path / "ds")]
    )
    assert res.exit_code == 0, res.output
    ds = datasets.load_from_disk(str(tmp_path / "ds"))
    ts = TaskSet.load(swe_rows[0]["task_set_path"])
    assert ds["task_id"] == [t.id for t in ts.tasks] and ds.num_rows == len(ts)
    first = ds[0]
    assert first["family"] == "swe_repo" and first["env_id"] == SWE_ENV and first["task_set_hash"] == ts.hash
    assert (
        first["prompt"] == swe_rows[0]["prompt"]
        and swe_tasks(ts)[0].visible.problem_statement.strip()[:40] in first["prompt"][0]["content"]
    )
    assert first["reward_model"] == {"style": "rule", "ground_truth": ts.tasks[0].id}
    assert first["extra_info"]["tools_kwargs"]["submit"]["create_kwargs"] == {"task_id": ts.tasks[0].id}
    # parquet and json lines: datasets.load_dataset reads them back
    for name, kind in (("prompts.parquet", "parquet"), ("prompts.jsonl", "json")):
        res = runner.invoke(
            app, ["tasks", "export", "swe_repo/billing-v1", "--format", "hf", "--out", str(tmp_path / name)]
        )
        assert res.exit_code == 0, res.output
        loaded = datasets.load_dataset(kind, data_files=str(tmp_path / name), split="train")
        assert loaded["task_id"] == ds["task_id"] and loaded[0]["prompt"] == first["prompt"]
    # errors: an occupied folder, a swebench-only flag, an unknown format
    res = runner.invoke(
        app, ["tasks", "export", "swe_repo/billing-v1", "--format", "hf", "--out", str(tmp_path / "ds")]
    )
    assert res.exit_code != 0 and "not an empty folder" in res.output
    res = runner.invoke(
        app,
        [
            "tasks",
            "export",
            "swe_repo/billing-v1",
            "--format",
            "hf",
            "--out",
            str(tmp_path / "x"),
            "--repos-out",
            str(tmp_path),
        ],
    )
    assert res.exit_code != 0 and "takes no --repos-out" in res.output
    res = runner.invoke(
        app, ["tasks", "export", "swe_repo/billing-v1", "--format", "hff", "--out", str(tmp_path / "y")]
    )
    assert res.exit_code != 0 and "jsonl, hf, swebench" in res.output


def test_hf_export_without_datasets_says_how_to_install(tmp_path, monkeypatch):
    from sandgym.adapters.hf_dataset import DatasetsMissing, export_dataset
    from sandgym.specs import bundled_task_set

    monkeypatch.setitem(sys.modules, "datasets", None)  # as if it were not installed: import fails
    with pytest.raises(
        DatasetsMissing, match=r"needs the Hugging Face `datasets` package.*pip install 'sandgym\[train\]'"
    ):
        export_dataset(TaskSet.load(bundled_task_set("swe_repo")), tmp_path / "ds", {})
    assert not (tmp_path / "ds").exists()


def test_env_error_is_no_score_in_both_adapters(runtime, swe_rows):
    import asyncio

    from sandgym.adapters.trl_env import trl_environment
    from sandgym.adapters.verl_tools import SandgymTool, verl_tool_config

    def lose_sandbox(episode):
        # The infrastructure failing mid-episode: the agent's sandbox is gone (closed under the env).
        episode.submit(lambda: episode.env.unwrapped._sandbox.close()).result()

    env_cls = trl_environment(SWE_ENV, runtime=runtime)
    try:
        env = cast(SWEToolEnv, env_cls())
        env.reset(task_id=SWE_TASK, prompt="p")
        lose_sandbox(env.episode)
        assert "(outcome: env_error)" in env.bash(command="echo hi")
        assert env_cls.reward_func(environments=[env]) == [None]  # TRL: not applicable, never a 0
        m = env_cls.counts.metrics()
        assert m["sandgym/env_error"] == 1.0 and m["sandgym/pass_rate"] == 0.0 and m["sandgym/episodes"] == 1.0
    finally:
        env_cls.close_all()

    entry = next(t for t in verl_tool_config(SWE_ENV)["tools"] if t["tool_schema"]["function"]["name"] == "bash")

    async def play(config):
        tool = SandgymTool(config, entry["tool_schema"])
        await tool.create("req-broken", create_kwargs={"task_id": SWE_TASK})
        from sandgym.adapters import verl_tools

        lose_sandbox(verl_tools._sessions[(tool._key, "req-broken")].episode)
        response, _, metrics = await tool.execute("req-broken", {"command": "echo hi"})
        try:
            return metrics["outcome"], await tool.calc_reward("req-broken")
        finally:
            await tool.release("req-broken")

    with pytest.raises(VerificationUnavailable, match="env_error.*env_error_score"):
        asyncio.run(play(entry["config"]))
    assert asyncio.run(play({**entry["config"], "env_error_score": -1.0})) == ("env_error", -1.0)


def test_metrics_callback_puts_outcome_counts_in_the_logs_reporters_see():
    pytest.importorskip("transformers")
    from transformers import TrainerCallback
    from transformers.trainer_callback import CallbackHandler, TrainerControl, TrainerState

    from sandgym.adapters.episodes import OutcomeCounts
    from sandgym.adapters.trl_env import metrics_callback

    seen = []

    class Reporter(TrainerCallback):  # stands for wandb/tensorboard: reads the logs
        def on_log(self, args, state, control, logs=None, **kwargs):
            seen.append(dict(logs))

    counts = OutcomeCounts()
    for outcome in ("passed", "failed", "passed", "env_error"):
        counts.add(outcome)
    handler = CallbackHandler([Reporter()], model=None, processing_class=None, optimizer=None, lr_scheduler=None)
    handler.callbacks.insert(0, metrics_callback(counts))
    no_args: Any = None  # neither callback reads the TrainingArguments
    handler.on_log(no_args, TrainerState(), TrainerControl(), {"loss": 1.0})
    handler.on_log(no_args, TrainerState(), TrainerControl(), {"loss": 0.5})
    assert seen[0]["loss"] == 1.0 and seen[0]["sandgym/passed"] == 2.0 and seen[0]["sandgym/env_error"] == 1.0
    assert seen[0]["sandgym/pass_rate"] == 2 / 3 and seen[0]["sandgym/episodes"] == 4.0
    assert seen[1]["sandgym/episodes"] == 0.0  # per logging step: counted afresh
