"""The page that follows an import or a submission check while a worker does it."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.http import require_GET, require_POST

from apps.accounts.access import can_start, signin_url
from apps.evaluations import jobs, selectors, submission
from apps.evaluations.forms import RegradeForm
from apps.evaluations.models import Evaluation, EvaluationJob


@require_GET
def job_detail(request, pk: int):
    """The job, as a page, or its status fragment for htmx's polling (every 2 s until it
    ends). Only the person who asked for it sees it (404 for anyone else). A job whose
    worker was lost is sent again, or failed, here too, on the next look after its lease:
    the page never says "running" for a dead worker."""
    job = selectors.evaluation_job_for(user=request.user, pk=pk)
    if not job.is_final:
        jobs.evaluation_jobs_reap(pks=[job.pk])
        job = selectors.evaluation_job_for(user=request.user, pk=pk)
    context = {
        "job": job,
        "notes": _import_notes(job.evaluation) if job.evaluation else [],
        "back": "",
    }
    if job.kind == EvaluationJob.Kind.CHECK:
        # In the page's own order of domains (the stored JSON keeps none).
        picks = (job.params or {}).get("picks") or {}
        query = urlencode({d: picks[d] for d in submission.DOMAINS if d in picks})
        context["back"] = f"{reverse('evaluations:submission')}?{query}"
    fragment = request.headers.get("HX-Request") == "true"
    template = "evaluations/_job_status.html" if fragment else "evaluations/job.html"
    return render(request, template, context)


@require_POST
def evaluation_regrade(request, pk: int):
    """Queue a re-grade of evaluation ``pk`` on this server's task set (a new evaluation
    of the asker's), with the NL judge the form names (none: the tasks that need one are
    not re-scored), and follow it on the job's page; or back to the evaluation saying why
    not."""
    evaluation = selectors.evaluation_get(pk=pk)
    if not can_start(request.user):
        return redirect(signin_url(next_url=evaluation.get_absolute_url(), reason="start"))
    form = RegradeForm(request.POST, user=request.user)
    if not form.is_valid():
        for errors in form.errors.values():
            messages.error(request, " ".join(errors))
        return redirect(evaluation)
    try:
        job = jobs.evaluation_job_regrade(
            user=request.user, evaluation=evaluation, judge=form.cleaned_data["judge_model"]
        )
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    except jobs.JobRefused as exc:
        messages.error(request, str(exc))
    else:
        return redirect(job)
    return redirect(evaluation)


def _import_notes(evaluation: Evaluation) -> list[tuple[str, str]]:
    """(level, text) lines on how an import re-scored: what it found, in words."""
    report = (evaluation.provenance or {}).get("import") or {}
    runs = report.get("simulations", 0)
    notes = [
        (
            "success",
            f"Imported {runs} simulation{'s' if runs != 1 else ''}; τ² scored "
            f"{report.get('rescored', 0)} of them again.",
        )
    ]
    differs = report.get("differs") or []
    if differs:
        shown = "; ".join(
            f"task {d['task_id']} trial {d['trial']}: file {d['stored']}, τ² {d['rescored']}"
            for d in differs[:5]
        )
        more = f" and {len(differs) - 5} more" if len(differs) > 5 else ""
        notes.append(
            (
                "warning",
                f"{len(differs)} stored reward{'s differ' if len(differs) != 1 else ' differs'} "
                f"from τ²'s re-score (the runs keep τ²'s): {shown}{more}.",
            )
        )
    not_rescored = report.get("not_rescored") or []
    if not_rescored:
        notes.append(
            (
                "warning",
                f"{len(not_rescored)} simulation{'s' if len(not_rescored) != 1 else ''} could "
                f"not be re-scored and keep the file's reward: {not_rescored[0]['reason']}.",
            )
        )
    if report.get("repeats"):
        notes.append(
            (
                "warning",
                "Some of these simulations were imported before ("
                + ", ".join(f"#{pk}: {n}" for pk, n in report["repeats"].items())
                + "): the leaderboard counts each simulation once, never as new trials.",
            )
        )
    if report.get("tasks_differ"):
        notes.append(
            (
                "warning",
                "The file's definitions of tasks "
                + ", ".join(report["tasks_differ"][:5])
                + " differ from this server's: the leaderboard ranks it apart.",
            )
        )
    return notes
