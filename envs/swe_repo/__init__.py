"""sandgym/SWERepo-v0: the SWE repo-issue family's env (see env.py), its tools and its task factory.

Importing the package loads none of them: `SWERepoEnv` is looked up on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .env import SWERepoEnv

__all__ = ["SWERepoEnv"]


def __getattr__(name: str) -> Any:
    if name == "SWERepoEnv":
        from .env import SWERepoEnv

        return SWERepoEnv
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
