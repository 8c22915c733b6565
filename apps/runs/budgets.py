"""Budgets of connections: what they spent this month, and what they let start.

A connection (``apps.connections``) may have a monthly budget for everyone together
(``monthly_budget_usd``) and one for each person (``person_monthly_budget_usd``). This
module lives in the runs app, not in ``apps.connections``, because spend is read from
runs and the connections app sits below the runs app (it may not import it).

**Spend** is derived from the runs, never kept in a second ledger that could drift: in a
calendar month (UTC) a connection spent the agent's cost (``Run.cost_usd``) of the runs
whose agent is on it, the customer's cost (``Run.user_cost_usd``) of the runs whose
customer is on it, and τ²'s NL judge's (``Run.judge_cost_usd``) of the runs it judged on
it (its own ``judge_model`` on ``judge_connection``, else the customer's route), and the
embeddings' (``Run.embedding_cost_usd``) of the runs that embed on it; a person, the
same over the runs they started. A run is charged to
the month it **started** in (``started_at``): a run queued but never started cost nothing,
and one that started on the 31st and ends on the 1st stays in the month it started in.
A judge that judged a stored conversation later (a re-grade, ``Run.judged_at``) is
charged to the month it judged in.
Unpriced calls cost nothing known: they are counted apart ("unpriced"), never as $0, and
a budgeted connection refuses a model it has no price for.

**Admission** (:func:`run_admit`, called by the runner after a model run is claimed and
before its first hop): under ``SELECT … FOR UPDATE`` of the run's budgeted connections
(in id order, one short transaction) the run is admitted iff what is committed — the
month's spend, where every other admitted run still going counts for the larger of its
cost so far and what it holds — plus what this run may cost is within the budget (the
connection's, and its person's). What it may cost (:func:`side_reservation`) is one
run's estimated maximum: the 95th percentile of what the team's last completed runs of
the domain on that model took, at this run's prices, else :data:`DEFAULT_TOKENS` per
run. It is held on the run (``Run.agent_reserved_usd`` / ``user_reserved_usd``) while the
run goes on; a run resumed after a lost worker or a hand-back keeps it and is not
admitted again; "retry the failed runs" clears it, so a retried run is admitted afresh.

**Between hops** (:func:`budget_reached`) a run on a budgeted connection stops, failed
with ``Run.Failure.BUDGET`` and the numbers, once the connection's (or its person's)
spend this month reached the budget; its messages are kept and "retry the failed runs"
takes it up again once there is room.

**Play sessions** (a person plays the agent, the customer on a budgeted connection) hold
no reservation: before each customer turn (:func:`play_turn_refusal`) the same check
runs, and a spent month (or a model without a price there) leaves the turn unasked, the
reason shown to the player, who asks again once there is room.

**Outside agents' episodes** (OpenEnv's ``/ws`` and ``/reset``, MCP's ``/agent/mcp``)
whose customer (and so τ²'s NL judge, which judges on the customer's route) is on a
budgeted connection are admitted as model runs are (:func:`episode_admit`, at the
reset, before the customer's first call): the model must have a price there, and one
run's estimated maximum is held on the episode's run (kind agent) while it is open.
Before each customer turn (:func:`episode_turn_refusal`) the month is checked as a play
session's is; a spent month ends the episode with the reason, its run failed with
``Run.Failure.BUDGET``.

**Requests in flight**: ``Connection.max_in_flight`` is kept by the evaluations'
dispatcher (``apps.evaluations.services.evaluations_dispatch``), counting every run
dispatched and not final that names the connection (:data:`IN_FLIGHT`). Single runs
(``run_create``) are sent to the workers at once, as before: they count toward the cap
but are not held back. An outside agent's episode is a run in flight while it is open:
it counts, and a reset finding the connection full is refused (an episode cannot wait
in a queue) with the numbers.
"""

from __future__ import annotations

import operator
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from functools import reduce

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Case, Count, DecimalField, F, Q, Sum, Value, When
from django.db.models.functions import Coalesce, Greatest
from django.utils import timezone

from apps.connections.llm_routes import prices_of
from apps.connections.models import Connection
from apps.inference.pricing import PricePair, cost_usd, dollars
from apps.runs.models import Run

