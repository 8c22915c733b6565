"""Writes of evaluations: create, dispatch fairly, pause, resume, stop, retry, settle.

An evaluation owns one model run per task and trial, created up front (``QUEUED``,
not yet handed to the workers). :func:`evaluations_dispatch` hands them to the Celery
queue within three caps — the evaluation's own concurrency, ``TAU2_EVAL_PER_PERSON``
and ``TAU2_EVAL_MAX_IN_FLIGHT`` — one run at a time to whoever has the fewest in flight,
so people share the workers fairly and single runs (which never wait for the
dispatcher) always find a free worker. A connection's ``max_in_flight`` (τ²'s
``--provider-limit``) caps the runs calling it at once: no run is handed out whose agent
or customer connection already has that many runs in flight (dispatched and not final,
single runs included — they are sent at once and count, but are never held back). It
runs when an evaluation starts or resumes, whenever one of its runs ends (or a single
run on a connection does), and from beat.

An evaluation with a side on a connection that has a monthly budget is refused before
anything is stored when its estimated cost is more than the budget has left this month
(``apps.runs.budgets``); each of its runs is then admitted to the budget as it starts.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace
from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Count, Q
from django.utils import timezone

from apps.accounts.vault import hf_token_for
from apps.connections.llm_routes import prices_of, side_provenance
from apps.connections.models import Connection
from apps.evaluations import events
from apps.evaluations.estimates import evaluation_cost_estimate
from apps.evaluations.external import agent_name_problem
from apps.evaluations.hooks import EvaluationNews, evaluation_news
from apps.evaluations.models import Evaluation, StartRequest
from apps.evaluations.selectors import evaluation_metrics
from apps.inference.pricing import dollars
from apps.runs import budgets, queue
from apps.runs.forms import spec_from
from apps.runs.models import MAX_TRIALS, Run, RunEvent
from apps.runs.services import (
    model_run_build,
    prices_for_storage,
    run_in_mode,
    run_stop,
    spec_for_domain,
    spec_router_sides,
    spec_sign_in_check,
    spec_validate,
)
from apps.runs.spec import RunSpec, Side, spec_columns
from apps.tasks.models import Task
from apps.tasks.selectors import catalogue_latest
from tau2_env.engine import catalog, episodes
from tau2_env.engine.evaluation import trial_seeds

logger = logging.getLogger(__name__)

IN_FLIGHT = budgets.IN_FLIGHT  # single runs and open agent episodes count too


@dataclass(frozen=True)
class TaskChoice:
    """The tasks an evaluation runs: ``task_ids`` of ``domain`` (None or empty: every
    task of ``split``); ``query``: the explorer search they came from, if any."""

    domain: str
    split: str = ""
    task_ids: list[str] | None = None
    query: str = ""


def evaluation_create(
    *,
    user,
    spec: RunSpec,
    tasks: TaskChoice,
    agent_prices: tuple | None = None,
    num_trials: int = 1,
    concurrency: int = 8,
    name: str = "",
    external_agent: bool = False,
) -> Evaluation:
    """Create an evaluation of ``spec`` over ``tasks`` × ``num_trials`` and start it.
    Each side runs on its connection (None: Hugging Face's router, on ``user``'s token).

    ``external_agent``: the agent is the team's own program, named by ``spec.agent``'s
    model (``name@version``), which pulls the episodes over OpenEnv or MCP
    (:mod:`apps.evaluations.external`) instead of the workers playing a model; default
    mode only, no agent prices.

    ``spec.mode`` is the paper's ablation (``Run.Mode``): its runs are played by τ²'s
    agent and user of that mode, as ``tau2 run --agent … --user …``; like ``tau2 run``
    it leaves out the tasks that agent refuses (Oracle plan: no expected action;
    No-User: no ticket), and No-User is refused on a domain τ² cannot run without a user.

    Raises ``ValidationError`` before anything is stored when a side is on the router and
    ``user`` has no usable token (``spec_sign_in_check``), and for anything else wrong —
    a side on a budgeted connection with no price, or whose estimated cost is more than
    the budget (the connection's, or ``user``'s on it) has left this month.
    """
    if external_agent:
        spec, agent_prices = _external_spec(spec), None
    spec_sign_in_check(spec, user=user)
    spec = spec_validate(spec)
    domain, split, mode = tasks.domain, tasks.split, spec.mode
    if not 1 <= num_trials <= MAX_TRIALS:
        raise ValidationError({"num_trials": f"Between 1 and {MAX_TRIALS} trials."})
    if not 1 <= spec.max_errors <= 1000:
        raise ValidationError({"max_errors": "The error limit must be between 1 and 1000."})
    if concurrency < 1:
        raise ValidationError({"concurrency": "At least one run at a time."})
    if domain not in catalog.domain_names():
        raise ValidationError({"domain": f"Unknown domain {domain!r}."})
    if mode not in Run.Mode.values:
        raise ValidationError({"mode": f"Unknown mode {mode!r}."})
    refusal = episodes.mode_domain_refusal(domain=domain, mode=mode)
    if refusal:
        raise ValidationError({"mode": refusal})
    spec = spec_for_domain(spec, domain)
    splits = catalog.get_domain(domain).splits
    if split and split not in splits:
        raise ValidationError({"split": f"{domain} has no split {split!r}."})
    if tasks.task_ids:
        ids = list(dict.fromkeys(str(t).strip() for t in tasks.task_ids if str(t).strip()))
    elif split:
        ids = list(splits[split])
    else:
        raise ValidationError({"task_ids": "Choose a split or some tasks."})
    rows = {t.task_id: t for t in Task.objects.filter(domain_id=domain, task_id__in=ids)}
    missing = [t for t in ids if t not in rows]
    if missing:
        shown = ", ".join(missing[:5]) + (" …" if len(missing) > 5 else "")
        raise ValidationError({"task_ids": f"No task {shown} in {domain}."})
    if not ids:
        raise ValidationError({"task_ids": "No tasks to evaluate."})
    left_out = []
    if mode != Run.Mode.DEFAULT:
        left_out = [
            t
            for t in ids
            if not episodes.mode_runs_task(mode=mode, task=catalog.get_tau2_task(domain, t))
        ]
        ids = [t for t in ids if t not in left_out]
        if not ids:
            raise ValidationError(
                {"mode": f"τ²'s {Run.Mode(mode).label} agent runs none of these tasks."}
            )
    seeds = trial_seeds(spec.seed, num_trials)
    prices = prices_for_storage(agent_prices)
    _refuse_over_budget(
        user=user, domain=domain, runs=len(ids) * num_trials, spec=spec, agent_prices=prices
    )
    latest = catalogue_latest()
    agent, customer = spec.agent, spec.customer
    with transaction.atomic():
        evaluation = Evaluation.objects.create(
            **spec_columns(spec, seed_field="seed"),
            name=name.strip()[:200],
            created_by=user,
            domain=domain,
            split=split,
            full_split=bool(split) and set(ids) == set(splits.get(split, ())),
            query=tasks.query[:500],
            task_ids=ids,
            num_trials=num_trials,
            trial_seeds=seeds,
            concurrency=concurrency,
            external_agent=external_agent,
            provenance={
                "tau2_version": catalog.tau2_version(),
                "task_set_hash": latest.task_set_hash if latest else catalog.catalogue_hash(),
                "agent_prices": list(prices) if prices else None,
                "source": "studio",
                "agent": (
                    _external_provenance(agent.model)
                    if external_agent
                    else side_provenance(connection=agent.connection, model=agent.model)
                ),
                "user": side_provenance(connection=customer.connection, model=customer.model),
                # The tasks tau2 run in this mode leaves out (its agent refuses them).
                **({"mode_left_out": left_out} if left_out else {}),
                # A knowledge domain's retrieval configuration (`--retrieval-config`).
                **({"retrieval_config": spec.retrieval_config} if spec.retrieval_config else {}),
                # Where its embeddings are made (an embedding configuration's), never a key.
                **(
                    {
                        "embedder": side_provenance(
                            connection=spec.embedder.connection, model=spec.embedder.model
                        )
                    }
                    if spec.embedder is not None
                    else {}
                ),
            },
        )
        # Trial-major, as τ² runs them: every task's trial 0, then trial 1, …
        built = (
            run_in_mode(
                model_run_build(
                    user=user,
                    task=rows[task_id],
                    spec=spec,
                    trial=trial,
                    trial_seed=seeds[trial],
                    prices=prices,
                    evaluation=evaluation,
                )
            )
            for trial in range(num_trials)
            for task_id in ids
        )
        Run.objects.bulk_create(_as_external(run) if external_agent else run for run in built)
        if not external_agent:  # its runs wait for the agent's clients, not for workers
            transaction.on_commit(evaluations_dispatch)
        else:
            transaction.on_commit(lambda: events.evaluation_publish(evaluation_id=evaluation.pk))
    return evaluation


# What an outside agent's evaluation and runs name as its agent's implementation.
EXTERNAL_IMPLEMENTATION = "an outside agent, pulling its episodes over OpenEnv or MCP"


def _external_spec(spec: RunSpec) -> RunSpec:
    """``spec`` for an outside agent's evaluation: its agent named (``name@version``), no
    model, no connection, the default mode; raises ``ValidationError`` saying why not."""
    name = (spec.agent.model or "").strip()
    problem = agent_name_problem(name)
    if problem:
        raise ValidationError({"external_agent": problem})
    if spec.mode != Run.Mode.DEFAULT:
        raise ValidationError(
            {"mode": "An outside agent plays the default mode only: the ablations swap τ²'s agent."}
        )
    return replace(spec, agent=Side(name, llm=False))


def _external_provenance(name: str) -> dict:
    return {"implementation": EXTERNAL_IMPLEMENTATION, "model": name, "external": True}


def _as_external(run: Run) -> Run:
    """A built run of an outside agent's evaluation: kind agent, no agent price."""
    run.kind = Run.Kind.AGENT
    run.agent_llm_args = None
    run.agent_price_input = run.agent_price_output = None
    run.provenance["agent"] = _external_provenance(run.agent_model)
    return run


