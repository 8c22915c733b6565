"""The Notifications pages, as each person meets them.

alice keeps a webhook of her own; stella (staff) keeps the team's; bob is a member of
the team: he sees the team's webhook and its log but cannot change it, and never sees
alice's; charlie, anonymous, is sent to sign in. A secret is on a page once; a URL
never (its host only).
"""

from __future__ import annotations

import pytest
from django.test import Client

from apps.accounts import crypto
from apps.notifications import services
from apps.notifications.models import Delivery, Event, Subscription
from tests.notifications.support import subscribed

URL = "https://hooks.example.org/services/T00/B00/CANARYPATH?token=CANARYQUERY"


@pytest.fixture
def held(monkeypatch) -> list[int]:
    ids: list[int] = []
    monkeypatch.setattr(services, "_send_later", ids.append)
    return ids


@pytest.fixture
def team(staff, subscriptions_cleared) -> Subscription:
    return subscribed(staff, URL, team=True, name="Team Slack", format="slack")[0]


@pytest.fixture
def alices(alice, subscriptions_cleared) -> Subscription:
    return subscribed(alice, URL, name="Alice hook")[0]


def _form(**overrides) -> dict:
    return {
        "name": "My CI",
        "url": URL,
        "events": [Event.FINISHED, Event.REGRESSED],
        "format": "json",
        "active": "on",
        **overrides,
    }


def test_alice_adds_a_webhook_and_sees_its_secret_once(alice, alice_client, subscriptions_cleared):
    """Issue 33: the browser stayed on the POST's response, so a reload posted again;
    now the POST redirects and the page it lands on shows the secret, once."""
    posted = alice_client.post("/notifications/new/", _form())

    subscription = Subscription.objects.get()
    assert posted.status_code == 302 and posted["Location"] == subscription.get_absolute_url()
    assert "tau2wh_" not in posted.content.decode()
    response = alice_client.get(posted["Location"])
    assert response.status_code == 200
    assert response["Cache-Control"] == "no-store"
    assert subscription.owner == alice and subscription.events == [
        "evaluation.finished",
        "evaluation.regressed",
    ]
    page = response.content.decode()
    secret = page.split('data-testid="secret-value">', 1)[1].split("<", 1)[0]
    assert secret.startswith("tau2wh_") and len(secret) > 40
    assert "CANARY" not in page and "https://hooks.example.org/…" in page
    again = alice_client.get(subscription.get_absolute_url()).content.decode()
    assert secret not in again and "CANARY" not in again
    # Sealed at rest: neither the URL nor the secret is in the row in the clear.
    assert secret not in subscription.secret_enc and "CANARY" not in subscription.url_enc


def test_the_list_shows_the_teams_and_ones_own(alice_client, team, alices, bob_client):
    page = alice_client.get("/notifications/").content.decode()
    assert "Team Slack" in page and "Alice hook" in page and "CANARY" not in page

    page = bob_client.get("/notifications/").content.decode()
    assert "Team Slack" in page and "Alice hook" not in page


def test_bob_never_sees_alices_webhook(bob_client, alices, held):
    pk = alices.pk
    for path in (
        f"/notifications/{pk}/",
        f"/notifications/{pk}/edit/",
        f"/notifications/{pk}/log/",
    ):
        assert bob_client.get(path).status_code == 404
    for path in (f"/notifications/{pk}/test/", f"/notifications/{pk}/secret/"):
        assert bob_client.post(path).status_code == 404
    assert bob_client.post(f"/notifications/{pk}/delete/").status_code == 404
    assert Subscription.objects.filter(pk=pk).exists() and not held