__all__ = [
    "DEFAULT_RANGE",
    "DEFAULT_TOKENS",
    "IN_FLIGHT",
    "ConnectionSpend",
    "EpisodeRefusal",
    "Room",
    "Spend",
    "budget_reached",
    "connection_spend",
    "connection_spend_view",
    "embedding_refusal",
    "episode_admit",
    "episode_turn_refusal",
    "judge_refusal",
    "month_window",
    "play_turn_refusal",
    "rooms",
    "run_admit",
    "side_cost_range",
    "side_reservation",
    "unpriced_refusal",
]

# (input, output) tokens of one side of one run when the team has no completed runs of
# the domain on the model to go by: the high end of apps.evaluations.estimates' default
# (a τ² conversation resends the policy, tools and conversation at every agent turn).
DEFAULT_TOKENS = (400_000, 10_000)
# (low, high) (input, output) tokens of one side of one run, for an evaluation's estimate:
# apps.evaluations.estimates' default.
DEFAULT_RANGE = ((50_000, 1_000), DEFAULT_TOKENS)
MIN_SAMPLE = 3
SAMPLE = 200
PERCENTILE = 0.95

_MONEY = DecimalField(max_digits=14, decimal_places=6)
_ZERO = Value(Decimal(0), output_field=_MONEY)
# The two sides of a run, and the columns that say what each spent and holds.
_SIDES = {
    "agent": ("agent_connection_id", "cost_usd", "agent_reserved_usd", "prompt_tokens"),
    "user": ("user_connection_id", "user_cost_usd", "user_reserved_usd", "user_prompt_tokens"),
}
# τ²'s NL judge spends too (no reservation: a few calls, after the conversation).
_JUDGE = ("judge_cost_usd", "judge_prompt_tokens")
# So do a knowledge domain's embeddings, on ``embedding_connection`` (no reservation:
# the knowledge base once per connection model, then a few tokens per search).
_EMBEDDING = ("embedding_connection_id", "embedding_cost_usd", "embedding_prompt_tokens")
# Runs calling their connections now: handed to the workers (or, an outside agent's
# episode, opened) and not final.
IN_FLIGHT = Q(dispatched_at__isnull=False, status__in=(Run.Status.QUEUED, Run.Status.RUNNING))


def _on(column: str, connection: Connection) -> Q:
    """The runs whose ``column`` side is on ``connection`` (the judge: ``"judge"``)."""
    if column != "judge":
        return Q(**{column: connection.pk})
    own = ~Q(judge_model="") & Q(judge_connection_id=connection.pk)
    return own | (Q(judge_model="") & Q(user_connection_id=connection.pk))


def _spending():
    """(where the side runs, its aggregates, whether the month is the judge's) for the
    agent, the customer, the judge and the embeddings."""
    for side, (column, *_) in _SIDES.items():
        yield column, _side_aggregates(side), False
    for column, cost, judge in (("judge", _JUDGE[0], True), (_EMBEDDING[0], _EMBEDDING[1], False)):
        spent = Coalesce(Sum(Coalesce(F(cost), _ZERO)), _ZERO)
        yield column, {"spent": spent, "committed": spent}, judge


# The sides a run plays on a connection, as ``Spend.unpriced_sides`` names them.
UNPRICED_SIDES = ("agent", "customer", "judge", "embedder")


def _unpriced_counts(connection: Connection) -> dict:
    """Aggregates counting the runs with calls on ``connection`` that have no price: each
    run once (``unpriced``) however many sides it plays there, and per side."""
    sides = {
        "agent": _on("agent_connection_id", connection)
        & _unpriced_side("cost_usd", "prompt_tokens"),
        "customer": _on("user_connection_id", connection)
        & _unpriced_side("user_cost_usd", "user_prompt_tokens"),
        "judge": _on("judge", connection) & _unpriced_side(*_JUDGE),
        "embedder": _on(_EMBEDDING[0], connection) & _unpriced_side(*_EMBEDDING[1:]),
    }
    return {
        "unpriced": Count("id", filter=reduce(operator.or_, sides.values())),
        **{f"unpriced_{side}": Count("id", filter=q) for side, q in sides.items()},
    }