def evaluation_start(*, user, data: dict) -> Evaluation:
    """Start the evaluation the evaluation form describes (its ``cleaned_data``): what its
    page's Start button and ``POST /api/evaluations/`` both do."""
    plan, model = data["plan"], data.get("agent_model")  # model: a ResolvedRoute
    external = data.get("external_agent") or ""
    spec = spec_from(data)
    if external:  # the team's own program plays the agent
        spec = replace(spec, agent=Side(external, llm=False))
    return evaluation_create(
        user=user,
        spec=spec,
        tasks=TaskChoice(
            domain=plan.domain, split=plan.split, task_ids=plan.task_ids, query=plan.query
        ),
        agent_prices=model.prices if model is not None and not external else None,
        num_trials=data["num_trials"],
        concurrency=data["concurrency"],
        name=data.get("name", ""),
        external_agent=bool(external),
    )


def _refuse_over_budget(
    *, user, domain: str, runs: int, spec: RunSpec, agent_prices: tuple | None
) -> None:
    """Raise ``ValidationError`` (on the side's field) when a side is on a budgeted
    connection that has no price for its model, or when the LOW end of the evaluation's
    estimated cost on a budgeted connection is more than a budget of it has left this
    month; the message says the range and what is left. The agent's calls are estimated
    as the evaluation's page estimates them (``evaluation_cost_estimate``); a customer on
    a budgeted connection from the customer's tokens in the team's runs
    (``budgets.side_cost_range``)."""
    agent_connection, agent_model = spec.agent.connection, spec.agent.model
    user_connection, user_model = spec.customer.connection, spec.customer.model
    sides = []
    if agent_connection is not None and agent_connection.budgeted:
        priced = None
        if agent_prices and None not in agent_prices:
            priced = tuple(Decimal(p) for p in agent_prices)
        sides.append(("agent_model", agent_connection, agent_model, priced))
    if user_connection is not None and user_connection.budgeted:
        priced = prices_of(connection=user_connection, model=user_model)
        sides.append(("user_model", user_connection, user_model, priced))
    on: dict[int, list] = {}  # connection id → [connection, field, low, high]
    for field, connection, model, priced in sides:
        if priced is None:
            refusal = budgets.unpriced_refusal(connection=connection, model=model)
            raise ValidationError({field: f"{refusal}."})
        if field == "agent_model":
            estimate = evaluation_cost_estimate(domain=domain, runs=runs, prices=priced)
            low, high = estimate.low, estimate.high
        else:
            low, high = budgets.side_cost_range(
                domain=domain, side="user", connection=connection, model=model, prices=priced
            )
            low, high = low * runs, high * runs
        entry = on.setdefault(connection.pk, [connection, field, Decimal(0), Decimal(0)])
        entry[2], entry[3] = entry[2] + low, entry[3] + high
    for connection, field, low, high in on.values():
        for room in budgets.rooms(connection=connection, user=user):
            if low > room.left:
                message = (
                    f"{room.sentence()}; this evaluation's {runs} run"
                    f"{'s' if runs != 1 else ''} are estimated to cost "
                    f"{dollars(low)} – {dollars(high)} on it. Raise the budget, wait "
                    "for next month, or evaluate fewer tasks or trials."
                )
                evaluation_news(
                    EvaluationNews(
                        kind="budget_reached", evaluation_id=None, user_id=user.pk, detail=message
                    )
                )
                raise ValidationError({field: message})


