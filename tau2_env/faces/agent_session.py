"""An outside agent's episode, as the OpenEnv and MCP faces drive it.

:class:`AgentSession` holds at most one :class:`~tau2_env.engine.episodes.Episode` and turns the
agent's tool calls into the engine's actions — the domain's tools, ``respond_to_user``
and ``done`` — with the same rules on both faces: what a bad input answers, what a call
after the end answers, what the final verdict carries. It tells the client's
:class:`~tau2_env.gate.access.EpisodeHooks` about each start, hop and end.

Blocking (LLM calls, tool calls, scoring): async callers run its methods in
``tau2_env.faces.openenv_env.episode_executor()``, except the acts :meth:`AgentSession.
acts_at_once` names (in memory, no I/O, ~0.1 ms). One caller at a time.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from tau2_env import config
from tau2_env.engine import catalog, episodes
from tau2_env.gate import access, arguments
from tau2_env.llm import gateway

__all__ = [
    "DONE",
    "ENDED_MESSAGE",
    "NOT_STARTED_MESSAGE",
    "RESPOND_TO_USER",
    "AgentSession",
    "BadRequest",
    "Outcome",
    "agent_tools",
    "tool_arguments",
    "tool_specs",
]

ENDED_MESSAGE = "The conversation has ended."
NOT_STARTED_MESSAGE = "No conversation yet: call reset() first."
RESPOND_TO_USER = "respond_to_user"
DONE = "done"


def _customer_route(credentials: access.Credentials, user_model: str | None) -> gateway.Route:
    """The customer's route: the one the client chose (if its credentials let it choose),
    else the server's default for these credentials."""
    if user_model:
        if credentials.customer is None:
            raise BadRequest(
                "Choosing the customer model (user_model) needs a studio API key "
                "(Authorization: Bearer <key>); without one the customer is the server's.",
                status=403,
            )
        try:
            return credentials.customer(user_model)
        except gateway.MissingCredentialsError as exc:
            raise BadRequest(str(exc), status=401) from None
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
    try:
        return gateway.resolve_route(hf_token=credentials.hf_token)
    except gateway.MissingCredentialsError as exc:
        raise BadRequest(str(exc), status=401) from None


def _admitted(
    credentials: access.Credentials, *, domain: str, split: str, task_id: str
) -> str | None:
    """What the credentials' ``admit`` says of an episode of ``task_id`` drawn from
    ``(domain, split)``: a warning line, or ``None``; a refusal as :class:`BadRequest`
    (403)."""
    if credentials.admit is None:
        return None
    try:
        return credentials.admit(domain, split, task_id)
    except access.CredentialsRefused as exc:
        raise BadRequest(str(exc), status=403) from None


def _budget_admit(
    budget: access.EpisodeBudget | None, episode: episodes.Episode, *, face: str
) -> None:
    """What the credentials' budget says of ``episode`` before it starts: nothing, or a
    refusal as :class:`BadRequest` (its status)."""
    if budget is None:
        return
    try:
        budget.episode_admit(episode, face=face)
    except access.EpisodeRefused as exc:
        raise BadRequest(str(exc), status=exc.status) from None


