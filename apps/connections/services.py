"""Writes of connections: create, update, rotate the key, delete; their models and prices,
typed or read from the endpoint; the last Test's outcome.

A key is sealed the moment it arrives and never stored, logged or returned in the clear;
only ``apps.connections.llm_routes.route_for`` opens it (for a run, the Test, or reading the
models an endpoint lists). Extra headers are sealed the same way: their names are kept in
the clear, their values never shown again.

Who may do what is checked here as well as in the views: staff manage team connections,
a person their own ones (``apps.connections.selectors.can_manage``).
"""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from urllib.parse import urlsplit

import httpx
from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.text import slugify

from apps.accounts import crypto
from apps.connections.llm_routes import ConnectionUnavailable, connection_base_url, route_for
from apps.connections.models import Connection, ConnectionModel
from apps.connections.selectors import can_manage
from tau2_env.llm import outbound
from tau2_env.llm.gateway import LITELLM_PREFIXES, litellm, redact

__all__ = [
    "ConnectionFields",
    "ModelsReadError",
    "TeamSettings",
    "connection_create",
    "connection_delete",
    "connection_key_rotate",
    "connection_test_record",
    "connection_update",
    "key_hint",
    "litellm_prices",
    "models_read",
    "models_read_for",
    "models_replace",
    "models_set",
]

ANTHROPIC_VERSION = "2023-06-01"

ModelItem = str | tuple[str, tuple | None]
"""A model as :func:`models_set` takes it: a name (priced from litellm's cost map when it
knows it), or ``(name, (input, output))`` with entered prices per 1M tokens (``None``:
litellm's, or unpriced)."""


@dataclass(frozen=True)
class TeamSettings:
    """Who may use a team connection, and its limits (``None``: no limit)."""

    access: str = Connection.Access.EVERYONE
    allowed_users: Iterable = ()  # kept as a tuple
    monthly_budget_usd: Decimal | None = None
    person_monthly_budget_usd: Decimal | None = None
    max_in_flight: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "allowed_users", tuple(self.allowed_users))


@dataclass(frozen=True)
class ConnectionFields:
    """What a person sets on a connection, as the form reads it: handed whole to
    :func:`connection_create` and :func:`connection_update`. Its kind, owner and slug are
    not here: they are chosen once, at creation, and never change.

    ``None`` is none on create (``team``: the defaults, everyone and no limits) and on
    update keeps what is there, as an empty ``api_key`` does: on update a key rotates
    the old one, ``headers`` replace them all (``{}`` removes them), ``models`` are
    exactly the ones offered then, and ``team`` applies to a team connection only.
    """

    name: str
    base_url: str = ""
    api_key: str = ""
    headers: Mapping[str, str] | None = None
    models: Sequence[ModelItem] | None = None  # kept as a tuple
    team: TeamSettings | None = None

    def __post_init__(self) -> None:
        # As given by anyone: the key and URL stripped, headers as str → str.
        object.__setattr__(self, "api_key", (self.api_key or "").strip())
        object.__setattr__(self, "base_url", (self.base_url or "").strip())
        if self.headers is not None:
            headers = {str(k): str(v) for k, v in self.headers.items()}
            object.__setattr__(self, "headers", headers)
        if self.models is not None:
            object.__setattr__(self, "models", tuple(self.models))


def key_hint(key: str) -> str:
    """``…a1b2``: enough to tell two keys apart, never enough to use one. A key shorter
    than 12 characters shows none of itself (four would be most of it): ``short key``."""
    key = (key or "").strip()
    return f"…{key[-4:]}" if len(key) >= 12 else ("short key" if key else "")


def litellm_prices(*, kind: str, model: str) -> tuple[Decimal, Decimal] | None:
    """(input, output) USD per 1M tokens from litellm's cost map, or ``None`` when it does
    not know the model (an own endpoint's model: enter its prices, or it stays unpriced)."""
    prefix = LITELLM_PREFIXES.get(kind, "")
    if kind == "openai_compatible":
        return None  # a name on someone's own server says nothing of its price
    for name in (f"{prefix}/{model}", model):
        info = litellm.model_cost.get(name)
        if not info:
            continue
        given_in = info.get("input_cost_per_token")
        given_out = info.get("output_cost_per_token")
        if given_in is None or given_out is None:
            continue
        million = Decimal(1_000_000)
        return (Decimal(str(given_in)) * million, Decimal(str(given_out)) * million)
    return None


def _unique_slug(name: str) -> str:
    base = slugify(name)[:32] or "connection"
    slug, n = base, 2
    while Connection.objects.filter(slug=slug).exists():
        slug, n = f"{base}-{n}", n + 1
    return slug


