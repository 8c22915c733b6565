"""The one JSON reader for untrusted input: what json.loads returns within its bounds, and
one refusal with a reason and a status for everything else — never a RecursionError,
OverflowError or a NUL that PostgreSQL cannot store."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tau2_env.jsonbounds import DEFAULT_MAX_DEPTH, JsonRefused, loads

MiB = 1024 * 1024


def refusal(data: bytes | str, **bounds) -> JsonRefused:
    with pytest.raises(JsonRefused) as caught:
        loads(data, **{"max_bytes": 10 * MiB, **bounds})
    return caught.value


def depth(value) -> int:
    """How many arrays and objects deep ``value`` is (0 for a scalar), without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict | list):
            deepest = max(deepest, level)
            stack.extend(
                (child, level + 1) for child in (node.values() if isinstance(node, dict) else node)
            )
    return deepest


def test_it_reads_what_json_reads():
    text = '{"a": [1, -2, 3.5, true, null, "x\\"]}\\\\", {"b": "\\ud83d\\ude00 \\n"}], "": {}}'
    assert loads(text, max_bytes=1000) == json.loads(text)
    assert loads(text.encode(), max_bytes=1000) == json.loads(text)
    assert loads(b"\xef\xbb\xbf[1]", max_bytes=1000) == [1]  # a BOM, as Windows editors write


def test_it_refuses_more_bytes_than_allowed_with_413():
    assert refusal(b"[" + b"1," * 600 + b"1]", max_bytes=1000).status == 413
    # Characters count as their UTF-8 bytes: 400 × "é" is 800 bytes.
    assert refusal('["' + "é" * 600 + '"]', max_bytes=1000).status == 413
    assert loads('["' + "é" * 400 + '"]', max_bytes=1000) == ["é" * 400]


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b'["\xff"]', "not UTF-8"),
        ('["\ud800"]', "unpaired surrogate"),
        ("", "not JSON"),
        ("[1,]", "not JSON: Expecting value: line 1 column 4"),
        ("{'a': 1}", "not JSON"),
        ("[1] [2]", "not JSON: Extra data"),
        ("NaN", "NaN"),
        ("[-Infinity]", "-Infinity"),
        ("[1e999]", "1e999, beyond the range of a float"),
        ('{"a": ' + "9" * 21 + "}", "integer of 21 digits; at most 20"),
        ("[-" + "9" * 5000 + "]", "integer of 5,000 digits"),
        ('["a\x00b"]', "NUL character"),
        ('{"a\x00": 1}', "NUL character"),
        ('["a\\u0000b"]', "NUL character (\\u0000)"),
        ('{"\\u0000": 1}', "NUL character (\\u0000)"),
        ('["\\ud800"]', "unpaired surrogate escape"),
        ('["\\udc00x"]', "unpaired surrogate escape"),
        ('["\\ud800\\\\\\udc00"]', "unpaired surrogate escape"),  # a backslash between
    ],
)
def test_it_refuses_what_cannot_be_stored_or_read_with_400_and_says_why(data, reason):
    refused = refusal(data)
    assert refused.status == 400 and reason in refused.reason and str(refused) == refused.reason


def test_escaped_backslashes_are_not_escapes():
    assert loads('["\\\\u0000", "\\\\ud800"]', max_bytes=100) == ["\\u0000", "\\ud800"]
    assert loads('["\\\\\\"[[[["]', max_bytes=100, max_depth=1) == ['\\"[[[[']


@pytest.mark.parametrize("levels", [50_000, 100_000, 1_000_000])
@pytest.mark.parametrize(
    "text",
    [
        lambda n: "[" * n,
        lambda n: "[" * n + "]" * n,
        lambda n: '{"a":' * n + "1" + "}" * n,
        lambda n: '[{"a": [], "b": "]"}, ' * n + "]" * n,
    ],
)
def test_nesting_far_too_deep_is_refused_before_parsing(levels, text, monkeypatch):
    """Refused by the depth check alone: json never sees it (its recursion is what a deep
    document would exhaust). How fast: ``bench/jsonbounds.py``."""

    def never(*args, **kwargs):
        raise AssertionError("json parsed a document the depth check should have refused")

    monkeypatch.setattr("tau2_env.jsonbounds.json.loads", never)
    refused = refusal(text(levels), max_bytes=100 * MiB)
    assert f"nested deeper than {DEFAULT_MAX_DEPTH} levels" in refused.reason


