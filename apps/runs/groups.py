"""Which runs belong to something of an app above (a race's lanes), so that the history
can tell them from single runs without knowing that app.

An app registers its :class:`RunGroup` in its ``AppConfig.ready`` (the races app: its
lanes). Light on purpose — it imports no model — so an app's config can import it at
the top of its module, before the app registry is ready.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Q


@dataclass(frozen=True)
class RunGroup:
    """``runs`` says which runs are the group's (a lookup the app names, e.g.
    ``Q(race_lane__isnull=False)``); ``related`` what a history row follows to link to
    its group (``select_related`` paths)."""

    name: str  # the history's kind filter value, e.g. "race"
    label: str  # as the filter offers it, e.g. "race runs"
    runs: Q
    related: tuple[str, ...] = ()


_groups: dict[str, RunGroup] = {}


def run_group_register(group: RunGroup) -> None:
    """Have the history tell ``group``'s runs apart (its name again replaces it)."""
    _groups[group.name] = group


def run_groups() -> list[RunGroup]:
    """The registered groups, in the order they were registered."""
    return list(_groups.values())
