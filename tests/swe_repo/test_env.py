"""sandgym/SWERepo-v0 with real sandboxes: tools, grammar, oracle and null, cleanup."""

from __future__ import annotations

import os
import signal

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import sandgym  # noqa: F401  (registers the envs)
from sandgym.envs.swe_repo.actions import ActionError, parse_action
from sandgym.envs.swe_repo.env import SWERepoEnv
from sandgym.runtimes import SandboxSpec
from sandgym.verifiers.swe_repo.sandbox import IMAGE
from tests.helpers import unwrapped

TASK = "billing/tax-on-gross"


def descendants() -> set[int]:
    found, frontier = set(), [os.getpid()]
    while frontier:
        pid = frontier.pop()
        try:
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as f:
                    kids = [int(c) for c in f.read().split()]
                found.update(kids)
                frontier.extend(kids)
        except OSError:
            pass
    return found


@pytest.fixture
def env(runtime):
    e = SWERepoEnv(runtime=runtime, max_steps=12, command_timeout_s=10)
    e.reset(options={"task_id": TASK})
    yield e
    e.close()


def feedback(env, action) -> str:
    obs, reward, terminated, truncated, info = env.step(action)
    assert not terminated
    return obs["feedback"]


# -- the action grammar (no sandbox) ----------------------------------------------------------


@pytest.mark.parametrize(
    "text, tool, args",
    [
        ("Let me look.\n```bash\nls -la\n```\n", "bash", {"command": "ls -la"}),
        ("```\necho hi\n```", "bash", {"command": "echo hi"}),
        ("```view billing/money.py 3 9\n```", "view", {"path": "billing/money.py", "start": 3, "end": 9}),
        ("```view billing/money.py 3:9\n```", "view", {"path": "billing/money.py", "start": 3, "end": 9}),
        ("```view billing\n```", "view", {"path": "billing", "start": None, "end": None}),
        (
            "```str_replace a.py\n<<<<<<< OLD\nx = 1\n=======\nx = 2\n>>>>>>> NEW\n```",
            "str_replace",
            {"path": "a.py", "old": "x = 1", "new": "x = 2"},
        ),
        (
            "````create doc.md\n# t\n```py\nx\n```\n````",
            "create",
            {"path": "doc.md", "content": "# t\n```py\nx\n```\n"},
        ),
        ("```run_tests tests/test_tax.py\n```", "run_tests", {"tests": ["tests/test_tax.py"]}),
        ("```submit\n```", "submit", {}),
        ("```bash\nsleep 1; echo cut off", "bash", {"command": "sleep 1; echo cut off"}),
    ],
)
def test_text_grammar(text, tool, args):
    call = parse_action(text)
    assert (call.tool, call.args) == (tool, args)


@pytest.mark.parametrize(
    "action, message",
    [
        ("just words", "no fenced block"),
        ("```bash\nls\n```\n```bash\npwd\n```", "exactly one"),
        ("```python\nprint(1)\n```", "is not a tool"),
        ("```str_replace a.py\nonly old text\n```", "exactly one line ======="),
        ("```view\n```", "needs a path"),
        ({"tool": "rm"}, "field `tool`"),
        ({"tool": "bash"}, "needs field(s) ['command']"),
        ({"tool": "view", "path": "a", "colour": 1}, "unknown field(s) ['colour']"),
        ({"tool": "view", "path": "a", "start": "1"}, "line number"),
        (42, "text or a dict"),
    ],
)
def test_bad_actions_are_named(action, message):
    with pytest.raises(ActionError, match=None) as err:
        parse_action(action)
    assert message in str(err.value)


# -- tools in a real sandbox ---------------------------------------------------------------------


def test_bash_keeps_cwd_and_exports(env):
    feedback(env, {"tool": "bash", "command": "cd billing && export GREETING=hello && X=local"})
    out = feedback(env, {"tool": "bash", "command": "pwd; echo $GREETING; echo ${X:-unset}"})
    assert out.startswith("/workspace/repo/billing\nhello\nunset")
    out = feedback(env, {"tool": "bash", "command": "cd /tmp; exit 3"})
    assert "[exit code 3]" in out
    assert feedback(env, {"tool": "bash", "command": "pwd"}).startswith("/tmp")


def test_bash_timeout_and_python_on_path(env):
    out = feedback(env, {"tool": "bash", "command": "sleep 30"})
    assert "timed out after 10 s" in out
    out = feedback(env, {"tool": "bash", "command": "python -c 'import pytest, billing; print(pytest.__version__)'"})
    assert out.startswith("8.3.4"), out


def test_view_ranges_and_listing(env):
    out = feedback(env, "```view billing/tax.py 3 4\n```")
    assert "(lines 3-4 of" in out and "3\tfrom __future__ import annotations" in out
    assert "billing/money.py" in feedback(env, {"tool": "view", "path": "."})
    assert "outside the file" in feedback(env, {"tool": "view", "path": "billing/tax.py", "start": 999})
    assert "no such file" in feedback(env, {"tool": "view", "path": "nope.py"})


def test_str_replace_errors_and_success(env):
    out = feedback(env, {"tool": "str_replace", "path": "billing/invoice.py", "old": "no such text", "new": "x"})
    assert out.startswith("Error: no match")
    out = feedback(
        env,
        {"tool": "str_replace", "path": "billing/invoice.py", "old": "total = Money.zero(self.currency)", "new": "x"},
    )
    assert out.startswith("Error: `old` occurs 3 times") and "lines" in out
    out = feedback(
        env,
        {
            "tool": "str_replace",
            "path": "billing/invoice.py",
            "old": "line.gross(self.currency) * rate",
            "new": "line.net(self.currency) * rate",
        },
    )
    assert "edited" in out and "line.net(self.currency) * rate" in out