def test_nesting_is_allowed_up_to_max_depth_exactly():
    assert depth(loads("[" * 64 + "]" * 64, max_bytes=1000)) == 64
    assert "deeper than 64" in refusal("[" * 65 + "]" * 65).reason
    assert depth(loads('{"a": [{"b": [[]]}], "c": "]]]]"}', max_bytes=100, max_depth=5)) == 5
    assert "deeper than 4" in refusal('{"a": [{"b": [[]]}], "c": "]]]]"}', max_depth=4).reason
    # Brackets inside strings, escaped quotes included, are text, not nesting.
    assert loads('["[[[[\\"[[[[", "{{{{"]', max_bytes=100, max_depth=1) == ['[[[["[[[[', "{{{{"]


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**19), 10**19)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00")),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(alphabet='[]{}"\\ab'), children, max_size=4)
    ),
    max_leaves=40,
)


@settings(max_examples=300, deadline=None)
@given(value=json_values, max_depth=st.integers(0, 8))
def test_the_depth_found_without_parsing_is_the_depth_of_the_value(value, max_depth):
    text = json.dumps(value, ensure_ascii=False)
    if depth(value) <= max_depth:
        assert loads(text, max_bytes=10 * MiB, max_depth=max_depth) == value
    else:
        assert f"deeper than {max_depth}" in refusal(text, max_depth=max_depth).reason


def large_results_like(size: int) -> bytes:
    """A τ²-results-shaped file of about ``size`` bytes: conversations with tool calls,
    escaped text and numbers."""
    message = {
        "role": "assistant",
        "content": 'Your reservation "8JX2WO" is booked.\nFlights: [HAT001, HAT002] — {€120}\\',
        "tool_calls": [
            {
                "id": "call_1",
                "name": "book_reservation",
                "arguments": {
                    "user_id": "mia_li_3668",
                    "passengers": [{"first_name": "Mia", "dob": "1990-04-05"}],
                    "payment": {"amount": 120.5, "id": 7},
                },
            }
        ],
        "usage": {"prompt_tokens": 1234, "completion_tokens": 56},
        "cost": 0.00123,
        "turn_idx": 3,
    }
    one = json.dumps(message, ensure_ascii=False)
    per_sim = 40
    sim = (
        '{"id": "s", "task_id": "27", "trial": 0, "duration": 12.5, "messages": ['
        + ", ".join([one] * per_sim)
        + "]}"
    )
    count = max(1, size // len(sim.encode()))
    return (
        '{"info": {"max_steps": 100}, "simulations": [' + ", ".join([sim] * count) + "]}"
    ).encode()


def test_a_results_shaped_file_reads_as_json_reads_it():
    """The bounded reader gives what json gives on a results-shaped file (how fast, beside
    json.loads on 100 MiB: ``bench/jsonbounds.py``)."""
    data = large_results_like(2 * MiB)
    assert loads(data, max_bytes=len(data)) == json.loads(data)


def test_pythons_own_integer_limit_is_a_refusal_too():
    # Above Python's 4,300-digit limit for int(), should a caller allow that many.
    assert "Python refuses" in refusal("[" + "9" * 5000 + "]", max_int_digits=10_000).reason


def test_a_depth_beyond_what_the_reader_can_check_is_a_programming_error():
    with pytest.raises(ValueError, match="max_depth must be 0 to 256"):
        loads("[]", max_bytes=10, max_depth=1000)


def test_a_refusal_names_its_input_the_json_unless_the_caller_names_it():
    nested = refusal("[" * 100)
    assert nested.reason == "The JSON is nested deeper than 64 levels."
    assert f"The file {nested.detail}" == "The file is nested deeper than 64 levels."
    assert refusal("[1,]").reason.startswith("This is not JSON: Expecting value")
    assert refusal("[1,]").detail.startswith("is not JSON: Expecting value")
