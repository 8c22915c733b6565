"""Security headers: one Content-Security-Policy on every page (and the Space's framing
within it), nosniff and frame denial on the OpenEnv API too, and templates the policy
can serve (no inline script, no inline event handler)."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
from asgiref.sync import async_to_sync
from django.test import override_settings

ROOT = Path(__file__).resolve().parents[2]
PAGES = ["/tasks/", "/tasks/airline/27/", "/accounts/sign-in/", "/models/", "/api/docs/"]


def _directives(header: str) -> dict[str, list[str]]:
    parts = (p.strip().split() for p in header.split(";") if p.strip())
    return {name: values for name, *values in parts}


@pytest.mark.parametrize("path", PAGES)
def test_every_page_has_one_policy_of_its_own_site(client, catalogue, path):
    response = client.get(path)
    assert response.status_code == 200
    policy = _directives(response["Content-Security-Policy"])
    assert policy["script-src"] == ["'self'"] and policy["style-src"] == ["'self'"]
    assert policy["default-src"] == ["'self'"] and policy["object-src"] == ["'none'"]
    assert policy["connect-src"] == ["'self'", "ws://testserver"]
    assert policy["frame-ancestors"] == ["'none'"]
    assert response["X-Frame-Options"] == "DENY"
    assert response["X-Content-Type-Options"] == "nosniff"


@override_settings(
    TAU2_EMBED_IN_SPACE=True, SECURE_PROXY_SSL_HEADER=("HTTP_X_FORWARDED_PROTO", "https")
)
def test_in_a_space_the_policy_lets_huggingface_frame_the_app_over_wss(client, catalogue):
    response = client.get("/tasks/", HTTP_X_FORWARDED_PROTO="https", HTTP_HOST="testserver")
    policy = _directives(response["Content-Security-Policy"])
    assert policy["frame-ancestors"] == ["'self'", "https://huggingface.co", "https://*.hf.space"]
    assert policy["connect-src"] == ["'self'", "wss://testserver"]
    assert "X-Frame-Options" not in response


def test_a_views_own_policy_stands(rf):
    from django.http import HttpResponse

    from tau2site.middleware import ContentSecurityPolicyMiddleware

    own = HttpResponse(headers={"Content-Security-Policy": "sandbox"})
    middleware = ContentSecurityPolicyMiddleware(lambda request: own)
    assert middleware(rf.get("/"))["Content-Security-Policy"] == "sandbox"


async def _get(path: str) -> httpx.Response:
    from tau2site.asgi import application

    transport = httpx.ASGITransport(app=application)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        return await client.get(path)


@pytest.mark.parametrize("path", ["/health", "/schema", "/metadata"])
def test_the_openenv_api_answers_with_security_headers(path, db):
    response = async_to_sync(_get)(path)
    assert response.status_code == 200
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["x-frame-options"] == "DENY"
    assert response.headers["referrer-policy"] == "same-origin"
    assert response.headers["content-security-policy"] == "frame-ancestors 'none'"


def test_no_template_has_an_inline_script_or_event_handler():
    """The policy allows scripts from files only: an inline <script> (other than JSON
    data) or an on…= attribute would silently stop working."""
    found = []
    for path in [*ROOT.glob("templates/**/*.html"), *ROOT.glob("apps/**/templates/**/*.html")]:
        text = path.read_text(encoding="utf-8")
        for tag in re.findall(r"<script\b[^>]*>", text):
            if "src=" not in tag and "application/json" not in tag:
                found.append(f"{path.relative_to(ROOT)}: {tag}")
        for handler in re.findall(r"<[a-z][^>]*\s(on[a-z]+)=", text):
            found.append(f"{path.relative_to(ROOT)}: {handler}=")
    assert not found, "\n".join(found)
