"""Limits on the tool arguments a client sends (the OpenEnv API, the play page).

τ²'s tools take small records: the deepest, airline's ``book_reservation``, nests three
levels (a list of passengers, each an object). Arguments nested hundreds of levels deep,
or megabytes large, are refused before they reach τ²: Python's JSON code and pydantic
recurse over them, and fail with ``RecursionError`` instead of an answer.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["MAX_BYTES", "MAX_DEPTH", "arguments_problem", "holds_nul", "parse_arguments"]

MAX_DEPTH = 16  # objects and lists inside the arguments object
MAX_BYTES = 64 * 1024  # as JSON text


def _walk(value: Any, *, limit: int) -> tuple[int, bool]:
    """How deep ``value`` nests (counting stops past ``limit``) and whether a string or a
    key in it holds a NUL character. Iterative: it must not recurse on what it checks."""
    deepest, nul = 0, False
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict):
            deepest = max(deepest, level)
            nul = nul or any(isinstance(k, str) and "\x00" in k for k in node)
            if level <= limit:
                stack.extend((v, level + 1) for v in node.values())
        elif isinstance(node, list | tuple):
            deepest = max(deepest, level)
            if level <= limit:
                stack.extend((v, level + 1) for v in node)
        elif isinstance(node, str) and "\x00" in node:
            nul = True
    return deepest, nul


def holds_nul(value: Any) -> bool:
    """True when a string (or a key) anywhere in ``value`` holds a NUL character, which
    PostgreSQL's text and jsonb cannot store."""
    return _walk(value, limit=10**9)[1]


def arguments_problem(arguments: Any, *, allow_nul: bool = True) -> str | None:
    """Why ``arguments`` cannot be a tool call's arguments, or ``None`` when they can.

    They must be a JSON object at most :data:`MAX_DEPTH` levels deep and
    :data:`MAX_BYTES` long as JSON; with ``allow_nul=False`` no string may hold a NUL
    character (what a database cannot store).
    """
    if not isinstance(arguments, dict):
        return "The arguments must be a JSON object."
    depth, nul = _walk(arguments, limit=MAX_DEPTH)
    if depth > MAX_DEPTH:
        return f"The arguments nest more than {MAX_DEPTH} levels deep."
    if nul and not allow_nul:
        return "The arguments hold a NUL character (\\u0000), which can't be stored."
    try:
        size = len(json.dumps(arguments, ensure_ascii=False).encode())
    except (TypeError, ValueError):
        return "The arguments must be JSON."
    if size > MAX_BYTES:
        return f"The arguments are larger than {MAX_BYTES // 1024} KB."
    return None


def parse_arguments(text: str, *, allow_nul: bool = True) -> Any:
    """``text`` read as tool arguments; raises ``ValueError`` with a readable reason."""
    if len(text.encode()) > MAX_BYTES:
        raise ValueError(f"The arguments are larger than {MAX_BYTES // 1024} KB.")
    try:
        arguments = json.loads(text)
    except RecursionError:
        raise ValueError(f"The arguments nest more than {MAX_DEPTH} levels deep.") from None
    except ValueError as exc:
        raise ValueError(f"Not JSON: {exc}") from None
    problem = arguments_problem(arguments, allow_nul=allow_nul)
    if problem:
        raise ValueError(problem)
    return arguments
