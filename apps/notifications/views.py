"""The Notifications pages: the list, a subscription's page (its delivery log, "Send a
test event", "Redeliver", a new secret), add, edit, delete.

Who sees and changes what is ``apps.notifications.selectors``'; the writes are
``apps.notifications.services``'. A secret is on a page once, when it is made: the
POST that makes it keeps it (sealed) in the session and redirects to the subscription's
page, whose next GET takes it out and shows it — a reload neither posts again nor shows
it again. A URL never (its host only).
"""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from apps.accounts.access import signin_required_to_start
from apps.accounts.shown_once import secret_hold, secret_take
from apps.notifications import selectors, services
from apps.notifications.forms import SubscriptionForm
from apps.notifications.models import Delivery, Subscription


def _subscription_for(request, pk: int, *, manage: bool = False) -> Subscription:
    """Subscription ``pk`` if the person may see it (404: someone else's is nobody
    else's business), and manage it when ``manage`` (403)."""
    subscription = selectors.subscription_visible(user=request.user, pk=pk)
    if subscription is None:
        raise Http404("There is no such subscription you may see.")
    if manage and not selectors.can_manage(request.user, subscription):
        raise PermissionDenied("Only staff change the team's notifications.")
    return subscription


def _page(request, template: str, context: dict, *, status: int = 200):
    context = {"nav_section": "notifications", **context}
    response = render(request, template, context, status=status)
    response["Cache-Control"] = "no-store"  # a new secret is on a page once, never cached
    return response


def _log_context(request, subscription: Subscription) -> dict:
    log = selectors.deliveries_for(subscription)
    return {
        "subscription": subscription,
        "manageable": selectors.can_manage(request.user, subscription),
        "log": log,
        "waiting": any(d.status in Delivery.WAITING for d, _ in log),
    }


# The session's slot for a secret just made, until its page has shown it.
_JUST_MADE = "notifications.new_secret"


def _show_secret_once(request, subscription: Subscription, secret: str):
    """Redirect to ``subscription``'s page, which shows ``secret`` on its next GET only."""
    secret_hold(request, slot=_JUST_MADE, secret=secret, owner=subscription.pk)
    return redirect(subscription.get_absolute_url())


def _take_secret(request, subscription: Subscription) -> str:
    """The secret just made for ``subscription`` (""); another subscription's stays."""
    return secret_take(request, slot=_JUST_MADE, owner=subscription.pk)


def _detail(request, subscription: Subscription, *, secret: str = ""):
    waits = [f"{s:g} s" for s in settings.TAU2_WEBHOOK_BACKOFF]
    return _page(
        request,
        "notifications/detail.html",
        {
            **_log_context(request, subscription),
            "created_secret": secret,
            "backoff": ", ".join(waits[:-1]) + f" and {waits[-1]}" if len(waits) > 1 else waits[0],
        },
    )


@signin_required_to_start
@require_GET
def subscription_list(request):
    """The team's subscriptions and the person's own."""
    team, personal = selectors.subscriptions_for(user=request.user)
    return _page(
        request,
        "notifications/list.html",
        {"team": team, "personal": personal, "is_staff": request.user.is_staff},
    )


@signin_required_to_start
@require_GET
def subscription_detail(request, pk: int):
    subscription = _subscription_for(request, pk)
    return _detail(request, subscription, secret=_take_secret(request, subscription))


@signin_required_to_start
@require_GET
def delivery_log(request, pk: int):
    """htmx: the delivery log again (the page refreshes it while some delivery waits)."""
    subscription = _subscription_for(request, pk)
    return _page(request, "notifications/_log.html", _log_context(request, subscription))


@signin_required_to_start
@require_http_methods(["GET", "POST"])
def subscription_form(request, pk: int | None = None):
    """Add (no ``pk``: its secret shown once, on its page) or edit a subscription."""
    subscription = _subscription_for(request, pk, manage=True) if pk is not None else None
    if request.method == "GET":
        form = SubscriptionForm(user=request.user, subscription=subscription)
        return _page(
            request, "notifications/form.html", {"form": form, "subscription": subscription}
        )
    form = SubscriptionForm(request.POST, user=request.user, subscription=subscription)
    if form.is_valid():
        try:
            if subscription is None:
                subscription, secret = services.subscription_create(
                    by=request.user, fields=form.subscription_fields(), team=form.for_team
                )
                return _show_secret_once(request, subscription, secret)
            services.subscription_update(
                by=request.user, subscription=subscription, fields=form.subscription_fields()
            )
        except ValidationError as exc:
            for field, errors in exc.message_dict.items():
                form.add_error(field if field in form.fields else None, errors)
        else:
            messages.success(request, f"The subscription “{subscription.name}” is saved.")
            return redirect(subscription.get_absolute_url())
    return _page(
        request,
        "notifications/form.html",
        {"form": form, "subscription": subscription},
        status=400,
    )


@signin_required_to_start
@require_http_methods(["GET", "POST"])
def subscription_delete(request, pk: int):
    subscription = _subscription_for(request, pk, manage=True)
    if request.method == "POST":
        services.subscription_delete(by=request.user, subscription=subscription)
        messages.success(request, f"The subscription “{subscription.name}” is deleted.")
        return redirect("notifications:list")
    return _page(request, "notifications/delete.html", {"subscription": subscription})


@signin_required_to_start
@require_POST
def subscription_secret(request, pk: int):
    """A new secret, shown once; the old one stops signing at once."""
    subscription = _subscription_for(request, pk, manage=True)
    secret = services.subscription_secret_rotate(by=request.user, subscription=subscription)
    return _show_secret_once(request, subscription, secret)


@signin_required_to_start
@require_POST
def subscription_test(request, pk: int):
    subscription = _subscription_for(request, pk, manage=True)
    services.subscription_test(by=request.user, subscription=subscription)
    messages.info(request, "A test event is on its way: its attempts show below.")
    return redirect(subscription.get_absolute_url())


@signin_required_to_start
@require_POST
def delivery_redeliver(request, pk: int, delivery_pk: int):
    subscription = _subscription_for(request, pk, manage=True)
    delivery = Delivery.objects.filter(pk=delivery_pk, subscription=subscription).first()
    if delivery is None:
        raise Http404("This subscription has no such delivery.")
    services.delivery_redeliver(by=request.user, delivery=delivery)
    messages.info(request, "The delivery is sent again, with the same id.")
    return redirect(subscription.get_absolute_url())
