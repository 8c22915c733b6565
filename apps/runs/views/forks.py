"""Forking a finished run at one of its messages (``apps.runs.forks``)."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.shortcuts import redirect, render
from django.urls import reverse

from apps.accounts.access import signin_required_to_start
from apps.runs import forks, presenters
from apps.runs.forms import ForkForm
from apps.runs.models import Run
from apps.runs.views.access import run_for_user


@signin_required_to_start
def run_fork(request, pk: int):
    """``GET ?at=S``: the fork form for message ``S``; ``POST``: start the fork, then go to
    it (its run page, or the play page when the person takes over). A message no fork may
    start at is a 400 page."""
    run = run_for_user(request, pk)
    params = request.POST if request.method == "POST" else request.GET
    try:
        point = forks.fork_point(run=run, at_seq=params.get("at"))
    except ValidationError as exc:
        context = {"run": run, "refusal": " ".join(exc.messages)}
        return render(request, "runs/fork.html", context, status=400)
    form = ForkForm(request.POST or None, initial={"at": point.seq}, user=request.user)
    if request.method == "POST" and form.is_valid():
        data, how = form.cleaned_data, form.cleaned_data["continue_with"]
        try:
            fork = forks.run_fork(
                run=run,
                at_seq=point.seq,
                by=request.user,
                agent_model=(
                    data["agent_model"].value
                    if how == ForkForm.MODEL and data["agent_model"]
                    else None
                ),
                seed=data["seed"] if how == ForkForm.SEED else None,
                user_model=data["user_model"].value if data["user_model"] else None,
                as_play=how == ForkForm.PLAY,
            )
        except ValidationError as exc:
            for field, errors in exc.message_dict.items():
                form.add_error(field if field in form.fields else None, errors)
        else:
            if fork.kind == Run.Kind.HUMAN:
                return redirect(reverse("play:detail", kwargs={"pk": fork.pk}))
            return redirect(fork)
    context = {
        "run": run,
        "form": form,
        "e": presenters.event_view(point),
    }
    return render(request, "runs/fork.html", context, status=400 if form.errors else 200)