def _unpriced_side(cost: str, tokens: str) -> Q:
    return Q(**{f"{cost}__isnull": True, f"{tokens}__gt": 0})


def _unpriced_spend(row: dict) -> Spend:
    """The unpriced counts of one aggregate ``row`` of :func:`_unpriced_counts`."""
    return Spend(
        spent=Decimal(0),
        committed=Decimal(0),
        unpriced_runs=row["unpriced"],
        unpriced_sides=tuple(row[f"unpriced_{side}"] for side in UNPRICED_SIDES),
    )


def month_window(now: datetime | None = None) -> tuple[datetime, datetime]:
    """The calendar month (UTC) holding ``now``: ``[start, end)``."""
    now = (now or timezone.now()).astimezone(UTC)
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    end = (start + timedelta(days=32)).replace(day=1)
    return start, end


@dataclass(frozen=True)
class Spend:
    """A connection's (or a person's on it) month: ``spent`` by priced calls,
    ``committed`` (spent, with each admitted run still going counted at the larger of
    its cost so far and what it holds), and ``unpriced_runs`` whose calls have no price
    (each run once, however many sides it plays there; ``unpriced_sides``: how many per
    side, in :data:`UNPRICED_SIDES`' order)."""

    spent: Decimal
    committed: Decimal
    unpriced_runs: int = 0
    unpriced_sides: tuple[int, ...] = (0, 0, 0, 0)

    @property
    def unpriced_by_side(self) -> list[tuple[str, int]]:
        """(side, runs) for the sides with unpriced runs, when a run plays several."""
        if sum(self.unpriced_sides) == self.unpriced_runs:
            return []  # each run unpriced on one side only: the total says it all
        return [(s, n) for s, n in zip(UNPRICED_SIDES, self.unpriced_sides, strict=True) if n]

    @property
    def held(self) -> Decimal:
        """What runs in progress hold beyond what they spent so far."""
        return self.committed - self.spent

    def __add__(self, other: Spend) -> Spend:
        return Spend(
            spent=self.spent + other.spent,
            committed=self.committed + other.committed,
            unpriced_runs=self.unpriced_runs + other.unpriced_runs,
            unpriced_sides=tuple(
                a + b for a, b in zip(self.unpriced_sides, other.unpriced_sides, strict=True)
            ),
        )


NOTHING = Spend(spent=Decimal(0), committed=Decimal(0))


def _month_runs(
    *, start: datetime, end: datetime, user=None, exclude_run: int | None = None, judge=False
):
    """The runs charged to ``[start, end)``; ``judge``: as the judge's calls are charged
    (in the month they were made: ``judged_at``, else the run's start)."""
    started = Q(started_at__gte=start, started_at__lt=end)
    if judge:
        judged = Q(judged_at__gte=start, judged_at__lt=end)
        runs = Run.objects.filter(judged | (Q(judged_at__isnull=True) & started))
    else:
        runs = Run.objects.filter(started)
    if user is not None:
        runs = runs.filter(created_by=user)
    if exclude_run is not None:
        runs = runs.exclude(pk=exclude_run)
    return runs


def _side_aggregates(side: str) -> dict:
    _, cost, reserved, tokens = _SIDES[side]
    spent = Coalesce(F(cost), _ZERO)
    holding = Q(**{f"{reserved}__isnull": False}) & ~Q(status__in=Run.FINAL)
    return {
        "spent": Coalesce(Sum(spent), _ZERO),
        "committed": Coalesce(
            Sum(Case(When(holding, then=Greatest(spent, F(reserved))), default=spent)), _ZERO
        ),
    }


def connection_spend(
    *, connection: Connection, user=None, now: datetime | None = None, exclude_run=None
) -> Spend:
    """What ``connection`` spent in ``now``'s month (UTC), by everyone or by ``user``,
    leaving out the run ``exclude_run`` (an id)."""
    start, end = month_window(now)
    runs = _month_runs(start=start, end=end, user=user, exclude_run=exclude_run)
    total = _unpriced_spend(runs.aggregate(**_unpriced_counts(connection)))
    for column, aggregates, judge in _spending():
        side_runs = (
            _month_runs(start=start, end=end, user=user, exclude_run=exclude_run, judge=True)
            if judge
            else runs
        )
        found = side_runs.filter(_on(column, connection)).aggregate(**aggregates)
        total += Spend(spent=found["spent"], committed=found["committed"])
    return total


