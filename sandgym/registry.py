"""Registration of sandgym's envs with Gymnasium.

Gymnasium 1.x loads no entry-point plugins: `import sandgym` registers
the envs, and `gymnasium.make("sandgym:sandgym/CodeFunction-v0")` imports
sandgym itself before looking the id up.
"""

from __future__ import annotations

import gymnasium

ENVS = {
    "sandgym/CodeFunction-v0": "sandgym.envs.code_function.env:CodeFunctionEnv",
    "sandgym/BrowserForm-v0": "sandgym.envs.browser_form.env:BrowserFormEnv",
    "sandgym/SWERepo-v0": "sandgym.envs.swe_repo.env:SWERepoEnv",
}

# The env that plays each task-set family.
FAMILY_ENVS = {
    "code_function": "sandgym/CodeFunction-v0",
    "swe_repo": "sandgym/SWERepo-v0",
    "browser_form": "sandgym/BrowserForm-v0",
}


def register_envs() -> None:
    for env_id, entry_point in ENVS.items():
        if env_id not in gymnasium.registry:
            # Episode length is bounded by the env itself (max_turns): a
            # TimeLimit would cut an episode off before its verdict.
            gymnasium.register(id=env_id, entry_point=entry_point)
    # sandgym/MiniWoB-<task>-v0: one id per page of the installed miniwob wheel.
    from sandgym.envs.browser_form.miniwob import register_miniwob

    register_miniwob()


def check_env_id(env_id: str) -> str:
    if env_id not in ENVS:
        raise ValueError(f"unknown env id {env_id!r}; choices: {', '.join(ENVS)}")
    return env_id
