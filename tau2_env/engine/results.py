"""τ²-bench results files (what ``tau2 run`` writes): read them with τ²'s own model, write
their sides' info with it, score their conversations again with τ²'s evaluator through
the one driver, and the settings taubench.com's leaderboard runs them with.

Framework-free. Re-scoring calls no LLM unless it is given a judge: a task whose reward
needs τ²'s NL-assertion judge is then judged by τ²'s own evaluator along that route (as
``tau2 evaluate-trajs`` judges it), and without one it is reported as not re-scored.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# isort: off
from tau2_env.llm._tau2 import registry  # noqa: F401  (τ² through its quiet import, first)
from pydantic import ValidationError
from tau2.data_model.simulation import AgentInfo, Results, SimulationRun, UserInfo
from tau2.data_model.tasks import RewardType, Task
from tau2.evaluator.evaluator import EvaluationType

# isort: on
from tau2_env import jsonbounds
from tau2_env.engine import catalog, episodes
from tau2_env.llm import gateway, tau2_gen

__all__ = [
    "LEADERBOARD",
    "LeaderboardSettings",
    "Rescore",
    "Results",
    "ResultsFileError",
    "agent_info",
    "mode_of",
    "needs_judge",
    "read_results",
    "rescore",
    "same_task",
    "user_info",
]


@dataclass(frozen=True)
class LeaderboardSettings:
    """What a run on taubench.com's leaderboard uses: ``tau2 run``'s own defaults (τ²'s
    ``RunConfig``) for the split, the limits and the customer's LLM arguments, and
    ``trials`` enough for the pass^1 … pass^4 it publishes."""

    split: str
    max_steps: int
    max_errors: int
    user_llm_args: Mapping[str, Any]
    trials: int = 4


def _default(field: str) -> Any:
    return tau2_gen.run_config_default(field)


LEADERBOARD = LeaderboardSettings(
    split=_default("task_split_name"),
    max_steps=_default("max_steps"),
    max_errors=_default("max_errors"),
    user_llm_args=dict(_default("llm_args_user")),
)


def agent_info(*, llm: str | None, llm_args: Mapping[str, Any] | None) -> dict[str, Any]:
    """τ²'s ``AgentInfo`` as a results file holds it: τ²'s ``llm_agent`` on ``llm`` (the
    model as litellm names it) with ``llm_args``, or a person (``llm=None``): ``human``
    with no model and no arguments. Built with τ²'s own model, so ``Results.load`` reads
    it; the caller passes no key or endpoint in ``llm_args``."""
    if llm is None:
        return AgentInfo(implementation="human").model_dump(mode="json")
    return AgentInfo(implementation="llm_agent", llm=llm, llm_args=dict(llm_args or {})).model_dump(
        mode="json"
    )


def user_info(*, llm: str, llm_args: Mapping[str, Any]) -> dict[str, Any]:
    """τ²'s ``UserInfo`` of the user simulator on ``llm`` with ``llm_args`` (as
    :func:`agent_info`; τ²'s global simulation guidelines are left out, as before)."""
    return UserInfo(implementation="user_simulator", llm=llm, llm_args=dict(llm_args)).model_dump(
        mode="json", exclude={"global_simulation_guidelines"}
    )


# Scoring without the judge needs no LLM, but an episode needs a customer route: this
# one has no credential and leads nowhere (the discard port), so nothing can leave.
_NO_LLM = gateway.Route(
    provider="hf",
    model="none/not-called-when-re-scoring",
    base_url="http://127.0.0.1:9/v1",
    api_key="none: re-scoring calls no LLM",
)


class ResultsFileError(ValueError):
    """The bytes are not a τ² results file; the message says why, for a person."""


# The deepest a results file nests (τ²'s own are about a dozen levels: a task's
# initial state, a tool call's arguments) and the longest integer it may hold: enough
# for the importer to name a field whose number is out of range, far from what costs.
MAX_DEPTH = 64
MAX_INT_DIGITS = 100


def read_results(data: bytes | str, *, max_bytes: int) -> Results:
    """τ²'s ``Results`` from a file's bytes, as ``Results.load`` reads it.

    Read with :func:`tau2_env.jsonbounds.loads`. Raises :class:`ResultsFileError` for an
    empty file, one larger than ``max_bytes``, one that is not JSON or that the bounded
    reader refuses (too deep, a NUL, an integer too long, NaN), or JSON that τ²'s model
    rejects (the first few problems named).
    """
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise ResultsFileError("The file is not JSON: it is not UTF-8 text.") from None
    if not data.strip():
        raise ResultsFileError("The file is empty.")
    try:
        parsed = jsonbounds.loads(
            data, max_bytes=max_bytes, max_depth=MAX_DEPTH, max_int_digits=MAX_INT_DIGITS
        )
    except jsonbounds.JsonRefused as exc:
        raise ResultsFileError(f"The file {exc.detail}") from None
    if not isinstance(parsed, dict):
        raise ResultsFileError(
            "This is not a τ² results file: expected an object with info, tasks and simulations."
        )
    try:
        return Results.model_validate(parsed)
    except ValidationError as exc:
        problems = [
            f"{'.'.join(str(part) for part in error['loc']) or 'file'}: {error['msg']}"
            for error in exc.errors()[:3]
        ]
        more = exc.error_count() - len(problems)
        raise ResultsFileError(
            "This is not a τ² results file ("
            + "; ".join(problems)
            + (f"; and {more} more" if more > 0 else "")
            + ")."
        ) from None


