"""The suite's own order: the k8s tests run last (tests/conftest.py), so
that scripts/test.sh can build the test cluster beside the others."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def collected(*files: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *files],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [line for line in out.splitlines() if "::" in line]


def test_k8s_tests_come_after_every_other_test_whatever_order_the_files_are_given_in():
    # test_k8s_pool.py is k8s throughout (a module mark); test_pool.py's
    # backends are parameters, two of them k8s (a param mark).
    ids = collected("tests/runtimes/test_k8s_pool.py", "tests/runtimes/test_pool.py")
    is_k8s = ["test_k8s_pool.py" in i or "[k8s" in i for i in ids]
    assert any(is_k8s) and not all(is_k8s)
    first_k8s = is_k8s.index(True)
    assert all(is_k8s[first_k8s:]), [i for i, k in zip(ids[first_k8s:], is_k8s[first_k8s:], strict=True) if not k]
    # Otherwise the order is pytest's: the files as given, a module's tests grouped by backend.
    others = [i for i, k in zip(ids, is_k8s, strict=True) if not k]
    assert others[0].endswith("test_acquire_release_and_verified_reset[local]")
    assert ids[first_k8s].startswith("tests/runtimes/test_k8s_pool.py::")


def test_a_test_that_reaches_the_cluster_unmarked_fails_before_starting_it(tmp_path):
    # It would start the cluster among the other tests, before the
    # background build is done: it fails first, naming the fix.
    (tmp_path / "test_unmarked.py").write_text(
        "def test_reaches_the_cluster(request):\n    request.getfixturevalue('k8s_cluster')\n"
    )
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 1, run.stdout[-2000:]
    assert "uses the test cluster but is not marked k8s" in run.stdout
    assert "pytest.mark.k8s" in run.stdout
