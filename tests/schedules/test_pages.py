"""Schedules' pages: "Repeat on a schedule…" on an evaluation's page, the list of one's
schedules with pause / resume / edit / delete, and refusals said in words.

alice repeats her evaluation; bob is on her team; stella is staff.
"""

from __future__ import annotations

import html

from django_celery_beat.models import PeriodicTask

from apps.schedules import services
from apps.schedules.models import EvaluationSchedule
from tests.schedules.test_schedules import FRIDAY, started
from tests.support.connections import staff  # noqa: F401 (a fixture)
from tests.support.people import signed_in


def page(response) -> str:
    return html.unescape(response.content.decode())


def test_alice_repeats_her_evaluation_nightly_from_its_page(alice):
    source = started(alice)
    client = signed_in(alice)
    shown = page(client.get(source.get_absolute_url()))
    assert "Repeat on a schedule…" in shown and 'data-testid="schedule-form"' in shown

    response = client.post(
        f"/schedules/evaluations/{source.pk}/", {"preset": "nightly", "name": "Every night"}
    )
    assert response.status_code == 302 and response["Location"] == "/schedules/"
    schedule = EvaluationSchedule.objects.get()
    assert (schedule.owner, schedule.source, schedule.name) == (alice, source, "Every night")

    listed = page(client.get("/schedules/"))
    assert "Repeating it every day at 02:00." in listed
    assert "Every night" in listed and "every day at 02:00" in listed and "not yet" in listed
    # The evaluation's page lists it too.
    assert "Every night" in page(client.get(source.get_absolute_url()))
    # And the evaluations' list leads to them.
    assert 'href="/schedules/" data-testid="schedules-link"' in page(client.get("/evaluations/"))


def test_a_malformed_cron_is_refused_in_words_on_the_page(alice):
    source = started(alice)
    client = signed_in(alice)
    response = client.post(
        f"/schedules/evaluations/{source.pk}/",
        {"preset": "custom", "cron": "0 2 * *"},
        follow=True,
    )
    assert response.redirect_chain[-1][0] == f"{source.get_absolute_url()}#schedules"
    assert "A schedule is five fields" in page(response)
    assert not EvaluationSchedule.objects.exists()


def test_the_list_says_the_last_run_and_the_last_error(alice):
    source = started(alice)
    schedule = services.schedule_create(evaluation=source, by=alice, preset="nightly")
    repetition = services.schedule_repeat(schedule_id=schedule.pk, now=FRIDAY)
    client = signed_in(alice)

    listed = page(client.get("/schedules/"))
    assert f'href="/evaluations/{repetition.pk}/" data-testid="last-evaluation"' in listed
    assert "Nightly airline · nightly 2026-12-04" in listed

    EvaluationSchedule.objects.filter(pk=schedule.pk).update(last_error="alice may no longer …")
    assert "alice may no longer …" in page(client.get("/schedules/"))


def test_alice_pauses_edits_resumes_and_deletes_it(alice):
    schedule = services.schedule_create(evaluation=started(alice), by=alice, preset="nightly")
    client = signed_in(alice)
    task_id = schedule.periodic_task_id

    assert client.post(f"/schedules/{schedule.pk}/pause/").status_code == 302
    assert not PeriodicTask.objects.get(pk=task_id).enabled
    assert 'data-testid="paused"' in page(client.get("/schedules/"))
    assert client.post(f"/schedules/{schedule.pk}/resume/").status_code == 302
    assert PeriodicTask.objects.get(pk=task_id).enabled

    refused = client.post(f"/schedules/{schedule.pk}/", {"preset": "custom", "cron": "61 2 * * *"})
    assert refused.status_code == 400
    assert "is not a cron expression" in page(refused)
    saved = client.post(f"/schedules/{schedule.pk}/", {"preset": "custom", "cron": "15 4 * * 6"})
    assert saved.status_code == 302
    task = PeriodicTask.objects.get(pk=task_id)
    assert (task.crontab.minute, task.crontab.hour, task.crontab.day_of_week) == ("15", "4", "6")

    assert client.post(f"/schedules/{schedule.pk}/delete/").status_code == 302
    assert not EvaluationSchedule.objects.exists()
    assert not PeriodicTask.objects.filter(pk=task_id).exists()


def test_bob_neither_sees_nor_changes_alices_schedule_and_staff_do(alice, bob, staff):  # noqa: F811
    schedule = services.schedule_create(evaluation=started(alice), by=alice, preset="weekly")
    bob_client, staff_client = signed_in(bob), signed_in(staff)

    assert "no-schedules" in page(bob_client.get("/schedules/"))
    assert bob_client.post(f"/schedules/{schedule.pk}/pause/").status_code == 403
    assert PeriodicTask.objects.get(pk=schedule.periodic_task_id).enabled

    assert "Nightly airline" in page(staff_client.get("/schedules/"))
    assert staff_client.post(f"/schedules/{schedule.pk}/pause/").status_code == 302
    assert not PeriodicTask.objects.get(pk=schedule.periodic_task_id).enabled
