"""A canary token, once alice signs in and it is refreshed, is found only behind the vault.

Not in any table (every column of every row, sessions decoded), not in the logs at DEBUG,
not in any page alice sees, not in the admin pages staff see.
"""

from __future__ import annotations

import logging

import pytest
from django.contrib.auth import get_user_model
from django.contrib.sessions.models import Session
from django.db import connection
from social_django.models import UserSocialAuth

from apps.accounts import crypto
from apps.accounts.models import HFCredential
from apps.accounts.vault import hf_token_for
from apps.tasks.models import Task
from tests.accounts.conftest import ALICE
from tests.support.fake_hf import sign_in

pytestmark = pytest.mark.django_db
User = get_user_model()

CANARIES = (
    "hf_oauth_CANARY_access_first_7f3a9c",
    "hf_oauth_CANARY_refresh_first_c41e2b",
    "hf_oauth_CANARY_access_second_93bd10",
    "hf_oauth_CANARY_refresh_second_5e8f77",
)


def canaries_in(text: str) -> list[str]:
    # Whole tokens, and their distinctive middles (a token cut or re-encoded in part).
    return [c for c in CANARIES if c in text or c.split("_", 2)[2] in text]


def every_cell_of_every_table() -> list[tuple[str, str]]:
    """Like a pg_dump: every table of the database, every row, every column, as text."""
    cells = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names(cursor):
            cursor.execute(f'SELECT * FROM "{table}"')  # noqa: S608 - names from introspection
            for row in cursor.fetchall():
                for value in row:
                    if isinstance(value, memoryview | bytes):
                        value = bytes(value).decode("latin-1")
                    cells.append((table, str(value)))
    return cells


def test_the_canary_is_nowhere_but_behind_the_vault(client, fake_hf, reviewer_client, caplog):
    caplog.set_level(logging.DEBUG)
    fake_hf.next_tokens = [(CANARIES[0], CANARIES[1]), (CANARIES[2], CANARIES[3])]
    fake_hf.expires_in = 120  # so that the vault refreshes it once: both pairs pass through
    assert sign_in(client, fake_hf, ALICE).status_code == 302
    alice = User.objects.get(username="alice")
    fake_hf.expires_in = 28800
    assert hf_token_for(user=alice) == CANARIES[2]
    assert fake_hf.refresh_calls == 1

    # The vault does hold it, encrypted.
    credential = HFCredential.objects.get(user=alice)
    assert crypto.unseal(credential.access_token_enc) == CANARIES[2]
    assert crypto.unseal(credential.refresh_token_enc) == CANARIES[3]

    # Pages alice sees.
    task = Task.objects.filter(domain_id="airline").first()
    pages = ["/tasks/", "/tasks/airline/", f"/tasks/airline/{task.task_id}/", "/accounts/sign-in/"]
    pages += ["/api/tasks/?domain=airline", "/api/domains/"]
    for path in pages:
        response = client.get(path)
        assert response.status_code == 200, path
        assert not canaries_in(response.content.decode()), path

    # Admin pages staff see, including alice's own rows.
    social = UserSocialAuth.objects.get(user=alice)
    admin_pages = [
        "/admin/",
        "/admin/accounts/hfcredential/",
        f"/admin/accounts/hfcredential/{credential.pk}/change/",
        "/admin/social_django/usersocialauth/",
        f"/admin/social_django/usersocialauth/{social.pk}/change/",
        "/admin/auth/user/",
        f"/admin/auth/user/{alice.pk}/change/",
        "/admin/sessions/session/" if _admin_has_sessions() else "/admin/",
    ]
    for path in admin_pages:
        response = reviewer_client.get(path)
        assert response.status_code == 200, path
        assert not canaries_in(response.content.decode()), path

    # Every table, and the sessions decoded (their data is base64-encoded).
    found = [(table, cell[:60]) for table, cell in every_cell_of_every_table() if canaries_in(cell)]
    assert found == []
    for session in Session.objects.all():
        assert not canaries_in(repr(session.get_decoded()))
    assert not canaries_in(repr(social.extra_data))

    # Logs, at DEBUG, of everything above.
    logged = "\n".join(
        f"{r.name} {r.getMessage()} {r.exc_text or ''} {r.args!r}" for r in caplog.records
    )
    assert "Refreshed the Hugging Face token" in logged  # the logs did capture the flow
    assert not canaries_in(logged)


def _admin_has_sessions() -> bool:
    from django.contrib import admin
    from django.contrib.sessions.models import Session

    return admin.site.is_registered(Session)
