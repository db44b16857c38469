"""The base of every env's options model: the make() kwargs an env takes, with their defaults.

Each family declares its envs' options in `sandgym/specs/<family>_options.py`,
a subclass of `EnvOptions`, and names it in the family table (`Family.options`).
Registration reads the defaults from there (`sandgym.families.spec_kwargs`),
so `import sandgym` registers every env without importing one; the env
validates its options with the same model (`sandgym.envs.base.check_options`).
These modules import only pydantic: they are on the path of `import sandgym`.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

# The longest action an env takes by default (its `max_action_chars` option):
# a policy that sends more has the episode end as `failed`, saying so.
DEFAULT_MAX_ACTION_CHARS = 1 << 20


class EnvOptions(BaseModel):
    """An env's options (make() kwargs, `-o KEY=VALUE`), checked strictly up
    front: "abc" is no number, 1 no bool, an unknown name an error."""

    # defer_build: `import sandgym` reads each family's defaults (model_fields,
    # collected with the class); the validator is built when an env of that
    # family first checks its options, not for every family at every start.
    model_config = ConfigDict(extra="forbid", strict=True, defer_build=True)

    # Every env takes these two. They may be objects (a TaskSet, a Runtime)
    # the floor does not know, so the env checks them itself, when it loads
    # the set (None: the family's default set) and gets the runtime.
    tasks: Any = None
    runtime: Any = "local"