def _spend_by_person(*, connection: Connection, now: datetime | None = None) -> dict[int, Spend]:
    start, end = month_window(now)
    out: dict[int, Spend] = defaultdict(lambda: NOTHING)
    unpriced = (
        _month_runs(start=start, end=end)
        .values("created_by")
        .annotate(**_unpriced_counts(connection))
        .order_by()
    )
    for row in unpriced:
        if row["unpriced"]:
            out[row["created_by"]] += _unpriced_spend(row)
    for column, aggregates, judge in _spending():
        rows = (
            _month_runs(start=start, end=end, judge=judge)
            .filter(_on(column, connection))
            .values("created_by")
            .annotate(**aggregates)
            .order_by()
        )
        for row in rows:
            out[row["created_by"]] += Spend(spent=row["spent"], committed=row["committed"])
    return dict(out)


# ------------------------------------------------------------------ reservation


def _side_sample(*, domain: str, side: str, connection: Connection, model: str) -> list:
    """(input, output) tokens of ``side`` in the team's last ``SAMPLE`` completed model
    runs of ``domain`` with that side on ``connection``'s ``model``."""
    column, _, _, prompt = _SIDES[side]
    completion = "completion_tokens" if side == "agent" else "user_completion_tokens"
    model_column = "agent_model" if side == "agent" else "user_model"
    return list(
        Run.objects.filter(
            kind=Run.Kind.MODEL,
            domain=domain,
            status=Run.Status.COMPLETED,
            fork_seq__isnull=True,  # a fork's tokens are those of a part of a conversation
            **{column: connection.pk, model_column: model, f"{prompt}__gt": 0},
        )
        .order_by("-finished_at", "-id")
        .values_list(prompt, completion)[:SAMPLE]
    )


def _quantile(values: list[Decimal], q: float) -> Decimal:
    """The nearest-rank ``q`` quantile of sorted ``values``."""
    return values[min(len(values) - 1, max(0, round(q * (len(values) - 1))))]


def side_reservation(
    *, domain: str, side: str, connection: Connection, model: str, prices: PricePair
) -> tuple[Decimal, str]:
    """What one side (``"agent"`` or ``"user"``) of one run of ``domain`` on
    ``connection``'s ``model`` may cost at ``prices``, and where that comes from (for
    the reason a refusal gives): the 95th percentile (nearest rank) of that side's
    tokens in the team's last completed runs of the domain on that model, priced at
    ``prices``, when there are at least ``MIN_SAMPLE``; else :data:`DEFAULT_TOKENS`."""
    sample = _side_sample(domain=domain, side=side, connection=connection, model=model)
    if len(sample) >= MIN_SAMPLE:
        costs = sorted(
            cost_usd(prompt_tokens=p, completion_tokens=c, prices=prices) for p, c in sample
        )
        return (
            _quantile(costs, PERCENTILE),
            f"the 95th percentile of the team's last {len(sample)} such runs",
        )
    tokens_in, tokens_out = DEFAULT_TOKENS
    return (
        cost_usd(prompt_tokens=tokens_in, completion_tokens=tokens_out, prices=prices),
        f"{tokens_in // 1000}k input and {tokens_out // 1000}k output tokens, as the team has "
        f"no completed runs of {domain} on {model} to go by",
    )


def side_cost_range(
    *, domain: str, side: str, connection: Connection, model: str, prices: PricePair
) -> tuple[Decimal, Decimal]:
    """(low, high) USD of one side of one run, as :func:`side_reservation` reads the
    team's runs: their 10th and 90th percentiles, else :data:`DEFAULT_RANGE`. What an
    evaluation's customer on a budgeted connection is estimated at (the evaluation's own
    estimate, ``apps.evaluations.estimates``, counts the agent's calls only)."""
    sample = _side_sample(domain=domain, side=side, connection=connection, model=model)
    if len(sample) >= MIN_SAMPLE:
        costs = sorted(
            cost_usd(prompt_tokens=p, completion_tokens=c, prices=prices) for p, c in sample
        )
        return _quantile(costs, 0.1), _quantile(costs, 0.9)
    (low_in, low_out), (high_in, high_out) = DEFAULT_RANGE
    return (
        cost_usd(prompt_tokens=low_in, completion_tokens=low_out, prices=prices),
        cost_usd(prompt_tokens=high_in, completion_tokens=high_out, prices=prices),
    )


