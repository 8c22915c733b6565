"""Starting runs: the run form and its task picker's list (the picker itself,
``selectors.task_picker``, serves every one-task form: run, race, play), and running a
finished run again."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.http import require_POST

from apps.accounts.access import can_start, signin_required_to_start
from apps.connections.llm_routes import router_refusal
from apps.connections.picker import llm_args_initial, picks_a_connection
from apps.runs import selectors, services
from apps.runs.forms import (
    PREFILLS,
    RunForm,
    has_retrieval,
    query_text,
    run_form_initial,
    spec_from,
)
from apps.runs.models import Run


@signin_required_to_start
def run_new(request):
    """``GET``: the form, preselected by ``?domain=&split=&task=&model=&user_model=&max_steps=
    &seed=&trial=``; ``POST``: start the run."""
    form = RunForm(
        request.POST or None,
        initial=run_form_initial(request.GET, user=request.user),
        user=request.user,
    )
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        model = data["agent_model"]  # a ResolvedRoute: where it runs, what to charge
        try:
            run = services.run_create(
                user=request.user,
                task=data["task"],
                spec=spec_from(data),
                agent_prices=model.prices,
                trial=data.get("trial") or 0,
            )
        except ValidationError as exc:
            for field, errors in exc.message_dict.items():
                form.add_error(field if field in form.fields else None, errors)
        else:
            return redirect(run)
    value = {name: query_text(form[field].value()) for name, field in PREFILLS.items()}
    picker = selectors.task_picker(
        domain=value.pop("domain"),
        split=value.pop("split"),
        q=value.pop("task"),
        keep=value,
        form_url=reverse("runs:new"),
    )
    model_fields = [
        form[name]
        for name in ("agent_model", "user_model", "judge_model", "max_steps", "timeout", "seed")
    ]
    if has_retrieval():  # a knowledge domain (banking_knowledge on τ² 1.x)
        model_fields += [form["retrieval_config"], form["embedding_model"]]
    return render(
        request,
        "runs/new.html",
        {
            "form": form,
            "limits_advice": picks_a_connection(form),
            "picker": picker,
            "model_fields": model_fields,
            "args_fields": form.llm_args_fields,
            # "Run with another model…": the model it ran, not preselected again.
            "instead_of": query_text(request.GET.get("instead_of")),
        },
        status=400 if form.errors else 200,  # a refused start is a client error
    )


def run_task_picker(request):
    """The picker's list for ``?domain=&split=&task_id=&form=`` (htmx), and the domain's
    splits; ``form`` is the path of the form it sits in."""
    params = request.GET
    picker = selectors.task_picker(
        domain=query_text(params.get("domain")),
        split=query_text(params.get("split")),
        q=query_text(params.get("task_id")),
        form_url=query_text(params.get("form")),
    )
    return render(request, "includes/task_picker.html", {"picker": picker, "oob": True})


def rerun_query(run: Run, *, same_model: bool = True) -> dict:
    """The run form's querystring that repeats ``run``'s settings; ``same_model=False``
    (for another model): the agent model is left to pick, the run's named as ``instead_of``."""
    spec = run.spec
    model = {"model": spec.agent.value} if same_model else {"instead_of": spec.agent.value}
    query = {
        "domain": run.domain,
        "task": run.task.task_id,
        **model,
        "user_model": spec.customer.value,
        "max_steps": spec.max_steps,
        "timeout": spec.timeout,
        "seed": spec.seed,
        "trial": run.seed_trial or None,
        **llm_args_initial(run.agent_llm_args, side="agent"),
        **llm_args_initial(run.user_llm_args, side="user"),
    }
    return {name: value for name, value in query.items() if value is not None}


def rerun_offer(user, run: Run) -> dict | None:
    """What the run page offers ``user`` to start from ``run``: nothing unless they may
    start runs and it is a model run; else the prefilled form's URL ("another model")
    and, when a side of it runs on Hugging Face's router and ``user`` cannot use the
    router (a developer sign-in), ``sign_in``: what to fix, said instead of a Retry
    that would fail again (``services.spec_sign_in_check`` would refuse it)."""
    if not can_start(user) or run.kind != Run.Kind.MODEL:
        return None
    query = urlencode(rerun_query(run, same_model=False))
    offer = {"form_url": f"{reverse('runs:new')}?{query}", "sign_in": ""}
    routed, why = services.spec_router_sides(run.spec), router_refusal(user=user)
    if why and routed:
        _, role, side = routed[0]
        offer["sign_in"] = services.sign_in_message(role=role, model=side.model, why=why)
        # The form with the same settings, the router's models left to pick again (the
        # customer starts on a connection's, as for a new run).
        params = {"agent_model": "model", "user_model": "user_model"}
        dropped = {params.get(field) for field, *_ in routed}
        query = {k: v for k, v in rerun_query(run).items() if k not in dropped}
        offer["fix_url"] = f"{reverse('runs:new')}?{urlencode(query)}"
    return offer


@require_POST
def run_rerun(request, pk: int):
    """Run a finished run again (or retry a failed one) with the same settings: a new run."""
    if not can_start(request.user):
        raise PermissionDenied("Sign in to start runs.")
    old = selectors.run_get(pk=pk)
    try:
        run = services.run_rerun(run=old, by=request.user)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
        return redirect(f"{reverse('runs:new')}?{urlencode(rerun_query(old))}")
    return redirect(run)
