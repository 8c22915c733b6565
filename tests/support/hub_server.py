"""A local stand-in of the Hugging Face Hub's endpoints a dataset push calls, on a real port.

Exactly what ``huggingface_hub`` (2.4) sends for ``HfApi.create_repo(repo_type="dataset")``
and ``HfApi.upload_folder`` of small files, as huggingface.co answers them:

* ``POST /api/repos/create`` → ``{"url": "<hub>/datasets/<ns>/<name>", "name": …}``
  (``409`` with the same body when it exists: ``exist_ok`` carries on);
* ``POST /api/validate-yaml`` (a README.md in the commit) → ``{"errors": [], "warnings": []}``;
* ``POST /api/datasets/<ns>/<name>/preupload/<rev>`` → every file ``"uploadMode": "regular"``
  (the content then travels inside the commit: no LFS or Xet upload is asked for);
* ``POST /api/datasets/<ns>/<name>/commit/<rev>`` (NDJSON: a header, then one ``file`` line
  each, base64) → ``{"commitUrl", "commitOid", "pullRequestUrl": null}``.

Requests need ``Authorization: Bearer <token>`` with a token in :attr:`HubServer.tokens`
(``401`` otherwise); ``refuse_with`` answers every call with that status instead. Each
request is recorded whole (method, path, headers, raw body) in :attr:`requests`, and each
commit's files decoded in :attr:`files` (``{"<repo>": {"<path>": bytes}}``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from typing import Any

from tests.support.scripted_http import JSONHandler, LocalServer

NAMESPACE = "alice-hf"


@dataclass(frozen=True)
class HubRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class HubServer(LocalServer):
    tokens: set[str] = field(default_factory=set)
    namespace: str = NAMESPACE
    refuse_with: int | None = None
    requests: list[HubRequest] = field(default_factory=list)
    repos: dict[str, dict[str, Any]] = field(default_factory=dict)
    files: dict[str, dict[str, bytes]] = field(default_factory=dict)
    _server: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    thread_name = "hub"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _handler(self) -> type[JSONHandler]:
        return _handler(self)

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
            self.repos.clear()
            self.files.clear()
            self.refuse_with = None

    def answer(self, request: HubRequest) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.requests.append(request)
        if self.refuse_with is not None:
            return self.refuse_with, {"error": "Refused by the stand-in Hub"}
        authorization = request.headers.get("authorization", "")
        if not authorization.startswith("Bearer ") or authorization[7:] not in self.tokens:
            return 401, {"error": "Invalid credentials in Authorization header"}
        path = request.path.split("?", 1)[0]
        if path == "/api/repos/create":
            return self._create(json.loads(request.body))
        if path == "/api/validate-yaml":
            return 200, {"errors": [], "warnings": []}
        match = re.fullmatch(r"/api/datasets/([^/]+/[^/]+)/(preupload|commit)/([^/]+)", path)
        if match is None:
            return 404, {"error": f"The stand-in Hub does not serve {request.method} {path}"}
        repo, action = match.group(1), match.group(2)
        if repo not in self.repos:
            return 404, {"error": "Repository not found"}
        if action == "preupload":
            files = json.loads(request.body)["files"]
            return 200, {
                "files": [
                    {"path": f["path"], "uploadMode": "regular", "shouldIgnore": False}
                    for f in files
                ]
            }
        return self._commit(repo, request.body)

    def _create(self, payload: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        repo = f"{payload.get('organization') or self.namespace}/{payload['name']}"
        body = {"url": f"{self.url}/datasets/{repo}", "name": repo}
        with self._lock:
            if repo in self.repos:
                return 409, {**body, "error": "You already created this dataset repo"}
            self.repos[repo] = payload
        return 200, body

    def _commit(self, repo: str, raw: bytes) -> tuple[int, dict[str, Any]]:
        lines = [json.loads(line) for line in raw.splitlines() if line.strip()]
        if not lines or lines[0].get("key") != "header":
            return 400, {"error": "A commit starts with its header"}
        with self._lock:
            stored = self.files.setdefault(repo, {})
            for line in lines[1:]:
                if line["key"] == "file":
                    value = line["value"]
                    stored[value["path"]] = base64.b64decode(value["content"])
        oid = hashlib.sha1(raw).hexdigest()  # noqa: S324 - an id, as git's
        return 200, {
            "commitUrl": f"{self.url}/datasets/{repo}/commit/{oid}",
            "commitOid": oid,
            "pullRequestUrl": None,
        }


def _handler(hub: HubServer) -> type[JSONHandler]:
    class Handler(JSONHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            request = HubRequest(
                method="POST",
                path=self.path,
                headers={k.lower(): v for k, v in self.headers.items()},
                body=self._read_raw(),
            )
            status, payload = hub.answer(request)
            self._send_json(status, payload)

        def do_GET(self) -> None:  # noqa: N802
            request = HubRequest(
                method="GET",
                path=self.path,
                headers={k.lower(): v for k, v in self.headers.items()},
                body=b"",
            )
            hub.answer(request)
            self._send_json(404, {"error": "The stand-in Hub serves no GET"})

    return Handler
