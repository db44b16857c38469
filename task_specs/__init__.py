"""Bundled task sets, as data (sandgym.task_specs). See sandgym/specs.py for the format."""