def _limited_connections(evaluation: Evaluation, limits: dict[int, int]) -> set[int]:
    """The connections of ``evaluation``'s sides that cap their runs in flight."""
    return {evaluation.agent_connection_id, evaluation.user_connection_id} & limits.keys()


def evaluations_dispatch() -> list[int]:
    """Hand queued runs of running evaluations to the workers, within the caps, fairly
    across people; returns the ids queued. Safe to call from anywhere at any time: the
    running evaluations are locked while the slots are counted."""
    queued: list[int] = []
    dispatched: set[int] = set()  # the evaluations whose runs went to the workers
    with transaction.atomic():
        # An outside agent's evaluation hands its runs to its clients, not to workers.
        active = list(
            Evaluation.objects.select_for_update()
            .filter(status=Evaluation.Status.RUNNING, external_agent=False)
            .order_by("created_at", "id")
        )
        if not active:
            return []
        in_flight = Counter(
            dict(
                Run.objects.filter(IN_FLIGHT, evaluation__isnull=False, kind=Run.Kind.MODEL)
                .values_list("evaluation_id")
                .annotate(n=Count("id"))
            )
        )
        owner = {e.pk: e.created_by_id for e in active}
        by_person: dict[int, int] = Counter()
        for evaluation_id, n in in_flight.items():
            person = owner.get(evaluation_id)
            if person is None:  # a paused or stopped evaluation's runs still count
                person = (
                    Evaluation.objects.filter(pk=evaluation_id)
                    .values_list("created_by_id", flat=True)
                    .first()
                )
            by_person[person] += n
        budget = settings.TAU2_EVAL_MAX_IN_FLIGHT - sum(in_flight.values())
        # Connections that cap the runs calling them at once, and how many do now (each
        # run once, whether one side or both are on it; single runs count too).
        named = {e.agent_connection_id for e in active} | {e.user_connection_id for e in active}
        limits = dict(
            Connection.objects.filter(
                pk__in=named - {None}, max_in_flight__isnull=False
            ).values_list("pk", "max_in_flight")
        )
        calling: Counter = Counter()
        if limits:
            sides = Run.objects.filter(IN_FLIGHT).filter(
                Q(agent_connection_id__in=limits) | Q(user_connection_id__in=limits)
            )
            for pair in sides.values_list("agent_connection_id", "user_connection_id"):
                calling.update(set(pair) & limits.keys())
        waiting: dict[int, list[Evaluation]] = defaultdict(list)
        for evaluation in active:
            waiting[evaluation.created_by_id].append(evaluation)
        pending = {
            e.pk: list(
                Run.objects.filter(
                    evaluation=e, status=Run.Status.QUEUED, dispatched_at__isnull=True
                )
                .order_by("trial", "id")
                .values_list("id", flat=True)[: max(0, e.concurrency - in_flight[e.pk])]
            )
            for e in active
        }
        # Every run final, yet still running: the end of its last run was not followed
        # through (the database or broker went away just then). Completed below.
        finished = [e.pk for e in active if not pending[e.pk] and not in_flight[e.pk]]
        while budget > 0:
            # The person with the fewest runs in flight goes next; their oldest
            # evaluation with room gives one run.
            people = sorted(
                (p for p, evs in waiting.items() if by_person[p] < settings.TAU2_EVAL_PER_PERSON),
                key=lambda p: (by_person[p], p),
            )
            taken = None
            for person in people:
                for evaluation in waiting[person]:
                    if (
                        pending[evaluation.pk]
                        and in_flight[evaluation.pk] < evaluation.concurrency
                        and all(
                            calling[c] < limits[c] for c in _limited_connections(evaluation, limits)
                        )
                    ):
                        taken = (person, evaluation, pending[evaluation.pk].pop(0))
                        break
                if taken:
                    break
            if taken is None:
                break
            person, evaluation, run_id = taken
            queued.append(run_id)
            dispatched.add(evaluation.pk)
            in_flight[evaluation.pk] += 1
            calling.update(_limited_connections(evaluation, limits))
            by_person[person] += 1
            budget -= 1
        if queued:
            Run.objects.filter(pk__in=queued).update(dispatched_at=timezone.now())
            for run_id in queued:
                # robust: one message the broker refuses must not keep the others from
                # being sent; the reaper sends a lost one again (``runs_reap``).
                queue.run_enqueue(run_id, robust=True)
    for evaluation_id in finished:
        _complete_if_done(evaluation_id)
        events.evaluation_publish(evaluation_id=evaluation_id)
    # Their pages count the runs waiting for a worker now, not at the next run's end.
    for evaluation_id in sorted(dispatched - set(finished)):
        events.evaluation_publish(evaluation_id=evaluation_id)
    return queued


