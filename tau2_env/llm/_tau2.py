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


__all__ = ["registry"]
