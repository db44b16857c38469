"""Adapters for training frameworks (TRL, verl): the core's one place, with the CLI and the family table,
that imports families' envs and verifiers.

- `trainers`: the code family's verifier as a single-turn reward (TRL, verl).
- `episodes`: multi-turn episodes driven by tool calls, for any family (no trainer named).
- `trl_env`: TRL's `environment_factory` class and its reward function.
- `verl_tools`: verl's multi-turn tool interface (`BaseTool` shape), without importing verl.
- `hf_dataset`: `sandgym tasks export --format hf`, training prompts as a `datasets` dataset.
"""
