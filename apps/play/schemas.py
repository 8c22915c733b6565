"""Tool argument schemas: resolved for the form, validated for the server.

τ²'s ``Tool.openai_schema`` comes from pydantic: nested types live in ``$defs`` and are
referenced with ``$ref``; lists of them are ``anyOf [{"$ref": …}, {"type": "object"}]``
and optional values ``anyOf [{…}, {"type": "null"}]``. The form wants one plain tree,
so :func:`form_schema` inlines references and picks the most specific branch. The
server validates against τ²'s schema itself (:func:`argument_errors`), never the
simplified one.
"""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator

from tau2_env.gate.arguments import arguments_problem

_MAX_DEPTH = 12  # a recursive $ref stops here (τ²'s domains have none)


def _lookup(root: dict[str, Any], ref: str) -> dict[str, Any]:
    if not ref.startswith("#/"):
        return {}
    node: Any = root
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or part not in node:
            return {}
        node = node[part]
    return node if isinstance(node, dict) else {}


def _specific(branches: list[dict[str, Any]]) -> tuple[dict[str, Any], bool]:
    """The branch a person should fill in, and whether ``null`` is allowed."""
    nullable = any(b.get("type") == "null" for b in branches)
    rest = [b for b in branches if b.get("type") != "null"]
    if not rest:
        return {"type": "null"}, True
    # Prefer a typed object with properties over a free-form ``{"type": "object"}``.
    rest.sort(key=lambda b: (not b.get("properties"), not b.get("type")))
    return rest[0], nullable


def form_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` without ``$ref``/``$defs``/``anyOf``: what the tool form renders.

    Returns a new dict; each node keeps ``type``, ``description``, ``enum``, ``default``,
    ``properties``/``required`` (objects) and ``items`` (arrays), plus ``nullable`` when
    τ² allows ``null``.
    """

    def walk(node: dict[str, Any], depth: int) -> dict[str, Any]:
        if depth > _MAX_DEPTH:
            return {"type": "object"}
        if "$ref" in node:
            target = _lookup(schema, node["$ref"])
            merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
            return walk(merged, depth + 1)
        for combinator in ("anyOf", "oneOf"):
            if combinator in node:
                branches = [walk(b, depth + 1) for b in node[combinator]]
                chosen, nullable = _specific(branches)
                outer = {k: v for k, v in node.items() if k != combinator}
                result = {**chosen, **outer}
                if nullable:
                    result["nullable"] = True
                return result
        if "allOf" in node and len(node["allOf"]) == 1:
            outer = {k: v for k, v in node.items() if k != "allOf"}
            return {**walk(node["allOf"][0], depth + 1), **outer}
        out: dict[str, Any] = {}
        kind = node.get("type")
        if isinstance(kind, list):  # ["string", "null"]
            non_null = [t for t in kind if t != "null"]
            kind = non_null[0] if non_null else "null"
            if "null" in node["type"]:
                out["nullable"] = True
        if kind is None:
            kind = "object" if "properties" in node else ("string" if "enum" in node else None)
        if kind:
            out["type"] = kind
        for key in ("title", "description", "enum", "default", "nullable"):
            if key in node:
                out[key] = node[key]
        if "properties" in node:
            out["properties"] = {
                name: walk(sub, depth + 1) for name, sub in node["properties"].items()
            }
            out["required"] = [r for r in node.get("required", []) if r in out["properties"]]
        if "items" in node and isinstance(node["items"], dict):
            out["items"] = walk(node["items"], depth + 1)
        return out

    return walk(schema, 0)


def _path(error) -> str:
    """A field path like ``passengers.0.first_name`` (the form names its fields so)."""
    parts = [str(p) for p in error.absolute_path]
    if error.validator == "required":
        # The message names the missing property; point at its field.
        missing = error.message.split("'")[1] if "'" in error.message else ""
        parts.append(missing)
    elif error.validator == "additionalProperties" and "'" in error.message:
        parts.append(error.message.split("'")[1])
    return ".".join(p for p in parts if p) or "__all__"


def _strict(node: dict[str, Any]) -> dict[str, Any]:
    """A form schema as standard JSON Schema (``nullable`` becomes a type list)."""
    out = {k: v for k, v in node.items() if k not in ("nullable", "properties", "items")}
    if node.get("nullable") and "type" in node:
        out["type"] = [node["type"], "null"]
    if "properties" in node:
        out["properties"] = {name: _strict(sub) for name, sub in node["properties"].items()}
    if "items" in node:
        out["items"] = _strict(node["items"])
    return out


def argument_errors(schema: dict[str, Any], arguments: Any) -> dict[str, str]:
    """Problems of ``arguments`` for a tool with τ²'s ``schema``: ``{field path: message}``.

    Empty when the arguments are valid. They must satisfy τ²'s schema and the form's
    reading of it (where τ² also accepts any object in place of a typed one, the form
    asks for the typed one's fields), so the server refuses exactly what the form does.
    Arguments nested too deep, too large, or holding a NUL character (which the
    conversation's storage cannot hold) are refused first.
    """
    problem = arguments_problem(arguments, allow_nul=False)
    if problem:
        return {"__all__": problem}
    errors: dict[str, str] = {}
    for checked in (schema, _strict(form_schema(schema))):
        validator = Draft202012Validator(checked)
        found = sorted(validator.iter_errors(arguments), key=lambda e: list(e.absolute_path))
        for error in found:
            if error.context:  # anyOf/oneOf: report the most specific cause
                error = max(error.context, key=lambda e: len(e.absolute_path))
            errors.setdefault(_path(error), _message(error))
    return errors


def _message(error) -> str:
    if error.validator == "required":
        return "Required."
    if error.validator == "type":
        expected = error.validator_value
        if isinstance(expected, list):
            expected = " or ".join(expected)
        return f"Must be {_article(expected)}."
    if error.validator == "enum":
        return "Must be one of: " + ", ".join(map(str, error.validator_value)) + "."
    if error.validator == "additionalProperties":
        return "Not a parameter of this tool."
    return error.message


def _article(kind: str) -> str:
    names = {
        "integer": "an integer",
        "number": "a number",
        "string": "text",
        "boolean": "true or false",
        "object": "an object",
        "array": "a list",
        "null": "empty",
    }
    return names.get(kind, kind)
