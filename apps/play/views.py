"""Play as the agent: pick a task, then talk, call tools and end on ``/play/<id>/``.

Actions answer JSON to the page's script (``Accept: application/json``) and redirect
back to the session otherwise, so the page works without it too.
"""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import JsonResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.views.decorators.http import require_POST

from apps.accounts.access import signin_required_to_start, signin_url
from apps.accounts.vault import SignInRequired
from apps.play import selectors, services
from apps.play.forms import PlayStartForm, SayForm, ToolForm
from apps.runs import presenters
from apps.runs.forms import customer_initial, query_text
from apps.runs.models import Run
from apps.runs.selectors import task_picker
from apps.runs.spec import Side


def _get_session_for_player(request, pk: int) -> Run:
    """The session, if the visitor is the person playing it (403 otherwise, 404 if none)."""
    run = selectors.play_get(pk=pk)
    if run.created_by_id != request.user.pk:
        raise PermissionDenied("Only the person playing this session can act in it.")
    return run


def _wants_json(request) -> bool:
    return "application/json" in request.headers.get("Accept", "")


def _state_payload(request, run: Run) -> dict:
    run.refresh_from_db()
    state = selectors.play_state(run=run)
    result = presenters.reward_view(run.reward_info) if run.is_final else None
    return {
        "phase": state.phase.value,
        "can_act": state.can_act,
        "pending": state.pending,
        "final": run.is_final,
        # The page keeps its socket until it has every event up to here (the last one of
        # an ended session, τ²'s stop, may still be on its way when the state says final).
        "last_seq": run.events.order_by("-seq").values_list("seq", flat=True).first(),
        "error": state.error,
        "html": render_to_string(
            "play/_state.html", {"run": run, "state": state, "result": result}, request=request
        ),
    }


def _answer(request, run: Run, *, status: int = 200, **extra):
    if _wants_json(request):
        return JsonResponse({"state": _state_payload(request, run), **extra}, status=status)
    if extra.get("message"):
        messages.error(request, extra["message"])
    for field, error in (extra.get("errors") or {}).items():
        messages.error(request, f"{field}: {error}")
    return redirect("play:detail", pk=run.pk)


def _start_initial(params, *, user) -> dict:
    """The start form's choices a link may preselect (``?domain=&split=&task=``), and the
    customer the other forms start on for ``user`` (``apps.runs.defaults``)."""
    return {
        "domain": query_text(params.get("domain")) or "airline",
        "task_id": query_text(params.get("task")),
        "split": query_text(params.get("split")) or "base",
        "user_model": customer_initial(user=user),
    }


def _start_context(form: PlayStartForm, **extra) -> dict:
    """The start form and its task picker (the run form's: runs.selectors.task_picker)."""
    picker = task_picker(
        domain=query_text(form["domain"].value()),
        split=query_text(form["split"].value()),
        q=query_text(form["task_id"].value()),
        form_url=reverse("play:new"),
    )
    return {"form": form, "picker": picker, **extra}


@signin_required_to_start
def play_index(request):
    form = PlayStartForm(initial=_start_initial(request.GET, user=request.user), user=request.user)
    sessions = selectors.play_list_open(user=request.user)
    return render(request, "play/index.html", _start_context(form, sessions=sessions))


@signin_required_to_start
def play_new(request):
    form = PlayStartForm(
        request.POST or None,
        initial=_start_initial(request.GET, user=request.user),
        user=request.user,
    )
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            task = data.get("task") or services.play_task_pick(
                domain=data["domain"], split=data["split"], seed=data.get("seed")
            )
            customer, embedder = data.get("user_model"), data.get("embedding_model")
            spec = services.play_spec(
                customer=Side(customer.model, customer.connection) if customer else None,
                seed=data.get("seed"),
                max_steps=data.get("max_steps"),
                retrieval_config=data.get("retrieval_config") or "",
                embedder=Side(embedder.model, embedder.connection) if embedder else None,
            )
            run = services.play_start(user=request.user, task=task, spec=spec)
        except ValidationError as exc:
            for field, errors in exc.message_dict.items():
                form.add_error(field if field in form.fields else None, errors)
        except SignInRequired as exc:
            messages.error(request, str(exc))
            return redirect(signin_url(next_url=request.get_full_path(), reason="start"))
        else:
            return redirect("play:detail", pk=run.pk)
    # A refused start is a client error.
    return render(
        request, "play/new.html", _start_context(form), status=400 if form.errors else 200
    )


@signin_required_to_start
def play_detail(request, pk: int):
    run = selectors.play_get(pk=pk)
    if run.created_by_id != request.user.pk:  # others follow it on the run page
        return redirect(run)
    events = [presenters.event_view(e) for e in run.events.order_by("seq")]
    state = selectors.play_state(run=run)
    return render(
        request,
        "play/detail.html",
        {
            "run": run,
            "events": events,
            "last_seq": events[-1]["seq"] if events else -1,
            "state": state,
            "result": presenters.reward_view(run.reward_info) if run.is_final else None,
            "policy": selectors.play_policy(run=run),
            "tools": selectors.tool_forms(domain=run.domain, retrieval_config=run.retrieval_config),
        },
    )


@signin_required_to_start
def play_state(request, pk: int):
    run = _get_session_for_player(request, pk)
    return JsonResponse({"state": _state_payload(request, run)})


def _act(request, run: Run, action):
    """Run ``action()``; refusals and sign-in problems become answers the page shows."""
    try:
        return action()
    except services.PlayRefused as exc:
        return _answer(request, run, status=409, message=str(exc))
    except SignInRequired as exc:
        return _answer(
            request,
            run,
            status=401,
            message=str(exc),
            signin=signin_url(next_url=reverse("play:detail", kwargs={"pk": run.pk})),
        )


@require_POST
@signin_required_to_start
def play_say(request, pk: int):
    run = _get_session_for_player(request, pk)
    form = SayForm(request.POST)
    if not form.is_valid():
        return _answer(request, run, status=400, errors=_errors(form))

    def say():
        try:
            event = services.play_say(run=run, text=form.cleaned_data["text"])
        except ValidationError as exc:
            return _answer(request, run, status=400, errors=_flat(exc))
        return _answer(request, run, events=[_event(event)])

    return _act(request, run, say)


@require_POST
@signin_required_to_start
def play_tool(request, pk: int):
    run = _get_session_for_player(request, pk)
    form = ToolForm(request.POST)
    if not form.is_valid():
        return _answer(request, run, status=400, errors=_errors(form))

    def call():
        try:
            events = services.play_tool(
                run=run, name=form.cleaned_data["name"], arguments=form.cleaned_data["arguments"]
            )
        except services.ArgumentsInvalid as exc:
            return _answer(request, run, status=400, errors=exc.errors)
        return _answer(request, run, events=[_event(e) for e in events])

    return _act(request, run, call)


@require_POST
@signin_required_to_start
def play_end(request, pk: int):
    run = _get_session_for_player(request, pk)

    def end():
        services.play_end(run=run)
        return _answer(request, run)

    return _act(request, run, end)


@require_POST
@signin_required_to_start
def play_retry(request, pk: int):
    run = _get_session_for_player(request, pk)

    def retry():
        services.play_retry(run=run)
        return _answer(request, run)

    return _act(request, run, retry)


def _event(event) -> dict:
    return {"seq": event.seq, "html": presenters.event_html(event)}


def _errors(form) -> dict[str, str]:
    return {field: " ".join(errors) for field, errors in form.errors.items()}


def _flat(exc: ValidationError) -> dict[str, str]:
    return {field: " ".join(errors) for field, errors in exc.message_dict.items()}
