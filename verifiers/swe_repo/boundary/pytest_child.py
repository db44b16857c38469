"""Starts pytest for the runner: `python -I pytest_child.py REPO IMPORT_ROOT ARGS...`.

Run with -I, so the interpreter honours no PYTHON* variables, no user site
and no script folder: pytest and the records plugin are imported from the
venv and this folder *before* the repository's import root goes on
sys.path, so a module in the repository cannot stand in for them.
"""

import os
import sys

sys.dont_write_bytecode = True  # -I ignores PYTHONDONTWRITEBYTECODE
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pytest  # noqa: E402
import sandgym_swe_records  # noqa: E402,F401  (pinned in sys.modules; -p finds this one)

repo, import_root = sys.argv[1], sys.argv[2]
sys.path.insert(1, os.path.normpath(os.path.join(repo, import_root)))
os.chdir(repo)
sys.exit(int(pytest.main(sys.argv[3:])))
