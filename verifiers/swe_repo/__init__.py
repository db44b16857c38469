"""Verifier of the SWE repo-issue family.

Host side: `host.py` (the verify flow) with `diffs.py` (diffs parsed
fail-closed), `path_policy.py` (which paths a diff may touch), `scan.py`
(the static scan), `sentinels.py` (hidden per-attempt tests), `sandbox.py`
(the verifier's sandbox and runner jobs) and `records.py` (reading what the
boundary writes back); the start state and test venvs it shares with the
env (`checkout.py`, `sources.py`, `git_sources.py`); and what runs inside
its boundary (`boundary/`)."""