def evaluation_run_ended(run: Run) -> None:
    """What the runs' settled hook (``apps.runs.hooks.on_run_settled``, registered by
    ``EvaluationsConfig.ready``) does: a run of an evaluation lets its evaluation go on;
    a single run on a connection may free a place an evaluation waits for on it."""
    if run.evaluation_id is not None:
        evaluation_run_settled(run_id=run.pk)
    elif run.agent_connection_id is not None or run.user_connection_id is not None:
        evaluations_dispatch()


def evaluation_run_moved(run: Run) -> None:
    """What the runs' moved hook (``apps.runs.hooks.on_run_moved``) does: a run of an
    evaluation taken by a worker or handed back changes its page's counts; tell it."""
    if run.evaluation_id is not None:
        events.evaluation_publish(evaluation_id=run.evaluation_id)


def evaluation_run_settled(*, run_id: int) -> None:
    """One of an evaluation's runs became final: stop the evaluation if the provider
    refused the token, complete it when every run is final, start the next runs, and
    tell its pages."""
    run = (
        Run.objects.filter(pk=run_id)
        .values("evaluation_id", "failure", "error", "finished_at", "evaluation__created_by_id")
        .first()
    )
    if not run or run["evaluation_id"] is None:
        return
    evaluation_id = run["evaluation_id"]
    if run["failure"] == Run.Failure.PROVIDER:
        evaluation_fail(evaluation_id=evaluation_id, error=run["error"])
    if run["failure"] == Run.Failure.BUDGET:
        # Budgets are monthly: news once per evaluation and month, however many runs stop.
        month = (run["finished_at"] or timezone.now()).strftime("%Y-%m")
        evaluation_news(
            EvaluationNews(
                kind="budget_reached",
                evaluation_id=evaluation_id,
                user_id=run["evaluation__created_by_id"],
                detail=run["error"],
                occurrence=month,
            )
        )
    _complete_if_done(evaluation_id)
    evaluations_dispatch()
    events.evaluation_publish(evaluation_id=evaluation_id)


