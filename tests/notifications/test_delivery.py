"""Delivering a webhook: signed so that the manual's check verifies it, through the
outbound policy, retried on a worker until the receiver is back, bounded by a deadline
per attempt, every attempt logged.

The receiver is a local HTTP server in a thread of the test; loopback is allowed by
the suite's ``TAU2_OUTBOUND_ALLOW`` (the tests of the policy's refusal remove it). The
worker tests use the session's real Celery worker, started with a short backoff and a
2 s deadline (``TAU2_WEBHOOK_BACKOFF``, ``TAU2_WEBHOOK_TIMEOUT`` in ``tests/conftest.py``):
the logic is the production one, only the waits are shorter.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from apps.evaluations import baselines
from apps.evaluations import services as evaluations
from apps.evaluations.models import Evaluation
from apps.notifications import services
from apps.notifications.models import Attempt, Delivery, Event, Subscription
from apps.notifications.payloads import sign
from tests.notifications.support import docs_verify, subscribed
from tests.support.evaluations import stored_evaluation
from tests.support.webhooks import WebhookReceiver


@pytest.fixture
def held(monkeypatch) -> list[int]:
    """Deliveries are not sent to the workers: the test makes the attempts itself."""
    ids: list[int] = []
    monkeypatch.setattr(services, "_send_later", ids.append)
    return ids


@pytest.fixture
def no_allow_list(monkeypatch):
    monkeypatch.delenv("TAU2_OUTBOUND_ALLOW", raising=False)


def _wait(predicate, *, timeout: float = 30.0, what: str = "it"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"waited {timeout:g} s for {what}")


def _now_due(delivery: Delivery) -> None:
    Delivery.objects.filter(pk=delivery.pk, next_attempt_at__isnull=False).update(
        next_attempt_at=timezone.now()
    )


def test_a_delivery_is_signed_as_the_manual_verifies_it(
    alice, subscriptions_cleared, receiver, held
):
    subscription, secret = subscribed(alice, receiver.url)
    delivery = services.subscription_test(by=alice, subscription=subscription)

    assert services.delivery_attempt(delivery_id=delivery.pk) is None  # delivered: no next

    [got] = receiver.received
    verify = docs_verify()
    assert verify(secret, got.headers, got.body)
    assert not verify(secret, got.headers, got.body + b" ")  # the body was changed
    assert not verify("tau2wh_another", got.headers, got.body)  # another secret
    stale = {**got.headers, "x-tau2-timestamp": str(int(time.time()) - 3600)}
    stale["x-tau2-signature"] = sign(
        secret=secret, timestamp=stale["x-tau2-timestamp"], body=got.body
    )
    assert not verify(secret, stale, got.body)  # replayed an hour later
    assert got.headers["x-tau2-event"] == "test"
    assert got.headers["x-tau2-delivery"] == str(delivery.uid)
    body = json.loads(got.body)
    assert body["version"] == 1 and body["delivery"] == str(delivery.uid)
    # Neither the secret nor the URL's token is ever in what is sent.
    assert secret not in got.body.decode() and "CANARY-URL-TOKEN" not in got.body.decode()
    delivery.refresh_from_db()
    assert delivery.status == Delivery.Status.DELIVERED
    [attempt] = delivery.tries.all()
    assert attempt.ok and attempt.status_code == 204 and attempt.error == ""


def test_the_slack_format_is_text_and_blocks(alice, subscriptions_cleared, receiver, held):
    subscription, _ = subscribed(alice, receiver.url, format=Subscription.Format.SLACK)
    delivery = services.subscription_test(by=alice, subscription=subscription)

    services.delivery_attempt(delivery_id=delivery.pk)

    body = json.loads(receiver.received[0].body)
    assert set(body) == {"text", "blocks"}
    assert body["text"].startswith("*Test event*")
    assert body["blocks"][0]["text"]["text"] == body["text"]


def test_a_failed_attempt_is_logged_in_words_and_tried_again_after_the_backoff(
    alice, subscriptions_cleared, receiver, held, settings
):
    settings.TAU2_WEBHOOK_BACKOFF = [10.0, 30.0]
    subscription, _ = subscribed(alice, receiver.url)
    delivery = services.subscription_test(by=alice, subscription=subscription)
    receiver.answer = 503

    waits = []
    for _ in range(3):
        waits.append(services.delivery_attempt(delivery_id=delivery.pk))
        _now_due(delivery)  # as if the wait had passed

    assert waits == [10.0, 30.0, None]  # then failed
    delivery.refresh_from_db()
    assert delivery.status == Delivery.Status.FAILED and delivery.attempts == 3
    assert [a.error for a in delivery.tries.all()] == ["HTTP 503"] * 3
    assert services.delivery_attempt(delivery_id=delivery.pk) is None  # nothing more
    assert len(receiver.received) == 3

    receiver.answer = "ok"
    services.delivery_redeliver(by=alice, delivery=delivery)
    assert services.delivery_attempt(delivery_id=delivery.pk) is None
    delivery.refresh_from_db()
    assert delivery.status == Delivery.Status.DELIVERED
    assert [a.number for a in delivery.tries.all()] == [1, 2, 3, 4]
    assert receiver.received[-1].headers["x-tau2-delivery"] == str(delivery.uid)  # same id


def test_a_redirect_is_not_followed(alice, subscriptions_cleared, receiver, held):
    subscription, _ = subscribed(alice, receiver.url)
    delivery = services.subscription_test(by=alice, subscription=subscription)
    receiver.answer = 302

    services.delivery_attempt(delivery_id=delivery.pk)

    [attempt] = Attempt.objects.filter(delivery=delivery)
    assert attempt.error == "HTTP 302: a redirect, which webhooks do not follow"


def test_a_hanging_receiver_ends_the_attempt_at_its_deadline(
    alice, subscriptions_cleared, receiver, held, settings
):
    settings.TAU2_WEBHOOK_TIMEOUT = 1.0
    subscription, _ = subscribed(alice, receiver.url)
    delivery = services.subscription_test(by=alice, subscription=subscription)
    receiver.answer = "hang"

    started = time.monotonic()
    wait = services.delivery_attempt(delivery_id=delivery.pk)
    took = time.monotonic() - started

    assert took < 2.5 and wait == settings.TAU2_WEBHOOK_BACKOFF[0]
    [attempt] = Attempt.objects.filter(delivery=delivery)
    assert attempt.error == "no complete answer within 1 s"
    assert 900 <= attempt.duration_ms < 2500


def test_an_internal_destination_fails_at_once_in_words(
    alice, subscriptions_cleared, receiver, held
):
    subscription, _ = subscribed(alice, receiver.url)  # allowed when it was made
    delivery = services.subscription_test(by=alice, subscription=subscription)

    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("TAU2_OUTBOUND_ALLOW", raising=False)  # the operator no longer allows it
        assert services.delivery_attempt(delivery_id=delivery.pk) is None

    delivery.refresh_from_db()
    assert delivery.status == Delivery.Status.FAILED and not receiver.received
    [attempt] = delivery.tries.all()
    assert "127.0.0.1 is a loopback address (this server itself)" in attempt.error
    assert "CANARY-URL-TOKEN" not in attempt.error


def test_a_form_refuses_an_internal_url_in_the_connections_words(
    alice, alice_client, subscriptions_cleared, no_allow_list
):
    response = alice_client.post(
        "/notifications/new/",
        {
            "name": "Mine",
            "url": "http://169.254.169.254/latest/meta-data",
            "events": [Event.FINISHED],
            "format": "json",
            "active": "on",
        },
    )

    assert response.status_code == 400
    page = response.content.decode()
    assert (
        "169.254.169.254 is a link-local address (where cloud metadata services answer): the "
        "server does not call private, loopback, link-local or metadata addresses for an "
        "endpoint people type (its operator may allow some in TAU2_OUTBOUND_ALLOW)."
    ) in page
    assert not Subscription.objects.exists()


@pytest.mark.slow
def test_a_receiver_down_for_a_while_gets_it_when_it_returns(
    alice, subscriptions_cleared, celery_worker
):
    down = WebhookReceiver().start()
    port = down.port
    down.stop()  # nothing listens on its port now
    subscription, secret = subscribed(alice, down.url)
    delivery = services.subscription_test(by=alice, subscription=subscription)

    # The worker tries, is refused, waits 0.5 s, 1 s, 1 s… (the suite's backoff).
    _wait(lambda: delivery.tries.count() >= 2, what="two refused attempts")
    back = WebhookReceiver(port=port).start()
    try:
        _wait(
            lambda: Delivery.objects.get(pk=delivery.pk).status == Delivery.Status.DELIVERED,
            what="the delivery once the receiver is back",
        )
        [got] = back.received
    finally:
        back.stop()

    assert docs_verify()(secret, got.headers, got.body)
    tries = list(delivery.tries.all())
    assert tries[-1].ok and tries[-1].status_code == 204
    refused = tries[:-1]
    assert len(refused) >= 2
    assert all(not a.ok and a.status_code is None for a in refused)
    assert all(a.error == "could not connect (refused, or no such host)" for a in refused)
    assert [a.number for a in tries] == list(range(1, len(tries) + 1))


@pytest.mark.slow
def test_a_hanging_receiver_holds_a_worker_no_longer_than_the_deadline(
    alice, subscriptions_cleared, celery_worker, receiver
):
    receiver.answer = "hang"
    slow, _ = subscribed(alice, receiver.url, name="slow")
    with WebhookReceiver() as fine_receiver:
        fine, _ = subscribed(alice, fine_receiver.url, name="fine")
        hanging = services.subscription_test(by=alice, subscription=slow)
        _wait(lambda: receiver.received, what="the hanging receiver to be called")
        quick = services.subscription_test(by=alice, subscription=fine)

        _wait(
            lambda: Delivery.objects.get(pk=quick.pk).status == Delivery.Status.DELIVERED,
            timeout=10,
            what="the other delivery, while the first one hangs",
        )
        first = _wait(
            lambda: Attempt.objects.filter(delivery=hanging).first(),
            timeout=10,
            what="the hanging attempt to end",
        )

    assert first.error == "no complete answer within 2 s"  # the suite's worker's deadline
    assert 1900 <= first.duration_ms < 4000
    assert Delivery.objects.get(pk=hanging.pk).status in Delivery.WAITING  # tried again later


def test_a_duplicate_or_early_message_sends_nothing(
    alice, subscriptions_cleared, receiver, held, settings
):
    settings.TAU2_WEBHOOK_BACKOFF = [30.0]
    subscription, _ = subscribed(alice, receiver.url)
    delivery = services.subscription_test(by=alice, subscription=subscription)
    receiver.answer = 503
    assert services.delivery_attempt(delivery_id=delivery.pk) == 30.0

    # The same message again (Redis gave it twice), long before the next attempt is due.
    assert services.delivery_attempt(delivery_id=delivery.pk) is None

    assert len(receiver.received) == 1 and delivery.tries.count() == 1
    assert Delivery.objects.get(pk=delivery.pk).status == Delivery.Status.PENDING


def test_the_reaper_sends_again_what_a_lost_worker_or_message_left(
    alice, subscriptions_cleared, receiver, held, monkeypatch
):
    sent: list[int] = []
    monkeypatch.setattr(
        services.current_app, "send_task", lambda name, args: sent.append((name, *args))
    )
    subscription, _ = subscribed(alice, receiver.url)
    long_ago = timezone.now() - timedelta(minutes=10)
    claimed = services.subscription_test(by=alice, subscription=subscription)
    overdue = services.subscription_test(by=alice, subscription=subscription)
    fresh = services.subscription_test(by=alice, subscription=subscription)
    Delivery.objects.filter(pk=claimed.pk).update(status="sending", claimed_at=long_ago)
    Delivery.objects.filter(pk=overdue.pk).update(next_attempt_at=long_ago)

    assert sorted(services.deliveries_reap()) == sorted([claimed.pk, overdue.pk])
    assert sorted(sent) == sorted([(services.DELIVER, claimed.pk), (services.DELIVER, overdue.pk)])

    # The claim a dead worker left is taken again: the delivery goes out.
    assert services.delivery_attempt(delivery_id=claimed.pk) is None
    assert Delivery.objects.get(pk=claimed.pk).status == Delivery.Status.DELIVERED
    assert Delivery.objects.get(pk=fresh.pk).status == Delivery.Status.PENDING


@pytest.mark.slow
def test_a_receiver_gets_a_signed_regressed_message_when_an_evaluation_ends_worse(
    alice, subscriptions_cleared, celery_worker, receiver
):
    tasks = ("0", "1", "2", "3", "4", "5")
    _, secret = subscribed(alice, receiver.url, events=[Event.REGRESSED])
    base = stored_evaluation(alice, outcomes={task: [1.0] for task in tasks})
    baselines.baseline_pin(evaluation=base, by=alice)
    later = stored_evaluation(
        alice,
        outcomes={task: [0.0] for task in tasks},
        agent_model="org/agent-b",
        status=Evaluation.Status.RUNNING,
    )

    evaluations.evaluation_run_settled(run_id=later.runs.last().pk)  # its last run ended

    [got] = receiver.wait_for(1)
    assert docs_verify()(secret, got.headers, got.body)
    assert got.headers["x-tau2-event"] == "evaluation.regressed"
    body = json.loads(got.body)
    assert body["evaluation"]["id"] == later.pk and body["verdict"]["outcome"] == "worse"
    assert body["verdict"]["baseline"] == base.pk


def test_a_delivery_is_tried_again_past_celerys_default_of_three_retries(monkeypatch):
    """The walk saw delivery 4 end in MaxRetriesExceededError while the page promised six
    more tries: retry(max_retries=None) is "the task's own", Celery's default of 3."""
    from apps.notifications import tasks

    answers = iter([30.0, None])  # one more wait, then delivered
    tried: list[int] = []

    def attempt(*, delivery_id: int) -> float | None:
        tried.append(delivery_id)
        return next(answers)

    monkeypatch.setattr(services, "delivery_attempt", attempt)
    result = tasks.deliver.apply(args=[41], retries=6, throw=False)
    assert result.state != "FAILURE", result.result
    assert tried == [41, 41]  # the 7th try waited, the 8th delivered
