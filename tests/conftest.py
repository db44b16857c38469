"""Shared fixtures. Sandboxes here are real: bubblewrap, installed by scripts/setup.sh.

Tests that need a sandbox carry the `sandbox` marker: set here on every
test that uses a sandbox fixture (`runtime`, `bwrap_runtime`,
`k8s_cluster`, or one built on them) or is marked `docker`, `chromium`,
`k8s` or `ray`, and by hand (`@pytest.mark.sandbox`) on a test that makes its own.
`pytest --quick` (`scripts/test.sh --quick`) runs the rest, with
bubblewrap replaced on PATH by a tripwire: a test that starts a sandbox
without the marker fails, naming the marker it needs.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest

from sandgym.runtimes.local.runtime import LocalRuntime

# What makes a test need a sandbox, besides the `sandbox` marker itself
# (mixed_run: test_report.py's run of real episodes).
SANDBOX_FIXTURES = ("runtime", "bwrap_runtime", "k8s_cluster", "rt", "mixed_run")
SANDBOX_MARKERS = ("docker", "chromium", "k8s", "ray")
# Tests that start sandboxes of their own (through `sandgym` commands,
# `gym.make`, a served env, a runtime made in the test file), as
# "folder/file.py::test" or a whole "folder/file.py": found by the --quick
# tripwire. (`@pytest.mark.sandbox` in the test file does the same; this
# list keeps test files untouched while they move.)
SANDBOX_TESTS = {
    "core/test_faults.py",  # kills and resumes real evals
    "core/test_server.py",  # serves envs, whose sessions have sandboxes
    "core/test_mcp_tools.py",  # serves envs, played through openenv's MCP actions
    "runtimes/test_conformance.py",  # its own runtimes, one per backend
    "runtimes/test_conformance_security.py",
    "runtimes/test_conformance_stock.py",
    "runtimes/test_pool.py",  # pools of local sandboxes
    "code_function/test_env.py::test_make_with_module_prefix_in_fresh_process",
    "code_function/test_samples.py::test_canonical_solutions_give_pass_at_1_of_one",
    "code_function/test_samples.py::test_mixed_samples_match_human_evals_estimator",
    "code_function/test_security.py::test_the_judge_and_agent_are_out_of_the_candidates_reach",
    "code_function/test_verifier.py::test_infrastructure_errors_are_retried_and_kept",
    "core/test_adapters_trainers.py::test_example_scripts_run_and_print_the_rewards",
    "core/test_adapters_trainers.py::test_hf_export_loads_with_datasets",
    "core/test_chat_policy.py::test_cli_options_reach_the_requests_and_the_records",
    "core/test_chat_policy.py::test_ctrl_c_keeps_finished_records_and_resume_finishes",
    "core/test_cli.py::test_env_options_reach_the_env_and_bad_ones_are_named",
    "core/test_cli.py::test_eval_end_to_end_subprocess",
    "core/test_cli.py::test_eval_oracle_all_pass",
    "core/test_cli.py::test_eval_replay_in_order",
    "core/test_cli.py::test_eval_replay_that_stops_before_submitting",
    "core/test_cli.py::test_eval_task_id_filter",  # an oracle episode: one verification
    "core/test_cli.py::test_example_script_runs",
    "core/test_cli.py::test_import_humaneval_then_validate_and_list",
    "core/test_cli.py::test_report_and_leaderboard_commands",
    "core/test_cli.py::test_validate_plays_oracle_and_null_episodes_for_other_families",
    "core/test_cli.py::test_validate_reports_a_broken_reference",
    "core/test_env_resets.py::test_a_served_session_survives_a_failed_reset",
    "core/test_gym_habits.py::test_action_space_of_code_and_swe_holds_their_actions",
    "core/test_gym_habits.py::test_check_env_passes",
    "core/test_gym_habits.py::test_time_limit_on_code_verifies_the_last_turn",
    "core/test_gym_habits.py::test_time_limit_on_swe_submits_the_work",
    "core/test_gym_habits.py::test_vector_code_episodes",
    "core/test_gym_habits.py::test_vector_env_with_a_time_limit_scores_truncated_episodes",
    "core/test_gym_habits.py::test_vector_swe_episodes",
    "core/test_interop.py::test_epochs_play_each_task_n_times_and_report_pass_at_k",
    "core/test_interop.py::test_eval_by_name_limit_and_a_new_folder_per_run",
    "core/test_observability.py::test_capacity_from_a_real_run",
    "core/test_observability.py::test_one_trace_per_episode_in_memory",
    "core/test_observability.py::test_prometheus_scrapes_eval_and_counts_match_records",
    "core/test_observability.py::test_prometheus_scrapes_serve",
    "core/test_observability.py::test_traces_exported_over_otlp_http",
    "runtimes/test_local.py::test_a_forked_child_never_takes_its_parents_stock",
    "runtimes/test_local.py::test_a_stocked_sandbox_keeps_the_specs_lifetime",
    "runtimes/test_local.py::test_sandbox_dies_with_its_parent",
    "runtimes/test_local.py::test_the_stock_hands_each_sandbox_out_once_and_close_leaves_nothing",
    "swe_repo/test_audit.py",  # every audit searches a real sandbox
    "swe_repo/test_security_in_process.py::test_closing_the_records_channel",
    "swe_repo/test_security_in_process.py::test_exception_swallowed_between_the_test_and_the_report",
    "swe_repo/test_security_diffs.py::test_git_config_cannot_hide_a_conftest",
    "swe_repo/test_security_in_process.py::test_introspection_from_the_package_is_reported",
    "swe_repo/test_security_in_process.py::test_items_swapped_through_frames",
    "swe_repo/test_security_in_process.py::test_killing_the_runner_is_never_accepted",
    "swe_repo/test_security_in_process.py::test_nonce_stolen_answer_forged_runner_killed",
    "swe_repo/test_security_in_process.py::test_own_memory_is_out_of_bounds",
    "swe_repo/test_security_in_process.py::test_plugin_hook_called_with_a_forged_report",
    "swe_repo/test_security_in_process.py::test_plugin_silenced_and_records_forged_on_its_pipe",
    "swe_repo/test_security_runs.py::test_reading_the_runner_through_proc_is_refused",
    "swe_repo/test_security_in_process.py::test_reports_forced_to_pass_at_import",
    "swe_repo/test_security_in_process.py::test_runtest_made_a_no_op_at_import",
    "swe_repo/test_security_in_process.py::test_self_restoring_patch_installed_during_the_call",
    "swe_repo/test_security_in_process.py::test_sentinels_removed_by_an_import_hook",
    "swe_repo/test_security_in_process.py::test_test_code_recompiled_in_memory",
    "swe_repo/test_security_in_process.py::test_tests_rewritten_at_import_and_pytest_run_again",
    "swe_repo/test_security_in_process.py::test_tests_rewritten_before_they_are_compiled",
    "swe_repo/test_security_in_process.py::test_the_venv_cannot_be_written_from_the_tests",
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
    # Run as root, sandboxes drop to an unprivileged user before bwrap (here,
    # the shim) runs: that user must reach the shim and append to the log.
    tripwire.chmod(0o755)
    log.chmod(0o666)
    shim = tripwire / "bwrap"
    shim.write_text(
        '#!/bin/sh\necho "$PYTEST_CURRENT_TEST" >> "$SANDGYM_QUICK_TRIPWIRE"\n'
        'echo "bwrap: not in a --quick test run (the test needs the sandbox marker)" >&2\nexit 127\n'
    )
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    os.environ["PATH"] = f"{tripwire}{os.pathsep}{os.environ.get('PATH', '')}"
    os.environ[TRIPWIRE_LOG] = str(log)
    # `sandgym eval` starts the local zygote ahead of its first sandbox; a
    # quick test's run never gets to one (refused up front, or a null policy).
    os.environ["SANDGYM_WARM_UP"] = "0"


def pytest_unconfigure(config):
    """The tripwire's folder goes with the run that made it."""
    log = os.environ.get(TRIPWIRE_LOG)
    if config.getoption("--quick") and log:
        shutil.rmtree(Path(log).parent, ignore_errors=True)