@transaction.atomic
def connection_create(
    *, by, kind: str, fields: ConnectionFields, owner=None, slug: str = ""
) -> Connection:
    """A new connection of ``kind`` with ``fields``, by ``by``: a team one (``owner``
    None, staff only) or ``owner``'s own. Raises ``ValidationError`` for what no
    connection may have.
    """
    if kind not in Connection.Kind.values:
        raise ValidationError({"kind": f"Unknown kind {kind!r}."})
    if owner is None and not getattr(by, "is_staff", False):
        raise ValidationError("Only staff add team connections; add a personal one instead.")
    if owner is not None and owner.pk != getattr(by, "pk", None):
        raise ValidationError("A personal connection is added by its owner only.")
    _check_fields(fields, kind=kind)
    team = fields.team or TeamSettings()
    _check_limits(team)
    headers = fields.headers or {}
    connection = Connection.objects.create(
        name=fields.name.strip()[:80],
        slug=slug or _unique_slug(fields.name),
        kind=kind,
        base_url=fields.base_url,
        api_key_enc=crypto.seal(fields.api_key) if fields.api_key else "",
        key_hint=key_hint(fields.api_key),
        headers_enc=crypto.seal(json.dumps(headers)) if headers else "",
        header_names=sorted(headers),
        owner=owner,
        access=team.access,
        created_by=by,
        monthly_budget_usd=team.monthly_budget_usd,
        person_monthly_budget_usd=team.person_monthly_budget_usd,
        max_in_flight=team.max_in_flight,
    )
    if team.allowed_users:
        connection.allowed_users.set(list(team.allowed_users))
    models_set(connection=connection, models=fields.models or ())
    return connection


def models_set(*, connection: Connection, models: Iterable[ModelItem]) -> list[ConnectionModel]:
    """Add (or re-price) the connection's ``models``; the others stay as they are."""
    out = []
    for item in models:
        name, entered = (item, None) if isinstance(item, str) else item
        name = name.strip()
        if not name:
            continue
        if entered is not None and entered[0] is not None and entered[1] is not None:
            prices, source = entered, ConnectionModel.PriceSource.ENTERED
        else:
            prices = litellm_prices(kind=connection.kind, model=name)
            source = ConnectionModel.PriceSource.LITELLM if prices else ""
        row, _ = ConnectionModel.objects.update_or_create(
            connection=connection,
            name=name,
            defaults={
                "input_price": prices[0] if prices else None,
                "output_price": prices[1] if prices else None,
                "price_source": source,
            },
        )
        out.append(row)
    return out


def models_replace(*, connection: Connection, models: Iterable[ModelItem]) -> list[ConnectionModel]:
    """The connection offers exactly ``models`` (as :func:`models_set` takes them): the
    others are removed. Runs name their model in their own row, so none loses it."""
    with transaction.atomic():
        rows = models_set(connection=connection, models=models)
        connection.models.exclude(pk__in=[row.pk for row in rows]).delete()
    return rows


def _check_fields(fields: ConnectionFields, *, kind: str) -> None:
    if not fields.name.strip():
        raise ValidationError({"name": "A connection needs a name."})
    if kind == Connection.Kind.OPENAI_COMPATIBLE and not fields.base_url:
        raise ValidationError({"base_url": "An OpenAI-compatible endpoint needs its base URL."})


def _check_limits(team: TeamSettings) -> None:
    errors = {}
    if team.access not in Connection.Access.values:
        errors["access"] = f"Unknown access {team.access!r}."
    for name, value in (
        ("monthly_budget_usd", team.monthly_budget_usd),
        ("person_monthly_budget_usd", team.person_monthly_budget_usd),
    ):
        if value is not None and Decimal(value) < 0:
            errors[name] = "A budget cannot be negative (leave it empty for none)."
    if team.max_in_flight is not None and int(team.max_in_flight) < 1:
        errors["max_in_flight"] = "At least one run at a time (leave it empty for no limit)."
    if errors:
        raise ValidationError(errors)


def _check_manager(*, connection: Connection, by) -> None:
    if not can_manage(by, connection):
        raise PermissionDenied(
            "Only staff change a team connection, and only its owner a personal one."
        )


def _sealed_headers(headers: Mapping[str, str]) -> tuple[str, list[str]]:
    headers = {str(k): str(v) for k, v in headers.items()}
    return (crypto.seal(json.dumps(headers)) if headers else ""), sorted(headers)


