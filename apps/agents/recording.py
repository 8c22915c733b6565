"""An outside agent's episodes in the team's history: runs of kind "agent via API".

A client that plays with a studio API key (``apps.agents.credentials``) gets an
:class:`AgentRunRecorder` as its episode hooks (``tau2_env.gate.access.EpisodeHooks``). Each
episode it starts becomes a run, created by the key's owner: its messages are stored
and published hop by hop through the runs' one publisher (``events_publish``), so
``/runs/<id>/`` shows it live; at ``done`` τ²'s verdict is stored by the runs' own
``run_finish``. An episode abandoned (closed idle, disconnected, replaced) ends its run
STOPPED with the reason; one whose server died is stopped by the reaper once its lease
(renewed at each hop) ran out. Stop on the run page stops the recording at the next
hop (the agent's episode goes on, unrecorded).

An episode the key plays under a training session's name (``X-Tau2-Training-Session``,
``?training_session=``, ``reset(training_session=…)``) is asked of the registered
training hooks (:mod:`apps.agents.hooks`) before it starts — they may warn or refuse —
and its run is told to them once recorded.

The hooks are called on the episode's own thread: they copy what they need and hand the
database work to a queue served by a small thread pool, one run's writes in order, so
an episode never waits for the database.

**Budgets and limits** (the recorder is also the credentials' ``EpisodeBudget``): an
episode whose customer (and so its NL judge) is on a connection with a monthly budget
or a limit of runs in flight is admitted before its customer's first call, as a model
run is (``apps.runs.budgets.episode_admit``): its run is created then, in flight and
holding its reservation, or the reset is refused with the reason. Before each customer
turn it waits for its writes (so its own spend is counted) and asks the budgets again
(``episode_turn_refusal``): a spent month ends the episode, its run failed with
``Run.Failure.BUDGET``. These episodes wait for the database; the others never do. A
browser session (the playground, unrecorded) may not put its customer on such a
connection (:class:`UnrecordedBudget`).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import uuid
import weakref
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone

from apps.agents.hooks import EpisodeRefused, TrainingEpisode, training_hooks
from apps.connections.llm_routes import parse_value
from apps.connections.models import Connection
from apps.runs import budgets
from apps.runs import hooks as run_hooks
from apps.runs.events import LostRun, events_publish, judge_fields
from apps.runs.lifecycle import agent_run_requeue, run_finish
from apps.runs.models import Run
from apps.runs.services import customer_prices, run_provenance
from apps.runs.spec import RunSpec, Side, spec_columns
from apps.tasks.models import Task
from tau2_env import config
from tau2_env.engine.episodes import DEFAULT_MAX_STEPS, Episode, TerminationReason
from tau2_env.gate import access
from tau2_env.llm import gateway

__all__ = [
    "AgentRunRecorder",
    "UnrecordedBudget",
    "agent_lease",
    "agent_run_end",
    "agent_run_start",
    "recordings_drain",
]

logger = logging.getLogger(__name__)

_pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="agent-runs")
FACES = {"openenv": "OpenEnv", "mcp": "MCP"}
# How long a budgeted episode's turn waits for its earlier writes (its spend so far)
# before it is refused as uncountable: the database is then in trouble.
WRITES_WAIT_SECONDS = 30.0


def agent_lease() -> timedelta:
    """How long an agent run stays RUNNING without a hop before the reaper stops it: an
    idle session is closed (and its run ended) well before."""
    return timedelta(seconds=config.session_idle_seconds() + 2 * settings.TAU2_RUN_LEASE_SECONDS)


@dataclass(frozen=True)
class Opening:
    """What a run is made from, copied off the episode on its own thread."""

    episode_id: str
    domain: str
    task_id: str
    user_model: str
    user_provider: str
    seed: int | None
    user_origin: str  # "@connection/model" when the customer runs on a connection
    face: str
    messages: list[dict[str, Any]]
    training: TrainingEpisode | None = None
    run: Run | None = None  # admitted to a budget: its run, already stored
    # A knowledge domain's retrieval configuration the episode plays ("": none).
    retrieval_config: str = ""


def _opening(
    episode: Episode, *, face: str, training: TrainingEpisode | None, messages=None
) -> Opening:
    return Opening(
        episode_id=episode.id,
        domain=episode.domain,
        task_id=str(episode.task.id),
        user_model=episode.user_llm.model,
        user_provider=episode.user_llm.provider,
        user_origin=episode.user_llm.origin,
        seed=episode.seed,
        face=face,
        messages=episode.messages_json() if messages is None else messages,
        training=training,
        retrieval_config=episode.retrieval_config or "",
    )


@dataclass(frozen=True)
class Ending:
    """An ended episode's verdict, copied off the episode."""

    status: str
    termination_reason: str
    reward_info: dict[str, Any] | None
    error: str
    failure: str
    judge_usage: gateway.Usage = dataclasses.field(default_factory=gateway.Usage)


