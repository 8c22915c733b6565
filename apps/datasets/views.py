"""The datasets page, its downloads, and pushes to the Hugging Face Hub."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.http import FileResponse, Http404, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from apps.accounts.access import can_start, can_view_runs, signin_url
from apps.datasets import exports, selectors
from apps.datasets.conversation import PAIRINGS
from apps.datasets.models import DatasetPush
from apps.datasets.selectors import (
    FORMATS,
    JSONL,
    Selection,
    SelectionError,
    selection_counts,
)
from apps.datasets.services import PushRefused, dataset_push_request
from apps.runs.models import ReviewLabel, Run
from tau2_env.engine import catalog

# The preview shortens long texts (the policy, tool results) to this many characters.
PREVIEW_TEXT = 300


@require_GET
def dataset_page(request):
    if not can_view_runs(request.user):
        return redirect(signin_url(next_url=request.get_full_path(), reason="runs"))
    return _page(request, request.GET)


def _page(request, params, *, push_error: str = "", status: int = 200):
    selection, error, counts, preview = None, "", None, ""
    try:
        selection = Selection.from_params(params)
        counts = selection_counts(selection)
        if not counts.refusal:
            preview = _preview(selection)
    except SelectionError as exc:
        error = str(exc)
    context = {
        "selection": selection or Selection(),
        "params": params,
        "error": error,
        "counts": counts,
        "preview": preview,
        "push_error": push_error,
        "max_runs_label": f"{selectors.MAX_RUNS:,}",
        "domains": catalog.domain_names(),
        "kinds": Run.Kind.choices,
        "categories": ReviewLabel.Category.choices,
        "formats": FORMATS,
        "pairings": PAIRINGS,
        "can_push": can_start(request.user),
        "pushes": (
            DatasetPush.objects.filter(created_by=request.user)[:5]
            if request.user.is_authenticated
            else []
        ),
    }
    return render(
        request, "datasets/page.html", context, status=400 if error or push_error else status
    )


def _preview(selection: Selection) -> str:
    """The first row, as JSON, its long texts shortened (each says its full length)."""
    first = next(exports.rows_of(selection), None)
    return "" if first is None else json.dumps(_shortened(first), indent=2, ensure_ascii=False)


def _shortened(value):
    if isinstance(value, str) and len(value) > PREVIEW_TEXT:
        return f"{value[:PREVIEW_TEXT]}… ({len(value):,} characters)"
    if isinstance(value, dict):
        return {key: _shortened(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_shortened(item) for item in value]
    return value


@require_GET
def dataset_download(request):
    if not can_view_runs(request.user):
        return redirect(signin_url(next_url=request.get_full_path(), reason="runs"))
    try:
        selection = Selection.from_params(request.GET)
        refusal = selection_counts(selection).refusal
    except SelectionError as exc:
        refusal = str(exc)
    if refusal:
        return HttpResponse(refusal, status=400, content_type="text/plain; charset=utf-8")
    name = exports.filename(selection)
    if selection.format == JSONL:
        chunks = exports.jsonl_lines(exports.rows_of(selection))
        body = _async(chunks) if isinstance(request, ASGIRequest) else chunks
        response = StreamingHttpResponse(body, content_type="application/jsonl; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="{name}"'
        return response
    return FileResponse(
        exports.parquet_file(selection),
        as_attachment=True,
        filename=name,
        content_type="application/vnd.apache.parquet",
    )


async def _async(chunks: Iterator[bytes]) -> AsyncIterator[bytes]:
    """``chunks`` served by the ASGI server as they are written: each one is read from the
    database on Django's one sync thread (a sync iterator would be read whole first)."""
    done = object()
    step = sync_to_async(lambda: next(chunks, done), thread_sensitive=True)
    while (chunk := await step()) is not done:
        yield chunk


@require_POST
def dataset_push(request):
    if not can_start(request.user):
        return redirect(signin_url(next_url="/datasets/", reason="start"))
    params = request.POST
    try:
        selection = Selection.from_params(params)
        push = dataset_push_request(
            user=request.user,
            selection=selection,
            repo_id=params.get("repo_id", ""),
            private=params.get("private") == "1",
        )
    except (SelectionError, PushRefused) as exc:
        return _page(request, params, push_error=str(exc))
    return redirect("datasets:push", pk=push.pk)


@require_GET
def dataset_push_status(request, pk: int):
    push = DatasetPush.objects.filter(pk=pk, created_by_id=request.user.pk or 0).first()
    if push is None:
        raise Http404("No such push of yours")
    template = (
        "datasets/_push_status.html" if request.headers.get("HX-Request") else "datasets/push.html"
    )
    return render(request, template, {"push": push})
