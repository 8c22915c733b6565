"""Evaluations of an outside agent: the team's own program plays the agent.

Such an evaluation (``Evaluation.external_agent``) is created like any other — one run
per task and trial with τ²'s trial seeds, all QUEUED — but its runs are kind "agent via
API" and never go to the workers: the team's agent pulls them over the OpenEnv or MCP
face with a studio key (``reset(evaluation=…)``, MCP's ``start`` with ``evaluation``,
or the ``X-Tau2-Evaluation`` header). :func:`episode_claim` hands each client the next
queued episode under the evaluation's concurrency; the agents' recorder stores the
conversation in that run and τ²'s verdict at its end, so pass^k, breakdowns, compare
and the leaderboard read it as they read a model's.

**Exactly once.** A claim locks the evaluation's row, counts the episodes being played,
and moves one QUEUED run to RUNNING for its client with a conditional UPDATE: of two
clients asking together, each gets a different episode, and never more than the
evaluation's concurrency play at once. A scored episode is final and never handed out
again.

**A client that leaves.** An episode its client abandons (closed, disconnected, replaced
by another reset) goes back to the queue at once (``lifecycle.agent_run_requeue``); one
whose client vanished without a word goes back when its lease runs out (the reaper).
Either way its messages are dropped and "agent left" is added to its resumptions: the
next client plays it from the start, on the same seed.
"""

from __future__ import annotations

import re
from datetime import timedelta

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from apps.accounts.vault import SignInRequired
from apps.connections.llm_routes import ConnectionUnavailable, route_for
from apps.evaluations import events
from apps.evaluations.models import Evaluation
from apps.runs import budgets
from apps.runs.models import Run
from tau2_env.gate.access import EpisodePlan, EpisodeRefused

__all__ = [
    "AGENT_NAME_HELP",
    "RETRY_AFTER",
    "agent_name_problem",
    "episode_claim",
    "run_requeued",
]

# Seconds a client waits before asking again when every episode is taken for now.
RETRY_AFTER = 5
AGENT_NAME_HELP = (
    "Your agent's name and version as your team says it, e.g. support-bot@2026-12-03: "
    "letters, digits and . _ - @ : / +, up to 100 characters."
)
_AGENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-@:/+]{0,99}")


def agent_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name an outside agent, or ``None``."""
    if not name:
        return "Name your agent (and its version), e.g. support-bot@2026-12-03."
    if not _AGENT_NAME.fullmatch(name):
        return AGENT_NAME_HELP
    return None


def _state(evaluation: Evaluation) -> dict:
    """What a client reads of the evaluation when refused."""
    counts = dict.fromkeys(("queued", "running", "completed", "failed", "stopped"), 0)
    for status in evaluation.runs.values_list("status", flat=True):
        counts[status] = counts.get(status, 0) + 1
    return {"evaluation": evaluation.pk, "state": evaluation.status, "episodes": counts}


def _evaluation(user_id: int, evaluation: str) -> Evaluation:
    """The outside agent's evaluation a client named, or why not (404, 403)."""
    pk = int(evaluation) if evaluation.isdigit() else None
    found = (
        Evaluation.objects.filter(pk=pk, external_agent=True).first() if pk is not None else None
    )
    if found is None:
        raise EpisodeRefused(
            f"No evaluation {evaluation!r} of an outside agent here: start one on "
            "/evaluations/new/ (agent: your own) or with POST /api/evaluations/ "
            '("external_agent": "name@version"), then pull its episodes with its id.',
            status=404,
        )
    if found.created_by_id != user_id:
        raise EpisodeRefused(
            f"Evaluation {found.pk} is not yours: only its starter's studio keys play its "
            "episodes.",
            status=403,
        )
    return found


