"""Who a Hugging Face token belongs to, as the Hub says (``/api/whoami-v2``), cached.

The agent faces grant a session slot to a raw Hugging Face token only once the Hub has
said whose it is: a made-up token gets no slot (and its client an answer at once, not a
failed customer turn later), and every token of one Hugging Face account counts against
that account's cap, however many of them a client presents.

``TAU2_HF_HUB_URL`` is the Hub (default ``https://huggingface.co``; tests point it at a
local server); ``TAU2_HF_TOKEN_CHECK=false`` turns the check off (then a raw token is
not known to be anyone's: its sessions count against its client's address).
Answers are kept ``TAU2_HF_TOKEN_CHECK_SECONDS`` (default 600; a refusal 60 s) by the
token's hash, never the token itself. Nothing here logs a token or puts one in a repr.
"""

from __future__ import annotations

import functools
import hashlib
import threading
import time
from dataclasses import dataclass

import cachetools
import httpx

from tau2_env import config

__all__ = ["TokenUnknown", "checking", "hf_account"]

_REFUSAL_SECONDS = 60.0
_CACHE_SIZE = 4096


class TokenUnknown(Exception):
    """The Hub refused the token, or could not be asked; ``str()`` says which (no secret)."""


@dataclass(frozen=True)
class _Answer:
    account: str | None  # None: refused, ``reason`` says why
    reason: str
    keep: float  # seconds the answer holds; 0: not kept (not the Hub's answer)


def _token_key(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


# The latest answers by the token's hash, each until its own time is up (an answer
# kept 0 s is not stored at all: the next question asks the Hub again).
_answers: cachetools.TLRUCache[str, _Answer] = cachetools.TLRUCache(
    maxsize=_CACHE_SIZE, ttu=lambda _key, answer, now: now + answer.keep, timer=time.monotonic
)


def checking() -> bool:
    """Whether raw tokens are checked with the Hub (``TAU2_HF_TOKEN_CHECK``, default on)."""
    raw = (config.env_value("TAU2_HF_TOKEN_CHECK") or "true").strip().lower()
    if raw not in ("1", "true", "yes", "on", "0", "false", "no", "off"):
        raise config.ConfigError(f"TAU2_HF_TOKEN_CHECK must be true or false, got {raw!r}")
    return raw in ("1", "true", "yes", "on")


def hub_url() -> str:
    """The Hub asked about tokens (``TAU2_HF_HUB_URL``)."""
    return (config.env_value("TAU2_HF_HUB_URL") or "https://huggingface.co").strip().rstrip("/")


def hf_account(token: str) -> str:
    """The name of the Hugging Face account ``token`` belongs to; raises
    :class:`TokenUnknown`. Blocks for one Hub request on a token not seen lately: call
    it off the event loop."""
    answer = _ask_the_hub(token)
    if answer.account is None:
        raise TokenUnknown(answer.reason)
    return answer.account


def forget() -> None:
    """Drop every cached answer (tests; a token revoked on the Hub is otherwise known
    until its answer expires)."""
    _ask_the_hub.cache_clear()


@functools.cache
def _client() -> httpx.Client:
    """One client for every question (its connections kept: a new client per question
    costs a TLS context, ~20 ms). Thread-safe."""
    return httpx.Client(limits=httpx.Limits(max_connections=32, max_keepalive_connections=8))


def _whoami(token: str) -> httpx.Response:
    """``GET /api/whoami-v2``, asked once more if the connection dropped without an
    answer (a kept connection the Hub closed meanwhile, a reset under load): the
    question changes nothing, and a dropped connection is not the Hub's answer.
    A timeout is not asked again."""
    for attempt in (0, 1):
        try:
            return _client().get(
                f"{hub_url()}/api/whoami-v2",
                headers={"authorization": f"Bearer {token}"},
                timeout=config._env_int("TAU2_HF_TOKEN_CHECK_TIMEOUT", 10),
            )
        except (httpx.NetworkError, httpx.RemoteProtocolError):
            if attempt:
                raise
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


@cachetools.cached(_answers, key=_token_key, lock=threading.Lock())
def _ask_the_hub(token: str) -> _Answer:
    """The Hub's answer about ``token``, kept as long as it says (:data:`_answers`)."""
    # httpx, not huggingface_hub's HfApi.whoami (2.4.0): that one sends through the
    # process-wide get_session() client, which has no timeout (timeout=None), follows
    # redirects and refuses to ask anything under HF_HUB_OFFLINE (set for τ²'s data);
    # changing any of that is set_client_factory, for every Hub user in the process.
    keep = float(config._env_int("TAU2_HF_TOKEN_CHECK_SECONDS", 600))
    try:
        response = _whoami(token)
    except httpx.HTTPError as exc:  # the Hub unreachable: the token cannot be used either
        reason = f"Hugging Face could not be asked about the token ({type(exc).__name__})."
        return _Answer(None, reason, 0)
    if response.status_code in (401, 403):
        return _Answer(None, "Hugging Face does not know this token.", _REFUSAL_SECONDS)
    if response.status_code != 200:  # not an answer about the token: ask again next time
        reason = f"Hugging Face could not check the token (HTTP {response.status_code})."
        return _Answer(None, reason, 0)
    try:
        name = response.json().get("name")
    except (ValueError, AttributeError):
        name = None
    if not isinstance(name, str) or not name:
        return _Answer(None, "Hugging Face did not say whose token this is.", 0)
    return _Answer(name, "", keep)