@dataclass(frozen=True)
class Rescore:
    """τ²'s verdict on a stored conversation, scored again.

    ``reward_info`` is τ²'s ``RewardInfo`` as JSON, or ``None`` when it could not be
    re-scored (``note`` says why). ``stored`` is the reward the file recorded.
    ``judge_usage``: the tokens of τ²'s NL judge's calls in the re-score (none made: an
    empty ``Usage``, also for a judge whose call failed, which reported none).
    """

    stored: float | None
    reward_info: dict[str, Any] | None
    note: str = ""
    judge_usage: gateway.Usage = field(default_factory=gateway.Usage)
    # Why the judge will fail for every conversation alike (refused by its provider: a
    # bad key, no credit, no such model), when it did here; "" otherwise.
    judge_stop: str = ""

    @property
    def reward(self) -> float | None:
        return self.reward_info["reward"] if self.reward_info is not None else None

    @property
    def differs(self) -> bool:
        """The file's reward is not τ²'s (beyond τ²'s 1e-6 tolerance)."""
        if self.reward_info is None:
            return False
        if self.stored is None:
            return True
        return abs(self.stored - self.reward_info["reward"]) > 1e-6

    @property
    def status(self) -> str:
        """ "equal", "differs" or "not_rescored"."""
        if self.reward_info is None:
            return "not_rescored"
        return "differs" if self.differs else "equal"


def mode_of(*, agent: str | None, user: str | None) -> str | None:
    """The evaluation mode (``engine.MODES``) of a results file whose ``agent_info`` and
    ``user_info`` name ``agent`` and ``user`` (τ²'s registry names, as ``tau2 run --agent
    … --user …`` writes them); ``None`` for a pair no mode is (another agent, a person)."""
    for mode, pair in episodes.IMPLEMENTATIONS.items():
        if (agent, user) == pair:
            return mode
    return None


def rescore(
    *,
    domain: str,
    task: Task,
    simulation: SimulationRun,
    max_steps: int,
    max_errors: int,
    mode: str = episodes.DEFAULT,
    judge_llm: gateway.Route | None = None,
) -> Rescore:
    """Score ``simulation``'s conversation again with τ²'s evaluator, as ``tau2 run`` does.

    The conversation is replayed in a fresh environment by
    :class:`~tau2_env.engine.episodes.Episode` (τ²'s orchestrator checks every tool result
    against the one it gets again) and ended as the file says it ended; a No-User file's in τ²'s
    solo mode, as ``tau2 run`` scored it (``mode``: :func:`mode_of` the file's sides). Never
    raises for a bad conversation: the :class:`Rescore` says it could not be re-scored, and why.

    A task whose reward needs τ²'s NL-assertion judge is judged along ``judge_llm`` (τ²'s
    prompt and τ²'s judge arguments, the model the route's); without one it is not
    re-scored. A judge that fails (an error of its provider, a reply τ² cannot read) leaves
    it not re-scored, the note saying so in words.
    """
    stored = simulation.reward_info.reward if simulation.reward_info is not None else None
    try:
        episode = episodes.Episode(
            domain=domain,
            task=task,
            user_llm=_NO_LLM,
            messages=simulation.messages,
            termination_reason=simulation.termination_reason,
            max_steps=max_steps,
            max_errors=max_errors,
            seed=simulation.seed,
            nl_judge="basis",
            judge_llm=judge_llm,
            score_on_end=False,
            mode=mode,
            # A mode's own agent is τ²'s (never asked here: the conversation is over).
            agent_llm=_NO_LLM if mode != episodes.DEFAULT else None,
        )
    except Exception as exc:
        return Rescore(
            stored,
            None,
            f"its messages do not replay in τ²'s {domain} environment "
            f"({episodes.failure_reason(exc)})",
        )
    judged = episode.evaluation_type() == EvaluationType.ALL_WITH_NL_ASSERTIONS
    if judged and judge_llm is None:
        return Rescore(stored, None, NO_JUDGE)
    try:
        info = episode.evaluate()
    except gateway.LLMCallError as exc:  # only the judge calls an LLM here
        reason = episodes.failure_reason(exc, judge_llm)
        refused = exc.status_code in (401, 402, 403, 404)
        return Rescore(
            stored,
            None,
            f"τ²'s NL-assertion judge failed ({reason})",
            judge_stop=reason if refused else "",
        )
    except Exception as exc:
        what = "τ²'s NL-assertion judge" if judged else "τ²'s evaluator"
        return Rescore(stored, None, f"{what} failed ({episodes.failure_reason(exc)})")
    return Rescore(stored, info.model_dump(mode="json"), judge_usage=episode.judge_usage)


# Why a conversation whose task needs the judge is not re-scored without one.
NO_JUDGE = "its task's reward needs τ²'s NL-assertion judge, an LLM, and no judge was chosen"


def needs_judge(task: Task) -> bool:
    """True when ``task``'s reward needs τ²'s NL-assertion judge (``NL_ASSERTION`` in its
    reward basis): re-scoring it calls an LLM."""
    criteria = task.evaluation_criteria
    return criteria is not None and RewardType.NL_ASSERTION in set(criteria.reward_basis or ())


def _without_stamps(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_stamps(v) for k, v in value.items() if k != "timestamp"}
    if isinstance(value, list):
        return [_without_stamps(v) for v in value]
    return value


def same_task(domain: str, task: Task) -> bool:
    """True when ``task`` (from a file) is this server's τ² task of that id, to the letter
    (τ²'s load-time message stamps aside)."""
    try:
        ours = catalog.get_tau2_task(domain, task.id)
    except KeyError:
        return False
    return _without_stamps(ours.model_dump(mode="json")) == _without_stamps(
        task.model_dump(mode="json")
    )
