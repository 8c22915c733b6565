"""Inside a Hugging Face Space's iframe, and behind its TLS proxy."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import override_settings

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]

EMBEDDED = override_settings(
    TAU2_EMBED_IN_SPACE=True,
    SESSION_COOKIE_SAMESITE="None",
    CSRF_COOKIE_SAMESITE="None",
    SESSION_COOKIE_SECURE=True,
    CSRF_COOKIE_SECURE=True,
)


def test_by_default_no_site_may_frame_the_app(client):
    response = client.get("/accounts/sign-in/")
    assert response["X-Frame-Options"] == "DENY"
    assert "frame-ancestors 'none'" in response["Content-Security-Policy"]
    assert response.cookies["csrftoken"]["samesite"] == "Lax"


@EMBEDDED
def test_in_a_space_huggingface_may_frame_the_app_and_cookies_cross_sites(client):
    response = client.get("/accounts/sign-in/")
    assert "X-Frame-Options" not in response
    assert response["Content-Security-Policy"].endswith(
        "; frame-ancestors 'self' https://huggingface.co https://*.hf.space"
    )
    cookie = response.cookies["csrftoken"]
    assert cookie["samesite"] == "None" and cookie["secure"] is True
    # HF's consent page refuses to be framed: the sign-in form opens a new tab.
    assert 'action="/auth/login/huggingface/" class="bare" target="_blank"' in (
        response.content.decode()
    )


@EMBEDDED
def test_in_a_space_the_session_cookie_crosses_sites_too(client, fake_hf):
    from tests.accounts.conftest import ALICE
    from tests.support.fake_hf import sign_in

    response = sign_in(client, fake_hf, ALICE)
    cookie = response.cookies["sessionid"]
    assert cookie["samesite"] == "None" and cookie["secure"] is True and cookie["httponly"]


def test_space_variables_configure_sign_in_hosts_and_cookies(tmp_path):
    code = """
import django; django.setup()
from django.conf import settings as s
print(s.TAU2_EMBED_IN_SPACE, s.SESSION_COOKIE_SAMESITE, s.CSRF_COOKIE_SAMESITE)
print(s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE, s.SECURE_PROXY_SSL_HEADER)
print("me-tau2.hf.space" in s.ALLOWED_HOSTS, "https://me-tau2.hf.space" in s.CSRF_TRUSTED_ORIGINS)
print(s.SOCIAL_AUTH_HUGGINGFACE_KEY, s.SOCIAL_AUTH_HUGGINGFACE_SECRET, s.OPENID_PROVIDER_URL)
"""
    environ = {k: v for k, v in os.environ.items() if k != "DJANGO_ALLOW_ASYNC_UNSAFE"}
    environ.update(
        DEBUG="false",
        SPACE_HOST="me-tau2.hf.space",
        OAUTH_CLIENT_ID="space-client",
        OAUTH_CLIENT_SECRET="space-secret",
        OPENID_PROVIDER_URL="https://huggingface.co/",
        SESSION_COOKIE_SECURE="false",  # the Space forces it back on
        TAU2_VAR_DIR=str(tmp_path),
        DJANGO_SETTINGS_MODULE="tau2site.settings",
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=environ, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "True None None",
        "True True ('HTTP_X_FORWARDED_PROTO', 'https')",
        "True True",
        "space-client space-secret https://huggingface.co",
    ]
