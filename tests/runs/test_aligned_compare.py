"""Compare aligns runs of one task by expected action and tool call, not by index.

alice's runs of airline/27 (expected: look the customer up, then a $150 certificate on
τ² 0.2; the lookup alone on 1.x): the gold run; one that also reads a reservation (an
inserted call); one that sends $149 (0.2: different arguments; 1.x: a certificate none
is owed; either way the first divergent write); one that never looks the customer up (a
missing call). bob, on her team, compares them too.
"""

from __future__ import annotations

import re

from apps.runs.models import Run
from tests.support import review
from tests.support.scored_runs import EXTRA_READ, GOLD, LOOKUP, certificate, stored_run
from tests.support.scripts import GOLD_CERTIFICATE


def _rows(page: str) -> list[str]:
    rows = page.split('data-testid="aligned-row"')[1:]
    assert rows, "the page shows no aligned rows"
    return rows


def _cells(row: str) -> list[str]:
    """Each run's cell of a row: the call's name or '-' for a gap (in column order)."""
    found = re.findall(
        r'data-testid="(aligned-gap)"|data-testid="aligned-call" data-name="(\w+)"', row
    )
    return ["-" if gap else name for gap, name in found]


def _compare(client, *runs: Run) -> str:
    response = client.get(f"/runs/compare/?ids={','.join(str(r.pk) for r in runs)}")
    assert response.status_code == 200
    return response.content.decode()


def test_an_inserted_call_faces_a_gap_and_the_calls_after_it_stay_aligned(
    llm_server, alice, alice_client, bob_client
):
    gold = stored_run(alice, llm_server, GOLD, model="org/gold")
    inserted = stored_run(alice, llm_server, [LOOKUP, EXTRA_READ, *GOLD[1:]], model="org/reader")
    assert gold.reward == inserted.reward == 1.0

    for client in (alice_client, bob_client):
        page = _compare(client, gold, inserted)
        assert 'data-aligned="true"' in page
        rows = [r for r in _rows(page) if "aligned-call" in r or "aligned-gap" in r]
        assert [_cells(r) for r in rows] == [
            ["get_user_details", "get_user_details"],
            ["-", "get_reservation_details"],
            *[["send_certificate", "send_certificate"]] * GOLD_CERTIFICATE,
        ]
        assert "Expected action 1: <code>get_user_details</code>" in rows[0]
        assert "Not an expected action" in rows[1]
        assert 'data-differs="true"' in rows[1]
        if GOLD_CERTIFICATE:
            assert 'data-differs="false"' in rows[2]
        # The talk before a call sits in its row; each call carries its own result.
        assert rows[0].count("My flight was delayed") == 2
        assert rows[1].count('data-testid="tool-result"') == 1 and "NO6JO3" in rows[1]
        assert "My flight was delayed" not in "".join(rows[1:])
        # By index the certificate would face the extra read.


def test_each_column_starts_with_its_database_diff_and_first_divergent_write(
    llm_server, alice, alice_client
):
    gold = stored_run(alice, llm_server, GOLD, model="org/gold")
    wrong = stored_run(alice, llm_server, [LOOKUP, certificate(149)], model="org/cheap")
    assert gold.reward == 1.0 and wrong.reward == 0.0

    page = _compare(alice_client, gold, wrong)
    counts = re.findall(r'data-testid="compare-db-changes"[^>]*>([^<]+)<', page)
    assert counts == [
        "0 differences from the expected DB",
        "1 difference from the expected DB",
    ]
    [path] = re.findall(r'data-testid="compare-db-path" data-path="([^"]+)"', page)
    assert path.startswith("users.ethan_martin_2396.payment_methods.certificate_")
    # 0.2 expects a $150 certificate: the amount differs. 1.x expects none: it is added.
    assert path.endswith(".amount") == GOLD_CERTIFICATE
    # In the run page's words ("only in this run", "missing here"), not the raw kind.
    [kind] = re.findall(r'data-testid="compare-db-path"[^>]*><span class="db-kind">([^<]+)<', page)
    assert kind == ("changed" if GOLD_CERTIFICATE else "only in this run")
    firsts = re.findall(r'data-testid="compare-first-divergent">([^<]+)<', page)
    assert firsts == ["no divergent write", "send_certificate"]
    head = page.split('data-testid="aligned-row"')[0]
    [args] = re.findall(r'data-testid="compare-divergent-args">(.*?)</p>', head)
    assert "amount=149" in args
    assert ("<mark" in args) == GOLD_CERTIFICATE  # no expected arguments to differ from on 1.x

    [row] = [r for r in _rows(page) if 'data-name="send_certificate"' in r]
    assert row.count('data-divergent="true"') == 1 and "first divergent write" in row
    if GOLD_CERTIFICATE:
        # The expected certificate's row: both calls side by side, the amount marked in each.
        assert _cells(row) == ["send_certificate", "send_certificate"]
        marked = re.findall(r'data-arg="(\w+)" data-differs="true"', row)
        assert marked == ["amount", "amount"]
        assert re.findall(r'data-arg="user_id" data-differs="(\w+)"', row) == ["false", "false"]
        assert 'data-kind="wrong_args"' in row
    else:
        # Not an expected action: a row of its own, the gold run's cell a gap.
        assert _cells(row) == ["-", "send_certificate"]
        assert "Not an expected action" in row
        assert 'data-kind="extra_write"' in row
    # The lookup row: same call, nothing marked.
    [lookup] = [r for r in _rows(page) if 'data-name="get_user_details"' in r]
    assert 'data-differs="true"' not in lookup


def test_three_and_four_runs_with_a_missing_call_align_on_the_expected_actions(
    llm_server, alice, alice_client
):
    gold = stored_run(alice, llm_server, [LOOKUP, certificate(150)], model="org/gold")
    inserted = stored_run(
        alice, llm_server, [LOOKUP, EXTRA_READ, certificate(150)], model="org/reader"
    )
    skipped = stored_run(alice, llm_server, [certificate(150)], model="org/hasty")
    three = _compare(alice_client, gold, inserted, skipped)
    assert three.count('data-testid="compare-column"') == 3
    calls = [_cells(r) for r in _rows(three) if "aligned-call" in r or "aligned-gap" in r]
    assert calls == [
        ["get_user_details", "get_user_details", "-"],
        ["-", "get_reservation_details", "-"],
        ["send_certificate", "send_certificate", "send_certificate"],
    ]

    wrong = stored_run(alice, llm_server, [LOOKUP, certificate(149)], model="org/cheap")
    four = _compare(alice_client, gold, inserted, skipped, wrong)
    calls = [_cells(r) for r in _rows(four) if "aligned-call" in r or "aligned-gap" in r]
    assert calls == [
        ["get_user_details", "get_user_details", "-", "get_user_details"],
        ["-", "get_reservation_details", "-", "-"],
        ["send_certificate"] * 4,
    ]
    assert 'class="compare cols-4 aligned"' in four
    assert "style=" not in four.split("<main", 1)[-1] and "<script>" not in four


def test_runs_of_different_tasks_are_shown_by_index_with_a_note(llm_server, alice, alice_client):
    mine = stored_run(alice, llm_server, [LOOKUP, certificate(150)], model="org/gold")
    other = review.stored_run(alice, task_id="1")
    page = _compare(alice_client, mine, other)
    assert 'data-aligned="false"' in page
    assert "aligning by expected action needs runs of one task" in page
    assert 'data-testid="compare-row"' in page and 'data-testid="aligned-row"' not in page
