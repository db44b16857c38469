"""Stdio tasks of the code family (kind: stdio, CodeContests / APPS style):
the spec rules, reading a program and its language out of an action, and
real verification in sandboxes of the `polyglot` image: the bundled tasks'
reference solutions pass in every language they are written in (a sample;
the whole set with SANDGYM_SLOW=1), a
wrong answer fails, a program out of time is a timeout (never a wrong
answer), a compile error fails; the env and the trainer reward judge the
same way."""

from __future__ import annotations

import os

import pytest
from pydantic import ValidationError

from sandgym.envs.code_function.actions import extract_program, parse_action
from sandgym.envs.code_function.env import CodeFunctionEnv
from sandgym.envs.code_function.trainer import judge
from sandgym.outcomes import Outcome
from sandgym.specs import TaskSet
from sandgym.specs.code_function import CodeHidden, CodeTask, CodeTaskPair, same_output
from sandgym.verifiers.code_function.host import validate_task
from sandgym.verifiers.code_function.stdio import verify_stdio

SET = "code_function/stdio-v1"


@pytest.fixture(scope="module")
def tasks() -> TaskSet:
    return TaskSet.load(SET)


def task(tasks: TaskSet, name: str, **visible) -> CodeTaskPair:
    pair = CodeTaskPair.of(tasks.get(f"stdio/{name}"))
    if visible:
        pair = CodeTaskPair(visible=pair.visible.model_copy(update=visible), hidden=pair.hidden)
    return pair


# -- no sandbox ----------------------------------------------------------------


def test_the_bundled_set_has_reference_solutions_in_four_languages(tasks):
    assert len(tasks) >= 20
    for t in tasks.tasks:
        pair = CodeTaskPair.of(t)
        assert pair.visible.kind == "stdio" and pair.visible.io_examples and len(pair.hidden.io_tests) >= 3
        assert {"cpp", "nodejs", "go"} <= set(pair.hidden.reference_solutions), pair.id


def test_stdio_specs_are_checked():
    with pytest.raises(ValidationError, match="whole program"):
        CodeTask(id="x/y", kind="stdio", prompt="p", entry_point="f")
    with pytest.raises(ValidationError, match="io_examples"):
        CodeTask(id="x/y", kind="stdio", prompt="p", examples=[{"args": [1], "expected": 1}])
    with pytest.raises(ValidationError, match="stdio"):
        CodeTask(id="x/y", prompt="p", entry_point="f", io_examples=[{"stdin": "1", "stdout": "1"}])
    with pytest.raises(ValidationError, match="io_tests"):
        CodeHidden(id="x/y", reference_solution="print(1)")
    visible = CodeTask(id="x/y", kind="stdio", prompt="p")
    with pytest.raises(ValidationError, match="io_tests alone"):
        CodeTaskPair(
            visible=visible,
            hidden=CodeHidden(id="x/y", reference_solution="x", tests=[{"args": [], "expected": 1}]),
        )


def test_function_tasks_dump_as_before():
    """The fields stdio tasks added are left out of a function task's dump
    at their defaults: function-task sets keep their content hash."""
    t = CodeTask(id="x/y", prompt="p", entry_point="f")
    h = CodeHidden(id="x/y", reference_solution="def f(): pass", tests=[{"args": [], "expected": 1}])
    assert not {"kind", "io_examples"} & set(t.model_dump(mode="json"))
    assert not {"io_tests", "reference_solutions"} & set(h.model_dump(mode="json"))
    assert CodeTask(id="x/y", kind="stdio", prompt="p").model_dump(mode="json")["kind"] == "stdio"


@pytest.mark.parametrize(
    "text, language",
    [
        ("```cpp\nint main() {}\n```", "cpp"),
        ("first\n```python\nprint(1)\n```\nthen\n```go\npackage main\nfunc main() {}\n```", "go"),
        ("```js\nconsole.log(1)\n```", "nodejs"),
        ("```\nprint(1)\n```", "python"),
        ("```c++\nint main() {}\n```", "cpp"),
    ],
)
def test_the_last_tagged_block_and_its_language_are_the_program(text, language):
    code, lang, problem = extract_program(text)
    assert (lang, problem) == (language, "") and code


def test_an_unknown_tag_is_named_in_the_problem():
    code, _, problem = extract_program("```cobol\nDISPLAY 'HI'.\n```")
    assert code is None and "cobol" in problem
    parsed = parse_action("SUBMIT\n```rust\nfn main() {}\n```", "", multi_turn=True, stdio=True)
    assert parsed.submit and parsed.language == "rust"


def test_outputs_compare_up_to_trailing_whitespace():
    assert same_output("1 2  \n3\n\n", "1 2\n3")
    assert not same_output("1 2\n3\n", "1  2\n3\n")
    assert not same_output("1\n", "1\n2\n")


# -- real sandboxes ------------------------------------------------------------------


@pytest.mark.sandbox
def test_every_reference_solution_passes_and_an_empty_program_does_not(tasks, runtime):
    # Every fourth task in CI (CI time; each task's references span every language of the set);
    # the whole set with SANDGYM_SLOW=1.
    whole = os.environ.get("SANDGYM_SLOW") == "1"
    for t in tasks.tasks if whole else tasks.tasks[::4]:
        assert validate_task(CodeTaskPair.of(t), runtime) == [], t.id


