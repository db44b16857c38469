from .env import ENV_ID, CodeFunctionEnv

__all__ = ["ENV_ID", "CodeFunctionEnv"]
