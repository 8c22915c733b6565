"""The evaluations app's hooks: what the apps above it register (in their
``AppConfig.ready``) to hear of evaluations, since evaluations never imports them.

* :func:`on_evaluation_news` — be told, once the transaction that stored it commits,
  that an evaluation finished, failed, or had runs stopped by a connection's monthly
  budget, or that a start was refused for a budget (the notifications app sends its
  webhooks from it).

Light on purpose (nothing but Django's transactions): an app registers its hooks at
start-up without loading its services — a hook may be given as the dotted path of a
function, imported when it is first called.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Literal

from django.db import transaction
from django.utils.module_loading import import_string

__all__ = ["EvaluationNews", "NewsKind", "evaluation_news", "news_hooks", "on_evaluation_news"]

logger = logging.getLogger(__name__)

NewsKind = Literal["finished", "failed", "budget_reached"]


@dataclass(frozen=True)
class EvaluationNews:
    """Something that happened to an evaluation (or to a start of one).

    ``evaluation_id`` is ``None`` for a start refused before anything was stored (a
    budget's refusal); ``user_id`` is who started it, or tried. ``detail`` says what
    happened in words (the failure's error, the budget's sentence). ``occurrence`` tells
    two happenings of the same kind to the same evaluation apart (it finished again after
    "retry the failed runs"; a budget was reached again in a later month): a hook may
    act once per (kind, evaluation, occurrence).
    """

    kind: NewsKind
    evaluation_id: int | None
    user_id: int
    detail: str = ""
    occurrence: str = ""


#: Called with the news, after the commit that stored it, in the process that did.
NewsHook = Callable[[EvaluationNews], None]
_hooks: list[tuple[str, NewsHook]] = []


def on_evaluation_news(name: str, hook: NewsHook | str) -> None:
    """Have ``hook(news)`` called for each :class:`EvaluationNews` (``hook``: a function,
    or its dotted path, imported at the first news). Registering ``name`` again replaces
    its hook."""
    _hooks[:] = [(n, h) for n, h in _hooks if n != name]
    _hooks.append((name, _lazy(hook) if isinstance(hook, str) else hook))


def _lazy(path: str) -> NewsHook:
    found: list[NewsHook] = []

    def hook(news: EvaluationNews) -> None:
        if not found:
            found.append(import_string(path))
        found[0](news)

    return hook


def news_hooks() -> list[str]:
    """The names of the hooks told of evaluations' news, in order."""
    return [name for name, _ in _hooks]


def evaluation_news(news: EvaluationNews) -> None:
    """Tell every hook of ``news`` once the current transaction commits (at once outside
    one; never when it rolls back). A hook that raises is logged: what was stored stays,
    and its failure must not pass for the evaluation's."""
    transaction.on_commit(partial(_tell, news))


def _tell(news: EvaluationNews) -> None:
    for name, hook in list(_hooks):
        try:
            hook(news)
        except Exception:
            logger.exception(
                "Evaluation %s: %s, but its %s hook failed", news.evaluation_id, news.kind, name
            )