@dataclass(frozen=True)
class Room:
    """One budget that applies to a run or an evaluation this month: the connection's
    (``person`` None) or a person's on it, with what was spent and is committed."""

    connection: Connection
    budget: Decimal
    spend: Spend
    person: object | None = None

    @property
    def left(self) -> Decimal:
        return max(self.budget - self.spend.committed, Decimal(0))

    def sentence(self) -> str:
        """``The connection “Team vLLM” has $0.40 left of its $5.00 budget this month
        ($4.60 spent)`` — or ``alice's budget on the connection “Team vLLM” has …``."""
        whose = (
            f"The connection “{self.connection.name}” has"
            if self.person is None
            else f"{_who(self.person)}'s budget on the connection “{self.connection.name}” has"
        )
        held = self.spend.held
        held = f", {dollars(held)} of it held by runs in progress" if held > 0 else ""
        return (
            f"{whose} {dollars(self.left)} left of its {dollars(self.budget)} budget this "
            f"month ({dollars(self.spend.spent)} spent{held})"
        )


def rooms(*, connection: Connection, user, exclude_run: int | None = None) -> list[Room]:
    """The budgets of ``connection`` that apply to ``user``'s runs this month (its own,
    and the person budget), leaving the run ``exclude_run`` (an id) out of the spend."""
    found = []
    for budget, person in (
        (connection.monthly_budget_usd, None),
        (connection.person_monthly_budget_usd, user),
    ):
        if budget is not None:
            spend = connection_spend(connection=connection, user=person, exclude_run=exclude_run)
            found.append(Room(connection=connection, budget=budget, spend=spend, person=person))
    return found


def _full_room(
    *,
    connection: Connection,
    user,
    exclude_run: int | None = None,
    pending: Decimal = Decimal(0),
    committed: bool = False,
) -> Room | None:
    """The first of ``connection``'s budgets for ``user`` (:func:`rooms`) that its month's
    spend — ``committed`` (holdings counted) or spent, plus ``pending`` — has reached;
    ``None`` when none has."""
    for room in rooms(connection=connection, user=user, exclude_run=exclude_run):
        used = room.spend.committed if committed else room.spend.spent
        if used + pending >= room.budget:
            return room
    return None


def unpriced_refusal(*, connection: Connection, model: str) -> str:
    """Why a budgeted connection refuses a model it has no price for."""
    return (
        f"The connection “{connection.name}” has a budget, and no price for {model}: "
        f"staff must set a price for {model} on the Connections page before it can be "
        "counted against the budget"
    )


# -------------------------------------------------------------------- admission


@dataclass(frozen=True)
class _Side:
    side: str  # "agent" or "user"
    connection: Connection
    model: str
    prices: PricePair | None
    cost: Decimal  # spent on it so far (a retried run's earlier hops)


def _budgeted_sides(run: Run) -> list[_Side]:
    """The run's sides on a connection with a budget, the connections read as they are now."""
    ids = {run.agent_connection_id, run.user_connection_id} - {None}
    if not ids:
        return []
    connections = {
        c.pk: c
        for c in Connection.objects.filter(pk__in=ids)
        if c.monthly_budget_usd is not None or c.person_monthly_budget_usd is not None
    }
    sides = []
    if run.agent_connection_id in connections:
        sides.append(
            _Side(
                side="agent",
                connection=connections[run.agent_connection_id],
                model=run.agent_model,
                prices=run.agent_prices,
                cost=run.cost_usd or Decimal(0),
            )
        )
    if run.user_connection_id in connections:
        sides.append(
            _Side(
                side="user",
                connection=connections[run.user_connection_id],
                model=run.user_model,
                prices=run.user_prices,
                cost=run.user_cost_usd or Decimal(0),
            )
        )
    return sides


