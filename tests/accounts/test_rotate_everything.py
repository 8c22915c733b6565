"""``manage.py rotate_vault_keys`` re-encrypts every sealed secret, not only Hugging Face
tokens: connections' keys and headers and webhooks' URLs and secrets too. After it, the old
key can be dropped and every secret still opens; a row no key opens is left as it is and
the others go on."""

from __future__ import annotations

import io
import json

from cryptography.fernet import Fernet
from django.core.management import call_command

from apps.accounts import crypto
from apps.accounts.models import HFCredential
from apps.connections.models import Connection
from apps.notifications.models import Subscription
from tests.notifications.support import subscribed
from tests.support.connections import CONNECTION_KEY, openai_compatible_connection

HOOK = "https://hooks.example.org/services/T000/B000/XXXX"


def test_every_sealed_field_is_registered():
    assert crypto.sealed_fields() == {
        "accounts.HFCredential": ("access_token_enc", "refresh_token_enc"),
        "connections.Connection": ("api_key_enc", "headers_enc"),
        "notifications.Subscription": ("url_enc", "secret_enc"),
    }


def test_rotation_reencrypts_keys_headers_webhooks_and_tokens(
    alice, llm_server, settings, monkeypatch
):
    monkeypatch.setenv("TAU2_OUTBOUND_ALLOW", "127.0.0.0/8,::1,localhost,hooks.example.org")
    connection = openai_compatible_connection(
        llm_server, by=alice, owner=alice, headers={"X-Org": "acme-secret"}
    )
    subscription, secret = subscribed(alice, HOOK)
    token = crypto.unseal(HFCredential.objects.get(user=alice).access_token_enc)
    broken = Connection.objects.create(name="sealed elsewhere", kind="openai_compatible")
    Connection.objects.filter(pk=broken.pk).update(
        api_key_enc=Fernet(Fernet.generate_key()).encrypt(b"lost").decode()
    )
    before = {
        "key": Connection.objects.get(pk=connection.pk).api_key_enc,
        "url": Subscription.objects.get(pk=subscription.pk).url_enc,
    }
    new_key = Fernet.generate_key().decode()
    settings.TAU2_VAULT_KEYS = [new_key, *settings.TAU2_VAULT_KEYS]

    out = io.StringIO()
    call_command("rotate_vault_keys", stdout=out)

    settings.TAU2_VAULT_KEYS = [new_key]  # the old key dropped after the rotation
    connection = Connection.objects.get(pk=connection.pk)
    subscription = Subscription.objects.get(pk=subscription.pk)
    assert connection.api_key_enc != before["key"] and subscription.url_enc != before["url"]
    assert crypto.unseal(connection.api_key_enc) == CONNECTION_KEY
    assert json.loads(crypto.unseal(connection.headers_enc)) == {"X-Org": "acme-secret"}
    assert crypto.unseal(subscription.url_enc) == HOOK
    assert crypto.unseal(subscription.secret_enc) == secret
    assert crypto.unseal(HFCredential.objects.get(user=alice).access_token_enc) == token
    said = out.getvalue()
    assert "Re-encrypted 1 connections.Connection row(s)." in said  # not the broken one
    assert "Re-encrypted 1 notifications.Subscription row(s)." in said
    assert CONNECTION_KEY not in said and HOOK not in said and secret not in said
