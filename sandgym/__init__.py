"""sandgym: Gymnasium environments for LLM agents, sandboxes, verifiers."""

from sandgym.families import register_envs

__version__ = "0.1.0"

register_envs()
