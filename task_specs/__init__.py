"""Bundled task sets, as data (sandgym.task_specs). See sandgym/specs/base.py for the format."""
