"""Fixtures of the sign-in tests: the fake Hugging Face provider and the people.

alice (tau2-team) and bob (tau2-team) sign in with Hugging Face, charlie stays anonymous,
dave belongs to another organisation, and reviewer is staff.
"""

from __future__ import annotations

import pytest

from tests.support.fake_hf import CLIENT_ID, CLIENT_SECRET, FakeHF, Person, sign_in

ALICE = Person(sub="u-alice", preferred_username="alice", name="Alice Liddell", orgs=["tau2-team"])
BOB = Person(sub="u-bob", preferred_username="bob", name="Bob Marley", orgs=["tau2-team", "misc"])
DAVE = Person(sub="u-dave", preferred_username="dave", name="Dave Lister", orgs=["other-org"])
REVIEWER = Person(sub="u-rev", preferred_username="reviewer", name="Rae Viewer", orgs=["tau2-team"])


@pytest.fixture(scope="session")
def fake_hf_server():
    server = FakeHF().start()
    yield server
    server.stop()


@pytest.fixture
def fake_hf(fake_hf_server, settings) -> FakeHF:
    """The fake provider, emptied, with the app's sign-in pointed at it."""
    fake_hf_server.reset()
    settings.OPENID_PROVIDER_URL = fake_hf_server.url
    settings.SOCIAL_AUTH_HUGGINGFACE_KEY = CLIENT_ID
    settings.SOCIAL_AUTH_HUGGINGFACE_SECRET = CLIENT_SECRET
    settings.TAU2_ALLOWED_ORGS = []
    return fake_hf_server


@pytest.fixture
def alice_client(client, fake_hf, db):
    """A browser in which alice signed in with Hugging Face."""
    response = sign_in(client, fake_hf, ALICE)
    assert response.status_code == 302, response.content[:500]
    return client


@pytest.fixture
def alice(alice_client):
    from django.contrib.auth import get_user_model

    return get_user_model().objects.get(username="alice")


@pytest.fixture
def reviewer_client(fake_hf, db):
    """A browser in which reviewer (made staff with grant_staff) signed in."""
    from django.core.management import call_command
    from django.test import Client

    browser = Client()
    assert sign_in(browser, fake_hf, REVIEWER).status_code == 302
    call_command("grant_staff", "reviewer")
    return browser