def episode_claim(
    *, user_id: int, evaluation: str, face: str, worker: str, lease: timedelta
) -> tuple[Run, EpisodePlan]:
    """Hand the key owner ``user_id``'s client (on ``face``, holding ``worker``) the next
    episode of ``evaluation``: its run, now RUNNING under ``lease``, and the
    plan it is played with. Raises :class:`~tau2_env.gate.access.EpisodeRefused`: 404
    no such evaluation of an outside agent, 403 not theirs, 409 paused, 410 nothing left
    to play, 429 with ``retry_after`` when every episode is taken or the evaluation's
    concurrency is full for now, and the customer's connection's own refusals (403, or
    429 when it is full). See :class:`apps.runs.hooks.EpisodeClaim`."""
    found = _evaluation(user_id, evaluation)
    user = found.created_by
    try:  # before any lock: may read the vault
        customer = route_for(connection=found.user_connection, model=found.user_model, user=user)
        judge = (
            route_for(connection=found.judge_connection, model=found.judge_model, user=user)
            if found.judge_model
            else None
        )
    except ConnectionUnavailable as exc:
        raise EpisodeRefused(str(exc), status=403) from None
    except SignInRequired as exc:  # the starter's Hugging Face sign-in
        raise EpisodeRefused(str(exc), status=401) from None
    with transaction.atomic():
        locked = Evaluation.objects.select_for_update().get(pk=found.pk)
        if locked.status == Evaluation.Status.PAUSED:
            raise EpisodeRefused(
                f"Evaluation {locked.pk} is paused: resume it on its page, then ask again.",
                status=409,
                data=_state(locked),
            )
        if locked.status != Evaluation.Status.RUNNING:
            raise EpisodeRefused(
                f"Evaluation {locked.pk} is {locked.get_status_display().lower()}: no "
                "episode is left to play.",
                status=410,
                data=_state(locked),
            )
        runs = Run.objects.filter(evaluation=locked)
        playing = runs.filter(status=Run.Status.RUNNING).count()
        queued = runs.filter(status=Run.Status.QUEUED, stop_requested=False)
        if not queued.exists():
            if playing:
                raise EpisodeRefused(
                    f"Every episode of evaluation {locked.pk} left is being played ({playing}); "
                    "one comes back if its client leaves: ask again in "
                    f"{RETRY_AFTER} s.",
                    status=429,
                    retry_after=RETRY_AFTER,
                    data=_state(locked),
                )
            raise EpisodeRefused(
                f"Every episode of evaluation {locked.pk} has been played.",
                status=410,
                data=_state(locked),
            )
        if playing >= locked.concurrency:
            raise EpisodeRefused(
                f"Evaluation {locked.pk} plays {locked.concurrency} episode"
                f"{'s' if locked.concurrency != 1 else ''} at a time and all are taken: ask "
                f"again in {RETRY_AFTER} s.",
                status=429,
                retry_after=RETRY_AFTER,
                data=_state(locked),
            )
        now = timezone.now()
        for pk in queued.order_by("trial", "id").values_list("pk", flat=True)[:20]:
            taken = Run.objects.filter(pk=pk, status=Run.Status.QUEUED).update(
                status=Run.Status.RUNNING,
                worker=worker,
                started_at=now,
                dispatched_at=now,
                lease_expires_at=now + lease,
                attempts=F("attempts") + 1,
            )
            if taken:
                break
        else:  # pragma: no cover - the evaluation's lock makes claims one at a time
            raise EpisodeRefused(
                f"Ask again in {RETRY_AFTER} s.", status=429, retry_after=RETRY_AFTER
            )
        run = Run.objects.select_related("task").get(pk=pk)
        guarded = run.user_connection is not None and (
            run.user_connection.budgeted or run.user_connection.max_in_flight
        )
        if guarded:
            refused = budgets.episode_admit(run=run)
            if refused is not None:  # rolled back: the run stays queued
                raise EpisodeRefused(
                    refused.reason,
                    status=429 if refused.later else 403,
                    retry_after=RETRY_AFTER if refused.later else None,
                    data=_state(locked),
                )
        transaction.on_commit(lambda: events.evaluation_publish(evaluation_id=locked.pk))
    plan = EpisodePlan(
        domain=run.domain,
        task_id=run.task.task_id,
        seed=run.seed,
        user_llm=customer,
        user_llm_args=run.user_llm_args,
        judge_llm=judge,
        max_steps=run.max_steps,
        max_errors=run.max_errors,
        retrieval_config=run.retrieval_config,
        timeout=run.timeout,
        labels={
            "evaluation": locked.pk,
            "trial": run.trial,
            "run_id": run.pk,
            "agent": locked.agent_model,
        },
    )
    return run, plan


def run_requeued(run_id: int) -> None:
    """The runs' requeued hook: the evaluation's pages show its episode queued again."""
    evaluation_id = Run.objects.filter(pk=run_id).values_list("evaluation_id", flat=True).first()
    if evaluation_id is not None:
        events.evaluation_publish(evaluation_id=evaluation_id)
