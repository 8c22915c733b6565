"""History, τ² results out and in, comparison of two evaluations, the leaderboard."""

from __future__ import annotations

from django import forms
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.utils.http import urlencode

from apps.accounts.access import can_start, can_view_runs, signin_required_to_start, signin_url
from apps.connections.picker import for_user, judge_field
from apps.evaluations import exports, imports, jobs, selectors
from apps.evaluations import leaderboard as board
from apps.evaluations.models import Evaluation
from apps.evaluations.selectors import EvaluationFilters
from apps.tasks.selectors import domain_list
from tau2_env import config


def _get_evaluation_for_user(request, pk: int) -> Evaluation:
    """The evaluation, if the visitor may see runs (403 otherwise; 404 if it doesn't exist)."""
    if not can_view_runs(request.user):
        raise PermissionDenied("Sign in to see the team's evaluations.")
    return selectors.evaluation_get(pk=pk)


def evaluation_list(request):
    if not can_view_runs(request.user):
        return redirect(signin_url(next_url=request.get_full_path(), reason="runs"))
    filters = EvaluationFilters.from_params(request.GET)
    page = Paginator(selectors.evaluation_list(filters=filters, user=request.user), 25).get_page(
        request.GET.get("page")
    )
    rows = selectors.evaluation_list_rows(page.object_list)
    return render(
        request,
        "evaluations/list.html",
        {
            "page": page,
            "rows": rows,
            "filters": filters,
            "query": urlencode(filters.as_query()),
            "statuses": Evaluation.Status.choices,
            "domains": domain_list(),
            "can_start": can_start(request.user),
        },
    )


def evaluation_json(request, pk: int):
    evaluation = _get_evaluation_for_user(request, pk)
    fmt = request.GET.get("format", "studio")
    if fmt == "tau2":
        payload = exports.evaluation_export_tau2(evaluation)
    elif fmt == "studio":
        payload = exports.evaluation_export(evaluation, url=request.build_absolute_uri)
    else:
        raise Http404("Unknown format")
    response = JsonResponse(payload, json_dumps_params={"indent": 2, "ensure_ascii": False})
    response["Content-Disposition"] = f'attachment; filename="evaluation-{pk}-{fmt}.json"'
    return response


def evaluation_csv(request, pk: int):
    evaluation = _get_evaluation_for_user(request, pk)
    # Whole, not streamed: Django under ASGI would buffer a sync iterator anyway (with a
    # warning), and a 2,285-task × 4 evaluation is ~2 MB of CSV.
    response = HttpResponse(
        "".join(exports.evaluation_csv_lines(evaluation, url=request.build_absolute_uri)),
        content_type="text/csv; charset=utf-8",
    )
    response["Content-Disposition"] = f'attachment; filename="evaluation-{pk}.csv"'
    return response


class ImportForm(forms.Form):
    # An empty file reaches the service, which says what is wrong with it like any other.
    file = forms.FileField(label="Results file (JSON written by tau2 run)", allow_empty_file=True)
    name = forms.CharField(max_length=200, required=False, label="Name (optional)")
    judge_model = judge_field(
        empty_label="No judge: those conversations keep the file's reward",
        help_text="τ²'s natural-language judge for the tasks whose reward needs it, on your "
        "Hugging Face token or a connection you may use; its calls count against that "
        "connection's budget.",
    )

    def __init__(self, *args, user=None, **kwargs):
        super().__init__(*args, **kwargs)
        for_user(self, user)


@signin_required_to_start
def evaluation_import(request):
    """Take the file and queue its import as a job (re-scoring it is the worker's work):
    the person follows the job's page."""
    form = ImportForm(request.POST or None, request.FILES or None, user=request.user)
    status = 200
    if request.method == "POST" and form.is_valid():
        upload = form.cleaned_data["file"]
        try:
            # Too large: refused before a byte of it is read into memory.
            if upload.size > imports.max_upload_bytes():
                raise ValidationError(imports.too_large(upload.size))
            job = jobs.evaluation_job_import(
                user=request.user,
                data=upload.read(),
                name=form.cleaned_data["name"],
                filename=upload.name,
                judge=form.cleaned_data["judge_model"],
            )
        except ValidationError as exc:
            form.add_error("file", exc.messages)
        except jobs.JobRefused as exc:
            form.add_error("file", str(exc))
            status = 429
        else:
            return redirect(job)
    if form.errors and status == 200:
        status = 400
    return render(
        request,
        "evaluations/import.html",
        {
            "form": form,
            "max_bytes": imports.max_upload_bytes(),
            "in_flight": selectors.evaluation_jobs_in_flight(user=request.user),
        },
        status=status,
    )


def _ids(raw: str) -> list[int]:
    try:
        return list(dict.fromkeys(int(x) for x in raw.replace(" ", "").split(",") if x))
    except ValueError:
        return []


def evaluation_compare(request):
    if not can_view_runs(request.user):
        raise PermissionDenied("Sign in to see the team's evaluations.")
    ids = _ids(request.GET.get("ids", ""))
    if len(ids) != 2:
        return render(
            request,
            "evaluations/compare.html",
            {"error": "Pick two evaluations to compare: ?ids=a,b."},
            status=400,
        )
    a, b = (selectors.evaluation_get(pk=pk) for pk in ids)
    if a.domain != b.domain:
        return render(
            request,
            "evaluations/compare.html",
            {"error": f"#{a.pk} is of {a.domain}, #{b.pk} of {b.domain}: pick one domain."},
            status=400,
        )
    sort = request.GET.get("sort", "task")
    descending = request.GET.get("dir") == "desc"
    rows = selectors.evaluation_compare(a, b, sort=sort, descending=descending)
    return render(
        request,
        "evaluations/compare.html",
        {
            "a": a,
            "b": b,
            "rows": rows,
            "flips": sum(1 for row in rows if row["flip"]),
            "significance": selectors.evaluation_compare_significance(a, b),
            "sort": sort if sort in selectors.COMPARE_SORTS else "task",
            "descending": descending,
            "ids": f"{a.pk},{b.pk}",
            "sides": [
                {"label": label, "evaluation": e, "summary": selectors.evaluation_summary(e)}
                for label, e in (("A", a), ("B", b))
            ],
            "columns": [
                ("task", "Task"),
                ("a", f"A #{a.pk}"),
                ("b", f"B #{b.pk}"),
                ("delta", "B − A"),
                ("flip", "Flip"),
            ],
        },
    )


def leaderboard(request):
    if not can_view_runs(request.user):
        return redirect(signin_url(next_url=request.get_full_path(), reason="runs"))
    domains = [d.name for d in domain_list()]
    domain = request.GET.get("domain") or config.default_domain()
    if domain not in domains:
        raise Http404(f"No domain {domain!r}")
    return render(
        request,
        "evaluations/leaderboard.html",
        {
            "domain": domain,
            "domains": domains,
            "groups": board.leaderboard(domain=domain),
            "published": board.published(domain=domain),
            "ks": board.KS,
        },
    )
