"""One JSON reader for input nobody vouches for: uploads, form fields, the agent faces.

``loads`` returns what ``json.loads`` returns, or raises :class:`JsonRefused` with a reason
for a person and an HTTP status (413 for too large, 400 otherwise) — never
``RecursionError``, ``OverflowError`` or a ``ValueError`` of its own. It refuses:

- more than ``max_bytes`` of UTF-8 (413);
- bytes that are not UTF-8 (a BOM is allowed), or text with an unpaired surrogate;
- text that is not JSON;
- nesting deeper than ``max_depth`` arrays and objects, checked before parsing and without
  recursion, so the parser never meets it;
- an integer with more than ``max_int_digits`` digits (refused before Python builds it);
- a non-finite number: ``NaN``, ``Infinity`` or a float beyond the double range (``1e999``);
- a NUL character (raw or ``\\u0000``) or an unpaired surrogate escape (``\\ud800``) in a
  string or key: PostgreSQL stores neither in ``text`` or ``jsonb``.

Framework-free. The checks before parsing run at C speed over the bytes: on a 100 MiB
results-shaped file about 0.6 s beside json.loads's 2.8 s, the whole read 4.0 s (the
number hooks cost the rest; ``tests/tau2_env/test_jsonbounds.py`` measures it).
"""

from __future__ import annotations

import functools
import json
import math
import re
from typing import Any

__all__ = ["DEFAULT_MAX_DEPTH", "DEFAULT_MAX_INT_DIGITS", "MAX_DEPTH", "JsonRefused", "loads"]

# Deep enough for any τ² results file, tool call or JSON-RPC message (their deepest
# is about a dozen); far below what the parser's recursion would reach.
DEFAULT_MAX_DEPTH = 64
# The deepest ``max_depth`` accepted (Python's regex compiler recurses once a level).
MAX_DEPTH = 256
# A signed 64-bit integer has at most 19 digits; one more keeps 2**64 readable so that
# range checks downstream can name the field.
DEFAULT_MAX_INT_DIGITS = 20

_BRACKETS = b'"[]{}'
_NOT_BRACKETS = bytes(b for b in range(256) if b not in _BRACKETS)
_OPEN_AS_SQUARE = bytes.maketrans(b"{}", b"[]")
_STRING = re.compile(rb'"[^"]*"')
_HIGH = rb"\\u[dD][89abAB][0-9a-fA-F]{2}"
_LOW = rb"\\u[dD][c-fC-F][0-9a-fA-F]{2}"
# A high surrogate escape not followed by a low one, or a low one not preceded by a high
# one; both branches begin with ``\\u[dD]``, which the regex engine searches for fast.
_LONE_SURROGATE = re.compile(
    rb"\\u[dD](?:[89abAB][0-9a-fA-F]{2}(?!%s)|[c-fC-F][0-9a-fA-F]{2}(?<!%s%s))"
    % (_LOW, _HIGH, _LOW)
)


class JsonRefused(ValueError):
    """Input the reader will not return. ``reason`` says why for a person ("The JSON is
    nested deeper than 64 levels."); ``detail`` is the same without its subject ("is
    nested deeper than 64 levels."), for a caller that names the input itself ("The file
    …"); ``status`` is the HTTP status to answer with (413 too large, 400 anything else)."""

    def __init__(self, detail: str, *, status: int = 400) -> None:
        subject = "This" if detail.startswith("is not JSON") else "The JSON"
        super().__init__(f"{subject} {detail}")
        self.reason = f"{subject} {detail}"
        self.detail = detail
        self.status = status


