"""Verifier of the code-function family: host side (`host.py`), and what runs inside its boundary (`boundary/`)."""