def _complete_if_done(evaluation_id: int) -> None:
    open_runs = Run.objects.filter(evaluation_id=evaluation_id).exclude(status__in=Run.FINAL)
    if open_runs.exists():
        return
    # Completed and summarised in one write: a reader that sees "completed" sees its numbers.
    evaluation = Evaluation.objects.get(pk=evaluation_id)
    if evaluation.status != Evaluation.Status.RUNNING:
        _summarise(evaluation_id)
        return
    now = timezone.now()
    changed = Evaluation.objects.filter(pk=evaluation_id, status=Evaluation.Status.RUNNING).update(
        status=Evaluation.Status.COMPLETED,
        finished_at=now,
        summary=evaluation_metrics(evaluation),
    )
    if changed:  # one UPDATE decides: of two runs ending together, one tells
        evaluation_news(
            EvaluationNews(
                kind="finished",
                evaluation_id=evaluation_id,
                user_id=evaluation.created_by_id,
                occurrence=now.isoformat(),
            )
        )


def _summarise(evaluation_id: int) -> None:
    evaluation = Evaluation.objects.get(pk=evaluation_id)
    Evaluation.objects.filter(pk=evaluation_id).update(summary=evaluation_metrics(evaluation))


def evaluation_fail(*, evaluation_id: int, error: str) -> None:
    """The provider refused the starter's token (401/402): stop everything, say why."""
    now = timezone.now()
    said = f"Stopped: {error}" if error else "Stopped: the provider refused the token."
    changed = Evaluation.objects.filter(
        pk=evaluation_id, status__in=(Evaluation.Status.RUNNING, Evaluation.Status.PAUSED)
    ).update(status=Evaluation.Status.FAILED, error=said, finished_at=now)
    if changed:
        _stop_runs(evaluation_id)
        starter = Evaluation.objects.filter(pk=evaluation_id).values_list(
            "created_by_id", flat=True
        )[0]
        evaluation_news(
            EvaluationNews(
                kind="failed",
                evaluation_id=evaluation_id,
                user_id=starter,
                detail=said,
                occurrence=now.isoformat(),
            )
        )


