"""The code-function family (sandgym/CodeFunction-v0): the env (`env.py`), its action grammar
(`actions.py`), the HumanEval importer (`humaneval.py`) and the trainers' reward (`trainer.py`).

Importing the package loads none of them: `CodeFunctionEnv` and `ENV_ID` (the family table's
env id) are looked up on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .env import CodeFunctionEnv

    ENV_ID: str

__all__ = ["ENV_ID", "CodeFunctionEnv"]


def __getattr__(name: str) -> Any:
    if name == "CodeFunctionEnv":
        from .env import CodeFunctionEnv

        return CodeFunctionEnv
    if name == "ENV_ID":
        from sandgym.families import family

        return family("code_function").env_id
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
