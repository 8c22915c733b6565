"""Review on the run page: labels on a run or its messages, who may write and delete them,
the history's filters, the task page, the admin and the review queue.

alice owns the runs; bob is another member; charlie is anonymous; stella is staff.
Members label only when ``TAU2_REVIEW_BY_MEMBERS`` is on.
"""

import importlib
import re

import pytest
from django.contrib import admin
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.test import Client, RequestFactory, override_settings

from apps.runs import review
from apps.runs.admin import ReviewLabelInline
from apps.runs.models import ReviewLabel, Run
from tests.support.people import signed_in
from tests.support.review import staff_member, stored_run

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def stella(committed_db):
    return staff_member("stella")


@pytest.fixture
def stella_client(stella) -> Client:
    return signed_in(stella)


def label(run, by, *, seq=None, category="agent_error", severity="benign", note=""):
    event = None if seq is None else run.events.get(seq=seq)
    return review.label_create(
        run=run, by=by, event=event, category=category, severity=severity, note=note
    )


def add(client, run, *, htmx=True, **fields):
    data = {"category": "agent_error", "severity": "critical", "note": "", **fields}
    return client.post(f"/runs/{run.pk}/labels/", data, **(HTMX if htmx else {}))


# --- labelling on the run page ------------------------------------------------------------


def test_stella_labels_a_message_inline_and_everyone_sees_it_next_to_it(
    alice, alice_client, stella_client
):
    run = stored_run(alice)
    page = stella_client.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="review-1"' in page and 'id="review-run"' in page  # forms for staff
    assert 'data-testid="label-form"' in page

    response = add(stella_client, run, seq="1", note="Invented a <b>reservation</b>.")
    assert response.status_code == 200
    fragment = response.content.decode()
    assert fragment.startswith('<div class="review-slot" id="review-1"')
    assert "Invented a &lt;b&gt;reservation&lt;/b&gt;." in fragment
    saved = ReviewLabel.objects.get(run=run)
    assert saved.event == run.events.get(seq=1) and saved.severity == "critical"
    assert saved.created_by.username == "stella"

    # alice (a member, not a reviewer) sees it beside message 1, with no form and no Delete.
    page = alice_client.get(f"/runs/{run.pk}/").content.decode()
    slot = page[page.index('id="review-1"') :]
    slot = slot[: slot.index("</div>")]
    assert "Invented a &lt;b&gt;reservation" in slot and "agent error" in slot
    assert 'data-testid="label-form"' not in page and 'data-testid="delete-label"' not in page


def test_a_label_on_the_run_itself_shows_in_the_review_panel(alice, stella, stella_client):
    run = stored_run(alice)
    response = add(stella_client, run, htmx=False, category="task_bug", note="Ambiguous policy.")
    assert response.status_code == 302 and response["Location"] == f"/runs/{run.pk}/#review-run"
    assert ReviewLabel.objects.get(run=run).event is None
    page = stella_client.get(f"/runs/{run.pk}/").content.decode()
    panel = page[page.index('data-testid="review"') : page.index('data-testid="conversation"')]
    assert "task bug" in panel and "Ambiguous policy." in panel


def test_a_contradictory_or_misplaced_label_is_refused_with_a_reason(alice, stella_client):
    run = stored_run(alice)
    response = add(stella_client, run, seq="0", category="no_issue", severity="critical")
    assert response.status_code == 200
    assert "cannot be critical" in response.content.decode()
    assert add(stella_client, run, seq="7").status_code == 404  # no message 7 in this run
    assert add(stella_client, run, category="not_a_category").status_code == 200
    assert not ReviewLabel.objects.exists()


