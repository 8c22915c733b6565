"""Reads of webhook subscriptions for their pages: who sees and who manages one.

* A personal subscription: its owner only sees and manages it (nobody else, staff
  included: its URL may be a credential).
* A team subscription: everyone signed in sees it (its name, host, events and delivery
  log — never its URL or secret); staff manage it, as they manage team connections
  (``apps.connections.selectors.can_manage``).
"""

from __future__ import annotations

from django.db.models import Q, QuerySet

from apps.notifications.models import Attempt, Delivery, Subscription

__all__ = [
    "can_manage",
    "can_see",
    "deliveries_for",
    "subscription_visible",
    "subscriptions_for",
]

# Deliveries a subscription's page lists, newest first.
LOG_LENGTH = 50


def _signed_in(user) -> bool:
    return bool(user is not None and user.is_authenticated and user.is_active)


def can_manage(user, subscription: Subscription) -> bool:
    """True when ``user`` may edit, test, redeliver or delete ``subscription``."""
    if not _signed_in(user):
        return False
    if subscription.owner_id is not None:
        return subscription.owner_id == user.pk
    return bool(user.is_staff)


def can_see(user, subscription: Subscription) -> bool:
    """True when ``user`` may see ``subscription``'s page."""
    return _signed_in(user) and (subscription.owner_id is None or subscription.owner_id == user.pk)


def _visible(user) -> QuerySet[Subscription]:
    if not _signed_in(user):
        return Subscription.objects.none()
    return Subscription.objects.filter(Q(owner__isnull=True) | Q(owner_id=user.pk))


def subscription_visible(*, user, pk: int) -> Subscription | None:
    """Subscription ``pk`` if ``user`` may see it, else ``None``."""
    return _visible(user).filter(pk=pk).first()


def subscriptions_for(*, user) -> tuple[list[Subscription], list[Subscription]]:
    """(team, personal): the subscriptions ``user`` may see, by name."""
    found = list(_visible(user).order_by("name", "pk"))
    return [s for s in found if s.is_team], [s for s in found if not s.is_team]


def deliveries_for(subscription: Subscription) -> list[tuple[Delivery, list[Attempt]]]:
    """The last :data:`LOG_LENGTH` deliveries of ``subscription``, each with its
    attempts in order (two queries)."""
    deliveries = list(subscription.deliveries.order_by("-created_at", "-id")[:LOG_LENGTH])
    tries: dict[int, list[Attempt]] = {d.pk: [] for d in deliveries}
    for attempt in Attempt.objects.filter(delivery__in=deliveries).order_by("number", "id"):
        tries[attempt.delivery_id].append(attempt)
    return [(d, tries[d.pk]) for d in deliveries]