def _then(run: Run) -> str:
    if run.kind == Run.Kind.AGENT:
        return "then start a new episode"
    if run.kind == Run.Kind.HUMAN:
        return "then ask the customer again"
    if run.evaluation_id is not None:
        return "then retry the failed runs"
    return "then run it again"


def _who(user) -> str:
    return getattr(user, "username", "") or "this person"


def _reservations(run: Run, sides: list[_Side]) -> tuple[dict[str, Decimal], dict[str, str]]:
    """What each budgeted side of ``run`` may cost (one run's estimated maximum), and
    where that comes from."""
    reserved: dict[str, Decimal] = {}
    basis: dict[str, str] = {}
    for side in sides:
        assert side.prices is not None
        reserved[side.side], basis[side.side] = side_reservation(
            domain=run.domain,
            side=side.side,
            connection=side.connection,
            model=side.model,
            prices=side.prices,
        )
    return reserved, basis


def _room_refusal(
    *,
    run: Run,
    connection: Connection,
    sides: list[_Side],
    reserved: dict[str, Decimal],
    basis: dict[str, str],
) -> str | None:
    """Why ``run`` does not fit in a budget of ``connection`` (locked by the caller), or
    ``None``."""
    mine = [side for side in sides if side.connection.pk == connection.pk]
    if not mine:
        return None
    need = sum((max(side.cost, reserved[side.side]) for side in mine), Decimal(0))
    for room in rooms(connection=connection, user=run.created_by, exclude_run=run.pk):
        if room.spend.committed + need > room.budget:
            why = " and ".join(basis[side.side] for side in mine)
            return (
                f"{room.sentence()}; this run may cost up to {dollars(need)} on it "
                f"({why}). Raise the budget or wait for next month; {_then(run)}."
            )
    return None


def _unpriced(run: Run, sides: list[_Side]) -> str | None:
    for side in sides:
        if side.prices is None:
            refusal = unpriced_refusal(connection=side.connection, model=side.model)
            return f"{refusal}; {_then(run)}."
    return None


def run_admit(*, run: Run) -> str | None:
    """Admit the claimed model ``run`` to its budgeted connections, holding one run's
    estimated maximum on each; returns ``None`` when admitted (or nothing is budgeted, or
    it was admitted before: a resumed run), else why not, with the numbers.

    Admissions to one connection are serialised by a row lock on it, so two runs can
    never both take the last room (see the module's docstring).
    """
    if run.agent_reserved_usd is not None or run.user_reserved_usd is not None:
        return None  # admitted before it was taken up again: it still holds its room
    refused = embedding_refusal(run=run)
    if refused is not None:
        return refused
    sides = _budgeted_sides(run)
    if not sides:
        return None
    refused = _unpriced(run, sides)
    if refused is not None:
        return refused
    reserved, basis = _reservations(run, sides)
    with transaction.atomic():
        ids = sorted({side.connection.pk for side in sides})
        locked = list(Connection.objects.select_for_update().filter(pk__in=ids).order_by("pk"))
        for connection in locked:
            refused = _room_refusal(
                run=run, connection=connection, sides=sides, reserved=reserved, basis=basis
            )
            if refused is not None:
                return refused
        Run.objects.filter(pk=run.pk).update(
            agent_reserved_usd=reserved.get("agent"), user_reserved_usd=reserved.get("user")
        )
    run.agent_reserved_usd, run.user_reserved_usd = reserved.get("agent"), reserved.get("user")
    return None


def embedding_refusal(*, run: Run) -> str | None:
    """Why ``run``'s embeddings may not be made on their budgeted connection — no price
    for the embeddings model there (their spend could not be counted), or the
    connection's (or its person's) budget reached this month — or ``None``. They hold no
    reservation (as the judge's): the month is checked before the run starts, and
    between hops by :func:`budget_reached`."""
    if not run.embedding_model or run.embedding_connection_id is None:
        return None
    connection = Connection.objects.get(pk=run.embedding_connection_id)
    if not connection.budgeted:
        return None
    if prices_of(connection=connection, model=run.embedding_model) is None:
        refusal = unpriced_refusal(connection=connection, model=run.embedding_model)
        return f"{refusal}; {_then(run)}."
    room = _full_room(
        connection=connection, user=run.created_by, exclude_run=run.pk, committed=True
    )
    if room is not None:
        return (
            f"{room.sentence()}, and this run's embeddings are made on it. Raise the "
            f"budget or wait for next month; {_then(run)}."
        )
    return None


