"""The alignment of runs' tool calls (tau2_env.engine.alignment): an inserted call, a missing call,
different arguments, three and four runs, an empty run, and no shared task (no centre)."""

from __future__ import annotations

from tau2_env.engine.alignment import Call, Row, align, differing_args

USER = {"user_id": "ethan_martin_2396"}
EXPECTED = [
    Call("get_user_details", USER, anchor=0),
    Call("get_reservation_details", {"reservation_id": "NO6JO3"}, anchor=1),
    Call("send_certificate", {**USER, "amount": 150}, anchor=2),
]


def _gold() -> list[Call]:
    return [Call(c.name, dict(c.arguments), anchor=c.anchor) for c in EXPECTED]


def _table(rows: list[Row], centre, runs) -> list[tuple]:
    """Each row as (expected name or '-', each run's call name or '-')."""
    return [
        (
            centre[r.centre].name if r.centre is not None else "-",
            *(runs[k][i].name if i is not None else "-" for k, i in enumerate(r.cells)),
        )
        for r in rows
    ]


def test_identical_runs_share_every_row_with_the_expected_actions():
    runs = [_gold(), _gold()]
    rows = align(runs, centre=EXPECTED)
    assert rows == [Row(0, (0, 0)), Row(1, (1, 1)), Row(2, (2, 2))]


def test_an_inserted_call_gets_its_own_row_with_a_gap_in_the_other_run():
    extra = Call("search_direct_flight", {"origin": "JFK", "destination": "LAX"})
    inserted = [*_gold()[:2], extra, _gold()[2]]
    rows = align([_gold(), inserted], centre=EXPECTED)
    assert _table(rows, EXPECTED, [_gold(), inserted]) == [
        ("get_user_details", "get_user_details", "get_user_details"),
        ("get_reservation_details", "get_reservation_details", "get_reservation_details"),
        ("-", "-", "search_direct_flight"),
        ("send_certificate", "send_certificate", "send_certificate"),
    ]


def test_a_missing_call_is_a_gap_in_its_expected_row_not_a_shift_of_the_rest():
    short = [_gold()[0], _gold()[2]]  # never looked the reservation up
    rows = align([_gold(), short], centre=EXPECTED)
    assert rows == [Row(0, (0, 0)), Row(1, (1, None)), Row(2, (2, 1))]
    # By index the certificate would have faced the reservation lookup.


def test_a_call_with_other_arguments_shares_the_row_and_names_the_argument():
    wrong = [*_gold()[:2], Call("send_certificate", {**USER, "amount": 149}, anchor=2)]
    rows = align([_gold(), wrong], centre=EXPECTED)
    assert rows[-1] == Row(2, (2, 2))
    assert differing_args([_gold()[2], wrong[2]]) == ("amount",)
    assert differing_args([_gold()[2], None, _gold()[2]]) == ()
    lacking = Call("send_certificate", USER)
    assert differing_args([_gold()[2], lacking]) == ("amount",)


def test_an_unanchored_call_of_the_same_tool_aligns_by_signature():
    """Without diagnosis anchors (an unscored run) the same call still meets its row."""
    plain = [Call(c.name, dict(c.arguments)) for c in EXPECTED]
    rows = align([_gold(), plain], centre=EXPECTED)
    assert rows == [Row(0, (0, 0)), Row(1, (1, 1)), Row(2, (2, 2))]


def test_calls_anchored_to_different_expected_actions_never_share_a_row():
    a = [Call("get_user_details", USER, anchor=0)]
    b = [Call("get_user_details", USER, anchor=1)]
    rows = align([a, b])
    assert rows == [Row(None, (0, None)), Row(None, (None, 0))]


def test_three_runs_line_up_a_shared_extra_call_in_one_row():
    extra = Call("get_reservation_details", {"reservation_id": "ZFA04Y"})
    first = [_gold()[0], extra, *_gold()[1:]]
    second = [_gold()[0], *_gold()[2:]]
    third = [_gold()[0], extra, _gold()[1]]
    runs = [first, second, third]
    rows = align(runs, centre=EXPECTED)
    assert _table(rows, EXPECTED, runs) == [
        ("get_user_details",) * 4,
        ("-", "get_reservation_details", "-", "get_reservation_details"),
        ("get_reservation_details", "get_reservation_details", "-", "get_reservation_details"),
        ("send_certificate", "send_certificate", "send_certificate", "-"),
    ]
    extra_row = rows[1]
    assert runs[0][extra_row.cells[0]].arguments["reservation_id"] == "ZFA04Y"


def test_four_runs_keep_each_runs_order_and_every_call_once():
    runs = [
        _gold(),
        [_gold()[2]],
        [Call("think", {"thought": "check"}), *_gold()],
        [_gold()[1], _gold()[0]],  # out of order: one of them must be a gap row
    ]
    rows = align(runs, centre=EXPECTED)
    for k, run in enumerate(runs):
        used = [r.cells[k] for r in rows if r.cells[k] is not None]
        assert used == list(range(len(run))), f"run {k} lost or reordered a call"
    assert [r.centre for r in rows if r.centre is not None] == [0, 1, 2]
    for r in rows:
        names = {runs[k][i].name for k, i in enumerate(r.cells) if i is not None}
        if r.centre is not None:
            names.add(EXPECTED[r.centre].name)
        assert len(names) == 1, f"a row mixes tools: {names}"


def test_an_empty_run_is_all_gaps_and_no_runs_is_no_rows():
    rows = align([_gold(), []], centre=EXPECTED)
    assert rows == [Row(0, (0, None)), Row(1, (1, None)), Row(2, (2, None))]
    assert align([[], []]) == []
    assert align([[], []], centre=EXPECTED) == [Row(i, (None, None)) for i in range(3)]
    assert align([]) == []


def test_without_a_centre_the_runs_align_pairwise_against_the_first():
    a = [Call("get_user_details", USER), Call("list_all_airports")]
    b = [Call("list_all_airports")]
    rows = align([a, b])
    assert rows == [Row(None, (0, None)), Row(None, (1, 0))]


def test_same_tool_with_other_arguments_loses_to_the_same_call():
    a = [Call("get_reservation_details", {"reservation_id": "X"})]
    b = [
        Call("get_reservation_details", {"reservation_id": "Y"}),
        Call("get_reservation_details", {"reservation_id": "X"}),
    ]
    assert align([a, b]) == [Row(None, (None, 0)), Row(None, (0, 1))]


def test_a_phone_call_never_shares_a_row_with_an_agent_call_of_the_same_name():
    """telecom: the customer's tools run on their phone (requestor ``user``)."""
    agent = [Call("toggle_roaming", {}, requestor="assistant")]
    phone = [Call("toggle_roaming", {}, requestor="user")]
    assert align([agent, phone]) == [Row(None, (0, None)), Row(None, (None, 0))]
    assert align([phone, phone]) == [Row(None, (0, 0))]