def test_create_and_run_tests(env):
    assert "created" in feedback(env, "```create notes/plan.txt\nstep one\n```")
    assert feedback(env, {"tool": "bash", "command": "cat notes/plan.txt"}).startswith("step one")
    out = feedback(env, "```run_tests\n```")
    assert "failed" in out and "tests/test_invoice.py::test_tax_is_charged_on_discounted_amount" in out
    out = feedback(env, "```run_tests tests/test_tax.py\n```")
    assert out.startswith("run_tests: 3 passed")


def test_bad_input_costs_a_step_and_says_why(env):
    obs, reward, terminated, truncated, info = env.step("no block here")
    assert info["tool"] == "invalid" and "no fenced block" in obs["feedback"] and not terminated
    obs, *_ = env.step({"tool": "view"})
    assert "needs field(s) ['path']" in obs["feedback"]


# -- whole episodes ------------------------------------------------------------------------------


def test_oracle_scores_full_and_null_scores_no(runtime):
    env = gym.make("sandgym/SWERepo-v0", runtime=runtime)
    try:
        for task_id in unwrapped(env).task_set.ids:
            env.reset(options={"task_id": task_id})
            for action in unwrapped(env).oracle_actions():
                obs, reward, terminated, truncated, info = env.step(action)
            assert terminated and reward == 1.0 and info["status"] == "FULL", (task_id, obs["feedback"])
            assert unwrapped(env).artifact and unwrapped(env).timings["verify_s"] > 0
        env.reset(options={"task_id": TASK})
        for action in unwrapped(env).null_actions():
            obs, reward, terminated, truncated, info = env.step(action)
        assert (reward, info["status"], info["outcome"]) == (0.0, "NO", "failed")
        assert unwrapped(env).artifact == ""
    finally:
        env.close()


def test_a_test_edit_in_the_episode_is_a_violation(runtime):
    env = SWERepoEnv(runtime=runtime)
    try:
        env.reset(options={"task_id": TASK})
        env.step({"tool": "bash", "command": "sed -i 's/17.10/19.00/' tests/test_invoice.py"})
        obs, reward, terminated, truncated, info = env.step({"tool": "submit"})
        assert reward == 0.0 and info["outcome"] == "violation"
        assert any("tests/test_invoice.py" in v for v in info["violations"])
    finally:
        env.close()


def test_steps_running_out_submits(runtime):
    env = SWERepoEnv(runtime=runtime, max_steps=2)
    try:
        env.reset(options={"task_id": TASK})
        _, _, terminated, _, _ = env.step({"tool": "bash", "command": "true"})
        assert not terminated
        obs, reward, terminated, truncated, info = env.step({"tool": "bash", "command": "true"})
        assert terminated and info["status"] == "NO" and "steps are used up" in obs["feedback"]
        with pytest.raises(RuntimeError, match="reset"):
            env.step({"tool": "submit"})
    finally:
        env.close()


def test_a_sandbox_lost_before_the_submit_is_env_error(bwrap_runtime):
    # The agent's sandbox dies between its last edit and the submit: the diff
    # cannot be taken, which is the infrastructure's failure, not an empty answer.
    env = SWERepoEnv(runtime=bwrap_runtime, max_steps=5, command_timeout_s=10, warm_pool=0)
    try:
        env.reset(options={"task_id": TASK})
        feedback(env, {"tool": "bash", "command": "echo '# edited' >> billing/money.py"})
        sandbox_uid = 65534 if os.geteuid() == 0 else os.geteuid()
        killed = 0
        for pid in descendants():
            try:
                if os.stat(f"/proc/{pid}").st_uid == sandbox_uid:
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
            except OSError:
                pass
        assert killed
        obs, reward, terminated, truncated, info = env.step({"tool": "submit"})
        assert terminated and reward == 0.0
        assert info["outcome"] == "env_error" and info["reward_valid"] is False, info
    finally:
        env.close()


def test_check_env_and_no_leaked_sandboxes(runtime):
    runtime.create(SandboxSpec(image=IMAGE)).close()  # the SWE image's zygote is up before the baseline
    before = descendants()
    env = gym.make("sandgym/SWERepo-v0", runtime=runtime, max_steps=3)
    check_env(env.unwrapped, skip_render_check=True)
    env.reset(seed=1)
    env.step({"tool": "bash", "command": "sleep 60 & echo started"})
    env.close()
    assert descendants() - before == set()


def test_warm_pool_reuses_only_a_verified_clean_sandbox(runtime):
    env = SWERepoEnv(runtime=runtime, max_steps=5, command_timeout_s=10, warm_pool=1)
    try:
        env.reset(options={"task_id": TASK})
        first = env._sandbox
        env.step(
            {
                "tool": "bash",
                "command": "export LEFT=over; echo junk > stray.txt; echo t > /tmp/t; echo s > /dev/shm/s; sleep 300 &",
            }
        )
        env.step({"tool": "submit"})
        env.reset(options={"task_id": TASK})
        assert env._sandbox is first  # the same sandbox, handed back after its reset
        out = feedback(
            env,
            {
                "tool": "bash",
                "command": 'echo "[$LEFT]"; git status --short; ls /tmp /dev/shm; '
                "cat /proc/[0-9]*/cmdline | tr '\\0' ' '",
            },
        )
        assert out.splitlines()[0] == "[]"  # no exports, no stray file, nothing in /tmp or /dev/shm
        assert "stray.txt" not in out and "sleep 300" not in out
        pool = next(iter(env._pools.values()))
        assert pool.metrics()["reused"] >= 1
    finally:
        env.close()
