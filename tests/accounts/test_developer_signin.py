"""A laptop's developer sign-in is a first-class path for everything on a connection.

eve signs in as the developer account ``dev-eve`` (DEBUG and TAU2_DEV_LOGIN on): no
Hugging Face token. The pages tell her what that means — models on a connection run,
models on Hugging Face's router need a Hugging Face sign-in — and ``grant_staff``
makes her the laptop's first staff member. In production (the developer sign-in off)
nobody can sign in as a developer account, and ``grant_staff`` refuses one.
"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

pytestmark = pytest.mark.django_db

WRONG = "runs need a Hugging Face sign-in"
TRUE = "models on a connection run"


@pytest.fixture
def laptop(settings):
    settings.DEBUG, settings.TAU2_DEV_LOGIN = True, True


@pytest.fixture
def eve(client, laptop):
    """eve's browser, signed in as dev-eve."""
    client.post("/accounts/dev-login/", {"name": "eve"})
    return client


def test_the_banner_after_the_developer_sign_in_says_connections_run(client, laptop):
    response = client.post("/accounts/dev-login/", {"name": "eve"}, follow=True)

    page = response.content.decode()
    assert "Signed in as dev-eve without Hugging Face: models on your connections run; " in page
    assert "models on Hugging Face&#x27;s router need a Hugging Face sign-in." in page
    assert WRONG not in page


def test_the_sign_in_page_tells_eve_what_runs_without_hugging_face(eve):
    page = eve.get("/accounts/sign-in/").content.decode()

    assert "You are signed in as <strong>dev-eve</strong>" in page
    assert TRUE in page and WRONG not in page
    assert "runs will ask for a real sign-in" not in page


def test_the_sign_in_page_says_why_a_start_asks_for_a_sign_in(client, laptop):
    page = client.get("/accounts/sign-in/?reason=start").content.decode()

    assert "a model on a connection on that connection&#x27;s key" in page
    assert "models on a connection (your own endpoint, OpenAI, Anthropic…) run on that" in page
    assert "runs will ask for a real sign-in" not in page


def test_the_sign_in_page_without_hugging_face_configured_says_what_still_runs(
    client, laptop, settings
):
    settings.SOCIAL_AUTH_HUGGINGFACE_KEY = settings.SOCIAL_AUTH_HUGGINGFACE_SECRET = ""

    page = client.get("/accounts/sign-in/").content.decode()

    assert 'data-testid="signin-unconfigured"' in page
    assert "for models on a connection; models on Hugging Face's router still need" in page
    assert "runs still need a Hugging Face sign-in" not in page


def test_grant_staff_makes_the_laptops_developer_account_staff(eve, capsys):
    call_command("grant_staff", "dev-eve")

    dev = get_user_model().objects.get(username="dev-eve")
    assert dev.is_staff and dev.is_superuser
    assert "dev-eve is now staff and superuser." in capsys.readouterr().out
    assert eve.get("/admin/").status_code == 200  # the admin opens for her

    call_command("grant_staff", "dev-eve", "--revoke")
    dev.refresh_from_db()
    assert not dev.is_staff and not dev.is_superuser


def test_grant_staff_names_both_kinds_of_account_for_nobody_on_a_laptop(laptop):
    with pytest.raises(CommandError, match="neither with Hugging Face nor as that developer"):
        call_command("grant_staff", "dev-zoe")


def test_grant_staff_refuses_a_developer_account_in_production(eve, settings):
    settings.DEBUG = False  # production: the developer sign-in does not exist

    with pytest.raises(CommandError) as refused:
        call_command("grant_staff", "dev-eve")

    assert "Nobody has signed in as 'dev-eve' with Hugging Face yet" in str(refused.value)
    assert "only where the developer sign-in is on (DEBUG and TAU2_DEV_LOGIN)" in str(refused.value)
    assert not get_user_model().objects.get(username="dev-eve").is_staff


def test_grant_staff_never_takes_a_hugging_face_account_for_a_developer_one(laptop):
    """An account that signed in with Hugging Face is found by its Hugging Face name only,
    even when its username looks like a developer account's."""
    from social_django.models import UserSocialAuth

    user = get_user_model().objects.create_user("dev-mallory")
    UserSocialAuth.objects.create(
        user=user, provider="huggingface", uid="u-m", extra_data={"username": "mallory"}
    )

    with pytest.raises(CommandError):
        call_command("grant_staff", "dev-mallory")
    call_command("grant_staff", "mallory")
    user.refresh_from_db()
    assert user.is_staff
