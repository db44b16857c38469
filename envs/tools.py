"""Chat tools made from a family's action models (pydantic -> JSON schema).

A family declares one pydantic model per tool (its docstring: the tool's
description; its fields: the arguments). `function_tool` turns the model
into an OpenAI function-calling schema and `tool_arguments` checks a call's
arguments against the same model, so the tools a chat model sees and the
actions the env takes cannot drift apart.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError


def _tidy(schema: Any) -> Any:
    """The schema without pydantic's `title`s, and an optional field's
    `anyOf [X, null]` as X: leaving the argument out means None, and some
    servers' constrained decoding handles a plain type better."""
    if isinstance(schema, list):
        return [_tidy(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _tidy(v) for k, v in schema.items() if k != "title"}
    variants = out.get("anyOf")
    if isinstance(variants, list) and out.get("default", ...) is None:
        kept = [v for v in variants if v != {"type": "null"}]
        if len(kept) == 1:
            out.pop("anyOf")
            out.pop("default")
            out = {**kept[0], **out}
    return out


def function_tool(name: str, model: type[BaseModel]) -> dict[str, Any]:
    """The OpenAI tool schema of `model`: {"type": "function", "function": {...}}."""
    parameters = _tidy(model.model_json_schema())
    description = parameters.pop("description", "") or ""
    parameters.setdefault("properties", {})
    parameters.setdefault("required", [])
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}


def tool_arguments(name: str, model: type[BaseModel], arguments: dict[str, Any]) -> dict[str, Any]:
    """The call's arguments checked against `model` (only those given, so an
    argument left out keeps the env's default); ValueError naming the field."""
    try:
        parsed = model.model_validate(arguments)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "arguments"
        raise ValueError(f"tool {name!r}: argument `{where}`: {first['msg']}") from None
    return parsed.model_dump(exclude_unset=True)
