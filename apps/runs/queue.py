"""The one place that hands work to the Celery workers.

Work is sent by task name (the names the tasks declare in ``apps/runs/tasks.py``,
``apps/play/tasks.py`` and ``apps/evaluations/tasks.py``), with ids only — never a token
or a whole object — and, by default, once the current transaction commits, so a worker
never looks for a row that is not there yet. Sending by name keeps this module below the
tasks it names: a service that queues work never imports the worker code that does it (no
import cycles).
"""

from __future__ import annotations

from celery import current_app
from django.db import transaction

EXECUTE_RUN = "runs.execute"
PLAY_CUSTOMER_TURN = "play.customer_turn"
PLAY_SCORE = "play.score"
EVALUATIONS_DISPATCH = "evaluations.dispatch"
AUTOREVIEW = "runs.autoreview"
EVALUATION_JOB = "evaluations.job"

NAMES = (
    EXECUTE_RUN,
    PLAY_CUSTOMER_TURN,
    PLAY_SCORE,
    EVALUATIONS_DISPATCH,
    AUTOREVIEW,
    EVALUATION_JOB,
)


def enqueue(name: str, *args: int, on_commit: bool = True, robust: bool = False) -> None:
    """Send task ``name`` with ``args`` (ids and counts) to the workers: after the current
    transaction commits (at once outside one), or at once with ``on_commit`` off.

    With ``robust``, a broker that cannot be reached after commit is logged by Django
    instead of raising into the code that committed (the reaper sends the work again).
    """
    if name not in NAMES:
        raise ValueError(f"Unknown task {name!r}: name it in apps.runs.queue.NAMES")

    def send() -> None:
        current_app.send_task(name, args=list(args))

    if on_commit:
        transaction.on_commit(send, robust=robust)
    else:
        send()


def run_enqueue(run_id: int, *, on_commit: bool = True, robust: bool = False) -> None:
    """Queue model run ``run_id`` for a worker (``runs.execute``)."""
    enqueue(EXECUTE_RUN, run_id, on_commit=on_commit, robust=robust)


def autoreview_enqueue(review_id: int) -> None:
    """Queue auto-review ``review_id`` for a worker (``runs.autoreview``), once it commits."""
    enqueue(AUTOREVIEW, review_id)
