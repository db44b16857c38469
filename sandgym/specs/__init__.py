"""Task specs: the base every family shares (`base.py`), one module per family.

`sandgym.specs` is the family-neutral API (task sets, pairs, loading);
a family's own models live in `sandgym.specs.<family>`, its envs' options
in `sandgym.specs.<family>_options`.

The names below come from `base.py` (`load_yaml_text` from `yaml_text.py`),
imported on first use: registering the envs (`import sandgym`) loads only
the options modules, which need none of it (nor its YAML parser).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sandgym.specs.base import (
        HiddenSpec,
        StrictModel,
        TaskId,
        TaskPair,
        TaskSet,
        TaskSetMeta,
        TaskSpecError,
        UnknownTask,
        VisibleSpec,
        bundled_dir,
        bundled_task_set,
        bundled_task_sets,
        choose_task,
        family_models,
        format_validation_error,
        json_data,
        json_schemas,
        load_family_task_set,
        make_pair,
        resolve_task_set,
    )
    from sandgym.specs.yaml_text import load_yaml_text

__all__ = [
    "HiddenSpec",
    "TaskId",
    "TaskPair",
    "TaskSet",
    "TaskSetMeta",
    "TaskSpecError",
    "UnknownTask",
    "VisibleSpec",
    "json_data",
    "StrictModel",
    "bundled_dir",
    "bundled_task_set",
    "bundled_task_sets",
    "choose_task",
    "family_models",
    "format_validation_error",
    "json_schemas",
    "load_family_task_set",
    "load_yaml_text",
    "make_pair",
    "resolve_task_set",
]


def __getattr__(name: str) -> Any:
    if name == "load_yaml_text":
        from sandgym.specs import yaml_text

        return yaml_text.load_yaml_text
    if name in __all__:
        from sandgym.specs import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