def _ending(episode: Episode, *, over_budget: str | None = None) -> Ending:
    reason = episode.termination_reason
    if episode.reward_info is not None:
        return Ending(
            status=Run.Status.COMPLETED,
            termination_reason=reason.value if reason else "",
            reward_info=episode.reward_info.model_dump(mode="json"),
            error="",
            failure="",
            judge_usage=episode.judge_usage,
        )
    if over_budget is not None and episode.error == over_budget:  # ended by its budget
        return Ending(
            status=Run.Status.FAILED,
            termination_reason="stopped",
            reward_info=None,
            error=over_budget,
            failure=Run.Failure.BUDGET,
        )
    if reason == TerminationReason.AGENT_ERROR:  # abandoned: closed idle, disconnected…
        return Ending(
            status=Run.Status.STOPPED,
            termination_reason="stopped",
            reward_info=None,
            error=episode.error or "The agent's session ended.",
            failure="",
        )
    return Ending(  # the customer's model or the scoring failed
        status=Run.Status.FAILED,
        termination_reason=reason.value if reason else "",
        reward_info=None,
        error=episode.error or "The conversation ended without a score.",
        failure=Run.Failure.CONVERSATION,
        judge_usage=episode.judge_usage,  # a scoring that failed may have called it
    )


def agent_run_build(*, user_id: int, key_id: str, agent: str, opening: Opening) -> Run | None:
    """A RUNNING run of kind agent for ``opening``, by the key's owner, not saved;
    ``None`` when the task is not in the catalogue."""
    task = Task.objects.filter(domain_id=opening.domain, task_id=opening.task_id).first()
    if task is None:
        logger.warning(
            "Agent episode on %s/%s not recorded: no such task in the catalogue",
            opening.domain,
            opening.task_id,
        )
        return None
    now = timezone.now()
    spec = RunSpec(
        agent=Side(agent, llm=False),
        customer=Side(opening.user_model, _connection_of(opening.user_origin)),
        max_steps=DEFAULT_MAX_STEPS,
        seed=opening.seed,
        retrieval_config=opening.retrieval_config,  # the episode's (reset's, or the default)
    ).for_domain(opening.domain)
    return Run(
        **spec_columns(spec, seed_field="given_seed"),
        **customer_prices(spec.customer),
        kind=Run.Kind.AGENT,
        status=Run.Status.RUNNING,
        task=task,
        domain=opening.domain,
        created_by_id=user_id,
        user_provider=opening.user_provider[:32],
        seed=opening.seed,
        started_at=now,
        # Calling its customer's connection from now on: a run in flight while it is open.
        dispatched_at=now,
        worker=f"agent:{opening.face}:{opening.episode_id}",
        lease_expires_at=now + agent_lease(),
        attempts=1,
        provenance=run_provenance(
            task=task,
            spec=spec,
            agent={
                "implementation": f"an outside agent over {FACES.get(opening.face, opening.face)}",
                "model": agent,
                "face": opening.face,
                "api_key": key_id,
            },
        ),
    )


def _connection_of(origin: str) -> Connection | None:
    """The connection a customer route's ``origin`` (``@connection/model``) names."""
    slug, _ = parse_value(origin) if origin else (None, "")
    return Connection.objects.filter(slug=slug).first() if slug else None


