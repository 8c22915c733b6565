"""The vault hands alice's token to server code, refreshes it, and asks her to sign in again."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from datetime import timedelta
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AnonymousUser
from django.core.management import call_command
from django.utils import timezone

from apps.accounts import crypto
from apps.accounts.models import HFCredential
from apps.accounts.services import credential_store
from apps.accounts.vault import SignInRequired, hf_token_for
from tests.accounts.conftest import ALICE, BOB
from tests.support.fake_hf import Person, sign_in

ROOT = Path(__file__).resolve().parents[2]
User = get_user_model()
db = pytest.mark.django_db


def sign_in_alice(client, fake):
    assert sign_in(client, fake, ALICE).status_code == 302
    return User.objects.get(username="alice")


@db
def test_alice_gets_her_current_token_without_a_refresh(client, fake_hf):
    alice = sign_in_alice(client, fake_hf)
    token = hf_token_for(user=alice)
    assert token.startswith("hf_oauth_")
    assert fake_hf.token_is_valid(token)
    assert hf_token_for(user=alice) == token
    assert fake_hf.refresh_calls == 0


@db
def test_a_token_about_to_expire_is_refreshed_and_the_refresh_token_rotates(client, fake_hf):
    fake_hf.expires_in = 120  # less than the five minutes' margin
    alice = sign_in_alice(client, fake_hf)
    credential = HFCredential.objects.get(user=alice)
    old_access = crypto.unseal(credential.access_token_enc)
    old_refresh = crypto.unseal(credential.refresh_token_enc)

    fake_hf.expires_in = 28800
    new_access = hf_token_for(user=alice)
    assert new_access != old_access and fake_hf.token_is_valid(new_access)
    assert fake_hf.refresh_calls == 1
    assert fake_hf.token_requests[-1] == {"grant_type": "refresh_token", "has_basic": True}

    credential.refresh_from_db()
    assert credential.refresh_count == 1
    assert credential.expires_at > timezone.now() + timedelta(hours=7)
    new_refresh = crypto.unseal(credential.refresh_token_enc)
    assert new_refresh != old_refresh
    assert not fake_hf.refresh_is_accepted(old_refresh)  # rotated out
    assert fake_hf.refresh_is_accepted(new_refresh)

    assert hf_token_for(user=alice) == new_access  # fresh now: no second refresh
    assert fake_hf.refresh_calls == 1


def test_two_concurrent_refreshes_make_one_call_and_share_its_token(
    django_db_setup, django_db_blocker, fake_hf
):
    """Committed rows and two threads with their own PostgreSQL connections."""
    from django.db import connection

    carol = Person(sub="u-carol", preferred_username="carol-concurrent", name="Carol")
    with django_db_blocker.unblock():
        user = User.objects.create(username="carol-concurrent")
        try:
            fake_hf.expires_in = 60
            credential_store(user=user, token_response=fake_hf.issue_for(carol))
            old = crypto.unseal(HFCredential.objects.get(user=user).access_token_enc)
            fake_hf.expires_in = 28800
            fake_hf.refresh_delay = 0.5  # both callers arrive while the first refresh runs
            results: list[str] = []
            errors: list[BaseException] = []
            start = threading.Barrier(2)

            def take():
                from django.db import connection as thread_connection

                try:
                    start.wait()
                    results.append(hf_token_for(user=user))
                except BaseException as exc:  # reported below
                    errors.append(exc)
                finally:
                    thread_connection.close()

            threads = [threading.Thread(target=take) for _ in range(2)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=30)
            assert not errors, errors
            assert fake_hf.refresh_calls == 1
            assert len(results) == 2 and results[0] == results[1] != old
            assert fake_hf.token_is_valid(results[0])
            assert HFCredential.objects.get(user=user).refresh_count == 1
        finally:
            User.objects.filter(pk=user.pk).delete()
            connection.close()


@db
def test_a_revoked_sign_in_asks_alice_to_sign_in_again(client, fake_hf):
    fake_hf.expires_in = 60
    alice = sign_in_alice(client, fake_hf)
    fake_hf.revoke_all(sub=ALICE.sub)
    with pytest.raises(SignInRequired, match="sign in with Hugging Face again") as caught:
        hf_token_for(user=alice)
    assert "hf_oauth" not in str(caught.value)
    assert HFCredential.objects.get(user=alice).revoked_at is not None
    with pytest.raises(SignInRequired, match="revoked"):
        hf_token_for(user=alice)
    assert fake_hf.refresh_calls == 1  # the second call did not ask HF again

    sign_in(client, fake_hf, ALICE)  # a new sign-in makes the vault usable again
    assert fake_hf.token_is_valid(hf_token_for(user=alice))


@db
def test_an_expired_token_without_a_refresh_token_asks_for_sign_in(client, fake_hf):
    fake_hf.issue_refresh_tokens = False
    fake_hf.expires_in = 60
    alice = sign_in_alice(client, fake_hf)
    assert fake_hf.token_is_valid(hf_token_for(user=alice))  # still a minute left: use it
    HFCredential.objects.filter(user=alice).update(expires_at=timezone.now() - timedelta(1))
    with pytest.raises(SignInRequired, match="expired. Please sign in with Hugging Face again"):
        hf_token_for(user=alice)
    assert fake_hf.refresh_calls == 0


@db
def test_a_token_without_inference_api_asks_for_sign_in_with_that_permission(client, fake_hf):
    fake_hf.scope = "openid profile"
    alice = sign_in_alice(client, fake_hf)
    with pytest.raises(SignInRequired, match="inference-api"):
        hf_token_for(user=alice)


@db
def test_when_hf_is_unreachable_a_still_valid_token_is_used(client, fake_hf, settings):
    fake_hf.expires_in = 120
    alice = sign_in_alice(client, fake_hf)
    token = crypto.unseal(HFCredential.objects.get(user=alice).access_token_enc)
    settings.OPENID_PROVIDER_URL = "http://127.0.0.1:9"  # nothing listens there
    assert hf_token_for(user=alice) == token
    HFCredential.objects.filter(user=alice).update(expires_at=timezone.now() - timedelta(1))
    with pytest.raises(SignInRequired, match="could not be reached"):
        hf_token_for(user=alice)
    assert HFCredential.objects.get(user=alice).revoked_at is None  # not her fault


@db
def test_charlie_anonymous_and_a_developer_sign_in_get_no_token(client, fake_hf, settings):
    with pytest.raises(SignInRequired, match="Sign in with Hugging Face first"):
        hf_token_for(user=AnonymousUser())
    with pytest.raises(SignInRequired):
        hf_token_for(user=None)
    settings.DEBUG = True
    settings.TAU2_DEV_LOGIN = True
    client.post("/accounts/dev-login/", {"name": "dave"})
    dev = User.objects.get(username="dev-dave")
    with pytest.raises(SignInRequired, match="did not sign in with Hugging Face"):
        hf_token_for(user=dev)


@db
def test_bob_gets_his_own_token_not_alices(client, fake_hf):
    from django.test import Client

    alice = sign_in_alice(client, fake_hf)
    sign_in(Client(), fake_hf, BOB)
    bob = User.objects.get(username="bob")
    assert hf_token_for(user=alice) != hf_token_for(user=bob)
    with fake_hf._lock:
        assert fake_hf.access[hf_token_for(user=bob)].person.sub == BOB.sub


@db
def test_vault_keys_rotate_and_a_lost_key_means_signing_in_again(client, fake_hf, settings):
    alice = sign_in_alice(client, fake_hf)
    token = hf_token_for(user=alice)
    old_keys = list(settings.TAU2_VAULT_KEYS)
    new_key = Fernet.generate_key().decode()
    settings.TAU2_VAULT_KEYS = [new_key, *old_keys]
    before = HFCredential.objects.get(user=alice).access_token_enc
    call_command("rotate_vault_keys", stdout=open(os.devnull, "w"))  # noqa: SIM115
    assert HFCredential.objects.get(user=alice).access_token_enc != before
    settings.TAU2_VAULT_KEYS = [new_key]  # old key dropped after the rotation
    assert hf_token_for(user=alice) == token
    settings.TAU2_VAULT_KEYS = [Fernet.generate_key().decode()]
    with pytest.raises(SignInRequired, match="can no longer be read"):
        hf_token_for(user=alice)


@db
def test_the_credential_shows_no_token_in_its_repr_or_str(client, fake_hf):
    alice = sign_in_alice(client, fake_hf)
    credential = HFCredential.objects.get(user=alice)
    token = hf_token_for(user=alice)
    for text in (repr(credential), str(credential)):
        assert token not in text and credential.access_token_enc not in text


def _settings_process(code: str, **environ) -> subprocess.CompletedProcess:
    base = {
        k: v
        for k, v in os.environ.items()
        if k not in {"TAU2_VAULT_KEYS", "DEBUG", "DJANGO_ALLOW_ASYNC_UNSAFE", "SPACE_HOST"}
    }
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**base, "DJANGO_SETTINGS_MODULE": "tau2site.settings", **environ},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_production_refuses_to_start_without_vault_keys(tmp_path):
    result = _settings_process(
        "import django; django.setup()", DEBUG="false", TAU2_VAR_DIR=str(tmp_path)
    )
    assert result.returncode != 0
    assert "TAU2_VAULT_KEYS must be set when DEBUG is off" in result.stderr


def test_a_laptop_keeps_a_generated_vault_key_under_var(tmp_path):
    code = "import django; django.setup(); from django.conf import settings; "
    code += "print(settings.TAU2_VAULT_KEYS[0])"
    first = _settings_process(code, DEBUG="true", TAU2_VAR_DIR=str(tmp_path))
    second = _settings_process(code, DEBUG="true", TAU2_VAR_DIR=str(tmp_path))
    assert first.returncode == 0, first.stderr
    key = first.stdout.strip()
    assert key == second.stdout.strip()
    Fernet(key.encode())  # a usable Fernet key
    assert (tmp_path / "dev-vault-key").stat().st_mode & 0o777 == 0o600
