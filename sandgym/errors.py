"""The one base class of sandgym's host-side errors.

Every error sandgym raises on the host for a reason it can explain (bad
input, a sandbox that failed, a run folder it cannot use) derives from
`SandgymError`, so a caller catches them all at once. Each also keeps the
built-in base it always had (ValueError, RuntimeError), so code that caught
those still does.
"""

from __future__ import annotations


class SandgymError(Exception):
    """Base of sandgym's host-side errors; the message names the cause and the fix."""