@transaction.atomic
def connection_update(*, connection: Connection, by, fields: ConnectionFields) -> Connection:
    """Change ``connection`` to ``fields``, as ``by`` may (see :class:`ConnectionFields`
    for what ``None`` keeps). A new key is rotated in (:func:`connection_key_rotate`);
    models are replaced (:func:`models_replace`). Who may use it and its limits are a
    team connection's only. Raises ``PermissionDenied`` (not theirs to change) or
    ``ValidationError``.
    """
    _check_manager(connection=connection, by=by)
    if connection.is_deleted:
        raise ValidationError("This connection was deleted.")
    _check_fields(fields, kind=connection.kind)
    connection.name = fields.name.strip()[:80]
    connection.base_url = fields.base_url
    changed = ["name", "base_url"]
    if fields.headers is not None:
        connection.headers_enc, connection.header_names = _sealed_headers(fields.headers)
        changed += ["headers_enc", "header_names"]
    team = fields.team if connection.is_team else None
    if team is not None:
        _check_limits(team)
        connection.access = team.access
        connection.monthly_budget_usd = team.monthly_budget_usd
        connection.person_monthly_budget_usd = team.person_monthly_budget_usd
        connection.max_in_flight = team.max_in_flight
        changed += ["access", "monthly_budget_usd", "person_monthly_budget_usd", "max_in_flight"]
    connection.save(update_fields=changed)
    if team is not None:
        connection.allowed_users.set(list(team.allowed_users))
    if fields.api_key:
        connection_key_rotate(connection=connection, by=by, api_key=fields.api_key)
    if fields.models is not None:
        models_replace(connection=connection, models=fields.models)
    return connection


def connection_key_rotate(*, connection: Connection, by, api_key: str) -> Connection:
    """Seal ``api_key`` as the connection's key from now on (the old one is gone), with
    its hint and ``key_rotated_at``. Runs that start from now on use the new key."""
    _check_manager(connection=connection, by=by)
    api_key = (api_key or "").strip()
    if not api_key:
        raise ValidationError({"api_key": "Enter the new key."})
    connection.api_key_enc = crypto.seal(api_key)
    connection.key_hint = key_hint(api_key)
    connection.key_rotated_at = timezone.now()
    connection.save(update_fields=["api_key_enc", "key_hint", "key_rotated_at"])
    return connection


def connection_delete(*, connection: Connection, by) -> Connection:
    """Delete ``connection`` softly: its key and headers are wiped and it serves no new
    run (a queued one fails saying so: ``routes.route_for``); the row stays, so the runs
    that name it keep saying where they ran."""
    _check_manager(connection=connection, by=by)
    Connection.objects.filter(pk=connection.pk, deleted_at__isnull=True).update(
        deleted_at=timezone.now(), api_key_enc="", headers_enc=""
    )
    connection.refresh_from_db()
    return connection


def connection_test_record(*, connection: Connection, outcome: Mapping) -> None:
    """Keep the last Test's outcome (``{ok, kind, message, model, at, …}``, no secret)."""
    Connection.objects.filter(pk=connection.pk).update(last_test=dict(outcome))
    connection.last_test = dict(outcome)


# --------------------------------------------------------------- models an endpoint lists


class ModelsReadError(Exception):
    """The endpoint's models could not be read; ``str()`` says why, for the person (no
    secret in it)."""


def _models_url(*, kind: str, base: str) -> str:
    base = base.rstrip("/")
    if kind == Connection.Kind.ANTHROPIC:
        return f"{base}/models" if base.endswith("/v1") else f"{base}/v1/models"
    if kind == Connection.Kind.GEMINI:
        return f"{base}/models" if base.endswith(("/v1", "/v1beta")) else f"{base}/v1beta/models"
    return f"{base}/models"


def _models_headers(*, kind: str, api_key: str, headers: Mapping[str, str]) -> dict:
    sent = dict(headers)
    if kind == Connection.Kind.ANTHROPIC:
        sent.update({"x-api-key": api_key, "anthropic-version": ANTHROPIC_VERSION})
    elif kind == Connection.Kind.GEMINI:
        sent["x-goog-api-key"] = api_key
    elif api_key:
        sent["Authorization"] = f"Bearer {api_key}"
    return sent


def _model_names(payload) -> list[str] | None:
    """The model ids of a models list: OpenAI's ``{"data": [{"id"}]}`` (also Anthropic's,
    Mistral's, OpenRouter's, Fireworks', vLLM's, TGI's, Ollama's), Together's bare list,
    Gemini's ``{"models": [{"name": "models/…"}]}`` (those that generate content)."""
    if isinstance(payload, dict) and isinstance(payload.get("models"), list):
        names = []
        for item in payload["models"]:
            if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                continue
            methods = item.get("supportedGenerationMethods")
            if isinstance(methods, list) and "generateContent" not in methods:
                continue
            names.append(item["name"].removeprefix("models/"))
        return names
    items = payload.get("data") if isinstance(payload, dict) else payload
    if not isinstance(items, list):
        return None
    names = [item["id"] for item in items if isinstance(item, dict) and item.get("id")]
    return [str(name) for name in names]