@pytest.mark.docker
@pytest.mark.parametrize("backend", ["docker", "docker:runsc"])
def test_stdio_programs_are_judged_alike_on_runc_and_gvisor(tasks, backend):
    """A few tasks' references in every language they are written in, an
    empty program, and a program out of time."""
    from sandgym.runtimes import get_runtime

    rt = get_runtime(backend)
    try:
        for name in ("power-mod", "roman-numerals"):
            assert validate_task(CodeTaskPair.of(tasks.get(f"stdio/{name}")), rt) == [], (backend, name)
        v = verify_stdio(task(tasks, "count-primes", timeout_s=1.0), "while True:\n    pass\n", "python", rt)
        assert v.outcome == Outcome.TIMEOUT, (backend, v)
    finally:
        rt.close()


@pytest.mark.sandbox
def test_a_wrong_answer_fails_without_showing_the_hidden_output(tasks, runtime):
    pair = task(tasks, "sum-list")
    v = verify_stdio(pair, "print(42)\n", "python", runtime)
    assert v.outcome == Outcome.FAILED
    assert all(t.status == "failed" and t.detail == "wrong answer" for t in v.tests), v.tests
    # Right on some cases, wrong on others: a failure, with the passing cases kept.
    partly = "import sys\nd = sys.stdin.read().split()\nprint(sum(map(int, d[1:])) if int(d[0]) < 10 else 0)\n"
    v = verify_stdio(pair, partly, "python", runtime)
    assert v.outcome == Outcome.FAILED and 0 < v.pass_rate < 1, v.tests


@pytest.mark.sandbox
@pytest.mark.parametrize(
    "language, code",
    [
        ("python", "while True:\n    pass\n"),
        ("cpp", "int main() { volatile long x = 0; for (;;) x++; }\n"),
    ],
)
def test_a_program_out_of_time_is_a_timeout_not_a_wrong_answer(tasks, runtime, language, code):
    v = verify_stdio(task(tasks, "count-primes", timeout_s=1.0), code, language, runtime)
    assert v.outcome == Outcome.TIMEOUT, v
    assert {t.status for t in v.tests} == {"timeout"}


@pytest.mark.sandbox
def test_a_slow_but_right_program_is_a_timeout(tasks, runtime):
    """Right on the small cases, out of time on the large ones: a timeout."""
    slow = (
        "n = int(input())\nprint(sum(1 for k in range(2, n + 1) if all(k % d for d in range(2, int(k ** 0.5) + 1))))\n"
    )
    v = verify_stdio(task(tasks, "count-primes", timeout_s=1.0), slow, "python", runtime)
    assert v.outcome == Outcome.TIMEOUT, v.tests
    statuses = {t.status for t in v.tests}
    assert statuses == {"passed", "timeout"}, v.tests


@pytest.mark.sandbox
def test_compile_and_runtime_errors_fail(tasks, runtime):
    pair = task(tasks, "sum-list")
    v = verify_stdio(pair, "int main() { return undefined_name; }\n", "cpp", runtime)
    assert v.outcome == Outcome.FAILED and "compile error" in v.detail
    assert {t.status for t in v.tests} == {"error"}
    v = verify_stdio(pair, 'package main\n\nfunc main() {\n\tpanic("boom")\n}\n', "go", runtime)
    assert v.outcome == Outcome.FAILED and all("exit 2" in t.detail for t in v.tests), v.tests


@pytest.mark.sandbox
def test_the_env_judges_stdio_programs_in_any_language(tasks, runtime):
    env = CodeFunctionEnv(tasks=SET, runtime=runtime)
    try:
        obs, _ = env.reset(options={"task_id": "stdio/gcd-lcm"})
        assert "```cpp" in obs["task"] and "Example 1 input" in obs["task"]
        _, reward, done, _, info = env.step(env.oracle_actions()[0])
        assert done and reward == 1.0 and info["outcome"] == "passed", info
        pair = CodeTaskPair.of(tasks.get("stdio/gcd-lcm"))
        env.reset(options={"task_id": "stdio/gcd-lcm"})
        _, reward, _, _, info = env.step(f"Here it is:\n```cpp\n{pair.reference('cpp')}```\n")
        assert reward == 1.0 and env.submitted_language == "cpp", info
        env.reset(options={"task_id": "stdio/gcd-lcm"})
        _, reward, _, _, info = env.step(env.null_actions()[0])
        assert reward == 0.0 and info["outcome"] == "failed"
    finally:
        env.close()


@pytest.mark.sandbox
def test_multi_turn_runs_show_the_visible_examples(tasks, runtime):
    env = CodeFunctionEnv(tasks=SET, runtime=runtime, mode="multi", max_turns=3)
    try:
        env.reset(options={"task_id": "stdio/reverse-words"})
        obs, reward, done, _, _ = env.step("```nodejs\nconsole.log('nope');\n```")
        assert not done and "FAILED: example 1 -> wrong answer: line 1" in obs["feedback"], obs["feedback"]
        pair = CodeTaskPair.of(tasks.get("stdio/reverse-words"))
        obs, _, done, _, _ = env.step(f"```go\n{pair.reference('go')}```")
        assert not done and "PASSED: example 1" in obs["feedback"], obs["feedback"]
        _, reward, done, _, info = env.step("SUBMIT")  # the code run last, in its language
        assert done and reward == 1.0, info
    finally:
        env.close()


@pytest.mark.sandbox
def test_the_trainer_reward_judges_stdio_completions(tasks, runtime):
    pair = CodeTaskPair.of(tasks.get("stdio/run-length"))
    good = judge(pair, f"```js\n{pair.reference('nodejs')}```", runtime, retries=0)
    assert good.outcome == Outcome.PASSED
    assert judge(pair, "no code here", runtime, retries=0).outcome == Outcome.FAILED
