"""τ²-bench, framework-free: the catalogue, the episode engine and the OpenEnv face.

Four rooms, each importing only the ones below it (an import-linter contract):
``faces`` (OpenEnv, MCP, TRL, the client) › ``gate`` (who may open a session, how many,
on which process) › ``engine`` (episodes, scoring, evaluation, results) › ``llm`` (the
door every LLM call goes through, and every hook into τ², litellm and openai). Beside
them the shared ground: ``config``, ``versions``, ``jsonbounds``.

Nothing in this package imports Django. Heavy imports (τ²-bench pulls in litellm,
~3 s) happen lazily, so ``from tau2_env import Tau2Env`` in a client stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tau2_env.faces.client import Tau2Env

__all__ = ["Tau2Env"]


def __getattr__(name: str) -> Any:
    if name == "Tau2Env":
        # Lazy: openenv imports gradio (seconds); importers of tau2_env.config must not pay.
        from tau2_env.faces.client import Tau2Env

        return Tau2Env
    raise AttributeError(f"module 'tau2_env' has no attribute {name!r}")
