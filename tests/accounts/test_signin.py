"""Alice signs in with Hugging Face through the whole OAuth dance against the fake provider."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from django.contrib.auth import get_user_model
from social_django.models import UserSocialAuth

from apps.accounts.models import HFCredential
from apps.accounts.vault import hf_token_for
from tests.accounts.conftest import ALICE, BOB, DAVE
from tests.support.fake_hf import sign_in

pytestmark = pytest.mark.django_db
User = get_user_model()


def test_alice_signs_in_and_lands_where_she_was(client, fake_hf):
    response = sign_in(client, fake_hf, ALICE, next_url="/tasks/airline/")
    assert response.status_code == 302
    assert response["Location"] == "/tasks/airline/"
    page = client.get("/tasks/")
    assert page.context["user"].username == "alice"
    assert 'data-testid="username"' in page.content.decode()
    assert "Sign out" in page.content.decode()
    assert "Sign in with Hugging Face" not in page.content.decode()


def test_the_dance_uses_pkce_s256_state_and_basic_client_auth(client, fake_hf):
    sign_in(client, fake_hf, ALICE)
    (authorize,) = fake_hf.authorize_requests
    assert authorize["code_challenge_method"] == "S256"
    assert len(authorize["code_challenge"]) == 43
    assert authorize["scope"].split() == ["openid", "profile", "inference-api"]
    assert authorize["redirect_uri"] == "http://testserver/auth/complete/huggingface/"
    assert "redirect_state" not in authorize["redirect_uri"]
    assert len(authorize["state"]) >= 32
    assert fake_hf.token_requests == [{"grant_type": "authorization_code", "has_basic": True}]


def test_a_server_that_pushes_datasets_asks_for_repository_writes_too(client, fake_hf, settings):
    settings.TAU2_HF_SIGNIN_WRITE_REPOS = True
    sign_in(client, fake_hf, ALICE)
    (authorize,) = fake_hf.authorize_requests
    assert authorize["scope"].split() == [
        "openid",
        "profile",
        "inference-api",
        "write-repos",
        "manage-repos",
    ]


def test_alice_gets_a_user_with_her_profile_and_a_vault_entry(client, fake_hf):
    sign_in(client, fake_hf, ALICE)
    alice = User.objects.get(username="alice")
    social = UserSocialAuth.objects.get(user=alice)
    assert social.provider == "huggingface"
    assert social.uid == "u-alice"
    assert social.extra_data["username"] == "alice"
    assert social.extra_data["orgs"] == ["tau2-team"]
    assert social.extra_data["picture"].startswith("https://")
    for secret in ("access_token", "refresh_token", "id_token"):
        assert secret not in social.extra_data
    credential = HFCredential.objects.get(user=alice)
    assert credential.scopes == ["openid", "profile", "inference-api"]
    assert fake_hf.token_is_valid(hf_token_for(user=alice))


def test_a_tampered_state_is_refused_and_signs_nobody_in(client, fake_hf):
    fake_hf.person = ALICE
    begin = client.post("/auth/login/huggingface/")
    provider = httpx.get(begin["Location"], follow_redirects=False)
    back = urlsplit(provider.headers["Location"])
    query = {k: v[0] for k, v in parse_qs(back.query).items()}
    query["state"] = query["state"][:-4] + "abcd"
    response = client.get(back.path, query)
    assert response.status_code == 403
    assert "did not complete" in response.content.decode()
    assert not User.objects.filter(username="alice").exists()
    assert fake_hf.token_requests == []  # refused before any code was exchanged


def test_a_callback_from_another_browser_is_refused(client, fake_hf):
    fake_hf.person = ALICE
    begin = client.post("/auth/login/huggingface/")
    provider = httpx.get(begin["Location"], follow_redirects=False)
    back = urlsplit(provider.headers["Location"])
    from django.test import Client

    response = Client().get(back.path, parse_qs(back.query))
    assert response.status_code == 403
    assert not User.objects.filter(username="alice").exists()


def test_a_wrong_pkce_verifier_is_refused_by_the_provider(client, fake_hf):
    fake_hf.person = ALICE
    begin = client.post("/auth/login/huggingface/")
    authorize = urlsplit(begin["Location"])
    params = {k: v[0] for k, v in parse_qs(authorize.query).items()}
    params["code_challenge"] = "A" * 43  # not the challenge of the session's verifier
    provider = httpx.get(f"{fake_hf.url}/oauth/authorize", params=params, follow_redirects=False)
    back = urlsplit(provider.headers["Location"])
    response = client.get(back.path, parse_qs(back.query))
    assert response.status_code >= 400
    assert not User.objects.filter(username="alice").exists()


def test_signing_in_is_a_post_form_not_a_link(client, fake_hf):
    assert client.get("/auth/login/huggingface/").status_code == 405
    page = client.get("/tasks/").content.decode()
    assert 'action="/auth/login/huggingface/"' in page
    assert 'method="post"' in page


def test_orgs_restrict_who_may_sign_in(client, fake_hf, settings):
    settings.TAU2_ALLOWED_ORGS = ["tau2-team"]
    refused = sign_in(client, fake_hf, DAVE)
    assert refused.status_code == 403
    page = refused.content.decode()
    assert "dave" in page and "tau2-team" in page and "not a member" in page
    assert not User.objects.filter(username="dave").exists()
    assert not HFCredential.objects.exists()
    assert not client.get("/tasks/").context["user"].is_authenticated

    from django.test import Client

    assert sign_in(Client(), fake_hf, BOB).status_code == 302  # bob is in tau2-team and misc
    assert User.objects.filter(username="bob").exists()


def test_org_names_match_without_regard_to_case(client, fake_hf, settings):
    settings.TAU2_ALLOWED_ORGS = ["TAU2-Team"]
    assert sign_in(client, fake_hf, ALICE).status_code == 302


def test_signing_in_again_replaces_the_tokens(client, fake_hf):
    sign_in(client, fake_hf, ALICE)
    alice = User.objects.get(username="alice")
    first = hf_token_for(user=alice)
    client.post("/accounts/sign-out/")
    sign_in(client, fake_hf, ALICE)
    assert User.objects.filter(username="alice").count() == 1
    second = hf_token_for(user=alice)
    assert second != first and fake_hf.token_is_valid(second)


def test_sign_out_is_a_post_and_keeps_the_vault_for_started_runs(alice_client, alice):
    assert alice_client.get("/accounts/sign-out/").status_code == 405
    response = alice_client.post("/accounts/sign-out/")
    assert response.status_code == 302
    page = alice_client.get("/tasks/")
    assert not page.context["user"].is_authenticated
    assert "Sign in with Hugging Face" in page.content.decode()
    assert HFCredential.objects.filter(user=alice).exists()


def test_on_a_space_the_callback_names_the_space_over_https(client, fake_hf, settings):
    settings.SPACE_HOST = "someone-tau2.hf.space"
    begin = client.post("/auth/login/huggingface/")
    params = parse_qs(urlsplit(begin["Location"]).query)
    assert params["redirect_uri"] == ["https://someone-tau2.hf.space/auth/complete/huggingface/"]


def test_behind_a_tls_proxy_the_callback_is_https(client, fake_hf, settings):
    assert settings.SOCIAL_AUTH_REDIRECT_IS_HTTPS is False  # the proxy header alone does it
    begin = client.post(
        "/auth/login/huggingface/", headers={"Host": "testserver", "X-Forwarded-Proto": "https"}
    )
    params = parse_qs(urlsplit(begin["Location"]).query)
    assert params["redirect_uri"] == ["https://testserver/auth/complete/huggingface/"]
