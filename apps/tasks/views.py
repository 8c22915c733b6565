from __future__ import annotations

from django.conf import settings
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import urlencode
from django_htmx.http import push_url

from apps.tasks import selectors
from apps.tasks.cards import task_cards
from apps.tasks.reward_basis import scoring_components
from apps.tasks.selectors import TaskFilters


def _resolve_split(filters: TaskFilters, domain) -> TaskFilters:
    """Keep the asked split if the domain has it, else the default split, else the largest."""
    names = [s.name for s in domain.splits.all()] if domain else []
    if not names or filters.split in names:
        return filters
    for fallback in (settings.TAU2_SPLIT, "test", "base"):
        if fallback in names:
            break
    else:
        fallback = names[0]
    return TaskFilters(domain=filters.domain, split=fallback, q=filters.q, kind=filters.kind)


def explorer(request):
    filters = TaskFilters.from_params(request.GET)
    domains = list(selectors.domain_list())
    domain = next((d for d in domains if d.name == filters.domain), None)
    filters = _resolve_split(filters, domain)
    split = (
        next((s for s in domain.splits.all() if s.name == filters.split), None) if domain else None
    )
    page = selectors.task_page(
        filters=filters,
        split=split,
        number=request.GET.get("page"),
        per_page=settings.TAU2_EXPLORER_PAGE_SIZE,
    )
    query = filters.as_query()
    context = {
        "filters": filters,
        "domains": domains,
        "domain": domain,
        "split": split,
        "page": page,
        "cards": task_cards(page.object_list, q=filters.q),
        "total": split.size if split else 0,
        "query": urlencode(query),
        # Cards link to detail_prefix + quoted task id: one reverse() per page, not per card.
        # Only a known domain has one (an unknown name need not even be a slug: "a.b").
        "detail_prefix": reverse("tasks:domain", kwargs={"domain": domain.name}) if domain else "",
    }
    if request.htmx and not request.htmx.history_restore_request:
        response = render(request, "includes/task_results.html", context)
        page_query = {**query, **({"page": page.number} if page.number > 1 else {})}
        return push_url(response, f"{reverse('tasks:explorer')}?{urlencode(page_query)}")
    return render(request, "tasks/explorer.html", context)


def task_detail(request, domain: str, task_id: str):
    task = selectors.task_get(domain=domain, task_id=task_id)
    criteria = task.evaluation_criteria or {}
    tools = {t.name: t for t in selectors.tool_list(domain=domain)}
    return render(
        request,
        "tasks/detail.html",
        {
            "task": task,
            "domain": task.domain,
            "criteria": criteria,
            "components": scoring_components(criteria, task.reward_basis),
            "actions": [
                {**action, "tool": tools.get(action.get("name"))}
                for action in criteria.get("actions") or []
            ],
            "splits": task.split_names,
            "required_documents": selectors.task_document_list(task),
        },
    )


def domain_detail(request, domain: str):
    domain_obj = selectors.domain_get(name=domain)
    tools = list(selectors.tool_list(domain=domain))
    return render(
        request,
        "tasks/domain.html",
        {
            "domain": domain_obj,
            "domains": selectors.domain_list(),  # the switcher
            "agent_tools": [t for t in tools if t.requestor == "assistant"],
            "user_tools": [t for t in tools if t.requestor == "user"],
            # A knowledge domain's documents, searched (?doc_q=) and one opened (?doc=).
            "documents": selectors.document_page(
                domain=domain_obj.name,
                query=str(request.GET.get("doc_q", "")),
                doc_id=str(request.GET.get("doc", ""))[:255],
            ),
        },
    )
