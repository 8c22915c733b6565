"""Starting and watching evaluations: the form with its preview, the live page, its
state for the page script, and pause / resume / stop / retry the failed runs."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from apps.accounts.access import can_control, can_start, can_view_runs, signin_url
from apps.accounts.vault import SignInRequired
from apps.connections.picker import picks_a_connection
from apps.evaluations import baselines, presenters, regrade, selectors, services
from apps.evaluations.forms import EvaluationForm, RegradeForm, preview_for
from apps.evaluations.models import Evaluation
from apps.runs.forms import has_retrieval
from apps.tasks.selectors import TaskFilters
from apps.tasks.task_sets import task_set_label

# Settings a link may prefill (the explorer's query, a task page's ids) besides the tasks.
_PREFILLED = (
    "agent_model",
    "num_trials",
    "seed",
    "max_steps",
    "max_errors",
    "timeout",
    "concurrency",
)
# The customer and τ²'s LLM arguments of both sides may be preselected by a link too.
_ARG_PREFILLS = ("user_model",) + tuple(
    f"{side}_{name}"
    for side in ("agent", "user")
    for name in ("temperature", "top_p", "max_tokens", "reasoning_effort", "extras")
)


def _get_evaluation_for_user(request, pk: int) -> Evaluation:
    """The evaluation, if the visitor may see runs (403 otherwise; 404 if it doesn't exist)."""
    if not can_view_runs(request.user):
        raise PermissionDenied("Sign in to see the team's evaluations.")
    return selectors.evaluation_get(pk=pk)


def _initial(params, *, user) -> dict[str, str]:
    """The form's starting values: the explorer's domain, split, search and kind (as
    its links carry them), task ids (``task_ids``), then the defaults."""
    filters = TaskFilters.from_params(params)
    form = EvaluationForm(user=user)
    initial = {name: field.initial for name, field in form.fields.items()}
    initial.update({name: params[name] for name in _ARG_PREFILLS if params.get(name)})
    splits = [s["name"] for s in form.split_options() if s["domain"] == filters.domain]
    split = (
        filters.split
        if filters.split in splits
        else next((s for s in ("test", "base", *splits) if s in splits), "")
    )
    initial.update(domain=filters.domain, split=split, q=filters.q, kind=filters.kind)
    initial["task_ids"] = (params.get("task_ids") or "")[:200_000]
    initial.update({name: params[name] for name in _PREFILLED if params.get(name)})
    return {name: "" if value is None else str(value) for name, value in initial.items()}


def _page(request, form: EvaluationForm, preview):
    chosen = form.data if form.is_bound else form.initial
    return render(
        request,
        "evaluations/new.html",
        {
            "form": form,
            "limits_advice": picks_a_connection(form),
            "preview": preview,
            "chosen_domain": chosen.get("domain", ""),
            "chosen_split": chosen.get("split", ""),
            "tasks_fields": [form["task_ids"], form["q"], form["kind"]],
            "args_fields": form.llm_args_fields,
            "field_groups": [
                (
                    "Models",
                    [
                        form[n]
                        for n in ("agent_model", "external_agent", "user_model", "judge_model")
                    ]
                    + [form["mode"]]
                    + (
                        [form["retrieval_config"], form["embedding_model"]]
                        if has_retrieval()
                        else []
                    ),
                ),
                ("Trials and limits", [form[n] for n in (*_PREFILLED[1:], "name")]),
            ],
        },
        status=400 if form.errors else 200,  # a refused start is a client error
    )


def evaluation_new(request):
    """``GET``: the form (``?preview=1``: only its preview, for htmx); ``POST``: start."""
    if not can_start(request.user):
        return redirect(signin_url(next_url=request.get_full_path(), reason="start"))
    if request.GET.get("preview"):
        preview = preview_for(EvaluationForm(request.GET, user=request.user))
        return render(request, "includes/evaluation_preview.html", {"preview": preview})
    if request.method != "POST":
        initial = _initial(request.GET, user=request.user)
        form = EvaluationForm(initial=initial, user=request.user)
        return _page(request, form, preview_for(EvaluationForm(initial, user=request.user)))
    form = EvaluationForm(request.POST, user=request.user)
    preview = preview_for(form)
    if form.is_valid():
        try:
            evaluation = services.evaluation_start(user=request.user, data=form.cleaned_data)
        except ValidationError as exc:
            for field, errors in exc.message_dict.items():
                form.add_error(field if field in form.fields else None, errors)
        except SignInRequired as exc:
            messages.error(request, str(exc))
            return redirect(signin_url(next_url=request.get_full_path(), reason="start"))
        else:
            return redirect(evaluation)
    return _page(request, form, preview)


def evaluation_detail(request, pk: int):
    if not can_view_runs(request.user):
        return redirect(signin_url(next_url=request.get_full_path(), reason="runs"))
    evaluation = selectors.evaluation_get(pk=pk)
    state = presenters.evaluation_state(evaluation)
    return render(
        request,
        "evaluations/detail.html",
        {
            "evaluation": evaluation,
            "state": state.head,
            "data_script": state.data_script,
            "can_control": can_control(request.user, owner_id=evaluation.created_by_id),
            "judged": baselines.judge(evaluation),
            "regrade_offer": _regrade_offer(request.user, evaluation),
        },
    )


@dataclass(frozen=True)
class RegradeOffer:
    """What the evaluation page offers: a re-grade on ``task_set``, its judge picker, and
    how many of the runs only a judge can re-score (``needs_judge``)."""

    task_set: str
    needs_judge: int
    form: RegradeForm


def _regrade_offer(user, evaluation) -> RegradeOffer | None:
    """The re-grade ``user`` may ask for on this evaluation, or ``None``."""
    if not can_start(user) or regrade.regrade_refusal(evaluation):
        return None
    return RegradeOffer(
        task_set=task_set_label(regrade.current_task_set()[0]),
        needs_judge=regrade.runs_needing_judge(evaluation),
        form=RegradeForm(user=user),
    )


def evaluation_state(request, pk: int):
    """The live state as the socket sends it (JSON), for a page whose socket is down."""
    evaluation = _get_evaluation_for_user(request, pk)
    return JsonResponse(presenters.evaluation_state(evaluation).message())


def _control(request, pk: int, action, done: str):
    """Run ``action(evaluation)`` for its starter or staff (others: 403; anonymous: sign
    in), then back to the page saying ``done`` or why not."""
    evaluation = selectors.evaluation_get(pk=pk)
    if not can_start(request.user):
        return redirect(signin_url(next_url=evaluation.get_absolute_url(), reason="start"))
    if not can_control(request.user, owner_id=evaluation.created_by_id):
        raise PermissionDenied("Only whoever started this evaluation, or staff, may do that.")
    try:
        result = action(evaluation)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    except SignInRequired as exc:  # the evaluation runs on its starter's token
        messages.error(request, str(exc))
        if request.user.pk == evaluation.created_by_id:
            return redirect(signin_url(next_url=evaluation.get_absolute_url(), reason="start"))
    else:
        messages.info(request, done.format(result=result))
    return redirect(evaluation)


@require_POST
def evaluation_pause(request, pk: int):
    return _control(
        request,
        pk,
        lambda e: services.evaluation_pause(evaluation=e),
        "Paused: no new run starts; runs already going finish.",
    )


@require_POST
def evaluation_resume(request, pk: int):
    return _control(request, pk, lambda e: services.evaluation_resume(evaluation=e), "Resumed.")


@require_POST
def evaluation_stop(request, pk: int):
    return _control(
        request,
        pk,
        lambda e: services.evaluation_stop(evaluation=e),
        "Stopped: runs not started were stopped; runs going stop after their current turn.",
    )


@require_POST
def evaluation_retry(request, pk: int):
    return _control(
        request,
        pk,
        lambda e: services.evaluation_retry_failed(evaluation=e),
        "{result} failed run(s) queued again.",
    )


@require_POST
def evaluation_baseline(request, pk: int):
    """Pin the evaluation as the baseline of its identity (``unpin=1``: unpin it), for
    its starter or staff (replacing or unpinning another's: whoever pinned it too)."""
    evaluation = selectors.evaluation_get(pk=pk)
    if not can_start(request.user):
        return redirect(signin_url(next_url=evaluation.get_absolute_url(), reason="start"))
    if not can_control(request.user, owner_id=evaluation.created_by_id):
        raise PermissionDenied("Only whoever started this evaluation, or staff, may do that.")
    try:
        if request.POST.get("unpin"):
            baselines.baseline_unpin(evaluation=evaluation, by=request.user)
            messages.info(request, "Unpinned: no baseline for these settings now.")
        else:
            baselines.baseline_pin(evaluation=evaluation, by=request.user)
            messages.info(request, "Pinned: later comparable evaluations are judged against it.")
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    except PermissionDenied as exc:  # another's baseline holds these settings
        messages.error(request, str(exc))
    return redirect(evaluation)