class BadRequest(ValueError):
    """A client's input cannot be used; ``str()`` says why, ``status`` is the HTTP status
    it deserves (400, or 401 for missing or refused credentials; an evaluation's refusal
    its own), ``retry_after`` the seconds to wait before asking again, ``data`` what a
    program reads of it."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        retry_after: int | None = None,
        data: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after
        self.data = data or {}


def _claimed(credentials: access.Credentials, evaluation: str, *, face: str) -> access.EpisodePlan:
    """The next episode of ``evaluation`` the credentials' ``claim`` hands this client; a
    refusal as :class:`BadRequest` with its status, wait and data."""
    if credentials.claim is None:
        raise BadRequest(
            "Playing an evaluation's episodes needs a studio API key that may start "
            "(Authorization: Bearer <key>).",
            status=403,
        )
    try:
        return credentials.claim(evaluation, face)
    except access.EpisodeRefused as exc:
        # Over OpenEnv's /ws an error frame carries only its message: the status ends it,
        # for a program to read (Tau2Env.next_episode does).
        wait = f", retry after {exc.retry_after} s" if exc.retry_after is not None else ""
        raise BadRequest(
            f"{exc} (status {exc.status}{wait})",
            status=exc.status,
            retry_after=exc.retry_after,
            data=exc.data,
        ) from None


@dataclass(frozen=True)
class Outcome:
    """What one tool call answered: its ``text``, whether it is an error, whether the
    episode is over (then :meth:`AgentSession.verdict` has the score)."""

    text: str
    is_error: bool = False
    done: bool = False


def agent_tools() -> list[dict[str, Any]]:
    """The two tools every domain adds for the agent (``name``, ``description``,
    ``input_schema``)."""
    return [
        {
            "name": RESPOND_TO_USER,
            "description": (
                "Say something to the customer and get their reply. The conversation may "
                "end when the customer is done."
            ),
            "input_schema": {
                "type": "object",
                "properties": {
                    "message": {"type": "string", "description": "What to say to the customer."}
                },
                "required": ["message"],
            },
        },
        {
            "name": DONE,
            "description": "End the conversation from the agent's side; it is then scored.",
            "input_schema": {"type": "object", "properties": {}},
        },
    ]


@functools.cache
def _tool_specs(domain: str, retrieval_config: str) -> tuple[dict[str, Any], ...]:
    return tuple(episodes.tool_specs(domain, retrieval_config) + agent_tools())


def tool_specs(domain: str, retrieval_config: str = "") -> list[dict[str, Any]]:
    """The agent's tools in ``domain`` (played with ``retrieval_config``, a knowledge
    domain's; "": its default): τ²'s own (names, descriptions, JSON schemas) and
    ``respond_to_user`` and ``done``. Raises ``KeyError`` for an unknown domain,
    ``ValueError`` for a retrieval configuration it cannot run."""
    return [dict(spec) for spec in _tool_specs(domain, retrieval_config)]


def tool_arguments(value: Any) -> dict[str, Any]:
    """A tool call's arguments as a dict: given as an object, as a JSON string of one
    (as the original OpenEnv Space's server accepted them), or absent; within the limits of
    :mod:`tau2_env.gate.arguments`. Raises :class:`BadRequest` with the reason."""
    if value is None or value == "":
        return {}
    try:
        if isinstance(value, str):
            value = arguments.parse_arguments(value)
        problem = arguments.arguments_problem(value)
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
    if problem:
        raise BadRequest(problem)
    return value


def _optional(name: str, value: Any, kinds: tuple[type, ...], what: str) -> Any:
    if value is None or (isinstance(value, kinds) and not isinstance(value, bool)):
        return value
    raise BadRequest(f"{name} must be {what}, got {type(value).__name__}")


class AgentSession:
    """At most one open episode of one client, replaced by each :meth:`start`."""

    def __init__(self, *, face: str) -> None:
        self.face = face
        self.episode: episodes.Episode | None = None
        self.split: str | None = None
        self.steps = 0
        self._hooks: access.EpisodeHooks | None = None
        self._budget: access.EpisodeBudget | None = None
        self._reported = 0
        self._ended_reported = False

    # ----------------------------------------------------------------- start

    def start(
        self,
        *,
        credentials: access.Credentials,
        domain: Any = None,
        split: Any = None,
        task_id: Any = None,
        seed: Any = None,
        user_model: Any = None,
        evaluation: Any = None,
        retrieval_config: Any = None,
    ) -> dict[str, Any]:
        """End any open episode (unscored) and start one; returns its opening:
        ``user_message``, ``policy``, ``task_id``, ``domain``, ``split``,
        ``episode_id``, ``user_model`` (and ``training_warning`` when the credentials'
        ``admit`` warns). ``user_model`` chooses the customer (a picker id,
        for clients whose credentials allow it: a studio key); ``retrieval_config`` a
        knowledge domain's (``tau2 run --retrieval-config``; None: its default). Raises
        :class:`BadRequest` for an unknown domain, split or task, a mistyped value, a
        customer model the client may not use, no credentials for the customer, or an
        episode the credentials' ``budget`` does not admit (before the customer speaks).

        ``evaluation``: play the next episode of that evaluation of an outside agent (its
        task, seed, customer and limits are the evaluation's: ``task_id``, ``seed`` and
        ``user_model`` may not be given with it); the opening adds ``evaluation``,
        ``trial`` and ``run_id``. Refused with the evaluation's answer (404 unknown,
        403 not the client's, 409 paused, 410 nothing left, 429 retry later)."""
        self.close("Replaced by a new reset().")
        self.steps = 0
        evaluation = access.evaluation_name(evaluation) if evaluation is not None else None
        if evaluation is not None:
            chosen = {
                "task_id": task_id,
                "seed": seed,
                "user_model": user_model,
                "retrieval_config": retrieval_config,
            }
            given = [name for name, value in chosen.items() if value is not None]
            if given:
                raise BadRequest(
                    f"{', '.join(given)} cannot be chosen with evaluation: an evaluation's "
                    "episodes are its own tasks, seeds and customer."
                )
            return self._start_claimed(credentials, evaluation)
        domain = _optional("domain", domain, (str,), "a string") or config.default_domain()
        asked_split = _optional("split", split, (str,), "a string")
        split = asked_split or config.default_split()
        task_id = _optional("task_id", task_id, (str, int), "a string or an integer")
        seed = _optional("seed", seed, (int,), "an integer")
        user_model = _optional("user_model", user_model, (str,), "a string")
        retrieval_config = _optional("retrieval_config", retrieval_config, (str,), "a string")
        if domain not in catalog.domain_names():
            raise BadRequest(
                f"Unknown domain {domain!r}; known: {', '.join(catalog.domain_names())}"
            )
        if asked_split is None and split not in catalog.get_domain(domain).splits:
            # A domain without the server's default split (banking_knowledge has only
            # "base"): its whole set, rather than refusing a reset that named no split.
            split = catalog.BASE_SPLIT
        route = _customer_route(credentials, user_model)
        try:
            if task_id is None or split not in catalog.get_domain(domain).splits:
                task_id = episodes.pick_task_id(domain=domain, split=split, seed=seed)
            task = catalog.get_tau2_task(domain, str(task_id))
        except KeyError as exc:
            raise BadRequest(exc.args[0] if exc.args else str(exc)) from None
        warning = _admitted(credentials, domain=domain, split=split, task_id=str(task.id))

        try:
            episode = episodes.Episode(
                domain=domain, task=task, user_llm=route, retrieval_config=retrieval_config or None
            )
        except ValueError as exc:  # a retrieval configuration it cannot run
            raise BadRequest(str(exc)) from None
        _budget_admit(credentials.budget, episode, face=self.face)
        started = self._open(episode, credentials, split=split)
        if warning:
            started["training_warning"] = warning
        return started

    def _start_claimed(self, credentials: access.Credentials, evaluation: str) -> dict[str, Any]:
        """Start the episode ``evaluation`` hands this client (see :meth:`start`)."""
        plan = _claimed(credentials, evaluation, face=self.face)
        args = plan.user_llm_args
        try:
            episode = episodes.Episode(
                domain=plan.domain,
                task=catalog.get_tau2_task(plan.domain, plan.task_id),
                user_llm=plan.user_llm,
                user_llm_args=dict(args) if args is not None else None,
                judge_llm=plan.judge_llm,
                seed=plan.seed,
                max_steps=plan.max_steps or episodes.DEFAULT_MAX_STEPS,
                max_errors=plan.max_errors or episodes.DEFAULT_MAX_ERRORS,
                retrieval_config=plan.retrieval_config or None,
                timeout=plan.timeout,
            )
        except KeyError as exc:  # the catalogue changed under the evaluation
            raise BadRequest(exc.args[0] if exc.args else str(exc), status=409) from None
        _budget_admit(credentials.budget, episode, face=self.face)
        return {**self._open(episode, credentials, split=None), **plan.labels}

    def _open(
        self, episode: episodes.Episode, credentials: access.Credentials, *, split: str | None
    ) -> dict[str, Any]:
        """Make ``episode`` this session's, let its customer open, tell the hooks; its
        opening."""
        self.episode, self.split, self._hooks = episode, split, credentials.hooks
        self._budget = credentials.budget
        self._reported, self._ended_reported = 0, False
        opening = episode.start()
        self._reported = len(episode.messages)
        access.call_hook(self._hooks, "on_start", episode, face=self.face)
        self._report_end()
        return {
            "user_message": opening.content if opening is not None else None,
            "policy": episode.policy,
            "task_id": episode.task.id,
            "domain": episode.domain,
            "split": split,
            "episode_id": episode.id,
            "user_model": episode.user_llm.describe(),
            **({"retrieval_config": episode.retrieval_config} if episode.retrieval_config else {}),
        }

    # ------------------------------------------------------------------- act

    def acts_at_once(self, name: str) -> bool:
        """Whether :meth:`act` of ``name`` neither waits nor blocks, so an event loop may
        run it itself instead of handing it to a thread: a domain tool (τ²'s in-memory
        database; no LLM) of an open episode nobody records (no hook does I/O) that this
        call cannot end (two hops and one error from τ²'s step and error limits, and no
        wall-clock timeout: an end is scored, which takes seconds)."""
        episode = self.episode
        return (
            episode is not None
            and self._hooks is None
            and name not in (RESPOND_TO_USER, DONE)
            and not episode.done
            and episode.step_count + 2 < episode.max_steps
            and episode.num_errors + 1 < episode.max_errors
            and episode.timeout is None  # τ²'s wall clock may end it at any hop
        )

    def act(self, name: str, arguments: Any) -> Outcome:
        """Call the agent's tool ``name`` (a domain tool, ``respond_to_user`` or ``done``)
        in the open episode. Bad arguments and unknown tools are error outcomes and the
        episode goes on (unless τ²'s error limit ends it). Needs a started episode.
        Before the customer's turn the credentials' budget may end the episode
        (unscored; the outcome's text is its reason)."""
        episode = self.episode
        if episode is None:
            raise RuntimeError("No episode: start() first")
        if episode.done:
            return Outcome(ENDED_MESSAGE, done=True)
        try:
            arguments = tool_arguments(arguments)
        except BadRequest as exc:
            return Outcome(f"Error: {exc}", is_error=True)
        self.steps += 1
        try:
            return self._act(episode, name, arguments)
        finally:
            self._report_hop()
            self._report_end()

    def _act(self, episode: episodes.Episode, name: str, arguments: dict[str, Any]) -> Outcome:
        if name == RESPOND_TO_USER:
            message = arguments.get("message")
            if not isinstance(message, str) or not message.strip() or set(arguments) - {"message"}:
                return Outcome(
                    "Error: respond_to_user takes one argument, message: a non-empty string.",
                    is_error=True,
                )
            refusal = self._budget.turn_refusal(episode) if self._budget is not None else None
            if refusal is not None:
                episode.abandon(refusal)
                return self._ended(refusal)
            reply = episode.say(message)
            if episode.done:
                text = reply.content if reply is not None else (episode.error or ENDED_MESSAGE)
                return self._ended(text)
            return Outcome((reply.content or "") if reply is not None else "")
        if name == DONE:
            episode.finish()
            return self._ended(episode.error or ENDED_MESSAGE)
        result = episode.call_tool(name, arguments)
        if episode.done:  # τ²'s step or error limit
            return self._ended(result.content or "")
        return Outcome(result.content or "", is_error=bool(result.error))

    def _ended(self, text: str | None) -> Outcome:
        assert self.episode is not None
        return Outcome(text or "", is_error=self.episode.error is not None, done=True)

    # --------------------------------------------------------------- verdict

    def verdict(self) -> dict[str, Any]:
        """The ended episode's verdict: ``reward``, ``termination_reason``,
        ``reward_info`` (τ²'s breakdown, when scored), ``error`` (why there is no
        score), ``messages`` (the whole conversation, τ²'s JSON)."""
        episode = self.episode
        assert episode is not None
        verdict: dict[str, Any] = {
            "reward": episode.reward,
            "termination_reason": (
                episode.termination_reason.value if episode.termination_reason else None
            ),
        }
        if episode.reward_info is not None:
            verdict["reward_info"] = episode.reward_info.model_dump(mode="json")
        if episode.error is not None:
            verdict["error"] = episode.error
        verdict["messages"] = episode.messages_json()
        return verdict

    def close(self, reason: str) -> None:
        """End the open episode, if any, without a score."""
        episode = self.episode
        if episode is not None and not episode.done:
            episode.abandon(reason)
            self._report_end()
        self.episode = None

    # -------------------------------------------------------------- internals

    def _report_hop(self) -> None:
        episode = self.episode
        if self._hooks is None and episode is not None:
            self._reported = len(episode.messages)  # nobody to tell: no JSON to make
        elif episode is not None and len(episode.messages) > self._reported:
            new = episode.messages_json(self._reported)
            self._reported = len(episode.messages)
            access.call_hook(self._hooks, "on_hop", episode, new)

    def _report_end(self) -> None:
        episode = self.episode
        if episode is not None and episode.done and not self._ended_reported:
            self._ended_reported = True
            access.call_hook(self._hooks, "on_done", episode)
