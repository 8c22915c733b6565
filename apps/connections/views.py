"""The Connections pages: the list, a connection's page with its Test, add, edit
(rotating the key), delete; and the form's two htmx helpers (the base URL's placeholder
for a kind, the models an endpoint lists).

Who sees and changes what is ``apps.connections.selectors``' (``can_see``,
``can_manage``); the writes are ``apps.connections.services``'; the Test is
``apps.connections.probe``'s. No page ever holds a key: a hint (``…a1b2``) at most.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from apps.accounts.access import signin_required_to_start
from apps.connections import selectors, services
from apps.connections.forms import ConnectionForm, TestForm, default_url, parse_headers
from apps.connections.models import Connection
from apps.connections.presses import test_press_admit
from apps.connections.probe import connection_test

# The listed models are ticked at first when there are no more than this many.
TICK_ALL_UP_TO = 25


def _connection_for(request, pk: int, *, manage: bool = False) -> Connection:
    """The connection ``pk`` if the person may see it (404 otherwise: a personal one is
    nobody else's business), and manage it when ``manage`` (403)."""
    connection = selectors.connection_visible(user=request.user, pk=pk)
    if connection is None:
        raise Http404("There is no such connection you may see.")
    if manage and not selectors.can_manage(request.user, connection):
        raise PermissionDenied("Only staff change a team connection.")
    return connection


def _page(request, template: str, context: dict, *, status: int = 200):
    # The header's place (the view's context wins over tau2site's context processor).
    context = {"nav_section": "connections", **context}
    response = render(request, template, context, status=status)
    response["Cache-Control"] = "no-store"  # a form that takes keys is never cached
    return response


@signin_required_to_start
@require_GET
def connection_list(request):
    """The team connections the person may use (staff: all) and their own ones."""
    team, personal = selectors.connection_cards_for(user=request.user)
    return _page(request, "connections/list.html", {"team": team, "personal": personal})


@signin_required_to_start
@require_GET
def connection_detail(request, pk: int):
    connection = _connection_for(request, pk)
    card = selectors.connection_card(connection, user=request.user)
    return _page(
        request,
        "connections/detail.html",
        {
            "card": card,
            "connection": connection,
            "test_form": TestForm(connection=connection),
            "test_timeout": settings.TAU2_CONNECTION_TEST_TIMEOUT,
        },
    )


def _form_page(request, form: ConnectionForm, *, listed=None, status: int = 200):
    return _page(
        request,
        "connections/form.html",
        {"form": form, "connection": form.connection, "listed": listed},
        status=status,
    )


def _save(form: ConnectionForm, *, by) -> Connection:
    fields = form.connection_fields()
    if form.connection is None:
        owner = None if form.for_team else by
        return services.connection_create(by=by, kind=form.chosen_kind, owner=owner, fields=fields)
    return services.connection_update(connection=form.connection, by=by, fields=fields)


@signin_required_to_start
@require_http_methods(["GET", "POST"])
def connection_form(request, pk: int | None = None):
    """Add (no ``pk``) or edit a connection. ``action=read_models`` reads the endpoint's
    models instead of saving: htmx swaps in the list, a plain post shows the form again."""
    connection = _connection_for(request, pk, manage=True) if pk is not None else None
    if request.method == "GET":
        scope = request.GET.get("scope")
        initial = (
            {"scope": scope} if scope in (ConnectionForm.FOR_TEAM, ConnectionForm.FOR_ME) else {}
        )
        form = ConnectionForm(user=request.user, connection=connection, initial=initial)
        return _form_page(request, form)
    form = ConnectionForm(request.POST, user=request.user, connection=connection)
    if request.POST.get("action") == "read_models":
        listed = _models_listed(request, form)
        if request.htmx:
            return _page(request, "connections/_models_read.html", {"listed": listed})
        return _form_page(request, form, listed=listed)
    if not form.is_valid():
        return _form_page(request, form, status=400)
    try:
        saved = _save(form, by=request.user)
    except ValidationError as exc:  # what only the service knows (a rule of connections)
        if hasattr(exc, "error_dict"):
            for field, errors in exc.error_dict.items():
                form.add_error(field if field in form.fields else None, errors)
        else:
            form.add_error(None, exc)
        return _form_page(request, form, status=400)
    verb = "added" if connection is None else "saved"
    messages.success(request, f"The connection “{saved.name}” is {verb}. Test it below.")
    return redirect("connections:detail", pk=saved.pk)


def _models_listed(request, form: ConnectionForm) -> dict:
    """What the endpoint lists, for the form: ``{names, ticked, error, where}``. Reads
    with the key typed, else (on edit) the connection's own."""
    post = request.POST
    connection = form.connection
    try:
        headers = parse_headers(post.get("headers", ""))
    except ValidationError as exc:
        return {"names": [], "ticked": [], "error": " ".join(exc.messages)}
    typed_key = post.get("api_key", "").strip()
    try:
        if connection is not None and not typed_key and not headers:
            names = services.models_read_for(connection=connection, by=request.user)
        else:
            names = services.models_read(
                kind=form.chosen_kind,
                base_url=post.get("base_url", "").strip()
                or (connection.base_url if connection else ""),
                api_key=typed_key,
                headers=headers,
            )
    except services.ModelsReadError as exc:
        return {"names": [], "ticked": [], "error": str(exc)}
    typed = {line.split()[0] for line in post.get("models", "").splitlines() if line.split()}
    names = [name for name in names if name not in typed]
    ticked = names if len(names) <= TICK_ALL_UP_TO else []
    return {"names": names, "ticked": ticked, "error": "", "already": len(typed)}


@signin_required_to_start
@require_GET
def base_url_field(request):
    """htmx: the base URL field again, its placeholder the chosen kind's default URL."""
    kind = request.GET.get("kind", "")
    if kind not in Connection.Kind.values:
        kind = Connection.Kind.OPENAI
    return render(
        request,
        "connections/_base_url.html",
        {
            "value": request.GET.get("base_url", "")[:500],
            "placeholder": default_url(kind),
            "required": kind == Connection.Kind.OPENAI_COMPATIBLE,
        },
    )


@signin_required_to_start
@require_http_methods(["GET", "POST"])
def connection_delete(request, pk: int):
    """A page saying what deleting does; its POST deletes (softly: the row stays)."""
    connection = _connection_for(request, pk, manage=True)
    if request.method == "POST":
        services.connection_delete(connection=connection, by=request.user)
        messages.success(
            request, f"The connection “{connection.name}” is deleted and its key wiped."
        )
        return redirect("connections:list")
    card = selectors.connection_card(connection, user=request.user)
    return _page(request, "connections/delete.html", {"card": card, "connection": connection})


@signin_required_to_start
@require_POST
def connection_test_view(request, pk: int):
    """The Test, in this request (one small call with a short timeout); htmx swaps the
    outcome in, a plain post goes back to the connection's page. On a budgeted
    connection each person's presses are limited per hour (``apps.connections.presses``)."""
    connection = _connection_for(request, pk)
    form = TestForm(request.POST, connection=connection)
    if not form.is_valid():
        return _page(
            request,
            "connections/_test_result.html",
            {"test": None, "error": "Choose one of the connection's models."},
            status=400,
        )
    refused = test_press_admit(connection=connection, user=request.user)
    if refused is None:
        connection_test(connection=connection, model=form.cleaned_data["model"], user=request.user)
    if not request.htmx:
        if refused is not None:
            messages.error(request, refused)
        return redirect("connections:detail", pk=connection.pk)
    card = selectors.connection_card(connection, user=request.user)
    # A refused press shows why above the last Test (htmx swaps only a 2xx answer in).
    return _page(
        request, "connections/_test_result.html", {"test": card.last_test, "error": refused}
    )
