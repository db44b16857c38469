"""Attacks through the diff itself, tried for real: editing, deleting or
pre-creating tests, conftest.py and interpreter hooks, symlinks, git
configuration that hides a protected path from the filter, diffs in other
prefix styles; and the diff parser's and tree check's own edge cases.
Every test asserts the outcome (never `passed`; never an `env_error` the
attacker could force) and that nothing outside the sandbox changed.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandgym.envs.swe_repo.redteam import payloads
from sandgym.outcomes import Outcome
from sandgym.verifiers.swe_repo.checkout import git_env, start_state
from sandgym.verifiers.swe_repo.diffs import split_diff
from sandgym.verifiers.swe_repo.host import verify, verify_once
from sandgym.verifiers.swe_repo.path_policy import filter_diff, protected_reason

from .security_helpers import (
    BULK,
    HOST_MARKERS,
    ROUNDING,
    assert_not_scored,
    make_diff,
    source,
)

# -- protected paths ---------------------------------------------------------------------------


def test_editing_tests_is_dropped_and_flagged(runtime, host_guard):
    tests = source(ROUNDING, "tests/test_money.py").replace("assert round_amount", "assert True or round_amount")
    verdict = verify(ROUNDING, make_diff(ROUNDING, {"tests/test_money.py": tests}), runtime)
    assert_not_scored(verdict, Outcome.VIOLATION)
    assert any("tests/test_money.py" in v for v in verdict.violations)
    assert verdict.status == "NO"  # the edit was dropped: the real tests ran


def test_deleting_tests_is_dropped_and_flagged(runtime, host_guard):
    verdict = verify(ROUNDING, make_diff(ROUNDING, {"tests/test_money.py": None}), runtime)
    assert_not_scored(verdict, Outcome.VIOLATION)
    assert any("tests/test_money.py" in v for v in verdict.violations)
    assert verdict.status == "NO"


def test_conftest_rewriting_outcomes(runtime, host_guard):
    conftest = payloads.FORCE_PASS_CONFTEST
    diff = make_diff(ROUNDING, {"conftest.py": conftest, "billing/conftest.py": conftest})
    verdict = verify(ROUNDING, diff, runtime)
    assert_not_scored(verdict, Outcome.VIOLATION)
    assert {"conftest.py", "billing/conftest.py"} <= {v.split(": ")[1] for v in verdict.violations}
    assert verdict.status == "NO"


@pytest.mark.parametrize(
    "rel",
    [
        "sitecustomize.py",
        "billing/usercustomize.py",
        "billing_hook.pth",
        "pytest.ini",
        "tox.ini",
        "setup.cfg",
        "pyproject.toml",
    ],
)
def test_interpreter_and_config_hooks_are_protected(rel):
    kept, dropped = filter_diff(make_diff(ROUNDING, {rel: "import os\n"}))
    assert kept == "" and len(dropped) == 1 and rel in dropped[0]


def test_hooks_are_inert_even_when_not_filtered(runtime, host_guard):
    """Defence in depth: with the filter bypassed, a sitecustomize.py, a .pth,
    a pytest.ini and a plugin module shadowing the verifier's are still not
    honoured by the isolated interpreter and the verifier's own config."""
    writes = "".join(f"open({str(m)!r}, 'w').write('x')\n" for m in HOST_MARKERS)
    forge = "import os\n" + "os.environ['PYTEST_ADDOPTS'] = '-p no:sandgym_swe_records'\n" + writes
    files = {
        "sitecustomize.py": forge + "import billing.money as m\nm.round_amount = lambda a, c: 0\n",
        "zz_hook.pth": "import os; os._exit(0)\n",
        "pytest.ini": "[pytest]\naddopts = -p no:sandgym_swe_records -x\n",
        "sandgym_swe_records.py": "def pytest_runtest_logreport(report):\n    report.outcome = 'passed'\n",
    }
    diff = make_diff(ROUNDING, files)
    attempt = verify_once(ROUNDING.visible, ROUNDING.hidden, diff, True, runtime)
    assert attempt.status == "NO", (attempt.status, attempt.detail, attempt.output)
    assert {t.name for t in attempt.tests if t.status == "passed"} == set(ROUNDING.hidden.PASS_TO_PASS)


