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

Two libraries' start-up work the command has no use for is skipped,
unless the user's environment asks for it:
- OpenBLAS (loaded with numpy, which gymnasium imports) starts a thread
  per core that spins for about 0.1 s before it sleeps: about 130 ms of
  CPU on another core, which the run's first sandboxes compete with.
  sandgym does no linear algebra: one thread is asked for during the
  import only, and the variable is removed again so that no child
  process inherits it.
- pydantic looks for plugins in every installed distribution's entry
  points (importlib.metadata) when the first model is built: tens of
  milliseconds. PYDANTIC_DISABLE_PLUGINS=__all__ skips that; set the
  variable to '' to load them.
"""

from __future__ import annotations

import gc
import os
import sys

VERSION = "0.1.0"  # = [project] version in pyproject.toml = sandgym.__version__


def main() -> None:
    if sys.argv[1:] == ["--version"]:
        print(f"sandgym {VERSION}")
        return
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    one_blas_thread = "OPENBLAS_NUM_THREADS" not in os.environ
    if one_blas_thread:
        os.environ["OPENBLAS_NUM_THREADS"] = "1"
    # No collection during the import (see above); the run's own garbage is
    # collected as usual.
    gc.disable()
    try:
        from sandgym.cli import app
    finally:
        gc.freeze()
        gc.enable()
        if one_blas_thread:
            del os.environ["OPENBLAS_NUM_THREADS"]
    try:
        app()
    finally:
        gc.freeze()


if __name__ == "__main__":
    main()
