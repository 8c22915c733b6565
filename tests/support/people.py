"""The people of the suite, signed in with a Hugging Face token in the vault.

alice and bob are members of the team; charlie (a bare ``Client()``) is anonymous; dana
signed in with the developer sign-in, without a Hugging Face token.
Their rows are committed (``committed_db``), so the live server and the Celery worker
see them.
"""

from __future__ import annotations

import pytest
from django.test import Client

ALICE_TOKEN = "hf_oauth_alice_0123456789abcdef"
BOB_TOKEN = "hf_oauth_bob_fedcba9876543210"


def person(username: str, token: str):
    """A user whose vault holds ``token`` (scope inference-api, valid for 8 hours)."""
    from django.contrib.auth import get_user_model

    from apps.accounts.services import credential_store

    user = get_user_model().objects.create_user(username=username)
    credential_store(
        user=user,
        token_response={
            "access_token": token,
            "refresh_token": f"{token}_refresh",
            "expires_in": 28800,
            "scope": "openid profile inference-api",
        },
    )
    return user


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def browser_signed_in(page, user, base_url: str):
    """``page`` (Playwright) with ``user``'s session cookie, as if they had signed in."""
    page.context.add_cookies(
        [
            {
                "name": "sessionid",
                "value": signed_in(user).cookies["sessionid"].value,
                "url": base_url,
            }
        ]
    )
    return page


@pytest.fixture
def alice(committed_db):
    return person("alice", ALICE_TOKEN)


@pytest.fixture
def bob(committed_db):
    return person("bob", BOB_TOKEN)


@pytest.fixture
def alice_client(alice) -> Client:
    return signed_in(alice)


@pytest.fixture
def bob_client(bob) -> Client:
    return signed_in(bob)


@pytest.fixture
def dana(committed_db):
    """dana, signed in with the laptop's developer sign-in (``dev-dana``): no Hugging Face
    token in the vault; what she runs, she runs on connections."""
    from apps.accounts.services import dev_user_get_or_create

    return dev_user_get_or_create(name="dana")