@dataclass(frozen=True)
class EpisodeRefusal:
    """Why an outside agent's episode may not start; ``later``: it may once a run in
    flight on its connection ends (its connection is full now), else not before the
    budget or the prices change."""

    reason: str
    later: bool = False


def _in_flight_refusal(*, run: Run, connection: Connection) -> EpisodeRefusal | None:
    """Refused when ``connection`` (locked by the caller) already has as many runs in
    flight as it allows."""
    limit = connection.max_in_flight
    if limit is None:
        return None
    calling = (
        Run.objects.filter(IN_FLIGHT)
        .filter(Q(agent_connection_id=connection.pk) | Q(user_connection_id=connection.pk))
        .exclude(pk=run.pk)
        .count()
    )
    if calling < limit:
        return None
    return EpisodeRefusal(
        reason=(
            f"The connection “{connection.name}” allows {limit} run{'s' if limit != 1 else ''} "
            f"at a time and has {calling} in flight (an open episode is one): start the "
            "episode again when one ends."
        ),
        later=True,
    )


def episode_admit(*, run: Run) -> EpisodeRefusal | None:
    """Admit an outside agent's episode: ``run``, its agent run, built and not saved,
    whose customer is on a connection with a budget or a limit of runs in flight.

    As :func:`run_admit` admits a model run — its customer's model priced there, room in
    each budget for one run's estimated maximum — and within the connection's
    ``max_in_flight``, under the same row lock. Admitted, ``run`` is saved (in flight,
    holding its reservation) and ``None`` returned; refused, nothing is saved and the
    refusal says why, with the numbers.
    """
    sides = _budgeted_sides(run)
    refused = _unpriced(run, sides)
    if refused is not None:
        return EpisodeRefusal(reason=refused)
    reserved, basis = _reservations(run, sides)
    ids = sorted({run.agent_connection_id, run.user_connection_id} - {None})
    with transaction.atomic():
        locked = list(Connection.objects.select_for_update().filter(pk__in=ids).order_by("pk"))
        for connection in locked:
            full = _in_flight_refusal(run=run, connection=connection)
            if full is not None:
                return full
            reason = _room_refusal(
                run=run, connection=connection, sides=sides, reserved=reserved, basis=basis
            )
            if reason is not None:
                return EpisodeRefusal(reason=reason)
        run.agent_reserved_usd, run.user_reserved_usd = reserved.get("agent"), reserved.get("user")
        run.dispatched_at = run.dispatched_at or run.started_at or timezone.now()
        run.save()
    return None


def budget_reached(*, run: Run) -> str | None:
    """Why ``run`` must stop before its next hop — its budgeted connection's (or its
    person's) spend this month reached the budget — or ``None``. Reads the connections
    as they are now (a budget raised mid-run lets it go on). No query for a run that
    names no connection."""
    ids = {run.agent_connection_id, run.user_connection_id, run.embedding_connection_id} - {None}
    if not ids:
        return None
    for connection in Connection.objects.filter(pk__in=ids).order_by("pk"):
        room = _full_room(connection=connection, user=run.created_by)
        if room is not None:
            whose = (
                f"The connection “{connection.name}”"
                if room.person is None
                else f"{_who(room.person)}'s budget on the connection “{connection.name}”"
            )
            stopped = {
                Run.Kind.HUMAN: "the customer's turn waits, the conversation kept",
                Run.Kind.AGENT: "the episode ended here, its messages kept",
            }.get(run.kind, "the run stopped here, its messages kept")
            return (
                f"{whose} reached its {dollars(room.budget)} budget this month "
                f"({dollars(room.spend.spent)} spent): {stopped}. Raise the budget or "
                f"wait for next month; {_then(run)}."
            )
    return None