def loads(
    data: bytes | str,
    *,
    max_bytes: int,
    max_depth: int = DEFAULT_MAX_DEPTH,
    max_int_digits: int = DEFAULT_MAX_INT_DIGITS,
) -> Any:
    """The JSON value in ``data``, within the bounds above; raises :class:`JsonRefused`."""
    raw = _as_utf8(data, max_bytes=max_bytes)
    if b"\x00" in raw:
        raise JsonRefused("holds a NUL character, which cannot be stored.")
    # Pair escaped backslashes off first (a run of them pairs from its left, as the
    # parser reads it), so that what is left of each backslash begins a real escape;
    # the placeholder keeps neighbours apart.
    unescaped = raw.replace(b"\\\\", b"__")
    if b"\\u0000" in unescaped:
        raise JsonRefused("holds a NUL character (\\u0000), which cannot be stored.")
    if _LONE_SURROGATE.search(unescaped):
        raise JsonRefused("holds an unpaired surrogate escape (like \\ud800), which is not text.")
    _check_depth(unescaped.replace(b'\\"', b"__"), max_depth=max_depth)
    text = raw.decode("utf-8")
    try:
        return json.loads(
            text,
            parse_int=_int_parser(max_int_digits),
            parse_float=_finite_float,
            parse_constant=_no_constant,
        )
    except JsonRefused:
        raise
    except json.JSONDecodeError as exc:
        raise JsonRefused(f"is not JSON: {exc}.") from None
    except ValueError as exc:  # Python's own int limit, when max_int_digits is above it.
        raise JsonRefused(f"holds a number Python refuses: {exc}.") from None
    except RecursionError:  # Unreachable after the depth check; kept as its guarantee.
        raise JsonRefused(f"is nested deeper than {max_depth} levels.") from None


def _as_utf8(data: bytes | str, *, max_bytes: int) -> bytes:
    """``data`` as UTF-8 bytes without a BOM, or a refusal (413 when too large)."""
    if isinstance(data, str):
        if len(data) > max_bytes:  # Each character is at least one byte.
            raise _too_large(max_bytes)
        try:
            data = data.encode("utf-8")
        except UnicodeEncodeError:
            raise JsonRefused("holds an unpaired surrogate, which is not text.") from None
    if len(data) > max_bytes:
        raise _too_large(max_bytes)
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JsonRefused(f"is not JSON: it is not UTF-8 text (byte {exc.start}).") from None
    return data


def _too_large(max_bytes: int) -> JsonRefused:
    return JsonRefused(f"is larger than {max_bytes:,} bytes.", status=413)


def _check_depth(unescaped: bytes, *, max_depth: int) -> None:
    """Refuse nesting deeper than ``max_depth``, reading the bytes without recursion.

    ``unescaped`` has no escaped quotes or backslashes left. What remains of it once
    strings are gone and only brackets are kept is the document's tree, which
    :func:`_shallow` matches at C speed (a few ns a byte) as far as it is no deeper than
    ``max_depth``.
    """
    # Keep quotes and brackets only (brackets inside strings too, until the strings go).
    skeleton = unescaped.translate(None, delete=_NOT_BRACKETS)
    # Two quotes side by side are a string with no brackets in it, or the end of one
    # string and the start of the next with nothing between: either way text (and
    # taking them off first makes the regex's work small).
    skeleton = _STRING.sub(b"", skeleton.replace(b'""', b"")).translate(_OPEN_AS_SQUARE)
    # Close what is left open, so that a truncated document's depth counts as well and
    # every bracket opened at the top closes somewhere after it.
    unclosed = 2 * skeleton.count(b"[") - len(skeleton)
    if unclosed > 0:
        skeleton += b"]" * unclosed
    shallow = _shallow(max_depth).match(skeleton)
    assert shallow is not None  # ``(...)*+`` matches the empty string at least
    end = shallow.end()
    # The match stops at a bracket that goes deeper than allowed, or at a closing one
    # that closes nothing (not JSON, which the parser says), or at the end.
    if skeleton[end : end + 1] == b"[":
        raise JsonRefused(f"is nested deeper than {max_depth} levels.")


@functools.lru_cache(maxsize=8)
def _shallow(max_depth: int) -> re.Pattern[bytes]:
    """A pattern matching balanced ``[]`` at most ``max_depth`` deep. Possessive, so it
    never backtracks (the grammar is deterministic) and needs no memory per bracket."""
    if not 0 <= max_depth <= MAX_DEPTH:
        raise ValueError(f"max_depth must be 0 to {MAX_DEPTH}, not {max_depth}.")
    pattern = b""
    for _ in range(max_depth):
        pattern = rb"(?:\[" + pattern + rb"\])*+"
    return re.compile(pattern)


def _int_parser(max_digits: int):
    def parse_int(digits: str) -> int:
        if len(digits.lstrip("-")) > max_digits:
            raise JsonRefused(
                f"holds an integer of {len(digits.lstrip('-')):,} digits; "
                f"at most {max_digits} are accepted."
            )
        return int(digits)

    return parse_int


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JsonRefused(f"holds the number {text[:40]}, beyond the range of a float.")
    return value


def _no_constant(name: str) -> float:
    raise JsonRefused(f"holds {name}, which is not a number JSON allows.")
