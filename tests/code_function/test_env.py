"""sandgym/CodeFunction-v0 with real bubblewrap sandboxes and the real verifier,
and the action grammar of envs/code_function/actions.py."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import gymnasium
import pytest
import yaml
from gymnasium.utils.env_checker import check_env

import sandgym  # noqa: F401  (registers the envs)
from sandgym.envs.code_function import ENV_ID, CodeFunctionEnv
from sandgym.envs.code_function.actions import ParsedAction, defines, extract_code, parse_action
from sandgym.specs import TaskSet

# -- a small task set -----------------------------------------------------------------

TASKS = {
    "add": (
        {
            "id": "add",
            "prompt": "Return a + b.",
            "entry_point": "add",
            "examples": [{"args": [1, 2], "expected": 3}, {"args": [0, 0], "expected": 0}],
        },
        {
            "id": "add",
            "tests": [
                {"args": [2, 3], "expected": 5},
                {"args": [-1, 1], "expected": 0},
                {"args": [0, 7], "expected": 7},
                {"args": [10, 5], "expected": 15},
            ],
            "reference_solution": "def add(a, b):\n    return a + b\n",
        },
    ),
    "rev": (
        {
            "id": "rev",
            "prompt": "Return the string reversed.",
            "entry_point": "rev",
            "examples": [{"args": ["abc"], "expected": "cba"}],
        },
        {
            "id": "rev",
            "tests": [{"args": ["hello"], "expected": "olleh"}, {"args": [""], "expected": ""}],
            "reference_solution": "def rev(s):\n    return s[::-1]\n",
        },
    ),
    "even": (
        {
            "id": "even",
            "prompt": "Return whether n is even.",
            "entry_point": "is_even",
            "examples": [{"args": [2], "expected": True}, {"args": [3], "expected": False}],
        },
        {
            "id": "even",
            "check_code": "def check(candidate):\n    assert candidate(4) is True\n    assert candidate(7) is False\n",
            "reference_solution": "def is_even(n):\n    return n % 2 == 0\n",
        },
    ),
}

ADD_OK = "def add(a, b):\n    return a + b\n"
ADD_WRONG = "def add(a, b):\n    return a * b\n"
# right on 3 of the 4 hidden tests (wrong only for a == 10)
ADD_MOSTLY = "def add(a, b):\n    return 0 if a == 10 else a + b\n"


def fence(code: str, lang: str = "python") -> str:
    return f"```{lang}\n{code}```"


def write_task_set(root: Path) -> Path:
    (root / "tasks").mkdir(parents=True)
    (root / "hidden").mkdir()
    (root / "taskset.yaml").write_text(yaml.safe_dump({"name": "env-mini", "family": "code_function"}))
    for slug, (vis, hid) in TASKS.items():
        (root / "tasks" / f"{slug}.yaml").write_text(yaml.safe_dump(vis))
        (root / "hidden" / f"{slug}.yaml").write_text(yaml.safe_dump(hid))
    return root


@pytest.fixture(scope="module")
def task_dir(tmp_path_factory) -> Path:
    return write_task_set(tmp_path_factory.mktemp("envtasks") / "ts")


@pytest.fixture
def make(task_dir, runtime):
    envs = []

    def _make(**kwargs):
        kwargs.setdefault("tasks", str(task_dir))
        kwargs.setdefault("runtime", runtime)
        env = gymnasium.make(ENV_ID, **kwargs)
        envs.append(env)
        return env

    yield _make
    for env in envs:
        env.close()


# -- registration -------------------------------------------------------------------------


def test_make_after_import(make, task_dir):
    env = make()
    assert isinstance(env.unwrapped, CodeFunctionEnv)
    assert "sandgym/CodeFunction-v0" in gymnasium.registry
    obs, info = env.reset(seed=0, options={"task_id": "add"})
    assert set(obs) == {"task", "feedback"}
    assert obs in env.observation_space
    assert "Return a + b." in obs["task"] and "add(1, 2) == 3" in obs["task"]
    assert obs["feedback"] == ""
    assert info == {"task_id": "add", "mode": "single", "turn": 0, "max_turns": 1}


def test_tasks_may_be_a_task_set_object(make, task_dir):
    env = make(tasks=TaskSet.load(task_dir))
    _, info = env.reset(options={"task_id": "rev"})
    assert info["task_id"] == "rev"


def test_make_with_module_prefix_in_fresh_process(task_dir, tmp_path):
    script = textwrap.dedent("""
        import json, sys
        assert "sandgym" not in sys.modules
        import gymnasium
        assert "sandgym" not in sys.modules
        env = gymnasium.make("sandgym:sandgym/CodeFunction-v0", tasks=sys.argv[1])
        obs, info = env.reset(options={"task_id": "add"})
        obs, reward, terminated, truncated, info = env.step("```python\\ndef add(a, b):\\n    return a + b\\n```")
        env.close()
        print(json.dumps({"cls": type(env.unwrapped).__name__, "reward": reward, "terminated": terminated,
                          "outcome": info["outcome"]}))
    """)
    proc = subprocess.run(
        [sys.executable, "-c", script, str(task_dir)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"cls": "CodeFunctionEnv", "reward": 1.0, "terminated": True, "outcome": "passed"}


# -- gymnasium's env checker ------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["single", "multi"])
def test_check_env_without_warnings(task_dir, mode, monkeypatch):
    # runtime="local" (a name): check_env re-makes the env from env.spec, which
    # deep-copies the kwargs; a runtime object is shared, see the test below.
    logged = []
    monkeypatch.setattr(gymnasium.logger, "warn", lambda msg, *a, **k: logged.append(msg % a if a else msg))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env = gymnasium.make(ENV_ID, tasks=str(task_dir), runtime="local", mode=mode, max_turns=3)
        try:
            check_env(env.unwrapped)
        finally:
            env.close()
    assert [str(w.message) for w in caught] == []
    assert logged == []


def test_make_with_runtime_name_keeps_spec(task_dir):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env = gymnasium.make(ENV_ID, tasks=str(task_dir), runtime="local")
    env.close()
    assert [str(w.message) for w in caught] == []
    assert env.spec is not None and env.spec.id == ENV_ID and env.spec.kwargs["runtime"] == "local"


def test_make_with_a_runtime_object_keeps_spec(task_dir, runtime):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env = gymnasium.make(ENV_ID, tasks=str(task_dir), runtime=runtime)
        spec = env.spec
    try:
        assert [str(w.message) for w in caught] == []
        assert spec is not None
        again = spec.make()
        assert isinstance(again.unwrapped, CodeFunctionEnv) and again.unwrapped.runtime is runtime
        again.close()
    finally:
        env.close()


# -- reset ----------------------------------------------------------------------------------


def test_same_seed_same_task(make):
    a, b = make(), make()
    picks = []
    for seed in range(12):
        ta = a.reset(seed=seed)[1]["task_id"]
        tb = b.reset(seed=seed)[1]["task_id"]
        assert ta == tb
        picks.append(ta)
    assert len(set(picks)) > 1  # the seed does choose


def test_reset_repeats_with_seed_and_returns_fresh_state(make):
    env = make(mode="multi", max_turns=3)
    obs1, info1 = env.reset(seed=5)
    env.step(fence(ADD_WRONG))
    obs2, info2 = env.reset(seed=5)
    assert obs1 == obs2 and info1 == info2
    assert obs2["feedback"] == "" and info2["turn"] == 0


def test_task_id_option(make):
    env = make()
    for tid in ("add", "rev", "even"):
        _, info = env.reset(seed=0, options={"task_id": tid})
        assert info["task_id"] == tid
        assert env.unwrapped.task.id == tid


def test_unknown_task_id_lists_choices(make):
    env = make()
    with pytest.raises(KeyError) as e:
        env.reset(options={"task_id": "nope"})
    msg = e.value.args[0]
    assert "'nope'" in msg and "choices" in msg
    for tid in ("add", "even", "rev"):
        assert tid in msg


def test_unknown_reset_option(make):
    env = make()
    with pytest.raises(ValueError, match="task_id"):
        env.reset(options={"taskid": "add"})


# -- single-turn ------------------------------------------------------------------------------


def test_single_turn_pass(make):
    env = make()
    env.reset(options={"task_id": "add"})
    obs, reward, terminated, truncated, info = env.step(fence(ADD_OK))
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert info["outcome"] == "passed" and info["reward_valid"] is True and info["tool"] == "submit"
    assert info["pass_rate"] == 1.0 and len(info["tests"]) == 4
    assert "passed" in obs["feedback"]
    assert env.unwrapped.submitted_code == ADD_OK
    assert env.unwrapped.last_verdict.outcome == "passed"


def test_check_code_task(make):
    env = make()
    env.reset(options={"task_id": "even"})
    _, reward, _, _, info = env.step(fence("def is_even(n):\n    return n % 2 == 0\n"))
    assert (reward, info["outcome"]) == (1.0, "passed")
    env.reset(options={"task_id": "even"})
    _, reward, _, _, info = env.step(fence("def is_even(n):\n    return True\n"))
    assert (reward, info["outcome"]) == (0.0, "failed")


def test_last_fenced_block_wins(make):
    env = make()
    env.reset(options={"task_id": "add"})
    action = f"First try:\n{fence(ADD_WRONG)}\nNo wait, this one:\n{fence(ADD_OK)}\nDone."
    _, reward, _, _, info = env.step(action)
    assert info["outcome"] == "passed" and reward == 1.0
    assert env.unwrapped.submitted_code == ADD_OK

    env.reset(options={"task_id": "add"})
    _, reward, _, _, info = env.step(f"{fence(ADD_OK)}\n{fence(ADD_WRONG, 'py')}")
    assert info["outcome"] == "failed" and reward == 0.0


def test_single_turn_no_code_ends_failed(make):
    env = make()
    env.reset(options={"task_id": "add"})
    obs, reward, terminated, truncated, info = env.step("I am not sure how to do this.")
    assert terminated and not truncated
    assert reward == 0.0
    assert info["outcome"] == "failed" and info["reward_valid"] is True
    assert "no code found" in obs["feedback"] and "`add`" in obs["feedback"]
    assert env.unwrapped.submitted_code is None
    assert env.unwrapped.last_verdict.verifier_version == "none"  # nothing ran


def test_single_turn_code_without_entry_point(make):
    env = make()
    env.reset(options={"task_id": "add"})
    obs, reward, terminated, _, info = env.step(fence("def plus(a, b):\n    return a + b\n"))
    assert terminated and reward == 0.0 and info["outcome"] == "failed"
    assert "does not define `add`" in obs["feedback"]


def test_single_turn_runtime_error_is_failed(make):
    env = make()
    env.reset(options={"task_id": "rev"})
    _, reward, _, _, info = env.step(fence("def rev(s):\n    raise ValueError('boom')\n"))
    assert reward == 0.0 and info["outcome"] == "failed"
    assert {t["status"] for t in info["tests"]} == {"error"}


def test_single_mode_ignores_max_turns(make):
    env = make(mode="single", max_turns=4)
    _, info = env.reset(options={"task_id": "add"})
    assert info["max_turns"] == 1


# -- multi-turn --------------------------------------------------------------------------------


def test_multi_run_shows_per_example_feedback(make):
    env = make(mode="multi", max_turns=3)
    obs, _ = env.reset(options={"task_id": "add"})
    assert "SUBMIT" in obs["task"] and "3 turns" in obs["task"]
    obs, reward, terminated, truncated, info = env.step(fence(ADD_WRONG))
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert info["tool"] == "run" and info["turn"] == 1 and "outcome" not in info
    assert "FAILED: add(1, 2)" in obs["feedback"]
    assert "expected 3, got 2" in obs["feedback"]
    assert "PASSED: add(0, 0)" in obs["feedback"]
    assert "Turn 1 of 3" in obs["feedback"]
    obs, _, terminated, _, info = env.step(fence(ADD_OK))
    assert not terminated
    assert "PASSED: add(1, 2)" in obs["feedback"] and "FAILED" not in obs["feedback"]


def test_multi_run_shows_load_errors_and_output(make):
    env = make(mode="multi", max_turns=3)
    env.reset(options={"task_id": "rev"})
    obs, _, terminated, _, info = env.step(fence("def rev(s):\n    return s[::-1\n"))
    assert not terminated and info["tool"] == "run"
    assert "loading the code failed" in obs["feedback"]
    obs, _, _, _, _ = env.step(fence("def rev(s):\n    print('debug', s)\n    return s[::-1]\n"))
    assert "PASSED: rev('abc')" in obs["feedback"] and "debug abc" in obs["feedback"]


def test_submit_alone_submits_last_run_code(make):
    env = make(mode="multi", max_turns=5)
    env.reset(options={"task_id": "add"})
    env.step(fence(ADD_WRONG))
    env.step(fence(ADD_OK))
    _, reward, terminated, _, info = env.step("SUBMIT")
    assert terminated and reward == 1.0
    assert info["tool"] == "submit" and info["outcome"] == "passed" and info["turn"] == 3
    assert env.unwrapped.submitted_code == ADD_OK


def test_submit_with_code_submits_that_code(make):
    env = make(mode="multi", max_turns=5)
    env.reset(options={"task_id": "add"})
    env.step(fence(ADD_OK))
    _, reward, terminated, _, info = env.step("submit\n" + fence(ADD_WRONG))
    assert terminated and reward == 0.0 and info["outcome"] == "failed"
    assert env.unwrapped.submitted_code == ADD_WRONG


def test_submit_before_any_run_fails(make):
    env = make(mode="multi", max_turns=5)
    env.reset(options={"task_id": "add"})
    obs, reward, terminated, _, info = env.step("SUBMIT")
    assert terminated and reward == 0.0 and info["outcome"] == "failed"
    assert "nothing was verified" in obs["feedback"]


def test_multi_no_code_continues_as_invalid(make):
    env = make(mode="multi", max_turns=3)
    env.reset(options={"task_id": "add"})
    obs, reward, terminated, truncated, info = env.step("Let me think about it.")
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert info["tool"] == "invalid" and info["turn"] == 1
    assert "no code found" in obs["feedback"] and "Turn 1 of 3" in obs["feedback"]
    _, reward, terminated, _, info = env.step("SUBMIT\n" + fence(ADD_OK))
    assert terminated and reward == 1.0


def test_last_turn_is_always_a_submission(make):
    env = make(mode="multi", max_turns=2)
    env.reset(options={"task_id": "add"})
    _, _, terminated, _, info = env.step(fence(ADD_WRONG))
    assert not terminated and info["tool"] == "run"
    obs, reward, terminated, truncated, info = env.step(fence(ADD_OK))  # no SUBMIT, but the last turn
    assert terminated and not truncated
    assert info["tool"] == "submit" and info["outcome"] == "passed" and reward == 1.0
    assert "Verdict: passed" in obs["feedback"]


def test_last_turn_without_code_fails(make):
    env = make(mode="multi", max_turns=1)
    env.reset(options={"task_id": "add"})
    _, reward, terminated, _, info = env.step("no idea")
    assert terminated and reward == 0.0 and info["outcome"] == "failed"


def test_pass_rate_reward(make):
    env = make(reward="pass_rate")
    env.reset(options={"task_id": "add"})
    _, reward, _, _, info = env.step(fence(ADD_MOSTLY))
    assert reward == pytest.approx(0.75)
    assert info["pass_rate"] == pytest.approx(0.75) and info["outcome"] == "failed"
    assert [t["status"] for t in info["tests"]].count("passed") == 3

    binary = make(reward="binary")
    binary.reset(options={"task_id": "add"})
    _, reward, _, _, _ = binary.step(fence(ADD_MOSTLY))
    assert reward == 0.0


def test_pass_rate_reward_multi(make):
    env = make(mode="multi", reward="pass_rate", max_turns=3)
    env.reset(options={"task_id": "add"})
    env.step(fence(ADD_MOSTLY))
    _, reward, terminated, _, _ = env.step("SUBMIT")
    assert terminated and reward == pytest.approx(0.75)


# -- misuse ---------------------------------------------------------------------------------


def test_step_after_end_raises(make):
    env = make()
    env.reset(options={"task_id": "add"})
    env.step(fence(ADD_OK))
    with pytest.raises(RuntimeError, match="reset"):
        env.step(fence(ADD_OK))


def test_step_before_reset_raises(make):
    env = make()
    with pytest.raises(RuntimeError):
        env.unwrapped.step(fence(ADD_OK))


@pytest.mark.parametrize("action", [42, {"tool": "bash", "command": "ls"}, ["x"], None])
def test_an_action_that_is_not_text_is_the_policys_mistake(make, action):
    # Not an env_error with a traceback: the turn is used, and a single-turn
    # episode ends failed, saying what an action is.
    env = make()
    env.reset(options={"task_id": "add"})
    obs, reward, terminated, _, info = env.unwrapped.step(action)
    assert terminated and reward == 0.0 and info["outcome"] == "failed" and info["reward_valid"]
    assert "an action is text (a str)" in obs["feedback"]


def test_an_action_that_is_not_text_uses_a_turn_in_multi_mode(make):
    env = make(mode="multi", max_turns=3)
    env.reset(options={"task_id": "add"})
    obs, _, terminated, _, info = env.unwrapped.step({"code": "x"})
    assert not terminated and info["tool"] == "invalid" and "an action is text" in obs["feedback"]
    obs, reward, terminated, _, info = env.step("SUBMIT\n" + fence(ADD_OK))
    assert terminated and info["outcome"] == "passed"


def test_an_action_with_a_lone_surrogate_is_refused_not_crashed(make):
    env = make()
    env.reset(options={"task_id": "add"})
    obs, _, terminated, _, info = env.unwrapped.step(fence("def add(a, b):\n    return '\ud800'\n"))
    assert terminated and info["outcome"] == "failed" and "not valid Unicode" in obs["feedback"]


@pytest.mark.parametrize("mode", ["single", "multi"])
def test_an_oversized_action_ends_the_episode_failed(make, mode):
    env = make(mode=mode, max_action_chars=1000)
    env.reset(options={"task_id": "add"})
    obs, reward, terminated, _, info = env.unwrapped.step(fence(ADD_OK) + "#" * 2000)
    assert terminated and info["outcome"] == "failed" and reward == 0.0
    assert "the limit is 1,000" in obs["feedback"] and "max_action_chars" in obs["feedback"]
    assert env.unwrapped.last_verdict.verifier_version == "none"  # nothing was run


def test_an_action_at_the_limit_is_taken(make):
    env = make(max_action_chars=len(fence(ADD_OK)))
    env.reset(options={"task_id": "add"})
    assert env.step(fence(ADD_OK))[4]["outcome"] == "passed"


def test_a_failed_reset_leaves_the_env_usable_through_gymnasium_make(make):
    # gymnasium's own env checker breaks after a first reset that raises;
    # sandgym registers its envs with one that does not.
    env = make()
    with pytest.raises(KeyError, match="unknown task id 'nope'"):
        env.reset(options={"task_id": "nope"})
    with pytest.raises(RuntimeError, match="call reset"):
        env.step(fence(ADD_OK))
    env.reset(options={"task_id": "add"})
    assert env.step(fence(ADD_OK))[4]["outcome"] == "passed"
    # A failed reset in the middle of an episode ends that episode.
    env.reset(options={"task_id": "add"})
    with pytest.raises(ValueError, match="unknown reset option"):
        env.reset(options={"bogus": 1})
    with pytest.raises(RuntimeError, match="call reset"):
        env.step(fence(ADD_OK))
    env.reset(options={"task_id": "add"})
    assert env.step(fence(ADD_OK))[4]["outcome"] == "passed"


@pytest.mark.parametrize(
    "kwargs,field",
    [
        ({"mode": "x"}, "mode"),
        ({"reward": "x"}, "reward"),
        ({"max_turns": 0}, "max_turns"),
        ({"render_mode": "human"}, "render_mode"),
        ({"verifier_retries": "abc"}, "verifier_retries"),
        ({"verifier_retries": -1}, "verifier_retries"),
        ({"max_turns": "3"}, "max_turns"),
        ({"max_turns": True}, "max_turns"),
        ({"max_action_chars": 0}, "max_action_chars"),
    ],
)
def test_bad_kwargs(task_dir, runtime, kwargs, field):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # gymnasium's own note on an undeclared render mode
        with pytest.raises(ValueError, match=field):
            gymnasium.make(ENV_ID, tasks=str(task_dir), runtime=runtime, **kwargs)
    with pytest.raises(ValueError, match=field):
        CodeFunctionEnv(tasks=str(task_dir), runtime=runtime, **kwargs)


def test_render_ansi(make):
    env = make(render_mode="ansi", mode="multi", max_turns=2)
    env.reset(options={"task_id": "rev"})
    env.step(fence("def rev(s):\n    return s\n"))
    text = env.render()
    assert "Return the string reversed." in text and "FAILED: rev('abc')" in text
    assert make().unwrapped.render() is None


# -- actions.py --------------------------------------------------------------------------------


@pytest.mark.parametrize("lang", ["python", "py", "python3", "Python", "PY", ""])
def test_extract_code_fence_languages(lang):
    code, problem = extract_code(f"Here:\n```{lang}\n{ADD_OK}```\n", "add")
    assert code == ADD_OK and problem == ""


def test_extract_code_fence_with_info_string_and_crlf():
    code, _ = extract_code(f"```python title=solution.py\r\n{ADD_OK}```", "add")
    assert code == ADD_OK
    code, _ = extract_code("```python\r\ndef add(a, b):\r\n    return a + b\r\n```", "add")
    assert code is not None and "return a + b" in code


def test_extract_code_last_python_block_wins():
    text = f"{fence(ADD_WRONG)}\ntext\n{fence(ADD_MOSTLY, 'py')}\nmore\n{fence(ADD_OK)}"
    assert extract_code(text, "add")[0] == ADD_OK


def test_extract_code_python_block_preferred_over_bare():
    assert extract_code(f"{fence(ADD_OK)}\n{fence(ADD_WRONG, '')}", "add")[0] == ADD_OK
    assert extract_code(f"{fence(ADD_WRONG, '')}\n{fence(ADD_OK, '')}", "add")[0] == ADD_OK


def test_extract_code_other_language_is_not_code():
    code, problem = extract_code(fence("function add(a, b) { return a + b }\n", "js"), "add")
    assert code is None and "no code found" in problem and "`add`" in problem


def test_extract_code_plain_text_code():
    assert extract_code(ADD_OK, "add") == (ADD_OK, "")
    code, problem = extract_code("The answer is to add a and b.", "add")
    assert code is None and "```python" in problem
    # plain text that parses but does not define the entry point is not code
    assert extract_code("x = 1\n", "add")[0] is None


def test_extract_code_empty_block():
    code, problem = extract_code("```python\n```", "add")
    assert code is None and "empty" in problem
    code, problem = extract_code("```python\n   \n\n```", "add")
    assert code is None and "empty" in problem


def test_extract_code_block_without_entry_point():
    code, problem = extract_code(fence("def plus(a, b):\n    return a + b\n"), "add")
    assert code is None and "does not define `add`" in problem
    nested = "if True:\n    def add(a, b):\n        return a + b\n"
    assert extract_code(fence(nested), "add")[0] is None  # only top-level definitions count


def test_extract_code_syntax_error_is_passed_on():
    # the verifier reports the load error; the parser does not judge syntax
    bad = "def add(a, b)\n    return a + b\n"
    assert extract_code(fence(bad), "add") == (bad, "")


@pytest.mark.parametrize(
    "code",
    [
        "add = lambda a, b: a + b\n",
        "add: object = sum\n",
        "from operator import add\n",
        "import operator as add\n",
        "class add:\n    pass\n",
        "async def add(a, b):\n    return a + b\n",
        "x = add = 3\n",
    ],
)
def test_defines_bindings(code):
    assert defines(code, "add") is True


def test_defines_unparsable_and_absent():
    assert defines("def (", "add") is None
    assert defines("def plus(): pass\n", "add") is False
    assert defines("add(1, 2)\n", "add") is False


def test_parse_action_single_turn_always_submits():
    p = parse_action(fence(ADD_OK), "add", multi_turn=False)
    assert p == ParsedAction(submit=True, code=ADD_OK, problem="", any_code=True)
    p = parse_action("nothing", "add", multi_turn=False)
    assert p.submit and p.code is None and p.problem


def test_parse_action_multi_run_and_submit():
    p = parse_action(fence(ADD_OK), "add", multi_turn=True)
    assert (p.submit, p.code) == (False, ADD_OK)
    for head in ("SUBMIT", "submit", "Submit", "  SUBMIT  ", "\n\n SUBMIT"):
        p = parse_action(f"{head}\n{fence(ADD_OK)}", "add", multi_turn=True)
        assert (p.submit, p.code) == (True, ADD_OK), head


def test_parse_action_submit_alone():
    for text in ("SUBMIT", "submit\n", "\n  SUBMIT\n\n"):
        p = parse_action(text, "add", multi_turn=True)
        assert p.submit and p.code is None


def test_parse_action_submit_must_be_first_line():
    p = parse_action(f"{fence(ADD_OK)}\nSUBMIT", "add", multi_turn=True)
    assert not p.submit and p.code == ADD_OK
    p = parse_action(f"SUBMITTED\n{fence(ADD_OK)}", "add", multi_turn=True)
    assert not p.submit
    p = parse_action(f"I will SUBMIT now\n{fence(ADD_OK)}", "add", multi_turn=True)
    assert not p.submit


def test_parse_action_submit_with_plain_code():
    p = parse_action("SUBMIT\n" + ADD_OK, "add", multi_turn=True)
    assert p.submit and p.code is not None and defines(p.code, "add")


def test_unclosed_fence_counts_as_code():
    p = parse_action("Here you go:\n```python\n" + ADD_OK, "add", multi_turn=False)
    assert p.code == ADD_OK


def test_multi_last_turn_without_code_submits_the_code_run_last(make):
    env = make(mode="multi", max_turns=2)
    env.reset(seed=0, options={"task_id": "add"})
    env.step(fence(ADD_OK))
    _, reward, terminated, _, info = env.step("I am done.")
    assert terminated and info["outcome"] == "passed" and reward == 1.0
