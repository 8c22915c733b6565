"""Evaluation updates to their live pages: one message to the group ``evaluation_<id>``.

The page (re)reads the evaluation's state from the database on each message and on
(re)connect, so a message lost while a page was away loses nothing: the next one, or the
reconnect, brings everything. ``version`` (how many of its runs are final) lets a page
skip messages older than what it already shows.
"""

from __future__ import annotations

import logging
from typing import Literal, TypedDict

from apps.runs.models import Run
from apps.runs.publishing import group_send

logger = logging.getLogger(__name__)


class EvaluationMessage(TypedDict):
    type: Literal["evaluation.update"]
    evaluation_id: int
    version: int


def group_name(evaluation_id: int) -> str:
    return f"evaluation_{evaluation_id}"


def evaluation_version(evaluation_id: int) -> int:
    """How many of the evaluation's runs are final (grows as it fills in)."""
    return Run.objects.filter(evaluation_id=evaluation_id, status__in=Run.FINAL).count()


def evaluation_publish(*, evaluation_id: int) -> None:
    """Tell the evaluation's pages to refresh (best effort: they also poll on reconnect)."""
    message = EvaluationMessage(
        type="evaluation.update",
        evaluation_id=evaluation_id,
        version=evaluation_version(evaluation_id),
    )
    try:
        group_send(group_name(evaluation_id), message)
    except Exception:  # a page missing an update catches up on its next message
        logger.exception("Could not publish evaluation.update for %s", evaluation_id)