def test_the_slot_of_one_message_is_served_for_messages_that_arrive_live(
    alice, alice_client, stella_client
):
    run = stored_run(alice, status=Run.Status.RUNNING, reward=None)
    assert 'data-review-slot="' in stella_client.get(f"/runs/{run.pk}/").content.decode()
    slot = stella_client.get(f"/runs/{run.pk}/labels/slot/", {"seq": "1"})
    assert slot.status_code == 200
    assert slot.content.decode().startswith('<div class="review-slot" id="review-1"')
    assert 'data-testid="label-form"' in slot.content.decode()
    for junk in ("2", "-1", "1e3", "", "99999999999999999999"):
        response = stella_client.get(f"/runs/{run.pk}/labels/slot/", {"seq": junk})
        assert response.status_code == 404, junk
    # alice may read the run but not label: no form, no script asking for one.
    assert alice_client.get(f"/runs/{run.pk}/labels/slot/", {"seq": "1"}).content.strip() == b""
    assert 'data-review-slot="' not in alice_client.get(f"/runs/{run.pk}/").content.decode()
    assert Client().get(f"/runs/{run.pk}/labels/slot/", {"seq": "1"}).status_code == 403


# --- who may label and delete -------------------------------------------------------------


def test_bob_labels_only_when_members_may_review(alice, bob, bob_client):
    run = stored_run(alice)
    assert add(bob_client, run, seq="1").status_code == 403
    assert 'data-testid="label-form"' not in bob_client.get(f"/runs/{run.pk}/").content.decode()
    with pytest.raises(PermissionDenied):
        label(run, bob)
    assert not ReviewLabel.objects.exists()

    with override_settings(TAU2_REVIEW_BY_MEMBERS=True):
        assert 'data-testid="label-form"' in bob_client.get(f"/runs/{run.pk}/").content.decode()
        assert add(bob_client, run, seq="1").status_code == 200
    assert ReviewLabel.objects.get().created_by == bob


def test_charlie_cannot_label_even_when_runs_and_reviews_are_open(alice, stella):
    run = stored_run(alice)
    existing = label(run, stella, seq=0, note="Seen by all.")
    charlie = Client()
    assert add(charlie, run).status_code == 403
    with override_settings(TAU2_PUBLIC_RUNS=True, TAU2_REVIEW_BY_MEMBERS=True):
        page = charlie.get(f"/runs/{run.pk}/").content.decode()
        assert "Seen by all." in page and 'data-testid="label-form"' not in page
        assert add(charlie, run).status_code == 403
        assert charlie.post(f"/runs/{run.pk}/labels/{existing.pk}/delete/").status_code == 403
    assert list(ReviewLabel.objects.all()) == [existing]


@override_settings(TAU2_REVIEW_BY_MEMBERS=True)
def test_a_label_is_deleted_by_its_author_or_staff_only(
    alice, bob, stella, alice_client, bob_client, stella_client
):
    run = stored_run(alice)
    bobs, alices = label(run, bob, seq=1), label(run, alice, seq=1)

    page = bob_client.get(f"/runs/{run.pk}/").content.decode()
    assert page.count('data-testid="delete-label"') == 1  # his own only
    assert alice_client.post(f"/runs/{run.pk}/labels/{bobs.pk}/delete/").status_code == 403
    assert ReviewLabel.objects.filter(pk=bobs.pk).exists()

    response = bob_client.post(f"/runs/{run.pk}/labels/{bobs.pk}/delete/", **HTMX)
    assert response.status_code == 200
    assert f'data-label-id="{alices.pk}"' in response.content.decode()
    assert not ReviewLabel.objects.filter(pk=bobs.pk).exists()

    other = stored_run(bob)  # a label is deleted through its own run only
    assert stella_client.post(f"/runs/{other.pk}/labels/{alices.pk}/delete/").status_code == 404
    response = stella_client.post(f"/runs/{run.pk}/labels/{alices.pk}/delete/")
    assert response.status_code == 302 and response["Location"] == f"/runs/{run.pk}/#review-1"
    assert not ReviewLabel.objects.exists()


# --- one run's label, one run's message ---------------------------------------------------