def models_read(
    *, kind: str, base_url: str = "", api_key: str = "", headers: Mapping[str, str] | None = None
) -> list[str]:
    """The names of the models the endpoint lists (sorted, without repeats), read with
    ``api_key`` and ``headers`` within ``TAU2_CONNECTION_TEST_TIMEOUT`` seconds: OpenAI's
    ``GET {base}/models`` with a bearer key (every kind but two), Anthropic's
    ``GET /v1/models`` with ``x-api-key`` and ``anthropic-version``, Gemini's
    ``GET /v1beta/models`` with ``x-goog-api-key``.

    Raises :class:`ModelsReadError` saying what happened, never with the key or a header.
    """
    secrets = (api_key, *(headers or {}).values())
    base = connection_base_url(Connection(kind=kind, base_url=base_url or ""))
    if not base:
        raise ModelsReadError("Enter the endpoint's base URL first.")
    url = _models_url(kind=kind, base=base)
    parts = urlsplit(url)
    where = f"{parts.scheme}://{parts.hostname}{f':{parts.port}' if parts.port else ''}"
    timeout = settings.TAU2_CONNECTION_TEST_TIMEOUT
    try:
        # The outbound policy's client: allowed destinations only, no redirects, the
        # whole answer within the timeout and under the size cap.
        response = outbound.client().get(
            url,
            headers=_models_headers(kind=kind, api_key=api_key, headers=headers or {}),
            timeout=timeout,
        )
    except httpx.TimeoutException:
        raise ModelsReadError(f"{where} did not answer within {timeout:g} s.") from None
    except httpx.HTTPError as exc:
        raise ModelsReadError(_unreachable(exc, where=where)) from None
    if response.status_code in (401, 403):
        raise ModelsReadError(
            f"{where} refused the key (HTTP {response.status_code}): check it, or type "
            "the models' names instead."
        )
    if response.status_code == 404:
        raise ModelsReadError(
            f"{where} has no list of models at {parts.path} (HTTP 404): check the base "
            "URL (an OpenAI-compatible one usually ends in /v1), or type the models' names."
        )
    if response.status_code != 200:
        raise ModelsReadError(
            f"{where} answered HTTP {response.status_code} for its list of models: type "
            "the models' names instead."
        )
    try:
        payload = response.json()
    except ValueError:
        kind_of = response.headers.get("content-type", "").split(";")[0] or "no type"
        raise ModelsReadError(
            f"{where} answered with something that is not JSON ({kind_of}): is this an "
            "OpenAI-compatible API? Check the base URL."
        ) from None
    names = _model_names(payload)
    if names is None:
        raise ModelsReadError(
            redact(f"{where} answered, but not with a list of models: type their names.", *secrets)
        )
    # Only what a model's name can be: the page shows them, and an endpoint that is not a
    # model server must not have its answer shown back through them.
    kept = sorted({name for name in names if MODEL_NAME.fullmatch(name)})
    if names and not kept:
        raise ModelsReadError(
            f"{where} answered, but none of what it listed looks like a model's name: type "
            "their names."
        )
    return kept


# A model's name as providers spell them: ``org/model``, ``model:tag``, ``models/x-1.5@v2``.
MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,199}")


def _unreachable(exc: BaseException, *, where: str) -> str:
    """Why the list could not be read, in as few words as tell the person what to fix: a
    refused destination, a name that does not resolve, or else "could not be reached" —
    never which of a closed port, another protocol or a reset it was (a port scanner's
    answers)."""
    current: BaseException | None = exc
    while current is not None:
        if isinstance(current, outbound.DestinationRefused):
            return f"{current}."
        if isinstance(current, outbound.OutboundError):
            return f"{where} could not be read: {current}."
        if isinstance(current, socket.gaierror):
            return f"{where} could not be found (no such host): check the base URL."
        current = current.__cause__ or current.__context__
    return f"{where} could not be reached: is it running, and is the base URL right?"


def models_read_for(*, connection: Connection, by) -> list[str]:
    """:func:`models_read` with the connection's own key and headers (for its editor)."""
    _check_manager(connection=connection, by=by)
    try:
        route = route_for(connection=connection, model="-", user=by)
    except ConnectionUnavailable as exc:
        raise ModelsReadError(str(exc)) from None
    key = route.api_key if connection.api_key_enc else ""
    return models_read(
        kind=connection.kind,
        base_url=connection.base_url,
        api_key=key,
        headers=route.extra_headers,
    )
