"""A local fake of Hugging Face's OAuth 2 / OpenID Connect provider, on a real HTTP port.

Endpoints (as huggingface.co serves them): ``/.well-known/openid-configuration``,
``/oauth/authorize`` (approves at once as ``fake.person`` and redirects back with
``code`` and ``state``), ``/oauth/token`` (HTTP Basic client auth; authorization_code
with PKCE S256 and refresh_token grants; refresh tokens rotate and a used one is refused),
``/oauth/userinfo`` (Bearer).

Tests set ``fake.person`` (who approves), ``fake.expires_in``, ``fake.scope`` (granted),
``fake.next_tokens`` (exact tokens to issue, e.g. a canary) and ``fake.refresh_delay``,
and read ``fake.authorize_requests``, ``fake.token_requests`` and ``fake.refresh_calls``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlencode, urlsplit

CLIENT_ID = "fake-client-id"
CLIENT_SECRET = "fake-client-secret"


@dataclass
class Person:
    sub: str
    preferred_username: str
    name: str
    orgs: list[str] = field(default_factory=list)

    def userinfo(self) -> dict:
        return {
            "sub": self.sub,
            "preferred_username": self.preferred_username,
            "name": self.name,
            "picture": f"https://cdn-avatars.huggingface.co/{self.preferred_username}.png",
            "profile": f"https://huggingface.co/{self.preferred_username}",
            "isPro": False,
            "orgs": [
                {
                    "sub": f"org-{org}",
                    "name": org.title(),
                    "preferred_username": org,
                    "picture": "",
                    "isEnterprise": False,
                }
                for org in self.orgs
            ],
        }


@dataclass
class Grant:
    person: Person
    scope: str
    expires_at: float = 0.0
    revoked: bool = False


class FakeHF:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reset()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread: threading.Thread | None = None

    # --- test controls ------------------------------------------------------------------
    def reset(self) -> None:
        with getattr(self, "_lock", threading.Lock()):
            self.person: Person | None = None
            self.expires_in = 28800
            self.scope = "openid profile inference-api"
            self.issue_refresh_tokens = True
            self.next_tokens: list[tuple[str, str]] = []  # (access, refresh) to issue next
            self.refresh_delay = 0.0
            self.codes: dict[str, dict] = {}
            self.access: dict[str, Grant] = {}
            self.refresh: dict[str, Grant] = {}
            self.used_refresh: set[str] = set()
            self.authorize_requests: list[dict] = []
            self.token_requests: list[dict] = []
            self.refresh_calls = 0

    def start(self) -> FakeHF:
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def revoke_all(self, *, sub: str) -> None:
        """What a person does on huggingface.co when they revoke the app's access."""
        with self._lock:
            for grant in [*self.access.values(), *self.refresh.values()]:
                if grant.person.sub == sub:
                    grant.revoked = True

    def issue_for(self, person: Person) -> dict:
        """A token response for ``person`` as if they had just signed in (for direct setups)."""
        with self._lock:
            return self._issue(person, self.scope)

    def refresh_is_accepted(self, refresh_token: str) -> bool:
        with self._lock:
            grant = self.refresh.get(refresh_token)
            return bool(grant and not grant.revoked)

    def token_is_valid(self, token: str) -> bool:
        with self._lock:
            grant = self.access.get(token)
            return bool(grant and not grant.revoked and grant.expires_at > time.time())

    # --- the provider -------------------------------------------------------------------
    def _issue(self, person: Person, scope: str) -> dict:
        if self.next_tokens:
            access, refresh = self.next_tokens.pop(0)
        else:
            access = "hf_oauth_" + secrets.token_urlsafe(24)
            refresh = "hf_oauth_refresh_" + secrets.token_urlsafe(24)
        self.access[access] = Grant(person, scope, expires_at=time.time() + self.expires_in)
        body = {
            "access_token": access,
            "token_type": "bearer",
            "expires_in": self.expires_in,
            "scope": scope,
            "id_token": "header.payload.signature",
        }
        if self.issue_refresh_tokens:
            self.refresh[refresh] = Grant(person, scope)
            body["refresh_token"] = refresh
        return body

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _json(self, status: int, body: dict, headers: dict | None = None) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                url = urlsplit(self.path)
                if url.path == "/.well-known/openid-configuration":
                    return self._json(200, fake._discovery())
                if url.path == "/oauth/authorize":
                    return self._authorize(parse_qs(url.query))
                if url.path == "/oauth/userinfo":
                    return self._userinfo()
                return self._json(404, {"error": "not_found"})

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                form = parse_qs(self.rfile.read(length).decode())
                if urlsplit(self.path).path == "/oauth/token":
                    return self._token({k: v[0] for k, v in form.items()})
                return self._json(404, {"error": "not_found"})

            def _authorize(self, query):
                params = {k: v[0] for k, v in query.items()}
                with fake._lock:
                    fake.authorize_requests.append(params)
                    s256 = params.get("code_challenge_method") == "S256"
                    problems = [
                        name
                        for name, ok in (
                            ("client_id", params.get("client_id") == CLIENT_ID),
                            ("response_type", params.get("response_type") == "code"),
                            ("code_challenge", bool(params.get("code_challenge"))),
                            ("code_challenge_method", s256),
                            ("state", bool(params.get("state"))),
                            ("redirect_uri", bool(params.get("redirect_uri"))),
                            ("person", fake.person is not None),
                        )
                        if not ok
                    ]
                    if problems:
                        return self._json(400, {"error": "invalid_request", "bad": problems})
                    code = secrets.token_urlsafe(16)
                    fake.codes[code] = {
                        "person": fake.person,
                        "challenge": params["code_challenge"],
                        "redirect_uri": params["redirect_uri"],
                        "scope": fake.scope,
                    }
                back = params["redirect_uri"]
                sep = "&" if "?" in back else "?"
                self.send_response(302)
                self.send_header(
                    "Location", back + sep + urlencode({"code": code, "state": params["state"]})
                )
                self.send_header("Content-Length", "0")
                self.end_headers()

            def _client_ok(self) -> bool:
                header = self.headers.get("Authorization", "")
                if not header.startswith("Basic "):
                    return False
                try:
                    user, _, password = base64.b64decode(header[6:]).decode().partition(":")
                except ValueError:
                    return False
                return user == CLIENT_ID and password == CLIENT_SECRET

            def _token(self, form):
                with fake._lock:
                    fake.token_requests.append(
                        {"grant_type": form.get("grant_type"), "has_basic": self._client_ok()}
                    )
                if not self._client_ok():
                    return self._json(
                        401, {"error": "invalid_client"}, {"WWW-Authenticate": "Basic"}
                    )
                grant_type = form.get("grant_type")
                if grant_type == "authorization_code":
                    return self._code_grant(form)
                if grant_type == "refresh_token":
                    return self._refresh_grant(form)
                return self._json(400, {"error": "unsupported_grant_type"})

            def _code_grant(self, form):
                with fake._lock:
                    entry = fake.codes.pop(form.get("code", ""), None)
                    if entry is None or entry["redirect_uri"] != form.get("redirect_uri"):
                        return self._json(400, {"error": "invalid_grant"})
                    verifier = form.get("code_verifier", "")
                    challenge = (
                        base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
                        .decode()
                        .rstrip("=")
                    )
                    if not verifier or challenge != entry["challenge"]:
                        return self._json(
                            400, {"error": "invalid_grant", "error_description": "PKCE failed"}
                        )
                    return self._json(200, fake._issue(entry["person"], entry["scope"]))

            def _refresh_grant(self, form):
                token = form.get("refresh_token", "")
                with fake._lock:
                    fake.refresh_calls += 1
                    delay = fake.refresh_delay
                if delay:
                    time.sleep(delay)  # lets concurrent callers pile up
                with fake._lock:
                    grant = fake.refresh.pop(token, None)
                    # Unknown, rotated out (popped on first use) or revoked: refused.
                    if grant is None or grant.revoked:
                        return self._json(400, {"error": "invalid_grant"})
                    fake.used_refresh.add(token)
                    return self._json(200, fake._issue(grant.person, grant.scope))

            def _userinfo(self):
                header = self.headers.get("Authorization", "")
                token = header[7:] if header.startswith("Bearer ") else ""
                if not fake.token_is_valid(token):
                    return self._json(401, {"error": "invalid_token"})
                with fake._lock:
                    person = fake.access[token].person
                return self._json(200, person.userinfo())

        return Handler

    def _discovery(self) -> dict:
        return {
            "issuer": self.url,
            "authorization_endpoint": f"{self.url}/oauth/authorize",
            "token_endpoint": f"{self.url}/oauth/token",
            "userinfo_endpoint": f"{self.url}/oauth/userinfo",
            "jwks_uri": f"{self.url}/oauth/jwks",
            "scopes_supported": ["openid", "profile", "email", "inference-api"],
            "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code", "refresh_token"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["client_secret_basic"],
        }


def sign_in(client, fake: FakeHF, person: Person, *, next_url: str = "/tasks/"):
    """Sign ``person`` in through ``fake`` with a Django test ``client``; returns the callback's
    response. The browser's hop to the provider is a real HTTP request to the fake."""
    import httpx

    fake.person = person
    begin = client.post("/auth/login/huggingface/", {"next": next_url})
    assert begin.status_code == 302, begin.status_code
    authorize = begin["Location"]
    assert authorize.startswith(fake.url + "/oauth/authorize"), authorize
    provider = httpx.get(authorize, follow_redirects=False, timeout=10)
    assert provider.status_code == 302, provider.text
    back = urlsplit(provider.headers["Location"])
    return client.get(back.path, parse_qs(back.query))