def _stop_runs(evaluation_id: int) -> None:
    now = timezone.now()
    Run.objects.filter(
        evaluation_id=evaluation_id, status=Run.Status.QUEUED, dispatched_at__isnull=True
    ).update(
        status=Run.Status.STOPPED,
        stop_requested=True,
        termination_reason="stopped",
        finished_at=now,
    )
    for run in Run.objects.filter(evaluation_id=evaluation_id).exclude(status__in=Run.FINAL):
        run_stop(run=run, by=None)
    _summarise(evaluation_id)


def evaluation_pause(*, evaluation: Evaluation) -> Evaluation:
    """No new run starts; runs already started finish."""
    Evaluation.objects.filter(pk=evaluation.pk, status=Evaluation.Status.RUNNING).update(
        status=Evaluation.Status.PAUSED
    )
    events.evaluation_publish(evaluation_id=evaluation.pk)
    evaluation.refresh_from_db()
    return evaluation


def evaluation_resume(*, evaluation: Evaluation) -> Evaluation:
    """Start handing out runs again (the starter's token must still be usable, when a
    side runs on Hugging Face's router: one on connections only needs none)."""
    if spec_router_sides(evaluation.spec):
        hf_token_for(user=evaluation.created_by)
    Evaluation.objects.filter(pk=evaluation.pk, status=Evaluation.Status.PAUSED).update(
        status=Evaluation.Status.RUNNING
    )
    transaction.on_commit(evaluations_dispatch)
    events.evaluation_publish(evaluation_id=evaluation.pk)
    evaluation.refresh_from_db()
    return evaluation