def test_bob_sees_the_teams_webhook_but_cannot_change_it(bob_client, team, held):
    page = bob_client.get(team.get_absolute_url())
    assert page.status_code == 200
    assert 'data-testid="send-test"' not in page.content.decode()
    assert 'data-testid="edit"' not in page.content.decode()

    assert bob_client.get(f"/notifications/{team.pk}/edit/").status_code == 403
    assert bob_client.post(f"/notifications/{team.pk}/edit/", _form()).status_code == 403
    assert bob_client.post(f"/notifications/{team.pk}/test/").status_code == 403
    assert bob_client.post(f"/notifications/{team.pk}/secret/").status_code == 403
    assert bob_client.post(f"/notifications/{team.pk}/delete/").status_code == 403
    team.refresh_from_db()
    assert team.name == "Team Slack" and not held


def test_a_member_cannot_add_a_team_webhook(bob, bob_client, subscriptions_cleared):
    response = bob_client.post("/notifications/new/", _form(scope="team"))

    assert response.status_code == 302
    assert Subscription.objects.get().owner == bob  # his own, whatever the form said


def test_staff_edit_the_teams_webhook_keeping_its_url(staff_client, team):
    response = staff_client.post(
        f"/notifications/{team.pk}/edit/", _form(name="Team chat", url="", format="slack")
    )

    assert response.status_code == 302
    team.refresh_from_db()
    assert team.name == "Team chat" and team.owner is None
    assert team.url_shown == "https://hooks.example.org/…"


def test_a_test_event_and_a_redelivery_from_the_page(alice_client, alices, held):
    response = alice_client.post(f"/notifications/{alices.pk}/test/")
    assert response.status_code == 302
    delivery = Delivery.objects.get()
    assert delivery.event == Event.TEST and held == [delivery.pk]

    page = alice_client.get(alices.get_absolute_url()).content.decode()
    assert str(delivery.uid) in page and 'hx-trigger="every 3s"' in page  # it waits

    Delivery.objects.filter(pk=delivery.pk).update(status=Delivery.Status.FAILED)
    response = alice_client.post(f"/notifications/{alices.pk}/deliveries/{delivery.pk}/redeliver/")
    assert response.status_code == 302
    delivery.refresh_from_db()
    assert delivery.status == Delivery.Status.PENDING and held == [delivery.pk, delivery.pk]


def test_charlie_is_sent_to_sign_in(team):
    response = Client().get("/notifications/")
    assert response.status_code == 302 and "next=" in response["Location"]
    assert Client().get(team.get_absolute_url()).status_code == 302


def test_the_admin_shows_no_url_or_secret(staff_client, team):
    for path in (
        "/admin/notifications/subscription/",
        f"/admin/notifications/subscription/{team.pk}/change/",
    ):
        page = staff_client.get(path)
        assert page.status_code == 200
        text = page.content.decode()
        assert "CANARY" not in text and team.secret_enc not in text and team.url_enc not in text


def test_a_new_secret_is_shown_once_and_signs_from_then_on(alice, alice_client, alices):
    before = crypto.unseal(alices.secret_enc)

    posted = alice_client.post(f"/notifications/{alices.pk}/secret/")

    assert posted.status_code == 302
    page = alice_client.get(posted["Location"]).content.decode()
    secret = page.split('data-testid="secret-value">', 1)[1].split("<", 1)[0]
    alices.refresh_from_db()
    assert secret != before and crypto.unseal(alices.secret_enc) == secret
    assert alices.secret_rotated_at is not None
    assert secret not in alice_client.get(alices.get_absolute_url()).content.decode()


def test_a_secret_is_sealed_in_the_session_and_waits_for_its_own_page(alice_client, alices):
    posted = alice_client.post(f"/notifications/{alices.pk}/secret/")
    secret = crypto.unseal(Subscription.objects.get(pk=alices.pk).secret_enc)
    session = alice_client.session
    stored = str(session.load())
    assert secret not in stored  # never in the session's row in the clear
    # Another page (the list) leaves it; its own page shows it, then never again.
    assert secret not in alice_client.get("/notifications/").content.decode()
    assert secret in alice_client.get(posted["Location"]).content.decode()
    assert secret not in alice_client.get(posted["Location"]).content.decode()