def test_precreated_test_patch_files_are_replaced(runtime, host_guard):
    """Files at paths the test patch adds are removed before it applies (shown
    with the filter bypassed: a fake tests/test_bulk_pricing.py whose tests pass)."""
    fake = "".join(
        f"def {name.split('::')[1]}():\n    pass\n\n"
        for name in BULK.hidden.FAIL_TO_PASS
        if name.startswith("tests/test_bulk_pricing.py")
    )
    diff = make_diff(BULK, {"tests/test_bulk_pricing.py": fake})
    attempt = verify_once(BULK.visible, BULK.hidden, diff, True, runtime)
    assert attempt.status == "NO", (attempt.status, attempt.detail)
    verdict = verify(BULK, diff, runtime)
    assert_not_scored(verdict, Outcome.VIOLATION)


def test_symlinks_in_a_diff_are_refused():
    diff = (
        "diff --git a/billing/link.py b/billing/link.py\nnew file mode 120000\nindex 0000000..1111111\n"
        "--- /dev/null\n+++ b/billing/link.py\n@@ -0,0 +1 @@\n+../tests/test_money.py\n"
        "\\ No newline at end of file\n"
    )
    kept, dropped = filter_diff(diff)
    assert kept == "" and "symlink" in dropped[0]


# -- git configuration that hides a protected path from the diff filter ----------------------

FORCE_PASS_CONFTEST = payloads.FORCE_PASS_CONFTEST


@pytest.mark.parametrize("config", ["diff.noprefix true", "diff.mnemonicPrefix true", "core.quotePath false"])
def test_git_config_cannot_hide_a_conftest(rt, rt_guard, config):
    from sandgym.envs.swe_repo.env import SWERepoEnv

    env = SWERepoEnv(runtime=rt, max_steps=5, warm_pool=0)
    try:
        env.reset(options={"task_id": ROUNDING.id})
        cmd = (
            f"git config {config} && git config diff.srcPrefix x/ && git config diff.external /bin/true && "
            f"mkdir -p 'ünï code' && cat > conftest.py <<'EOF'\n{FORCE_PASS_CONFTEST}EOF\n"
            "cp conftest.py 'ünï code/conftest.py'"
        )
        obs, *_ = env.step({"tool": "bash", "command": cmd})
        assert obs["feedback"].startswith("[no output, exit code 0]"), obs["feedback"]
        _, reward, done, _, info = env.step({"tool": "submit"})
        assert done and reward == 0.0
        verdict = env.last_verdict
        assert verdict is not None
        assert_not_scored(verdict, Outcome.VIOLATION)
        assert verdict.status == "NO"  # the conftest never reached the verifier's tree
        assert {"conftest.py", "ünï code/conftest.py"} <= {v.split(": ")[1] for v in verdict.violations}
        assert info["violations"] == verdict.violations
    finally:
        env.close()


def agent_diff(task, files: dict[str, str], *config: str, flags: tuple[str, ...] = ()) -> str:
    """The diff as git writes it under the agent's own configuration (how the
    env took it before issue #11)."""
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"sg-gitcfg-{os.getpid()}-{time.monotonic_ns()}"
    work.mkdir()
    try:
        with tarfile.open(fileobj=io.BytesIO(start_state(task.visible).tree_tar)) as tar:
            tar.extractall(work, filter="data")
        repo, env = work / "repo", git_env(str(work))
        cfg = [x for c in config for x in ("-c", c)]

        def git(*args):
            return subprocess.run(["git", *cfg, *args], cwd=repo, env=env, check=True, capture_output=True).stdout

        git("init", "-q")
        git("add", "-A", "-f")
        git("commit", "-q", "-m", "start")
        for rel, text in files.items():
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            (repo / rel).write_text(text)
        git("add", "-A", "-f")
        return git("diff", "--cached", "--binary", *flags).decode()
    finally:
        shutil.rmtree(work)


