"""Alice signs in with Hugging Face in Chromium (through the local fake provider) and out again."""

from __future__ import annotations

import re
import threading

import pytest
from playwright.sync_api import expect

from tests.support.fake_hf import CLIENT_ID, CLIENT_SECRET, FakeHF, Person

pytestmark = [pytest.mark.browser, pytest.mark.django_db]

ALICE = Person(sub="u-alice-browser", preferred_username="alice", name="Alice Liddell")


@pytest.fixture
def fake_provider(settings):
    """The fake HF provider; the live server shares this process's settings, read per request."""
    fake = FakeHF().start()
    settings.OPENID_PROVIDER_URL = fake.url
    settings.SOCIAL_AUTH_HUGGINGFACE_KEY = CLIENT_ID
    settings.SOCIAL_AUTH_HUGGINGFACE_SECRET = CLIENT_SECRET
    settings.TAU2_ALLOWED_ORGS = []
    fake.person = ALICE
    yield fake
    fake.stop()
    _delete_committed_user("alice")


def _delete_committed_user(username: str) -> None:
    """The server committed alice on its own connection: remove her on another one."""

    def delete():
        from django.contrib.auth import get_user_model
        from django.db import connection

        try:
            get_user_model().objects.filter(username=username).delete()
        finally:
            connection.close()

    thread = threading.Thread(target=delete)
    thread.start()
    thread.join(timeout=30)


def test_alice_signs_in_with_hugging_face_and_out_again(page, fake_provider):
    page.goto("/tasks/airline/")
    header = page.get_by_test_id("site-user")
    page.get_by_test_id("sign-in").click()

    expect(page).to_have_url(re.compile(r"/tasks/airline/$"))
    expect(header.get_by_test_id("username")).to_have_text("alice")
    expect(header.locator("img.avatar")).to_have_attribute("src", re.compile(r"alice\.png$"))
    assert len(fake_provider.authorize_requests) == 1
    assert fake_provider.authorize_requests[0]["code_challenge_method"] == "S256"

    page.goto("/tasks/")
    expect(header.get_by_test_id("username")).to_have_text("alice")  # the session holds

    header.get_by_test_id("sign-out").click()
    expect(header.get_by_test_id("sign-in")).to_be_visible()
    expect(header.get_by_test_id("username")).to_have_count(0)
    expect(page.locator(".messages")).to_contain_text("You are signed out.")