def evaluation_stop(*, evaluation: Evaluation) -> Evaluation:
    """Stop: runs not started are stopped at once, started ones between their hops."""
    changed = Evaluation.objects.filter(
        pk=evaluation.pk, status__in=(Evaluation.Status.RUNNING, Evaluation.Status.PAUSED)
    ).update(status=Evaluation.Status.STOPPED, finished_at=timezone.now())
    if changed:
        _stop_runs(evaluation.pk)
    events.evaluation_publish(evaluation_id=evaluation.pk)
    evaluation.refresh_from_db()
    return evaluation


def evaluation_retry_failed(*, evaluation: Evaluation) -> int:
    """Queue again the runs that failed on a transient or infrastructure error, or for a
    connection's budget (``Run.RETRYABLE``; never completed ones, never a provider
    refusal); they resume from their stored messages, and a budget's run is admitted to
    the budget afresh as it starts again. Returns how many; the evaluation runs again if
    any."""
    if evaluation.status == Evaluation.Status.IMPORTED:
        raise ValidationError("An imported evaluation has nothing to run again.")
    if spec_router_sides(evaluation.spec):  # on connections only, no Hugging Face token
        hf_token_for(user=evaluation.created_by)
    with transaction.atomic():
        retried = Run.objects.filter(
            evaluation=evaluation, status=Run.Status.FAILED, failure__in=Run.RETRYABLE
        )
        if evaluation.external_agent:  # an outside agent's episode is played again whole
            RunEvent.objects.filter(run__in=retried).delete()
            retried.update(n_messages=0, n_tool_calls=0)
        count = retried.update(
            status=Run.Status.QUEUED,
            failure="",
            error="",
            termination_reason="",
            finished_at=None,
            dispatched_at=None,
            attempts=0,
            worker="",
            lease_expires_at=None,
            agent_reserved_usd=None,
            user_reserved_usd=None,
        )
        if count:
            Evaluation.objects.filter(pk=evaluation.pk).update(
                status=Evaluation.Status.RUNNING, finished_at=None, error=""
            )
            transaction.on_commit(evaluations_dispatch)
    events.evaluation_publish(evaluation_id=evaluation.pk)
    return count


class IdempotencyKeyReused(Exception):
    """The ``Idempotency-Key`` started an evaluation with another request body."""

    def __init__(self, evaluation: Evaluation) -> None:
        self.evaluation = evaluation
        super().__init__(
            f"This Idempotency-Key started evaluation {evaluation.pk} with another request "
            "body: send a new key for a new evaluation, or the same body to read that one."
        )


def _earlier(user, key: str, body_sha256: str) -> StartRequest | None:
    earlier = StartRequest.objects.filter(created_by=user, key=key).first()
    if earlier is not None and body_sha256 and earlier.body_sha256 not in ("", body_sha256):
        raise IdempotencyKeyReused(earlier.evaluation)
    return earlier


def evaluation_create_once(
    *, user, idempotency_key: str, create: Callable[[], Evaluation], body_sha256: str = ""
) -> tuple[Evaluation, bool]:
    """``create()`` (an :func:`evaluation_create`) unless ``user`` already started one
    with ``idempotency_key``; returns (the evaluation, whether this call created it).
    An empty key always creates. Two calls racing with one key start one evaluation:
    the loser's, inserted in the same transaction as its key, rolls back (its dispatch
    was queued ``on_commit`` and never runs) and it answers with the winner's. With
    ``body_sha256`` (the request's fingerprint), the key again with another body raises
    :class:`IdempotencyKeyReused` and starts nothing."""
    key = (idempotency_key or "").strip()[:255]
    if not key:
        return create(), True
    earlier = _earlier(user, key, body_sha256)
    if earlier is not None:
        return earlier.evaluation, False
    try:
        with transaction.atomic():
            evaluation = create()
            StartRequest.objects.create(
                created_by=user, key=key, evaluation=evaluation, body_sha256=body_sha256
            )
    except IntegrityError:
        earlier = _earlier(user, key, body_sha256)
        if earlier is None:
            raise
        return earlier.evaluation, False
    return evaluation, True