def needs_sandbox(item: pytest.Item) -> bool:
    fixtures = getattr(item, "fixturenames", ())
    name = getattr(item, "originalname", item.name)
    file = f"{item.path.parent.name}/{item.path.name}"
    listed = {file, f"{file}::{name}"} & SANDBOX_TESTS
    return (
        bool(listed)
        or any(f in fixtures for f in SANDBOX_FIXTURES)
        or any(item.get_closest_marker(m) for m in ("sandbox", *SANDBOX_MARKERS))
    )


def needs_k8s(item: pytest.Item) -> bool:
    return item.get_closest_marker("k8s") is not None or "k8s_cluster" in getattr(item, "fixturenames", ())


# Last, after pytest's own ordering (which groups a module's parametrized
# fixtures): the k8s tests are moved to the end (see `k8s_cluster`).
@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    items.sort(key=needs_k8s)  # stable: every other order kept
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


# The test item being set up: the one `k8s_cluster` checks.
_SETTING_UP: dict[str, pytest.Item] = {}


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    _SETTING_UP["item"] = item


@pytest.fixture(scope="session")
def k8s_cluster():
    """The real single-node test cluster (scripts/k8s-cluster.sh), started
    for the tests that need it and stopped after them if they started it.

    The k8s tests run last (`pytest_collection_modifyitems`): scripts/test.sh
    builds the cluster's binaries in the background while the others run
    (a cold build takes 8 to 70 minutes), and `up` waits for that build. A test
    that reaches the cluster without the `k8s` marker (through
    `request.getfixturevalue`) would start it early: it fails, naming the fix."""
    import subprocess

    item = _SETTING_UP.get("item")
    if item is not None and not needs_k8s(item):
        pytest.fail(
            f"{item.nodeid} uses the test cluster but is not marked k8s: mark it "
            "(pytest.mark.k8s, or pytest.param(..., marks=pytest.mark.k8s)) so that it runs with the k8s tests, last"
        )
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