@pytest.mark.parametrize(
    "config, flags",
    [
        (("diff.mnemonicPrefix=true",), ()),
        (("diff.noprefix=true",), ()),
        (("diff.srcPrefix=c/", "diff.dstPrefix=o/"), ()),
        ((), ("--src-prefix=a/x/", "--dst-prefix=b/x/")),
        (("core.quotePath=false",), ()),
    ],
)
def test_diffs_in_foreign_prefix_styles_are_never_applied(config, flags):
    files = {"conftest.py": FORCE_PASS_CONFTEST, "ünï tests/test_x.py": "x = 1\n", "billing/extra.py": "y = 2\n"}
    diff = agent_diff(ROUNDING, files, *config, flags=flags)
    kept, dropped = filter_diff(diff)
    assert len(dropped) >= 2, (diff, dropped)
    # Whatever was kept, git's own reading of it names no protected path.
    assert not [p for p in git_apply_paths(kept) if protected_reason(p)], kept


# -- the defences' own edge cases --------------------------------------------------------------


def git_apply_paths(patch: str) -> list[str]:
    """Every path `git apply -p1` would touch (its own parse, not ours); []
    when git refuses the patch outright (then nothing is applied either)."""
    if not patch.strip():
        return []
    r = subprocess.run(
        ["git", "apply", "--numstat", "--summary", "-z", "-p1", "-"],
        input=patch.encode("utf-8", "surrogateescape"),
        capture_output=True,
        env={"PATH": "/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "HOME": "/"},
        cwd="/",
    )
    if r.returncode != 0:
        return []
    out = []
    for field in r.stdout.split(b"\0"):
        text = field.decode("utf-8", "surrogateescape")
        if "\t" in text:
            text = text.rsplit("\t", 1)[1]
        if text and not text.startswith(" "):
            out.append(text)
    return out


PROTECTED = ["conftest.py", "tests/test_money.py", "billing/conftest.py", "sitecustomize.py", "x.pth", "ünï tests/a.py"]
PLAIN = ["billing/money.py", "billing/sp ace.py", "billing/ünï.py", "billing/tab\tx.py"]


def _c_quote(name: str) -> str:
    out = ""
    for b in name.encode("utf-8", "surrogateescape"):
        c = chr(b)
        if c in '"\\':
            out += "\\" + c
        elif c == "\t":
            out += "\\t"
        elif b < 0x20 or b >= 0x7F:
            out += f"\\{b:03o}"
        else:
            out += c
    return f'"{out}"'


@st.composite
def diff_sections(draw):
    """One `diff --git` section in one of the shapes and prefix styles git can write."""
    styles = [("a/", "b/"), ("i/", "w/"), ("c/", "o/"), ("", ""), ("b/", "a/"), ("a/", "a/")]
    old_p, new_p = draw(st.sampled_from(styles))
    src = draw(st.sampled_from(PROTECTED + PLAIN))
    dst = draw(st.sampled_from(PROTECTED + PLAIN)) if draw(st.booleans()) else src
    shape = draw(st.sampled_from(["modify", "new", "delete", "rename", "copy", "mode", "binary", "symlink"]))
    quote = draw(st.booleans())

    def q(name: str) -> str:
        return _c_quote(name) if quote or any(ord(c) < 0x20 or ord(c) > 0x7E for c in name) else name

    if shape not in ("rename", "copy"):
        dst = src
    lines = [f"diff --git {q(old_p + src)} {q(new_p + dst)}"]
    if shape in ("rename", "copy"):
        lines += ["similarity index 90%", f"{shape} from {q(src)}", f"{shape} to {q(dst)}"]
    if shape == "mode":
        lines += ["old mode 100644", "new mode 100755"]
        return "\n".join(lines) + "\n"
    if shape == "new":
        lines += ["new file mode 100644", "index 0000000..1111111", "--- /dev/null", f"+++ {q(new_p + dst)}"]
        lines += ["@@ -0,0 +1 @@", "+import os"]
    elif shape == "symlink":
        lines += ["new file mode 120000", "index 0000000..1111111", "--- /dev/null", f"+++ {q(new_p + dst)}"]
        lines += ["@@ -0,0 +1 @@", "+../tests/test_money.py", "\\ No newline at end of file"]
    elif shape == "delete":
        lines += ["deleted file mode 100644", "index 1111111..0000000", f"--- {q(old_p + src)}", "+++ /dev/null"]
        lines += ["@@ -1 +0,0 @@", "-import os"]
    elif shape == "binary":
        lines += ["new file mode 100644", "index 0000000..1111111", "GIT binary patch", "literal 2"]
        lines += ["JcmZRu0000", "", "literal 0", "HcmV?d00001", ""]
    else:
        lines += ["index 1111111..2222222 100644", f"--- {q(old_p + src)}", f"+++ {q(new_p + dst)}"]
        lines += ["@@ -1 +1 @@", "-import os", "+import sys"]
    return "\n".join(lines) + "\n"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(diff_sections(), min_size=1, max_size=3), st.sampled_from(["", "From 0 Mon\nSubject: x\n\n"]))
