"""Verifier of the SWE repo-issue family: host side (`host.py`), the start state and test venvs it shares
with the env (`checkout.py`, `sources.py`), and what runs inside its boundary (`boundary/`)."""
