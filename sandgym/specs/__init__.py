"""Task specs: the base every family shares (`base.py`), one module per family.

`sandgym.specs` is the family-neutral API (task sets, pairs, loading);
a family's own models live in `sandgym.specs.<family>`.
"""

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
    load_yaml_text,
    make_pair,
    resolve_task_set,
)

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
