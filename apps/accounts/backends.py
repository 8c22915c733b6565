"""Sign in with Hugging Face: a social-core OAuth 2 backend (authorization code + PKCE S256).

social-core 7 ships no Hugging Face backend. Endpoints come from the discovery document
of ``settings.OPENID_PROVIDER_URL`` (https://huggingface.co unless a Space or a test says
otherwise), read at request time so that tests and the live server can point at a fake.
"""

from __future__ import annotations

import threading
from typing import Any

from django.conf import settings
from django.urls import reverse
from requests.auth import HTTPBasicAuth
from social_core.backends.oauth import BaseOAuth2PKCE
from social_core.exceptions import AuthResponseError

from apps.accounts.models import INFERENCE_SCOPE
from apps.accounts.selectors import signin_missing_settings

SCOPES = ["openid", "profile", INFERENCE_SCOPE]
# What pushing a dataset repository on the person's own token needs (TAU2_HF_SIGNIN_WRITE_REPOS).
WRITE_SCOPES = ["write-repos", "manage-repos"]

_discovery: dict[str, dict[str, Any]] = {}
_discovery_lock = threading.Lock()


class HuggingFaceOAuth2(BaseOAuth2PKCE):
    name = "huggingface"
    # HF matches redirect URIs exactly: the state travels as `state` only.
    REDIRECT_STATE = False
    STATE_PARAMETER = True
    USE_BASIC_AUTH = True
    ID_KEY = "sub"
    DEFAULT_SCOPE = SCOPES
    SCOPE_SEPARATOR = " "
    PKCE_DEFAULT_CODE_CHALLENGE_METHOD = "S256"
    # Profile only: the tokens go to the vault (apps.accounts.pipeline), never to extra_data.
    EXTRA_DATA = [
        ("preferred_username", "username"),
        ("name", "name"),
        ("picture", "picture"),
    ]

    def get_scope(self) -> list[str]:
        """The scopes sign-in asks for: always the inference ones, with
        ``TAU2_HF_SIGNIN_WRITE_REPOS`` also the Hub's repository writes (dataset pushes)."""
        scope = list(super().get_scope())
        if settings.TAU2_HF_SIGNIN_WRITE_REPOS:
            scope += [s for s in WRITE_SCOPES if s not in scope]
        return scope

    # --- endpoints --------------------------------------------------------------------
    def provider_url(self) -> str:
        return settings.OPENID_PROVIDER_URL.rstrip("/")

    def oidc_config(self) -> dict[str, Any]:
        """The provider's discovery document (fetched once per provider URL)."""
        url = self.provider_url()
        with _discovery_lock:
            cached = _discovery.get(url)
        if cached is None:
            cached = self.get_json(f"{url}/.well-known/openid-configuration", stage="begin")
            if not isinstance(cached, dict) or "token_endpoint" not in cached:
                raise AuthResponseError(self, code="malformed_response", stage="begin")
            with _discovery_lock:
                _discovery[url] = cached
        return cached

    def authorization_url(self) -> str:
        return self.oidc_config()["authorization_endpoint"]

    def access_token_url(self) -> str:
        return self.oidc_config()["token_endpoint"]

    def userinfo_url(self) -> str:
        default = f"{self.provider_url()}/oauth/userinfo"
        return self.oidc_config().get("userinfo_endpoint") or default

    def get_redirect_uri(self, state: str | None = None) -> str:
        # On a Space the app sits behind HF's proxy: the callback must name the Space's host.
        space_host = getattr(settings, "SPACE_HOST", None)
        uri = super().get_redirect_uri(state)
        if space_host:
            path = uri.split("://", 1)[-1].partition("/")[2]
            return f"https://{space_host}/{path}"
        return uri

    def start(self):
        # Without a client id and secret Hugging Face would refuse us after a round trip
        # (or, offline, the discovery read fails as "could not be reached"): say instead
        # which settings are missing, on the sign-in page.

        if signin_missing_settings():
            return self.strategy.redirect(reverse("accounts:signin"))
        return super().start()

    def get_key_and_secret(self) -> tuple[str, str]:
        return settings.SOCIAL_AUTH_HUGGINGFACE_KEY, settings.SOCIAL_AUTH_HUGGINGFACE_SECRET

    # --- refresh (client authenticated with HTTP Basic, as for the code exchange) ---------
    def refresh_token_auth(self) -> HTTPBasicAuth:
        return HTTPBasicAuth(*self.get_key_and_secret())

    def refresh_token_params(self, token: str, *args, **kwargs) -> dict[str, str]:
        return {"grant_type": "refresh_token", "refresh_token": token}

    # --- the person ---------------------------------------------------------------------
    def user_data(self, access_token: str, *args, **kwargs) -> dict[str, Any]:
        return self.get_json(
            self.userinfo_url(), headers={"Authorization": f"Bearer {access_token}"}
        )

    def get_user_details(self, response: dict[str, Any]) -> dict[str, Any]:
        return {
            "username": response.get("preferred_username") or "",
            "email": response.get("email") or "",
            "fullname": response.get("name") or "",
        }

    def extra_data(self, user, uid, response, details, pipeline_kwargs) -> dict[str, Any]:
        data = super().extra_data(user, uid, response, details, pipeline_kwargs)
        for secret in ("access_token", "refresh_token", "id_token", "token_type"):
            data.pop(secret, None)
        data["orgs"] = org_handles(response)
        return data


def org_handles(userinfo: dict[str, Any]) -> list[str]:
    """The handles (``preferred_username``) of the organisations in a userinfo response."""
    handles = []
    for org in userinfo.get("orgs") or []:
        if isinstance(org, dict):
            handle = org.get("preferred_username") or org.get("name")
            if handle:
                handles.append(str(handle))
    return handles
