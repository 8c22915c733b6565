"""The runs app's hooks and queue: how it tells the apps above it of a run's end, lets a
person take a fork over, and sends work to the workers — named, typed, tested."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest

from apps.runs import hooks, lifecycle, queue
from apps.runs.models import Run
from tau2site.celery import app as celery_app
from tests.support.scripts import queued_run


def test_the_feature_apps_register_their_hooks_at_start():
    assert "evaluations" in hooks.settled_hooks()
    assert hooks.fork_takeover() is not None


def test_every_name_the_queue_sends_and_beat_schedules_is_a_registered_task(settings):
    celery_app.loader.import_default_modules()
    registered = set(celery_app.tasks)
    assert set(queue.NAMES) <= registered
    assert {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()} <= registered


def test_the_queue_refuses_a_task_it_does_not_know():
    with pytest.raises(ValueError, match="Unknown task"):
        queue.enqueue("runs.nothing", 1)


@pytest.mark.django_db
def test_work_is_sent_by_name_with_ids_only_once_the_transaction_commits(
    monkeypatch, django_capture_on_commit_callbacks
):
    sent = []
    monkeypatch.setattr(celery_app, "send_task", lambda name, args: sent.append((name, args)))
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        queue.run_enqueue(7)
        queue.enqueue(queue.PLAY_CUSTOMER_TURN, 8, 3)
        assert sent == []  # not before the commit
    assert len(callbacks) == 2
    assert sent == [(queue.EXECUTE_RUN, [7]), (queue.PLAY_CUSTOMER_TURN, [8, 3])]


@pytest.fixture
def alice(django_user_model):
    return django_user_model.objects.create(username="alice")


@pytest.mark.django_db
def test_a_run_that_ends_tells_each_settled_hook_once(monkeypatch, alice):
    heard = []
    monkeypatch.setattr(hooks, "_settled", list(hooks._settled))
    hooks.on_run_settled("test", lambda run: heard.append(run.pk))
    run = queued_run(alice)
    assert lifecycle.run_finish(run=run, status=Run.Status.STOPPED, termination_reason="stopped")
    assert not lifecycle.run_finish(run=run, status=Run.Status.STOPPED)  # already final
    assert heard == [run.pk]


@pytest.mark.django_db
def test_a_run_taken_or_handed_back_tells_each_moved_hook(monkeypatch, caplog, alice):
    """Issue 33: an evaluation's page heard of a run's end only; it hears of a worker
    taking a run (queued → running) and of a run handed back to its queue too. A moved
    hook that raises is logged, and the run goes on."""
    heard = []
    # A hand-back drops the connection to open a fresh one (after a restart): not the
    # test's transaction, which holds the rows.
    monkeypatch.setattr(lifecycle, "close_old_connections", lambda: None)
    monkeypatch.setattr(hooks, "_moved", [])
    hooks.on_run_moved("broken", lambda run: 1 / 0)
    hooks.on_run_moved("test", lambda run: heard.append((run.pk, run.status)))
    run = queued_run(alice)
    with caplog.at_level(logging.ERROR, logger="apps.runs.hooks"):
        claimed = lifecycle.run_claim(run_id=run.pk, worker="w1")
    assert claimed is not None and heard == [(run.pk, Run.Status.RUNNING)]
    assert "moved, but its broken hook failed" in caplog.text
    assert lifecycle.run_claim(run_id=run.pk, worker="w2") is None  # held: no move
    lifecycle.run_hand_back(run=claimed, worker="w1", reason=Run.Resumption.DATABASE)
    assert [pk for pk, _ in heard] == [run.pk, run.pk]
    lifecycle.run_hand_back(run=claimed, worker="w1", reason=Run.Resumption.DATABASE)
    assert len(heard) == 2  # not held any more: nothing moved


@pytest.mark.django_db
def test_a_hook_that_raises_is_logged_and_the_run_stays_ended(monkeypatch, caplog, alice):
    monkeypatch.setattr(hooks, "_settled", [])

    def broken(run):
        raise RuntimeError("the evaluation could not go on")

    hooks.on_run_settled("broken", broken)
    hooks.on_run_settled("broken", broken)  # the same name replaces, never doubles
    assert hooks.settled_hooks() == ["broken"]
    run = queued_run(alice)
    with caplog.at_level(logging.ERROR, logger="apps.runs.hooks"):
        assert lifecycle.run_finish(run=run, status=Run.Status.STOPPED)
    run.refresh_from_db()
    assert run.status == Run.Status.STOPPED
    assert "its broken hook failed" in caplog.text


def test_django_starts_without_loading_tau2_or_litellm():
    """Registering the hooks at start-up loads no τ²: a manage.py command that never runs a
    conversation starts in well under a second, as before the hooks (τ² and litellm take
    seconds to import)."""
    code = (
        "import django, sys; django.setup(); "
        "print(sorted(m for m in ('tau2', 'litellm', 'tau2_env.engine.episodes') "
        "if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "tau2site.settings"},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "[]"
