"""τ²'s LLM arguments: what ``tau2 run --agent-llm-args / --user-llm-args`` pass.

``tau2 run`` parses each flag as one JSON object and hands it, unchanged, to τ²'s
``LLMAgent`` / ``UserSimulator`` as ``llm_args``; every LLM call of that side then gets
them as keyword arguments of ``litellm.completion`` (plus the trial's ``seed``). With
no flag, each side gets τ²'s default, ``{"temperature": 0.0}``; a flag *replaces* it
(``--agent-llm-args '{"reasoning_effort": "high"}'`` sends no temperature at all).

:func:`llm_args_clean` checks what a person or a client asks for before anything runs:
the named arguments within their ranges, the provider extras a JSON object of plain
values, and none of the keys that are the route's (the key, the endpoint) or τ²'s (the
seed, the messages, the tools).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

__all__ = [
    "DEFAULT_AGENT_ARGS",
    "DEFAULT_USER_ARGS",
    "REASONING_EFFORTS",
    "LLMArgsError",
    "llm_args_clean",
    "llm_args_label",
    "llm_args_of",
]

# τ²'s ``tau2.config.DEFAULT_LLM_ARGS_AGENT`` / ``DEFAULT_LLM_ARGS_USER`` (a test holds
# them equal): written out so that pages and forms need not import τ² and litellm.
DEFAULT_AGENT_ARGS: dict[str, Any] = {"temperature": 0.0}
DEFAULT_USER_ARGS: dict[str, Any] = {"temperature": 0.0}

# The extra keyword our callers put in τ²'s ``llm_args`` to say whose call it is
# (``tau2_env.llm.gateway`` removes it before litellm sees the call).
ROLE_KEY = "tau2_llm_role"
# Keys a caller must not choose: they are the route's (``tau2_env.llm.gateway.Route``).
ROUTE_KEYS = (
    "model",
    "api_key",
    "api_base",
    "base_url",
    "timeout",
    "num_retries",
    "retry_policy",
    "max_retries",
    "caching",
    "extra_headers",
    "custom_llm_provider",
)
REASONING_EFFORTS = ("minimal", "low", "medium", "high")
MAX_EXTRAS_BYTES = 4096
_NAMED = ("temperature", "top_p", "max_tokens", "reasoning_effort")

# Keys no one may set: the route's (key, endpoint, retries, cache), τ²'s own (it sends
# the messages and tools, and the seed is the trial's) and litellm's that would change
# how the answer comes back.
_RESERVED = frozenset(
    {
        *ROUTE_KEYS,
        ROLE_KEY,
        "messages",
        "tools",
        "tool_choice",
        "functions",
        "seed",
        "stream",
        "stream_options",
        "n",
        "user",
        "mock_response",
        "metadata",
        "api_version",
        "organization",
        "headers",
    }
)


class LLMArgsError(ValueError):
    """What is wrong with asked-for LLM arguments; ``field`` names the part (``temperature``,
    ``extras``…), the message says what to do."""

    def __init__(self, message: str, *, field: str = "extras") -> None:
        super().__init__(message)
        self.field = field


def _number(name: str, value: Any, *, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise LLMArgsError(f"{name} must be a number.", field=name)
    if not low <= value <= high:
        raise LLMArgsError(f"{name} must be between {low:g} and {high:g}.", field=name)
    return float(value)


def _plain(value: Any, depth: int = 0) -> bool:
    """JSON of strings, numbers, booleans, null, lists and objects, four levels at most."""
    if depth > 4:
        return False
    if value is None or isinstance(value, str | bool | int):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(_plain(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v, depth + 1) for k, v in value.items())
    return False


def llm_args_clean(
    *,
    temperature: float | None = None,
    top_p: float | None = None,
    max_tokens: int | None = None,
    reasoning_effort: str | None = None,
    extras: Mapping[str, Any] | str | None = None,
) -> dict[str, Any]:
    """The ``llm_args`` dict for these choices, in the order τ²'s flag would hold them.

    ``None`` (or ``""``) leaves an argument out: the provider's default applies, as with
    ``tau2 run`` when the flag does not name it. ``extras`` is a JSON object (or its
    text) of provider arguments passed as they are (``{"thinking": {...}}``,
    ``{"top_k": 20}``); it may not repeat a named argument. Raises :class:`LLMArgsError`.
    """
    args: dict[str, Any] = {}
    if temperature is not None and temperature != "":
        args["temperature"] = _number("temperature", temperature, low=0, high=2)
    if top_p is not None and top_p != "":
        args["top_p"] = _number("top_p", top_p, low=0, high=1)
    if max_tokens is not None and max_tokens != "":
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise LLMArgsError(
                "max_tokens must be a whole number of at least 1.", field="max_tokens"
            )
        if max_tokens > 1_000_000:
            raise LLMArgsError("max_tokens must be at most 1,000,000.", field="max_tokens")
        args["max_tokens"] = max_tokens
    if reasoning_effort:
        if reasoning_effort not in REASONING_EFFORTS:
            raise LLMArgsError(
                f"reasoning_effort must be one of {', '.join(REASONING_EFFORTS)}.",
                field="reasoning_effort",
            )
        args["reasoning_effort"] = reasoning_effort
    for key, value in _extras(extras).items():
        if key in args:
            raise LLMArgsError(
                f"{key!r} is set above; leave it out of the provider extras.", field="extras"
            )
        args[key] = value
    return args


def _extras(extras: Mapping[str, Any] | str | None) -> dict[str, Any]:
    if extras is None or (isinstance(extras, str) and not extras.strip()):
        return {}
    if isinstance(extras, str):
        if len(extras.encode()) > MAX_EXTRAS_BYTES:
            raise LLMArgsError(f"The provider extras are longer than {MAX_EXTRAS_BYTES} bytes.")
        try:
            extras = json.loads(extras)
        except json.JSONDecodeError as exc:
            raise LLMArgsError(
                f"The provider extras are not JSON ({exc.msg} at line {exc.lineno}, column "
                f'{exc.colno}): write an object such as {{"top_k": 20}}.'
            ) from None
    if not isinstance(extras, Mapping):
        raise LLMArgsError('The provider extras must be a JSON object, such as {"top_k": 20}.')
    if len(json.dumps(extras)) > MAX_EXTRAS_BYTES:
        raise LLMArgsError(f"The provider extras are longer than {MAX_EXTRAS_BYTES} bytes.")
    out: dict[str, Any] = {}
    for key, value in extras.items():
        if not isinstance(key, str) or not key or len(key) > 64:
            raise LLMArgsError("Each provider extra needs a name of 1 to 64 characters.")
        if key in _RESERVED:
            raise LLMArgsError(
                f"{key!r} cannot be set here: "
                + (
                    "the seed is each trial's, as tau2 run derives it."
                    if key == "seed"
                    else "it is the connection's (key, endpoint, headers) or τ²'s own."
                )
            )
        if not _plain(value):
            raise LLMArgsError(f"{key!r} must be plain JSON (at most four levels deep).")
        out[key] = value
    return out


def llm_args_of(value: Any, *, default: Mapping[str, Any]) -> dict[str, Any]:
    """Stored LLM arguments (a run's, an evaluation's, a client's) checked again, or
    ``default`` when there are none (``None``: τ²'s default, as with no flag)."""
    if value is None:
        return dict(default)
    if not isinstance(value, Mapping):
        raise LLMArgsError("The LLM arguments must be a JSON object.")
    named = {
        k: value[k]
        for k in ("temperature", "top_p", "max_tokens", "reasoning_effort")
        if k in value
    }
    extras = {k: v for k, v in value.items() if k not in named}
    cleaned = llm_args_clean(**named, extras=extras)
    return {k: cleaned[k] for k in value}  # the order given, as τ² would keep it


def llm_args_label(args: Mapping[str, Any] | None) -> str:
    """``temperature 0 · reasoning_effort high`` for pages; ``provider defaults`` for {}."""
    if args is None:
        return "τ² default"
    if not args:
        return "provider defaults"
    return " · ".join(f"{k} {_shown(v)}" for k, v in args.items())


def _shown(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, int | str) and not isinstance(value, bool):
        return str(value)
    return json.dumps(value)
