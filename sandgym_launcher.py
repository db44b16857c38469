"""The `sandgym` console script (pyproject.toml `[project.scripts]`).

`sandgym --version` is answered here, without importing the `sandgym`
package: importing it registers the envs with Gymnasium (a documented
feature), which imports gymnasium and numpy, a few hundred milliseconds
that printing a version has no use for. This module is top-level, not
inside the package, because importing anything under `sandgym` runs
`sandgym/__init__.py` first. The version is a constant rather than read
from the distribution's metadata: `importlib.metadata` scans every
installed distribution, which costs more than the rest of the start-up
(tests/core/test_cli.py checks that the three copies agree). Every other
command line goes to the CLI itself, `sandgym.cli.app`.

The garbage collector is off while `sandgym.cli` is imported, and what
the import made is then frozen out of it (`gc.freeze`): those objects live
as long as the process, and each collection during the import would walk
all of them made so far (about a sixth of the import's CPU). When the
command is done, the objects still alive are frozen too: the
interpreter's collections at exit would otherwise walk every one of them
(pydantic's schemas, numpy, a run's records), about 0.1 s of CPU after a
`sandgym eval`, to free memory the process gives back anyway. atexit
handlers and `weakref.finalize` callbacks (temporary folders, runtimes'
cleanup) still run; sandgym defines no `__del__` that exit would skip.
"""

from __future__ import annotations

import gc
import sys

VERSION = "0.1.0"  # = [project] version in pyproject.toml = sandgym.__version__


def main() -> None:
    if sys.argv[1:] == ["--version"]:
        print(f"sandgym {VERSION}")
        return
    # No collection during the import (see above); the run's own garbage is
    # collected as usual.
    gc.disable()
    try:
        from sandgym.cli import app
    finally:
        gc.freeze()
        gc.enable()
    try:
        app()
    finally:
        gc.freeze()


if __name__ == "__main__":
    main()