def judge_refusal(
    *,
    connection: Connection | None,
    model: str,
    prices: PricePair | None,
    user,
    pending: Decimal = Decimal(0),
) -> str | None:
    """Why τ²'s NL judge on ``connection``'s ``model`` may not be asked for ``user``'s next
    judgement (a re-grade judges one conversation after another, each a call or so, and
    holds no reservation, as a play session's customer) — no price for it on a budgeted
    connection, or the connection's (or the person's) budget reached this month — or
    ``None``: it may. ``pending``: what the judge spent already and is not stored yet (a
    re-grade stores its runs at the end). The router, on the person's own token, has no
    budget here."""
    if connection is None:
        return None
    connection = Connection.objects.get(pk=connection.pk)  # its budget as it is now
    if not connection.budgeted:
        return None
    if prices is None:
        return unpriced_refusal(connection=connection, model=model)
    room = _full_room(connection=connection, user=user, pending=pending)
    if room is not None:
        return (
            f"{room.sentence()}: its budget is reached, so the judge was not asked. Raise "
            "the budget or wait for next month, then re-grade again"
        )
    return None


def play_turn_refusal(*, run: Run) -> str | None:
    """Why the customer of play session ``run`` may not take a turn on its budgeted
    connection — no price for its model there (its spend could not be counted), or the
    connection's (or its person's) budget reached this month — or ``None``. A play
    session holds no reservation: each customer turn is one call, checked before it."""
    return (
        _unpriced(run, _budgeted_sides(run))
        or embedding_refusal(run=run)
        or budget_reached(run=run)
    )


def episode_turn_refusal(*, run_id: int) -> str | None:
    """Why the customer of the outside agent's episode recorded as run ``run_id`` may not
    take a turn — as :func:`play_turn_refusal` — or because its run no longer records
    (stopped from its page, or by the reaper: its spend could not be counted); ``None``:
    it may."""
    run = Run.objects.get(pk=run_id)
    if run.is_final:
        return (
            "This episode's run was stopped (from its page, or as lost), so what its "
            "customer spends on a budgeted connection could no longer be counted: the "
            f"episode ended here; {_then(run)}."
        )
    return play_turn_refusal(run=run)


# ------------------------------------------------------------------ for pages


@dataclass(frozen=True)
class PersonSpend:
    username: str
    spend: Spend


@dataclass(frozen=True)
class ConnectionSpend:
    """What a connection's spend panel shows (``{% connection_spend connection %}``).

    Amounts are ``Decimal``; a budget is ``None`` when there is none; ``people`` is
    filled for staff only (who spent what on it this month).
    """

    connection: Connection
    month: datetime
    spend: Spend
    budget: Decimal | None
    person_budget: Decimal | None
    mine: Spend | None
    people: list[PersonSpend]

    @property
    def left(self) -> Decimal | None:
        if self.budget is None:
            return None
        return max(self.budget - self.spend.spent, Decimal(0))

    @property
    def my_left(self) -> Decimal | None:
        if self.person_budget is None or self.mine is None:
            return None
        return max(self.person_budget - self.mine.spent, Decimal(0))


def connection_spend_view(
    *, connection: Connection, viewer, now: datetime | None = None
) -> ConnectionSpend:
    """``connection``'s month for ``viewer``: its spend, budget and what is left; the
    viewer's own spend and personal budget; each person's spend when ``viewer`` is staff."""
    signed_in = viewer is not None and getattr(viewer, "is_authenticated", False)
    people: list[PersonSpend] = []
    if signed_in and viewer.is_staff:
        by_person = _spend_by_person(connection=connection, now=now)
        names = dict(
            get_user_model().objects.filter(pk__in=by_person).values_list("pk", "username")
        )
        people = sorted(
            (PersonSpend(username=names.get(pk, "?"), spend=s) for pk, s in by_person.items()),
            key=lambda p: (-p.spend.spent, p.username),
        )
    return ConnectionSpend(
        connection=connection,
        month=month_window(now)[0],
        spend=connection_spend(connection=connection, now=now),
        budget=connection.monthly_budget_usd,
        person_budget=connection.person_monthly_budget_usd,
        mine=connection_spend(connection=connection, user=viewer, now=now) if signed_in else None,
        people=people,
    )
