"""Studio keys on the JSON API (``/api/``): ``Authorization: Bearer tau2s_…`` signs a
request as the key's owner, with the key's scope as ``request.auth``
(:class:`~apps.accounts.grants.KeyGrant`). A revoked or unknown key is a 401 saying why;
a request with no key falls through to the browser session."""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from apps.accounts.grants import KeyGrant
from apps.agents.services import API_KEY_PREFIX, ApiKeyRefused, api_key_resolve

REALM = 'Bearer realm="api"'


def _presented(request) -> str:
    """The studio key the request presents (``""``: none)."""
    header = authentication.get_authorization_header(request).decode("latin-1")
    scheme, _, raw = header.partition(" ")
    if scheme.lower() != "bearer" or not raw.strip().startswith(API_KEY_PREFIX):
        return ""
    return raw.strip()


class StudioKeyAuthentication(authentication.BaseAuthentication):
    def authenticate(self, request):
        raw = _presented(request)
        if not raw:
            return None
        try:
            key = api_key_resolve(raw=raw)
        except ApiKeyRefused as exc:
            raise exceptions.AuthenticationFailed(str(exc)) from None
        return key.user, KeyGrant(key_id=key.key_id, may_start=key.may_start)

    def authenticate_header(self, request) -> str | None:
        # Only a request that presented a key is told to present one (401); one
        # without keeps the session's answer (403), as before keys were accepted here.
        return REALM if _presented(request) else None


class StudioKeyScheme(OpenApiAuthenticationExtension):
    """The OpenAPI schema's "studioKey" security scheme."""

    target_class = StudioKeyAuthentication
    name = "studioKey"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A studio API key (tau2s_…, made on /accounts/keys/): read, "
            "or read and start. It acts as its owner: their connections, budgets and caps.",
        }
