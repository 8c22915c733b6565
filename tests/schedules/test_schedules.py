"""An evaluation repeated on a schedule: beat's row, each tick a new evaluation with the
same settings as the owner, once per tick, and refusals in words.

alice starts evaluations and schedules them; bob is on her team; stella is staff.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.core.exceptions import ValidationError
from django_celery_beat.models import PeriodicTask
from django_celery_beat.schedulers import ModelEntry

from apps.evaluations import services as evaluations
from apps.evaluations.forms import EvaluationForm
from apps.evaluations.models import Evaluation
from apps.schedules import services, tasks
from apps.schedules.crons import CronError, cron_last_tick, cron_parse
from apps.schedules.models import EvaluationSchedule
from tau2site.celery import app
from tests.support import connections as with_connections
from tests.support.connections import CONNECTION_MODEL, openai_compatible_connection
from tests.support.scripts import AGENT_MODEL

staff = with_connections.staff
connections_cleared = with_connections.connections_cleared

# 03:00 UTC on Friday 4 December 2026: the nightly tick of that day (02:00) is the latest.
FRIDAY = datetime(2026, 12, 4, 3, 0, tzinfo=UTC)


def started(user, **fields) -> Evaluation:
    """An evaluation ``user`` starts as the form starts it (its runs stay queued)."""
    data = {
        "domain": "airline",
        "split": "test",
        "task_ids": "27 2",
        "agent_model": AGENT_MODEL,
        "num_trials": "2",
        "seed": "301",
        "max_steps": "30",
        "max_errors": "10",
        "concurrency": "4",
        "agent_temperature": "0.3",
        "agent_extras": '{"top_k": 20}',
        "name": "Nightly airline",
        **fields,
    }
    form = EvaluationForm(data, user=user)
    assert form.is_valid(), form.errors
    return evaluations.evaluation_start(user=user, data=form.cleaned_data)


def repeated(schedule, at=FRIDAY):
    return services.schedule_repeat(schedule_id=schedule.pk, now=at)


def test_making_a_schedule_makes_beats_row_with_its_crontab(alice):
    source = started(alice)
    schedule = services.schedule_create(evaluation=source, by=alice, preset="nightly")

    task = PeriodicTask.objects.get(pk=schedule.periodic_task_id)
    assert task.task == "schedules.repeat" == tasks.repeat.name
    assert json.loads(task.kwargs) == {"schedule_id": schedule.pk}
    assert json.loads(task.args) == []
    assert task.enabled
    crontab = task.crontab
    assert (crontab.minute, crontab.hour, crontab.day_of_month) == ("0", "2", "*")
    assert (crontab.month_of_year, crontab.day_of_week) == ("*", "*")
    assert str(crontab.timezone) == "UTC"
    assert schedule.name == "Nightly airline" and schedule.owner == alice

    services.schedule_edit(schedule=schedule, by=alice, preset="custom", cron="30 1 * * 1-5")
    task.refresh_from_db()
    assert (task.crontab.minute, task.crontab.hour, task.crontab.day_of_week) == ("30", "1", "1-5")


def test_a_tick_starts_the_same_evaluation_again_as_the_owner(alice, bob):
    source = started(alice)
    # bob repeats alice's evaluation: the repetitions are his.
    schedule = services.schedule_create(evaluation=source, by=bob, preset="nightly")

    tasks.repeat.apply(kwargs={"schedule_id": schedule.pk})  # as beat's message runs
    repetition = Evaluation.objects.exclude(pk=source.pk).get()

    assert repetition.created_by == bob
    assert repetition.spec == source.spec
    assert repetition.spec.agent.llm_args == {"temperature": 0.3, "top_k": 20}
    for field in ("domain", "split", "task_ids", "num_trials", "seed", "trial_seeds"):
        assert getattr(repetition, field) == getattr(source, field), field
    assert repetition.concurrency == source.concurrency
    assert repetition.runs.count() == 4
    assert repetition.name.startswith("Nightly airline · nightly 20")
    schedule.refresh_from_db()
    assert schedule.last_evaluation == repetition and schedule.last_error == ""
    assert schedule.last_tick is not None and schedule.last_run_at is not None


def test_it_is_named_after_its_tick(alice):
    schedule = services.schedule_create(evaluation=started(alice), by=alice, preset="weekly")
    # Monday 30 November 2026, 03:00: the latest weekly tick before Friday the 4th.
    assert repeated(schedule).name == "Nightly airline · weekly 2026-11-30"


def test_two_messages_for_one_tick_start_one_evaluation(alice):
    source = started(alice)
    schedule = services.schedule_create(evaluation=source, by=alice, preset="nightly")

    first = repeated(schedule)
    again = repeated(schedule, FRIDAY + timedelta(hours=20))  # still the 4th's tick

    assert first is not None and again is None
    assert Evaluation.objects.exclude(pk=source.pk).count() == 1
    # The next night's tick starts the next one.
    assert repeated(schedule, FRIDAY + timedelta(days=1)) is not None
    assert Evaluation.objects.exclude(pk=source.pk).count() == 2


def test_beat_back_after_days_down_sends_one_tick_and_it_runs_once(alice):
    source = started(alice)
    schedule = services.schedule_create(evaluation=source, by=alice, preset="nightly")
    # Beat last sent this schedule three days ago, then went down.
    task = schedule.periodic_task
    task.last_run_at = datetime.now(UTC) - timedelta(days=3)
    task.save()

    entry = ModelEntry(PeriodicTask.objects.get(pk=task.pk), app=app)
    due, _ = entry.is_due()
    assert due  # the missed nights: due once now
    entry = next(entry)  # what beat does once it has sent it
    due_again, wait = entry.is_due()
    assert not due_again and wait > 0  # and not again until the next night

    # Messages of the missed nights still queued (a worker down too) run as well: all
    # belong to today's tick, so one evaluation starts.
    for _ in range(3):
        tasks.repeat.apply(kwargs={"schedule_id": schedule.pk})
    assert Evaluation.objects.exclude(pk=source.pk).count() == 1


def test_a_paused_schedule_starts_nothing_until_resumed(alice):
    source = started(alice)
    schedule = services.schedule_create(evaluation=source, by=alice, preset="nightly")

    services.schedule_set_enabled(schedule=schedule, by=alice, enabled=False)
    assert not PeriodicTask.objects.get(pk=schedule.periodic_task_id).enabled
    assert repeated(schedule) is None
    assert not Evaluation.objects.exclude(pk=source.pk).exists()

    services.schedule_set_enabled(schedule=schedule, by=alice, enabled=True)
    assert PeriodicTask.objects.get(pk=schedule.periodic_task_id).enabled
    assert repeated(schedule) is not None


def test_an_owner_no_longer_active_gets_no_evaluation_and_the_schedule_says_why(alice):
    source = started(alice)
    schedule = services.schedule_create(evaluation=source, by=alice, preset="nightly")
    alice.is_active = False
    alice.save()

    assert repeated(schedule) is None
    schedule.refresh_from_db()
    assert (
        schedule.last_error == "alice may no longer start evaluations (their account is inactive)."
    )
    assert not Evaluation.objects.exclude(pk=source.pk).exists()


def test_an_owner_who_lost_the_connection_gets_no_evaluation_and_the_reason(
    alice, staff, llm_server, connections_cleared
):
    connection = openai_compatible_connection(
        llm_server, by=staff, slug="ours", access="named", allowed_users=[alice]
    )
    source = started(alice, agent_model=f"@ours/{CONNECTION_MODEL}")
    schedule = services.schedule_create(evaluation=source, by=alice, preset="nightly")
    assert schedule.spec["agent_model"] == f"@ours/{CONNECTION_MODEL}"

    connection.allowed_users.remove(alice)
    assert repeated(schedule) is None

    schedule.refresh_from_db()
    assert schedule.last_error.startswith("alice may no longer start it: Agent model: ")
    assert not Evaluation.objects.exclude(pk=source.pk).exists()
    assert schedule.last_evaluation is None
    # The tick is spent: the same night's second message says nothing new and starts nothing.
    assert repeated(schedule) is None


def test_it_refuses_to_schedule_what_the_person_could_not_start(
    alice, bob, staff, llm_server, connections_cleared
):
    openai_compatible_connection(
        llm_server, by=staff, slug="ours", access="named", allowed_users=[alice]
    )
    source = started(alice, agent_model=f"@ours/{CONNECTION_MODEL}")
    with pytest.raises(ValidationError) as refused:
        services.schedule_create(evaluation=source, by=bob, preset="nightly")
    assert refused.value.messages[0].startswith("It could not start as you now: Agent model: ")
    assert not EvaluationSchedule.objects.exists()


@pytest.mark.parametrize(
    ("cron", "said"),
    [
        ("0 2 * *", "A schedule is five fields"),
        ("0 25 * * *", "is not a cron expression"),
        ("zero 2 * * *", "is not a cron expression"),
        ("*/15 * * * *", "fires more than once an hour"),
        ("0 2 31 2 *", "day_of_month '31' never occurs in month_of_year '2'"),
        ("0 2 29 2 1", "does not fire in the next four years"),
    ],
)
def test_a_malformed_cron_is_refused_in_words(alice, cron, said):
    source = started(alice)
    with pytest.raises(ValidationError) as refused:
        services.schedule_create(evaluation=source, by=alice, preset="custom", cron=cron)
    assert said in refused.value.message_dict["cron"][0]
    assert not EvaluationSchedule.objects.exists()
    assert not PeriodicTask.objects.filter(task="schedules.repeat").exists()


def test_the_tick_of_a_moment_is_the_latest_firing_at_or_before_it():
    weekdays = cron_parse("30 1 * * 1-5")
    saturday = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
    assert cron_last_tick(weekdays, saturday) == datetime(2026, 12, 4, 1, 30, tzinfo=UTC)
    assert cron_last_tick(weekdays, datetime(2026, 12, 4, 1, 30, 59, tzinfo=UTC)) == datetime(
        2026, 12, 4, 1, 30, tzinfo=UTC
    )
    assert cron_last_tick(weekdays, datetime(2026, 12, 4, 1, 29, tzinfo=UTC)) == datetime(
        2026, 12, 3, 1, 30, tzinfo=UTC
    )
    leap = cron_parse("0 0 29 2 *")
    assert cron_last_tick(leap, saturday) == datetime(2024, 2, 29, 0, 0, tzinfo=UTC)
    with pytest.raises(CronError):
        cron_parse("")


def test_an_own_agents_evaluation_repeats_as_one_for_its_clients_to_pull(alice):
    source = started(
        alice, agent_model="", external_agent="support-bot@2026-12-03", agent_temperature=""
    )
    schedule = services.schedule_create(evaluation=source, by=alice, preset="nightly")

    again = repeated(schedule)

    assert again is not None and again.pk != source.pk
    assert again.external_agent and again.agent_model == "support-bot@2026-12-03"
    assert again.runs.filter(kind="agent", status="queued").count() == 4
