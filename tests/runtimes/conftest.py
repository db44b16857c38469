"""The `rt` fixture of the conformance suites (test_conformance*.py): one
runtime per backend, for a module's tests. test_local.py and test_pool.py
define an `rt` of their own."""

from __future__ import annotations

import pytest

from sandgym.runtimes import get_runtime
from tests.runtimes.conformance import BACKENDS


@pytest.fixture(scope="module", params=BACKENDS)
def rt(request):
    if request.param.startswith("k8s"):
        request.getfixturevalue("k8s_cluster")
    runtime = get_runtime(request.param)
    yield runtime
    runtime.close()
