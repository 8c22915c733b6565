"""Review by an LLM on the pages: staff start an auto-review of a run (run page) or of an
evaluation's failures or all its runs (evaluation page); reviewers accept, edit or
dismiss each finding (the message's review slot). The work is ``apps.runs.autoreview``'s.

The evaluation's form posts here (``runs:autoreview_evaluation``): the runs app sits
below the evaluations app, so it goes by the evaluation's id and its runs only.
"""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from apps.accounts.access import can_review
from apps.runs import autoreview, review
from apps.runs.models import ReviewLabel, Run
from apps.runs.views.access import run_for_user
from apps.runs.views.review import _answer
from apps.runs.views.review_forms import FindingForm, autoreview_form


def _form_errors(form: forms.Form) -> str:
    return " ".join(message for errors in form.errors.values() for message in errors)


@require_POST
def autoreview_run(request, pk: int):
    run = run_for_user(request, pk)
    if not autoreview.can_request(request.user):
        raise PermissionDenied("Only staff may start an auto-review.")
    form = autoreview_form(request.user, data=request.POST)
    if not form.is_valid():
        messages.error(request, "The auto-review was not started: " + _form_errors(form))
    else:
        try:
            autoreview.autoreview_request(
                run=run,
                by=request.user,
                reviewer=form.cleaned_data["reviewer_model"],
                mode=form.cleaned_data["mode"],
            )
        except ValidationError as error:
            messages.error(request, "The auto-review was not started: " + " ".join(error.messages))
        else:
            messages.success(request, "Auto-review queued: its findings appear here, pending.")
    return redirect(f"{run.get_absolute_url()}#auto-review")


@require_POST
def autoreview_evaluation(request, pk: int):
    if not autoreview.can_request(request.user):
        raise PermissionDenied("Only staff may start an auto-review.")
    back = reverse("evaluations:detail", kwargs={"pk": pk}) + "#auto-review"
    form = autoreview_form(request.user, evaluation=True, data=request.POST)
    if not form.is_valid():
        messages.error(request, "The auto-review was not started: " + _form_errors(form))
        return redirect(back)
    queued = autoreview.autoreviews_request(
        evaluation_id=pk,
        by=request.user,
        reviewer=form.cleaned_data["reviewer_model"],
        which=form.cleaned_data["which"],
        mode=form.cleaned_data["mode"],
    )
    if form.cleaned_data["which"] == autoreview.WHICH_EACH:
        messages.success(
            request,
            f"Each run is reviewed as it ends; {len(queued)} ended "
            f"run{'s' if len(queued) != 1 else ''} queued now. The findings wait in the "
            "review queue.",
        )
    elif queued:
        messages.success(
            request,
            f"{len(queued)} run{'s' if len(queued) != 1 else ''} queued for auto-review: the "
            "findings wait in the review queue.",
        )
    else:
        messages.info(request, "No finished run to review.")
    return redirect(back)


@require_POST
def standing_review_stop(request, pk: int):
    autoreview.standing_review_stop(evaluation_id=pk, by=request.user)
    messages.success(request, "Runs that end from now on are not reviewed; the reviews made stay.")
    return redirect(reverse("evaluations:detail", kwargs={"pk": pk}) + "#auto-review")


def _finding(request, pk: int, label_pk: int) -> tuple[Run, ReviewLabel]:
    run = run_for_user(request, pk)
    if not can_review(request.user):
        raise PermissionDenied("Only reviewers may decide on findings.")
    return run, review.label_get(run_id=run.pk, pk=label_pk)


def _seq_of(label: ReviewLabel) -> int | None:
    return label.event.seq if label.event else None


@require_POST
def finding_accept(request, pk: int, label_pk: int):
    run, label = _finding(request, pk, label_pk)
    _decided(request, lambda: autoreview.finding_accept(label=label, by=request.user))
    return _answer(request, run, _seq_of(label))


@require_POST
def finding_dismiss(request, pk: int, label_pk: int):
    run, label = _finding(request, pk, label_pk)
    _decided(request, lambda: autoreview.finding_dismiss(label=label, by=request.user))
    return _answer(request, run, _seq_of(label))


@require_POST
def finding_edit(request, pk: int, label_pk: int):
    run, label = _finding(request, pk, label_pk)
    form = FindingForm(request.POST, prefix=f"finding-{label.pk}")
    if not form.is_valid():
        messages.error(request, "The finding was not changed: " + _form_errors(form))
        return _answer(request, run, _seq_of(label))
    _decided(
        request, lambda: autoreview.finding_edit(label=label, by=request.user, **form.cleaned_data)
    )
    return _answer(request, run, _seq_of(label))


def _decided(request, act) -> None:
    try:
        act()
    except ValidationError as error:
        messages.error(request, "Not done: " + " ".join(error.messages))
