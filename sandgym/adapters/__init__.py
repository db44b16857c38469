"""Adapters for training frameworks (TRL, verl): the core's one place, with the CLI and the family table,
that imports families' envs and verifiers."""