def test_a_label_on_another_runs_message_is_refused_by_the_service_and_the_database(
    alice, bob, stella
):
    mine, theirs = stored_run(alice), stored_run(bob)
    stray = theirs.events.get(seq=1)
    with pytest.raises(ValidationError) as refused:
        review.label_create(
            run=mine, by=stella, event=stray, category="agent_error", severity="benign"
        )
    assert f"belongs to run {theirs.pk}, not to run {mine.pk}" in str(refused.value)
    # Around the model's checks, PostgreSQL's composite foreign key still refuses it.
    with pytest.raises(IntegrityError), transaction.atomic():
        ReviewLabel.objects.create(run=mine, event=stray, category="task_bug", severity="benign")
    assert not ReviewLabel.objects.exists()


def test_the_admin_offers_and_accepts_only_the_runs_own_messages(alice, bob, stella):
    mine, theirs = stored_run(alice, messages=3), stored_run(bob)
    stella.is_superuser = True  # the admin's permissions to add labels
    stella.save()
    request = RequestFactory().get(f"/admin/runs/run/{mine.pk}/change/")
    request.user = stella
    formset_class = ReviewLabelInline(Run, admin.site).get_formset(request, mine)
    offered = formset_class(instance=mine).forms[0].fields["event"].queryset
    assert set(offered) == set(mine.events.all())
    assert "#1 customer: line 1" in str(formset_class(instance=mine).forms[0]["event"])

    def post(event):
        return formset_class(
            {
                "labels-TOTAL_FORMS": "1",
                "labels-INITIAL_FORMS": "0",
                "labels-0-event": str(event.pk),
                "labels-0-category": "agent_error",
                "labels-0-severity": "benign",
                "labels-0-note": "",
            },
            instance=mine,
        )

    assert not post(theirs.events.get(seq=1)).is_valid()
    assert post(mine.events.get(seq=2)).is_valid()


def test_the_admins_label_form_refuses_another_runs_message(alice, bob, stella):
    mine, theirs = stored_run(alice), stored_run(bob)
    stella.is_superuser = True  # the admin's permissions to add labels
    stella.save()
    admin_client = signed_in(stella)
    data = {"run": mine.pk, "category": "user_sim_error", "severity": "critical", "note": "x"}
    response = admin_client.post(
        "/admin/runs/reviewlabel/add/", {**data, "event": theirs.events.get(seq=1).pk}
    )
    assert response.status_code == 200
    assert f"belongs to run {theirs.pk}, not to run {mine.pk}" in response.content.decode()
    assert not ReviewLabel.objects.exists()

    response = admin_client.post(
        "/admin/runs/reviewlabel/add/", {**data, "event": mine.events.get(seq=1).pk}
    )
    assert response.status_code == 302
    saved = ReviewLabel.objects.get()
    change = admin_client.get(f"/admin/runs/reviewlabel/{saved.pk}/change/")
    offered = change.context["adminform"].form.fields["event"].queryset
    assert set(offered) == set(mine.events.all())


# --- the history, the task page and the queue ---------------------------------------------


def test_the_history_filters_by_critical_label_and_by_category(alice, bob, stella, alice_client):
    critical, benign, unlabelled = stored_run(alice), stored_run(bob), stored_run(alice)
    label(critical, stella, seq=1, category="agent_error", severity="critical")
    label(critical, stella, category="task_bug", severity="benign")
    label(benign, stella, category="task_bug", severity="benign")

    def ids(**params):
        html = alice_client.get("/runs/", params).content.decode()
        return {r.pk for r in (critical, benign, unlabelled) if f'data-run-id="{r.pk}"' in html}

    assert ids() == {critical.pk, benign.pk, unlabelled.pk}
    assert ids(critical="1") == {critical.pk}
    assert ids(category="task_bug") == {critical.pk, benign.pk}
    assert ids(category="agent_error") == {critical.pk}
    assert ids(category="grader_bug") == set()
    assert ids(category="none") == {unlabelled.pk}
    assert ids(critical="1", person="bob") == set()  # with the other filters
    assert ids(category="task_bug", person="bob") == {benign.pk}
    page = alice_client.get("/runs/", {"critical": "1"}).content.decode()
    assert page.count('data-testid="critical-label"') == 1  # one row, not one per label


