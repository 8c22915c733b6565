"""Writes to the model catalogue: copying the Hugging Face router's list into the database."""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from typing import Literal

import httpx
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from apps.inference.hf_catalogue import (
    CatalogueError,
    RouterModel,
    RouterOffer,
    catalogue_fetch,
    catalogue_parse,
    catalogue_url,
)
from apps.inference.models import InferenceModel, ProviderOffer
from apps.inference.pricing import cheapest_offer

logger = logging.getLogger(__name__)

# Any fixed number: serialises refreshes (beat, a staff click, the command) on PostgreSQL.
_ADVISORY_LOCK = 0x7461_7532_6D6F  # "tau2mo"

_OFFER_FIELDS = [
    "status",
    "context_length",
    "input_price",
    "output_price",
    "supports_tools",
    "supports_structured_output",
    "first_token_latency_ms",
    "throughput",
]
_MODEL_FIELDS = [
    "owned_by",
    "is_fallback",
    "refreshed_at",
    "provider_count",
    "cheapest_provider",
    "cheapest_input_price",
    "cheapest_output_price",
]


@dataclass
class RefreshReport:
    """What one refresh did.

    ``source`` is ``router`` (the catalogue was replaced by the router's), ``kept`` (the
    router failed; the stored catalogue was left as it was) or ``fallback`` (the router
    failed and nothing was stored: the built-in list was installed). ``error`` says why
    the router failed. Model names are listed, never ids alone, so logs read well.
    """

    source: Literal["router", "kept", "fallback"]
    url: str
    models: int = 0
    offers: int = 0
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    error: str = ""

    def as_dict(self) -> dict:
        """JSON-ready (a Celery result)."""
        return asdict(self)

    def summary(self) -> str:
        if self.source == "router":
            return (
                f"{self.models} models, {self.offers} provider offers from the router: "
                f"{len(self.created)} new, {len(self.updated)} updated, "
                f"{len(self.removed)} removed."
            )
        if self.source == "fallback":
            return (
                f"The router could not be read ({self.error}); installed the fallback list "
                f"of {self.models} models (unpriced)."
            )
        return f"The router could not be read ({self.error}); kept the stored {self.models} models."


def catalogue_refresh(*, client: httpx.Client | None = None) -> RefreshReport:
    """Replace the stored catalogue with the router's, or keep it when the router fails.

    Reads ``GET {TAU2_HF_ROUTER_URL}/models`` (no credential sent; ``client`` lets a
    caller bring its own ``httpx.Client``). On success every kept model and offer is
    upserted and models or providers the router no longer lists are deleted, in one
    transaction. When the router cannot be reached, answers an error or a body without a
    usable model, the stored catalogue is kept; if nothing is stored, the fallback list
    (``TAU2_MODELS_FALLBACK``) is installed. Both cases log a warning. Idempotent.
    """
    url = catalogue_url()
    try:
        models = catalogue_parse(catalogue_fetch(client=client))
        if not models:
            raise CatalogueError("the router listed no chat model with a live tool provider")
    except (httpx.HTTPError, CatalogueError) as exc:
        return _keep_or_fallback(url=url, error=_describe(exc))
    with transaction.atomic():
        _lock()
        report = _replace(models, url=url)
    logger.info("Model catalogue refreshed from %s: %s", url, report.summary())
    return report


def _describe(exc: Exception) -> str:
    if isinstance(exc, httpx.HTTPStatusError):
        return f"HTTP {exc.response.status_code}"
    if isinstance(exc, httpx.TimeoutException):
        return "timed out"
    if isinstance(exc, httpx.HTTPError):
        return f"{type(exc).__name__}: {exc}"
    return str(exc)


def _lock() -> None:
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_ADVISORY_LOCK])


def _keep_or_fallback(*, url: str, error: str) -> RefreshReport:
    with transaction.atomic():
        _lock()
        stored = InferenceModel.objects.count()
        if stored:
            logger.warning(
                "Model catalogue not refreshed: %s from %s; keeping the %d stored models",
                error,
                url,
                stored,
            )
            return RefreshReport(source="kept", url=url, models=stored, error=error)
        now = timezone.now()
        names = list(dict.fromkeys(settings.TAU2_MODELS_FALLBACK))
        InferenceModel.objects.bulk_create(
            [
                InferenceModel(
                    name=name, owned_by=name.split("/", 1)[0], is_fallback=True, refreshed_at=now
                )
                for name in names
            ]
        )
    logger.warning(
        "Model catalogue not refreshed: %s from %s; nothing was stored, so the fallback list "
        "of %d models (unpriced) is installed",
        error,
        url,
        len(names),
    )
    return RefreshReport(source="fallback", url=url, models=len(names), created=names, error=error)


def _model_row(model: RouterModel, now) -> InferenceModel:
    usable = [o for o in model.offers if o.usable]
    cheapest = cheapest_offer(usable)
    return InferenceModel(
        name=model.name,
        owned_by=model.owned_by,
        is_fallback=False,
        refreshed_at=now,
        provider_count=len(usable),
        cheapest_provider=cheapest.provider if cheapest else "",
        cheapest_input_price=cheapest.input_price if cheapest else None,
        cheapest_output_price=cheapest.output_price if cheapest else None,
    )


def _offer_row(model_pk: int, offer: RouterOffer) -> ProviderOffer:
    return ProviderOffer(
        model_id=model_pk,
        provider=offer.provider,
        status=ProviderOffer.Status.LIVE if offer.live else ProviderOffer.Status.ERROR,
        context_length=offer.context_length,
        input_price=offer.input_price,
        output_price=offer.output_price,
        supports_tools=offer.supports_tools,
        supports_structured_output=offer.supports_structured_output,
        first_token_latency_ms=offer.first_token_latency_ms,
        throughput=offer.throughput,
    )


def _replace(models: list[RouterModel], *, url: str) -> RefreshReport:
    now = timezone.now()
    before = set(InferenceModel.objects.values_list("name", flat=True))
    wanted = {m.name for m in models}
    removed = sorted(before - wanted)
    InferenceModel.objects.filter(name__in=removed).delete()  # their offers cascade
    InferenceModel.objects.bulk_create(
        [_model_row(m, now) for m in models],
        update_conflicts=True,
        unique_fields=["name"],
        update_fields=_MODEL_FIELDS,
    )
    pks = dict(InferenceModel.objects.filter(name__in=wanted).values_list("name", "pk"))
    rows = [_offer_row(pks[m.name], o) for m in models for o in m.offers]
    keep = {(row.model_id, row.provider) for row in rows}
    vanished = [
        pk
        for pk, model_pk, provider in ProviderOffer.objects.values_list(
            "pk", "model_id", "provider"
        )
        if (model_pk, provider) not in keep
    ]
    ProviderOffer.objects.filter(pk__in=vanished).delete()
    ProviderOffer.objects.bulk_create(
        rows,
        update_conflicts=True,
        unique_fields=["model", "provider"],
        update_fields=_OFFER_FIELDS,
    )
    return RefreshReport(
        source="router",
        url=url,
        models=len(models),
        offers=len(rows),
        created=sorted(wanted - before),
        updated=sorted(wanted & before),
        removed=removed,
    )