def agent_run_start(
    *, user_id: int, key_id: str, agent: str, opening: Opening, run: Run | None = None
) -> Run | None:
    """The run of ``opening`` (``run``, stored at its admission to a budget, else a new
    one: :func:`agent_run_build`), with its opening messages stored and published;
    ``None`` when the task is not in the catalogue."""
    if run is None:
        run = agent_run_build(user_id=user_id, key_id=key_id, agent=agent, opening=opening)
        if run is None:
            return None
        run.save()
    events_publish(run=run, messages=opening.messages, worker=run.worker)
    return run


def agent_run_hop(*, run: Run, messages: list[dict[str, Any]]) -> bool:
    """Store and publish an agent run's new ``messages`` and renew its lease; returns
    False once the run no longer records (stopped from its page, or ended)."""
    try:
        events_publish(run=run, messages=messages, worker=run.worker)
    except LostRun:
        return False
    renewed = Run.objects.filter(
        pk=run.pk, worker=run.worker, status=Run.Status.RUNNING, stop_requested=False
    ).update(lease_expires_at=timezone.now() + agent_lease())
    if not renewed:  # Stop was pressed: the recording ends here
        run_finish(
            run=run, status=Run.Status.STOPPED, worker=run.worker, termination_reason="stopped"
        )
        return False
    return True


def agent_run_end(*, run: Run, ending: Ending) -> bool:
    """End an agent run with its episode's verdict (once); τ²'s ``reward_info`` and the
    NL judge's calls (spent where the customer runs) as a model run stores them."""
    return run_finish(
        run=run,
        status=ending.status,
        worker=run.worker,
        error=ending.error,
        termination_reason=ending.termination_reason,
        reward_info=ending.reward_info,
        failure=ending.failure,
        fields=judge_fields(run_id=run.pk, usage=ending.judge_usage) or None,
    )