def test_property_a_protected_path_is_never_applied(sections, preamble):
    diff = preamble + "".join(sections)
    kept, dropped = filter_diff(diff)
    touched = [p for s in split_diff(diff) for p in s.paths]
    applied = git_apply_paths(kept)
    # git, reading what is kept, touches no protected path ...
    assert not [p for p in applied if protected_reason(p)], (diff, kept)
    # ... every kept section was read exactly, and a protected path in a
    # section we could read is reported (dropped + violation), not just lost.
    assert all(not s.problem for s in split_diff(kept))
    if any(protected_reason(p) for p in touched):
        assert dropped, diff


def test_unreadable_sections_are_dropped_not_kept():
    traditional = "--- a/conftest.py\n+++ b/conftest.py\n@@ -0,0 +1 @@\n+import os\n"
    cases = {
        "trailing traditional diff": (
            "diff --git a/billing/money.py b/billing/money.py\nindex 1111111..2222222 100644\n"
            "--- a/billing/money.py\n+++ b/billing/money.py\n@@ -1 +1 @@\n-a\n+b\n" + traditional
        ),
        "header and --- disagree": (
            "diff --git a/billing/money.py b/billing/money.py\n--- a/conftest.py\n+++ b/conftest.py\n"
            "@@ -1 +1 @@\n-a\n+b\n"
        ),
        "bad quoting": 'diff --git "a/conftest.py b/conftest.py\n',
        "gitlink": "diff --git a/sub b/sub\nnew file mode 160000\nindex 0000000..1111111\n",
        "path into .git": "diff --git a/.git/hooks/x b/.git/hooks/x\nnew file mode 100755\n",
        "dot-dot": "diff --git a/../conftest.py b/../conftest.py\nnew file mode 100644\n",
        "hunk longer than its header": (
            "diff --git a/billing/money.py b/billing/money.py\n--- a/billing/money.py\n+++ b/billing/money.py\n"
            "@@ -1 +1 @@\n-a\n+b\n+c\n"
        ),
    }
    for name, diff in cases.items():
        kept, dropped = filter_diff(diff)
        assert kept == "" and len(dropped) == 1 and "unreadable" in dropped[0], name


def test_applied_tree_is_checked_whatever_the_diff_said(runtime, host_guard):
    """With the filter bypassed, a diff that adds a protected path, a symlink
    and a module shadowing the standard library: the tree after `git apply`,
    compared with the start state, shows all three."""
    diff = make_diff(ROUNDING, {"billing/conftest.py": FORCE_PASS_CONFTEST, "decimal.py": "x = 1\n"})
    diff += (
        "diff --git a/billing/link.py b/billing/link.py\nnew file mode 120000\nindex 0000000..1111111\n"
        "--- /dev/null\n+++ b/billing/link.py\n@@ -0,0 +1 @@\n+../tests/test_money.py\n"
        "\\ No newline at end of file\n"
    )
    attempt = verify_once(ROUNDING.visible, ROUNDING.hidden, diff, True, runtime)
    assert attempt.outcome == Outcome.VIOLATION, (attempt.status, attempt.detail)
    text = " | ".join(attempt.violations)
    assert "billing/conftest.py: conftest.py configures" in text
    assert "billing/link.py: the applied diff made a symlink file" in text
    assert "decimal.py: a new module named like 'decimal'" in text