def test_the_task_page_reports_each_label_on_the_run_it_belongs_to(alice, bob, stella):
    first, second = stored_run(alice), stored_run(bob)
    label(second, stella, seq=1, category="user_sim_error", note="On the second run.")
    label(first, stella, category="task_bug", note="On the first run.")
    label(first, stella, seq=0, category="no_issue")

    assert 'data-testid="review-flags"' not in Client().get("/tasks/airline/27/").content.decode()
    page = signed_in(bob).get("/tasks/airline/27/").content.decode()
    flags = page[page.index('data-testid="review-flags"') :]
    assert "Review flags (2)" in flags  # "no issue" is not a flag
    on_second = flags[flags.index(f'data-run-id="{second.pk}"') :]
    assert on_second.index("On the second run.") < on_second.index("</li>")
    assert f'href="/runs/{second.pk}/#review-1"' in on_second
    assert f"run {second.pk}, message 1" in on_second
    on_first = flags[flags.index(f'data-run-id="{first.pk}"') :]
    assert f'href="/runs/{first.pk}/#review-run"' in on_first.split("</li>")[0]
    assert "On the first run." in on_first.split("</li>")[0]


def test_the_review_queue_puts_unreviewed_failures_first(
    alice, bob, stella, stella_client, bob_client
):
    solved = stored_run(alice)
    failed = stored_run(alice, status=Run.Status.FAILED, reward=None)
    unsolved = stored_run(bob, reward=0.0)
    reviewed = stored_run(bob, reward=0.0)
    label(reviewed, stella, category="agent_error")
    running = stored_run(alice, status=Run.Status.RUNNING, reward=None)
    solved_later = stored_run(bob)

    page = stella_client.get("/runs/review/").content.decode()
    rows = [int(pk) for pk in re.findall(r'data-testid="queue-row" data-run-id="(\d+)"', page)]
    assert rows == [unsolved.pk, failed.pk, solved_later.pk, solved.pk]
    assert reviewed.pk not in rows and running.pk not in rows
    assert 'data-testid="review-queue-link"' in stella_client.get("/runs/").content.decode()

    assert bob_client.get("/runs/review/").status_code == 403
    assert 'data-testid="review-queue-link"' not in bob_client.get("/runs/").content.decode()
    charlie = Client().get("/runs/review/")
    assert charlie.status_code == 302 and "/accounts/sign-in/" in charlie["Location"]
    with override_settings(TAU2_REVIEW_BY_MEMBERS=True):
        assert bob_client.get("/runs/review/").status_code == 200


def test_migration_0004_detaches_a_label_from_another_runs_message(alice, bob, stella):
    """The rows the old admin let through (run 1, message 5#2) keep their run and lose the
    message, with a note saying which it was, before the composite foreign key is added."""
    from django.apps import apps

    migration = importlib.import_module("apps.runs.migrations.0004_review_labels")
    mine, theirs = stored_run(alice), stored_run(bob)
    fine = label(mine, stella, seq=1, note="Right message.")
    with transaction.atomic():  # the composite key is checked at commit, after the repair
        stray = ReviewLabel.objects.create(
            run=mine, event=theirs.events.get(seq=1), category="task_bug", severity="benign"
        )
        migration.detach_events_of_other_runs(apps, None)
    stray.refresh_from_db()
    assert stray.run == mine and stray.event is None
    assert stray.note == f"[was on message {theirs.pk}#1, another run's]"
    fine.refresh_from_db()
    assert fine.event.seq == 1 and fine.note == "Right message."
