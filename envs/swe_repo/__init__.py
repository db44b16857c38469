"""sandgym/SWERepo-v0: the SWE repo-issue family's env (see env.py)."""

from .env import ENV_ID, SWERepoEnv

__all__ = ["ENV_ID", "SWERepoEnv"]