class _Serial:
    """Jobs run one after another, in order, on the shared pool."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: deque[tuple[Callable[..., Any], tuple[Any, ...]]] = deque()
        self._draining = False
        self.idle = threading.Event()
        self.idle.set()
        _serials.add(self)

    def submit(self, func: Callable[..., Any], *args: Any) -> None:
        with self._lock:
            self._jobs.append((func, args))
            self.idle.clear()
            if self._draining:
                return
            self._draining = True
        _pool.submit(self._drain)

    def _drain(self) -> None:
        close_old_connections()
        while True:
            with self._lock:
                if not self._jobs:
                    self._draining = False
                    self.idle.set()
                    return
                func, args = self._jobs.popleft()
            try:
                func(*args)
            except Exception:
                logger.exception("Recording an agent episode failed")


# Every recorder's queue, to wait for at shutdown.
_serials: weakref.WeakSet[_Serial] = weakref.WeakSet()


def recordings_drain(*, timeout: float) -> bool:
    """Wait (at most ``timeout`` seconds) until every recorder's queued writes are done;
    whether they are. Called as the process stops (``tau2site.asgi``'s lifespan), so that
    the episodes its closing sessions ended are stored as ended: after the interpreter
    began to exit, a job could no longer publish (asgiref's executor refuses new work)
    and its run stayed RUNNING until the reaper stopped it as lost."""
    deadline = time.monotonic() + timeout
    return all(serial.idle.wait(max(0.0, deadline - time.monotonic())) for serial in list(_serials))


def _guarded_connection(episode: Episode) -> Connection | None:
    """The connection ``episode``'s customer runs on when it counts what runs on it (a
    budget, or a limit of runs in flight), else ``None``. A customer on the router (no
    connection) asks the database nothing."""
    if not episode.user_llm.origin:
        return None
    close_old_connections()
    connection = _connection_of(episode.user_llm.origin)
    if connection is None or not (connection.budgeted or connection.max_in_flight):
        return None
    return connection


class UnrecordedBudget:
    """The ``EpisodeBudget`` of a client whose episodes are not recorded (a signed-in
    person's playground on ``/ws``): its customer may not run on a connection that
    counts its runs — what it spent there could not be counted."""

    def episode_admit(self, episode: Episode, *, face: str) -> None:
        connection = _guarded_connection(episode)
        if connection is not None:
            raise access.EpisodeRefused(
                f"The connection “{connection.name}” counts what runs on it (a budget, or a "
                "limit of runs at a time), and the playground's episodes are not recorded: "
                "play with a studio API key (create one on /accounts/keys/), whose episodes "
                "are recorded and counted."
            )

    def turn_refusal(self, episode: Episode) -> str | None:
        return None


class AgentRunRecorder:
    """Episode hooks recording each episode of one keyed client as an agent run."""

    def __init__(
        self, *, user_id: int, key_id: str, agent: str, training_session: str | None = None
    ) -> None:
        self.user_id, self.key_id, self.agent = user_id, key_id, agent
        self.training_session = training_session
        self._serial = _Serial()
        self._runs: dict[str, Run | None] = {}  # episode id → its run (touched by jobs only)
        # The training episode admit() let start, for the on_start that follows it (both
        # on the episode's thread, one start at a time).
        self._admitted: TrainingEpisode | None = None
        # Episodes admitted to a budget or a limit (episode id → its run), and why one
        # was ended by its budget: touched on the episodes' threads only.
        self._budgeted: dict[str, Run] = {}
        self._over_budget: dict[str, str] = {}
        # The evaluation's run claim() took for the episode about to start (on the
        # episode's thread, one start at a time), and the claimed runs by episode id.
        self._claimed: Run | None = None
        self._claims: dict[str, Run] = {}

    def __repr__(self) -> str:
        return f"<AgentRunRecorder user_id={self.user_id} key_id={self.key_id}>"

    def admit(self, domain: str, split: str, task_id: str) -> str | None:
        """``Credentials.admit`` of a key playing under a training session's name: the
        training hooks' warning line for the episode of ``task_id`` drawn from
        ``domain``/``split``, or
        ``None``; raises :class:`~tau2_env.gate.access.CredentialsRefused` when they refuse
        it. Runs on the episode's thread (the guard reads the database)."""
        self._admitted = None
        hooks = training_hooks()
        if hooks is None or not self.training_session:
            return None
        episode = TrainingEpisode(
            user_id=self.user_id,
            key_id=self.key_id,
            session=self.training_session,
            domain=domain,
            split=split,
            task_id=task_id,
        )
        close_old_connections()
        try:
            warning = hooks.admit(episode=episode)
        except EpisodeRefused as exc:
            raise access.CredentialsRefused(str(exc)) from None
        self._admitted = dataclasses.replace(episode, warning=warning or "")
        return warning

    def claim(self, evaluation: str, face: str) -> access.EpisodePlan:
        """``Credentials.claim``: the next episode of ``evaluation`` (an outside agent's,
        this key owner's), its run taken for this client under the agents' lease; the
        evaluation's refusal as :class:`~tau2_env.gate.access.EpisodeRefused`. On the
        episode's thread (it reads and writes the database)."""
        claim = run_hooks.episode_claim()
        if claim is None:
            raise access.EpisodeRefused("This server has no evaluations to pull.", status=404)
        # This key's episode before (replaced by this reset) is stored as ended first: a
        # claimed episode left unfinished goes back to its queue.
        self._serial.idle.wait(WRITES_WAIT_SECONDS)
        close_old_connections()
        run, plan = claim(
            user_id=self.user_id,
            evaluation=evaluation,
            face=face,
            worker=f"agent:{face}:{uuid.uuid4().hex}",
            lease=agent_lease(),
        )
        self._claimed = run
        return plan

    # ------------------------------------------------ access.EpisodeBudget

    def episode_admit(self, episode: Episode, *, face: str) -> None:
        """Admit ``episode`` to its customer's connection's budget and limit of runs in
        flight, when it has either (its run stored now); raises
        :class:`~tau2_env.gate.access.EpisodeRefused` with the reason. On the episode's thread.
        An evaluation's episode was admitted as it was claimed."""
        claimed, self._claimed = self._claimed, None
        if claimed is not None and (claimed.domain, claimed.task.task_id, claimed.seed) == (
            episode.domain,
            str(episode.task.id),
            episode.seed,
        ):
            self._claims[episode.id] = claimed
            if claimed.user_reserved_usd is not None:  # admitted to a monthly budget
                self._budgeted[episode.id] = claimed  # its turns ask the budget
            return
        connection = _guarded_connection(episode)
        if connection is None:
            return
        # This key's episode before (replaced by this reset) ends first: its run is no
        # longer in flight, nor holding its reservation.
        self._serial.idle.wait(WRITES_WAIT_SECONDS)
        run = agent_run_build(
            user_id=self.user_id,
            key_id=self.key_id,
            agent=self.agent,
            opening=_opening(episode, face=face, training=None, messages=[]),
        )
        if run is None:
            raise access.EpisodeRefused(
                f"Task {episode.task.id} of {episode.domain} is not in this studio's "
                f"catalogue, so what its customer spends on “{connection.name}” could not "
                "be counted: pick another task."
            )
        refused = budgets.episode_admit(run=run)
        if refused is not None:
            raise access.EpisodeRefused(refused.reason, status=429 if refused.later else 403)
        self._budgeted[episode.id] = run

    def turn_refusal(self, episode: Episode) -> str | None:
        """Why the admitted ``episode``'s customer may not take a turn now (its
        connection's month spent, or its run stopped), or ``None``. Waits for the
        episode's writes first: its own spend is counted. On the episode's thread."""
        run = self._budgeted.get(episode.id)
        if run is None:
            return None
        if not self._serial.idle.wait(WRITES_WAIT_SECONDS):
            refusal = (
                "What this episode spent could not be stored in time to be counted against "
                "its connection's budget: the episode ended here; start a new one."
            )
        else:
            close_old_connections()
            refusal = budgets.episode_turn_refusal(run_id=run.pk)
        if refusal is not None:
            self._over_budget[episode.id] = refusal
        return refusal

    # ------------------------------------------------ access.EpisodeHooks

    def on_start(self, episode: Episode, *, face: str) -> None:
        opening = dataclasses.replace(
            _opening(episode, face=face, training=self._admitted),
            run=self._claims.get(episode.id) or self._budgeted.get(episode.id),
        )
        self._admitted = None
        self._serial.submit(self._start, opening)

    def on_hop(self, episode: Episode, messages: list[dict[str, Any]]) -> None:
        self._serial.submit(self._hop, episode.id, messages)

    def on_done(self, episode: Episode) -> None:
        self._budgeted.pop(episode.id, None)
        claimed = self._claims.pop(episode.id, None) is not None
        over = self._over_budget.pop(episode.id, None)
        self._serial.submit(self._end, episode.id, _ending(episode, over_budget=over), claimed)
        if claimed:
            # An evaluation's episode is stored as ended before its client hears the end:
            # its next claim sees it played (or, left unfinished, queued again).
            self._serial.idle.wait(WRITES_WAIT_SECONDS)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until everything heard so far is stored; False on timeout."""
        return self._serial.idle.wait(timeout)

    # Jobs, in order on the pool.
    def _start(self, opening: Opening) -> None:
        run = agent_run_start(
            user_id=self.user_id,
            key_id=self.key_id,
            agent=self.agent,
            opening=opening,
            run=opening.run,
        )
        self._runs[opening.episode_id] = run
        hooks = training_hooks()
        if run is not None and opening.training is not None and hooks is not None:
            hooks.recorded(episode=opening.training, run=run)

    def _hop(self, episode_id: str, messages: list[dict[str, Any]]) -> None:
        run = self._runs.get(episode_id)
        if run is not None and not agent_run_hop(run=run, messages=messages):
            self._runs[episode_id] = None

    def _end(self, episode_id: str, ending: Ending, claimed: bool = False) -> None:
        run = self._runs.pop(episode_id, None)
        if run is None:
            return
        left = claimed and ending.status == Run.Status.STOPPED and ending.failure == ""
        # An evaluation's episode its client left: another client plays it.
        if left and agent_run_requeue(run=run, worker=run.worker, reason=ending.error):
            return
        agent_run_end(run=run, ending=ending)
