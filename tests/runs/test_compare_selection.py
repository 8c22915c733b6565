"""Compare with too few or too many runs: back to the list, the same runs ticked, and why.

alice is signed in; the runs are hers and bob's.
"""

import re

from apps.runs.models import Run
from apps.tasks.models import Task


def _run(user) -> Run:
    task = Task.objects.get(domain_id="airline", task_id="27")
    return Run.objects.create(
        task=task,
        domain="airline",
        created_by=user,
        agent_model="org/model-a",
        user_model="u/m",
        status=Run.Status.COMPLETED,
        reward=1.0,
    )


def _ticked(page: str) -> set[int]:
    boxes = re.findall(r'<input type="checkbox" name="pick" value="(\d+)"[^>]*>', page)
    checked = re.findall(r'<input type="checkbox" name="pick" value="(\d+)"[^>]* checked>', page)
    assert boxes, "the list shows no checkboxes"
    return {int(pk) for pk in checked}


def test_one_ticked_run_goes_back_to_the_list_still_ticked_with_the_reason(
    alice, bob, alice_client
):
    mine, theirs = _run(alice), _run(bob)

    response = alice_client.get(f"/runs/compare/?ids={mine.pk}")

    assert response.status_code == 302
    assert response["Location"] == f"/runs/?picked={mine.pk}"
    page = alice_client.get(response["Location"]).content.decode()
    assert "Pick 2 to 4 runs to compare; you picked 1 run." in page
    assert _ticked(page) == {mine.pk}
    assert theirs.pk not in _ticked(page)


def test_five_ticked_runs_stay_ticked_and_the_count_is_said(alice, alice_client):
    five = [_run(alice).pk for _ in range(5)]

    response = alice_client.get(f"/runs/compare/?ids={','.join(map(str, five))}", follow=True)

    assert response.status_code == 200
    page = response.content.decode()
    assert "you picked 5 runs" in page
    assert _ticked(page) == set(five)


def test_the_form_without_script_compares_the_ticked_runs(alice, bob, alice_client):
    a, b = _run(alice), _run(bob)

    response = alice_client.get(f"/runs/compare/?ids=&pick={a.pk}&pick={b.pk}")

    assert response.status_code == 200
    assert response.content.decode().count('data-testid="compare-column"') == 2


def test_junk_ids_are_no_selection_never_a_server_error(alice, alice_client):
    _run(alice)

    # (A NUL is refused before any view: tau2site.middleware.RejectNulMiddleware.)
    response = alice_client.get("/runs/compare/?ids=x,%C2%B2,-3,1e3,99999999999999999999")

    assert response.status_code == 302
    assert response["Location"] == "/runs/"
    page = alice_client.get("/runs/?picked=x,%C2%B2,-3").content.decode()
    assert "you picked no run" in page
    assert _ticked(page) == set()
