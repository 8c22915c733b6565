"""Starting runs: the run form."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.shortcuts import redirect, render

from apps.accounts.access import signin_required_to_start
from apps.runs import services
from apps.runs.forms import RunForm
from apps.tasks.models import Task
from tau2_env import config


@signin_required_to_start
def run_new(request):
    initial = {
        "domain": request.GET.get("domain") or "airline",
        "task_id": request.GET.get("task") or "",
        "user_model": config.provider_settings().model,
    }
    form = RunForm(request.POST or None, initial=initial)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        model = data["agent_model"]  # a ResolvedModel: what to send, what to charge
        try:
            run = services.run_create(
                user=request.user,
                task=data["task"],
                agent_model=model.value,
                user_model=data.get("user_model"),
                max_steps=data["max_steps"],
                seed=data.get("seed"),
                agent_prices=model.prices,
            )
        except ValidationError as exc:
            for field, errors in exc.message_dict.items():
                form.add_error(field if field in form.fields else None, errors)
        else:
            return redirect(run)
    domain = form["domain"].value() or "airline"
    task = Task.objects.filter(domain_id=domain, task_id=form["task_id"].value()).first()
    return render(request, "runs/new.html", {"form": form, "task": task, "domain": domain})
