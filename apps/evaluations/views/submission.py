"""A taubench.com leaderboard submission from the team's evaluations: pick one per
domain, fill in what they cannot know, preview ``submission.json``, check the folder
with the installed τ²'s ``tau2 submit validate`` and ``verify-trajs``, download it."""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.utils.http import urlencode

from apps.accounts.access import signin_required_to_start
from apps.evaluations import jobs, submission
from tau2_env.engine.submission import KS, SubmissionInvalid


class SubmissionForm(forms.Form):
    """What ``tau2 submit prepare`` asks (τ²'s ``Submission`` schema), prefilled from the
    evaluations where they know it."""

    model_name = forms.CharField(max_length=200, label="Model name")
    organization = forms.CharField(
        max_length=200, label="Organization", help_text="that developed the model"
    )
    submitting_organization = forms.CharField(
        max_length=200,
        required=False,
        label="Submitting organization",
        help_text="that ran the evaluation (τ² 1.x asks; empty: the model's)",
    )
    submission_type = forms.ChoiceField(
        choices=[("standard", "standard (τ²'s own agent scaffold)"), ("custom", "custom")],
        initial="standard",
        required=False,
        label="Submission type",
        help_text="custom: your own scaffold, prompts or tools (τ² 1.x)",
    )
    reasoning_effort = forms.CharField(
        max_length=50,
        required=False,
        label="Reasoning effort",
        help_text="as the model ran, e.g. high, low, none (τ² 1.x)",
    )
    email = forms.EmailField(label="Contact email")
    contact_name = forms.CharField(max_length=200, required=False, label="Contact name")
    github = forms.CharField(max_length=100, required=False, label="GitHub username")
    is_new = forms.BooleanField(required=False, label="Highlight it as new on the leaderboard")
    evaluation_date = forms.DateField(
        required=False, label="Evaluation date", widget=forms.DateInput(attrs={"type": "date"})
    )
    tau2_bench_version = forms.CharField(max_length=100, required=False, label="τ²-bench version")
    notes = forms.CharField(
        max_length=2000, required=False, label="Methodology notes", widget=forms.Textarea
    )


def _preview(draft, values: dict) -> tuple[str, list[str]]:
    try:
        return submission.submission_json(
            draft, submission.submission_details(values, user_simulator=draft.user_llm)
        ), []
    except SubmissionInvalid as exc:
        return "", exc.problems


@signin_required_to_start
def submission_page(request):
    picks = {d: request.GET[d] for d in submission.DOMAINS if d in request.GET}
    plan = submission.submission_plan(user=request.user, picks=picks)
    action = request.POST.get("action") if request.method == "POST" else None
    refused = ""
    if action == "check" and plan.ok:
        # τ²'s checks build the folder and run its CLI twice: a worker's job, followed
        # on its own page; this request only queues it.
        posted = SubmissionForm(request.POST)
        if posted.is_valid():
            try:
                job = jobs.evaluation_job_check(
                    user=request.user, picks=plan.query(), details=posted.cleaned_data
                )
            except jobs.JobRefused as exc:
                refused = str(exc)
            else:
                return redirect(job)
    draft = submission.submission_draft(plan) if plan.ok else None
    initial = submission.submission_initial(draft) if draft else {}
    form = SubmissionForm(request.POST or None, initial=initial)
    context = {"plan": plan, "draft": draft, "form": form, "checks": None, "posted": False}
    status = 200
    if draft is not None and request.method != "POST":
        context["preview"], _ = _preview(draft, initial)
    elif request.method == "POST":
        context["posted"] = True
        if draft is None or draft.refusal or not form.is_valid():
            status = 400
        else:
            context["preview"], problems = _preview(draft, form.cleaned_data)
            if draft.evaluations[0].external_agent and (
                form.cleaned_data.get("submission_type") != "custom"
            ):
                problems = [
                    *problems,
                    "These evaluations' agent is your own program, not τ²'s agent: "
                    "taubench.com lists it as a custom submission (submission type custom).",
                ]
            for problem in problems:
                form.add_error(None, problem)
            if problems:
                status = 400
            elif action == "download":
                return _download(draft, form.cleaned_data)
            if refused:
                form.add_error(None, refused)
                status = 429
    context.update(
        query=urlencode(plan.query()),
        ks=KS,
        customers=settings.TAU2_LEADERBOARD_CUSTOMERS,
    )
    return render(request, "evaluations/submission.html", context, status=status)


def _download(draft, values: dict) -> HttpResponse:
    name, data = submission.submission_zip(
        draft, submission.submission_details(values, user_simulator=draft.user_llm)
    )
    response = HttpResponse(data, content_type="application/zip")
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response
