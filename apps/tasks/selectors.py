"""Reads of the catalogue: what the explorer, the task pages and the API show."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.core.paginator import Page, Paginator
from django.db.models import Prefetch, QuerySet
from django.http import Http404

from apps.tasks.models import CatalogueLoad, Domain, Split, Task, Tool
from tau2_env.engine import catalog

KINDS = {"write": True, "read": False}


@dataclass(frozen=True)
class TaskFilters:
    """The explorer's query: domain and split (with defaults), search text, kind."""

    domain: str
    split: str
    q: str = ""
    kind: str = ""

    @classmethod
    def from_params(cls, params) -> TaskFilters:
        kind = (params.get("kind") or "").strip().lower()
        return cls(
            domain=(params.get("domain") or settings.TAU2_DOMAIN).strip(),
            split=(params.get("split") or settings.TAU2_SPLIT).strip(),
            q=" ".join((params.get("q") or "").split())[:200],
            kind=kind if kind in KINDS else "",
        )

    def as_query(self) -> dict[str, str]:
        return {k: v for k, v in vars(self).items() if v}


def domain_list(*, with_policy: bool = False) -> QuerySet[Domain]:
    domains = Domain.objects.all() if with_policy else Domain.objects.defer("policy")
    return domains.prefetch_related(
        Prefetch("splits", queryset=Split.objects.order_by("-size", "name"))
    )


def domain_get(*, name: str) -> Domain:
    try:
        return domain_list(with_policy=True).get(name=name)
    except Domain.DoesNotExist:
        raise Http404(f"No domain {name!r}") from None


def split_get(*, domain: str, name: str) -> Split | None:
    return Split.objects.filter(domain_id=domain, name=name).first()


def task_list(*, filters: TaskFilters, split: Split | None = None) -> QuerySet[Task]:
    """Tasks of the filters' domain and split matching the search and kind, in τ²'s order.

    Every word of ``q`` must appear (case-insensitive) in the title, the reason for
    call, the task id or the names of the expected tools. An unknown split matches
    nothing.
    """
    if split is None:  # callers that already hold the split pass it
        split = split_get(domain=filters.domain, name=filters.split)
    if split is None:
        return Task.objects.none()
    # One join (tasks ⋈ task_splits on the split's id) instead of three tables.
    tasks = Task.objects.filter(splits=split.pk)
    for word in filters.q.lower().split():
        tasks = tasks.filter(search_text__contains=word)
    if filters.kind:
        tasks = tasks.filter(changes_db=KINDS[filters.kind])
    return tasks.order_by("position")


def task_card_fields(tasks: QuerySet[Task]) -> QuerySet[Task]:
    """Only the columns a task card shows (keeps the big JSON columns out of list pages):
    besides the title, what tells tasks apart (``apps.tasks.cards``) and what a search
    matches in."""
    return tasks.only(
        "domain_id",
        "task_id",
        "title",
        "reward_basis",
        "expected_calls",
        "changes_db",
        "position",
        "tool_names",
        "known_info",
        "reason_for_call",
    )


def task_page(*, filters: TaskFilters, split: Split | None, number, per_page: int) -> Page:
    """One page of the explorer: the matching tasks' cards, in τ²'s order, and their count.

    A whole split is paged with LIMIT/OFFSET and counted from the split's size. A search
    scans once for the matching ids (at most a split's few thousand), which gives the
    count and the page; only the page's rows are then read.
    """
    tasks = task_list(filters=filters, split=split)
    if split is not None and not filters.q and not filters.kind:
        paginator = Paginator(task_card_fields(tasks), per_page)
        paginator.count = split.size  # the whole split: no need to count it again
        return paginator.get_page(number)
    page = Paginator(list(tasks.values_list("pk", flat=True)), per_page).get_page(number)
    cards = {t.pk: t for t in task_card_fields(Task.objects.filter(pk__in=page.object_list))}
    page.object_list = [cards[pk] for pk in page.object_list]
    return page


def task_get(*, domain: str, task_id: str) -> Task:
    try:
        return (
            Task.objects.select_related("domain")
            .prefetch_related("splits")
            .get(domain_id=domain, task_id=task_id)
        )
    except Task.DoesNotExist:
        raise Http404(f"No task {task_id!r} in {domain!r}") from None


def tool_list(*, domain: str) -> QuerySet[Tool]:
    return Tool.objects.filter(domain_id=domain).order_by("requestor", "position")


def catalogue_latest() -> CatalogueLoad | None:
    return CatalogueLoad.objects.order_by("-created_at", "-id").first()


def task_set_installed() -> tuple[str, str]:
    """This server's τ² version and task-set hash: what imports and re-grades score on
    (the last catalogue load's hash; the installed τ²'s own before any load)."""
    latest = catalogue_latest()
    return catalog.tau2_version(), latest.task_set_hash if latest else catalog.catalogue_hash()


# How many of a search's documents the domain page lists at once.
DOCUMENTS_SHOWN = 50


@dataclass(frozen=True)
class DocumentPage:
    """A knowledge domain's documents on its page: how many it has (``total``), those
    matching ``query`` (``count``; the first :data:`DOCUMENTS_SHOWN` in ``matches``), and
    the one opened (``shown``; None: none, or no such id)."""

    total: int
    query: str
    count: int
    matches: list[catalog.Document]
    shown: catalog.Document | None


def document_page(*, domain: str, query: str = "", doc_id: str = "") -> DocumentPage | None:
    """``domain``'s knowledge-base documents for its page, searched (every word of
    ``query`` in the id, title or text) and one opened; ``None`` for a domain without a
    knowledge base."""
    everything = catalog.documents(domain)
    if not everything:
        return None
    query = " ".join(query.split())[:200]
    found = catalog.document_search(domain, query)
    shown = next((d for d in everything if d.id == doc_id), None) if doc_id else None
    return DocumentPage(
        total=len(everything),
        query=query,
        count=len(found),
        matches=found[:DOCUMENTS_SHOWN],
        shown=shown,
    )


def task_document_list(task: Task) -> list[tuple[str, catalog.Document | None]]:
    """The documents ``task``'s answer rests on (τ²'s ``required_documents``, what
    golden retrieval gives the agent), each with its document (None: not in the knowledge
    base); empty when the task names none."""
    refs = (task.raw or {}).get("required_documents") or []
    return catalog.task_documents(task.domain_id, [str(r) for r in refs])
