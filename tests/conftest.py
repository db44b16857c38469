"""Shared fixtures. Sandboxes here are real: bubblewrap, installed by scripts/setup.sh.

Tests that need a sandbox carry the `sandbox` marker: set here on every
test that uses a sandbox fixture (`runtime`, `bwrap_runtime`,
`k8s_cluster`, or one built on them) or is marked `docker`, `chromium` or
`k8s`, and by hand (`@pytest.mark.sandbox`) on a test that makes its own.
`pytest --quick` (`scripts/test.sh --quick`) runs the rest, with
bubblewrap replaced on PATH by a tripwire: a test that starts a sandbox
without the marker fails, naming the marker it needs.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest

from sandgym.runtimes.local import LocalRuntime

# What makes a test need a sandbox, besides the `sandbox` marker itself.
SANDBOX_FIXTURES = ("runtime", "bwrap_runtime", "k8s_cluster")
SANDBOX_MARKERS = ("docker", "chromium", "k8s")
# Tests that start sandboxes of their own (through `sandgym` commands,
# `gym.make`, a served env), as "file name::test name" or a whole file
# name: found by the --quick tripwire. (A `@pytest.mark.sandbox` in the
# test file does the same; this list keeps test files untouched.)
SANDBOX_TESTS = {
    "test_env.py::test_make_with_module_prefix_in_fresh_process",
    "test_samples.py::test_canonical_solutions_give_pass_at_1_of_one",
    "test_samples.py::test_mixed_samples_match_human_evals_estimator",
    "test_security.py::test_the_judge_and_agent_are_out_of_the_candidates_reach",
    "test_verifier.py::test_infrastructure_errors_are_retried_and_kept",
    "test_adapters_trainers.py::test_example_scripts_run_and_print_the_rewards",
    "test_adapters_trainers.py::test_hf_export_loads_with_datasets",
    "test_chat_policy.py::test_cli_options_reach_the_requests_and_the_records",
    "test_chat_policy.py::test_ctrl_c_keeps_finished_records_and_resume_finishes",
    "test_cli.py::test_env_options_reach_the_env_and_bad_ones_are_named",
    "test_cli.py::test_eval_end_to_end_subprocess",
    "test_cli.py::test_eval_oracle_all_pass",
    "test_cli.py::test_eval_replay_in_order",
    "test_cli.py::test_eval_replay_that_stops_before_submitting",
    "test_cli.py::test_example_script_runs",
    "test_cli.py::test_import_humaneval_then_validate_and_list",
    "test_cli.py::test_report_and_leaderboard_commands",
    "test_cli.py::test_validate_plays_oracle_and_null_episodes_for_other_families",
    "test_cli.py::test_validate_reports_a_broken_reference",
    "test_env_resets.py::test_a_served_session_survives_a_failed_reset",
    "test_faults.py",  # kills and resumes real evals
}
# In --quick runs: the file the tripwire appends the running test's id to.
TRIPWIRE_LOG = "SANDGYM_QUICK_TRIPWIRE"


def pytest_addoption(parser):
    parser.addoption(
        "--quick",
        action="store_true",
        help="run only the tests that need no sandbox (no bubblewrap, Docker, Chromium or Kubernetes)",
    )


def pytest_configure(config):
    if not config.getoption("--quick"):
        return
    # bubblewrap is found on PATH (shutil.which), by this process and by the
    # sandgym commands tests start: put a tripwire first on PATH.
    tripwire = Path(tempfile.mkdtemp(prefix="sandgym-quick-"))
    log = tripwire / "started.log"
    log.touch()
    shim = tripwire / "bwrap"
    shim.write_text(
        '#!/bin/sh\necho "$PYTEST_CURRENT_TEST" >> "$SANDGYM_QUICK_TRIPWIRE"\n'
        'echo "bwrap: not in a --quick test run (the test needs the sandbox marker)" >&2\nexit 127\n'
    )
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    os.environ["PATH"] = f"{tripwire}{os.pathsep}{os.environ.get('PATH', '')}"
    os.environ[TRIPWIRE_LOG] = str(log)


def needs_sandbox(item: pytest.Item) -> bool:
    fixtures = getattr(item, "fixturenames", ())
    name = getattr(item, "originalname", item.name)
    listed = {item.path.name, f"{item.path.name}::{name}"} & SANDBOX_TESTS
    return (
        bool(listed)
        or any(f in fixtures for f in SANDBOX_FIXTURES)
        or any(item.get_closest_marker(m) for m in ("sandbox", *SANDBOX_MARKERS))
    )


def pytest_collection_modifyitems(config, items):
    for item in items:
        if needs_sandbox(item) and not item.get_closest_marker("sandbox"):
            item.add_marker(pytest.mark.sandbox)
    if config.getoption("--quick"):
        quick = [i for i in items if not i.get_closest_marker("sandbox")]
        config.hook.pytest_deselected(items=[i for i in items if i.get_closest_marker("sandbox")])
        items[:] = quick
    # Soak tests run in full only when asked; CI runs a bounded sample.
    if os.environ.get("SANDGYM_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow soak test: set SANDGYM_SLOW=1")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    log = os.environ.get(TRIPWIRE_LOG)
    if not log or call.when != "teardown":
        return
    started = [line for line in Path(log).read_text().splitlines() if line.startswith(item.nodeid + " ")]
    if started:
        report = outcome.get_result()
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} started a sandbox (bubblewrap) in a --quick run: "
            "mark it @pytest.mark.sandbox or give it the `runtime` fixture"
        )


@pytest.fixture(scope="session")
def runtime():
    rt = LocalRuntime()
    yield rt
    rt.close()


@pytest.fixture(scope="session")
def bwrap_runtime():
    """A runtime that starts one bubblewrap process per sandbox (no zygote)."""
    rt = LocalRuntime(zygote=False)
    yield rt
    rt.close()


K8S_SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "k8s-cluster.sh")


@pytest.fixture(scope="session")
def k8s_cluster():
    """The real single-node test cluster (scripts/k8s-cluster.sh), started
    for the tests that need it and stopped after them if they started it."""
    import subprocess

    status = subprocess.run(["bash", K8S_SCRIPT, "status"], capture_output=True, text=True)
    started = "kube-apiserver: running" not in status.stdout
    if started:
        up = subprocess.run(["bash", K8S_SCRIPT, "up"], capture_output=True, text=True)
        assert up.returncode == 0, f"scripts/k8s-cluster.sh up failed:\n{up.stdout[-3000:]}\n{up.stderr[-3000:]}"
    # The script says where its kubeconfig is and which node pods name.
    env_line = subprocess.run(["bash", K8S_SCRIPT, "env"], capture_output=True, text=True, check=True).stdout
    wanted = dict(item.split("=", 1) for item in env_line.split()[1:])
    saved = {k: os.environ.get(k) for k in wanted}
    os.environ.update(wanted)
    kubeconfig = wanted["KUBECONFIG"]
    yield kubeconfig
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    if started:
        subprocess.run(["bash", K8S_SCRIPT, "down"], capture_output=True, text=True)
