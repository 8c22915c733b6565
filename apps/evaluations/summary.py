"""An evaluation's summary: its progress, τ²'s metrics over its scored runs and the means a
person compares, as one typed, versioned contract.

The page, ``/state/``, the socket, the API, the downloads and the history all read an
:class:`EvaluationSummary`; ``Evaluation.summary`` keeps its :meth:`~EvaluationSummary.to_json`
and the API serves that same JSON. Older stored shapes are read in one place,
:meth:`EvaluationSummary.from_json`, which refuses (:class:`SummaryUnreadable`) what it
cannot read faithfully, so that its reader computes the summary again from the runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any, ClassVar, TypeVar

T = TypeVar("T")

# What a summary written before the customer's calls were counted lacks (its costs and
# tokens are the agent's alone; runs carry the customer's since runs migration 0005).
_CUSTOMER_KEYS = (
    "user_cost_usd",
    "total_cost_usd",
    "unpriced_runs",
    "mean_total_cost_usd",
    "user_prompt_tokens",
    "user_completion_tokens",
)


class SummaryUnreadable(ValueError):
    """A stored summary in a shape :meth:`EvaluationSummary.from_json` cannot read as it
    was meant: compute it again from the runs."""


@dataclass(frozen=True)
class TaskReward:
    """One scored task's mean reward over its ``trials`` scored (completed) runs."""

    task_id: str
    reward: float
    trials: int


@dataclass(frozen=True)
class EvaluationSummary:
    """An evaluation when it was computed (``computed_at``).

    Progress counts its runs: ``final`` = completed + failed + stopped; ``running`` the
    runs a worker has started (as the matrix and each run's page show them), ``queued``
    the others, those handed to the workers and waiting for one included;
    ``retryable`` the failed runs "retry" would queue again. ``eta_seconds`` is ``None``
    unless it is running and some scored run has a duration.

    τ²'s metrics are over the scored runs (``scored_runs``): the completed ones and the
    failures that are the model's own (a conversation that went wrong: reward 0, as τ²
    counts them; ``failures_counted`` of them). ``left_out`` counts the final runs left
    out, by why (``apps.evaluations.selectors.LEFT_OUT``: infrastructure, transient
    provider trouble, a provider's refusal, a budget, a cause unrecorded, stopped), as
    τ² leaves out infrastructure errors. ``pass_hat_ks`` is pass^k by k for k = 1 …
    ``max_k`` (the fewest scored trials of any task; empty when nothing is scored),
    ``avg_reward`` ``None`` when nothing is scored. ``reward_by_basis`` is the mean of
    each reward component over the ``basis_runs`` scored runs whose task's basis has it;
    ``basis_without_breakdown`` of them have no breakdown (τ² ended them before scoring
    the components, e.g. at the step limit) and count their reward (0) on each.
    ``termination_reasons`` counts the final runs by how they ended (τ²'s reason, or the
    run's status when it has none), in the order the runs were read; ``reward_by_task``
    is best first (tasks in natural order among equals).

    Without critical user-simulator errors: ``sim_error_runs`` scored runs carry one (a
    person's label, or an accepted auto-review finding, of category ``user_sim_error``
    and severity ``critical``); ``clean_pass_hat_ks`` is pass^k over the ``clean_runs``
    other scored runs (of ``clean_tasks`` tasks), k up to their fewest trials of a task.

    The fields from ``scored_runs`` on are ``None`` in a summary of version 2 (stored
    before they were counted): :meth:`complete` says whether they are there.

    Money is USD, ``None`` when nothing was priced (unknown, never $0): ``cost_usd`` and
    ``mean_cost_usd`` are the agent's calls (τ²'s agent cost), ``user_cost_usd`` the
    customer's, ``judge_cost_usd`` τ²'s NL-assertion judge's, ``total_cost_usd`` every
    priced call; ``mean_total_cost_usd`` is over the runs whose every call was priced,
    and ``unpriced_runs`` counts the runs that made calls of which some have no price.
    Version 4 counts the judge's calls (``judge_*``, ``None`` in an older summary, whose
    totals left them out: :attr:`complete` is false for it).
    """

    VERSION: ClassVar[int] = 4

    planned: int
    completed: int
    failed: int
    stopped: int
    running: int
    queued: int
    final: int
    retryable: int
    eta_seconds: int | None
    avg_reward: float | None
    pass_hat_ks: Mapping[int, float]
    max_k: int
    tasks_scored: int
    successes: int
    reward_by_basis: Mapping[str, float]
    termination_reasons: Mapping[str, int]
    mean_messages: float | None
    mean_tool_calls: float | None
    mean_duration_s: float | None
    cost_usd: Decimal | None
    mean_cost_usd: Decimal | None
    user_cost_usd: Decimal | None
    total_cost_usd: Decimal | None
    unpriced_runs: int
    mean_total_cost_usd: Decimal | None
    prompt_tokens: int
    completion_tokens: int
    user_prompt_tokens: int
    user_completion_tokens: int
    reward_by_task: tuple[TaskReward, ...]
    computed_at: datetime
    scored_runs: int | None = None
    failures_counted: int | None = None
    left_out: Mapping[str, int] | None = None
    basis_runs: int | None = None
    basis_without_breakdown: int | None = None
    sim_error_runs: int | None = None
    clean_pass_hat_ks: Mapping[int, float] | None = None
    clean_runs: int | None = None
    clean_tasks: int | None = None
    judge_prompt_tokens: int | None = None
    judge_completion_tokens: int | None = None
    judge_cost_usd: Decimal | None = None

    @property
    def complete(self) -> bool:
        """Whether it has what versions 3 and 4 added (one of an older version has not:
        the pages compute it again from the runs)."""
        return self.left_out is not None and self.judge_prompt_tokens is not None

    @property
    def runs_left_out(self) -> int:
        return sum((self.left_out or {}).values())

    def clean_pass_hat(self, k: int) -> float | None:
        """pass^k without the runs with a critical user-simulator error."""
        return (self.clean_pass_hat_ks or {}).get(k)

    @property
    def tokens(self) -> int:
        """The agent's and the customer's prompt and completion tokens together."""
        return (
            self.prompt_tokens
            + self.completion_tokens
            + self.user_prompt_tokens
            + self.user_completion_tokens
        )

    def pass_hat(self, k: int) -> float | None:
        """pass^k; ``None`` for a k beyond ``max_k`` (some task has fewer scored trials)."""
        return self.pass_hat_ks.get(k)

    @property
    def pass_max_k(self) -> float | None:
        """pass^k at the largest k there is (``None`` when nothing is scored)."""
        return self.pass_hat(self.max_k)

    def pass_hat_ks_json(self) -> dict[str, float]:
        """``pass_hat_ks`` as JSON has it: k as text, in order of k."""
        return {str(k): value for k, value in sorted(self.pass_hat_ks.items())}

    def to_json(self) -> dict[str, Any]:
        """The summary as ``Evaluation.summary`` keeps it and the API serves it: the keys
        of the fields (``version`` first), money as decimal text, ``computed_at`` as ISO
        8601, ``reward_by_task`` as ``{"task_id", "reward", "trials"}`` objects."""
        return {
            "version": self.VERSION,
            "planned": self.planned,
            "completed": self.completed,
            "failed": self.failed,
            "stopped": self.stopped,
            "running": self.running,
            "queued": self.queued,
            "final": self.final,
            "retryable": self.retryable,
            "eta_seconds": self.eta_seconds,
            "avg_reward": self.avg_reward,
            "pass_hat_ks": self.pass_hat_ks_json(),
            "max_k": self.max_k,
            "tasks_scored": self.tasks_scored,
            "successes": self.successes,
            "reward_by_basis": dict(self.reward_by_basis),
            "termination_reasons": dict(self.termination_reasons),
            "mean_messages": self.mean_messages,
            "mean_tool_calls": self.mean_tool_calls,
            "mean_duration_s": self.mean_duration_s,
            "cost_usd": _money_text(self.cost_usd),
            "mean_cost_usd": _money_text(self.mean_cost_usd),
            "user_cost_usd": _money_text(self.user_cost_usd),
            "total_cost_usd": _money_text(self.total_cost_usd),
            "unpriced_runs": self.unpriced_runs,
            "mean_total_cost_usd": _money_text(self.mean_total_cost_usd),
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "user_prompt_tokens": self.user_prompt_tokens,
            "user_completion_tokens": self.user_completion_tokens,
            "reward_by_task": [
                {"task_id": row.task_id, "reward": row.reward, "trials": row.trials}
                for row in self.reward_by_task
            ],
            "computed_at": self.computed_at.isoformat(),
            "scored_runs": self.scored_runs,
            "failures_counted": self.failures_counted,
            "left_out": None if self.left_out is None else dict(self.left_out),
            "basis_runs": self.basis_runs,
            "basis_without_breakdown": self.basis_without_breakdown,
            "sim_error_runs": self.sim_error_runs,
            "clean_pass_hat_ks": None
            if self.clean_pass_hat_ks is None
            else {str(k): v for k, v in sorted(self.clean_pass_hat_ks.items())},
            "clean_runs": self.clean_runs,
            "clean_tasks": self.clean_tasks,
            "judge_prompt_tokens": self.judge_prompt_tokens,
            "judge_completion_tokens": self.judge_completion_tokens,
            "judge_cost_usd": _money_text(self.judge_cost_usd),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EvaluationSummary:
        """The summary ``data`` (as :meth:`to_json` writes it) says.

        Reads this ``VERSION``, versions 3 (without the judge's calls: those fields
        ``None``) and 2 (without what versions 3 and 4 added) and the shape stored before
        summaries had a version (version 2's keys without ``version``, stored since the
        customer's calls were counted). Raises
        :class:`SummaryUnreadable` for every other: the first shape (without the
        customer's tokens and costs: none of its keys says what they were), a version
        this code does not know, a key missing or a value of the wrong type.
        ``from_json(s.to_json()) == s``.
        """
        if not isinstance(data, Mapping):
            raise SummaryUnreadable(f"a summary is a JSON object, not {type(data).__name__}")
        version = data["version"] if "version" in data else _unversioned_shape(data)
        if version not in (2, 3, cls.VERSION) or isinstance(version, bool):
            raise SummaryUnreadable(f"summary version {version!r}, not {cls.VERSION}")
        read = _Reader(data)
        added: dict[str, Any] = {}
        if version >= 3:
            added = {
                "scored_runs": read.count("scored_runs"),
                "failures_counted": read.count("failures_counted"),
                "left_out": read.mapping("left_out", read.count_value),
                "basis_runs": read.count("basis_runs"),
                "basis_without_breakdown": read.count("basis_without_breakdown"),
                "sim_error_runs": read.count("sim_error_runs"),
                "clean_pass_hat_ks": read.pass_hat_ks("clean_pass_hat_ks"),
                "clean_runs": read.count("clean_runs"),
                "clean_tasks": read.count("clean_tasks"),
            }
        if version >= 4:
            added.update(
                judge_prompt_tokens=read.count("judge_prompt_tokens"),
                judge_completion_tokens=read.count("judge_completion_tokens"),
                judge_cost_usd=read.optional(read.money, "judge_cost_usd"),
            )
        return cls(
            **added,
            planned=read.count("planned"),
            completed=read.count("completed"),
            failed=read.count("failed"),
            stopped=read.count("stopped"),
            running=read.count("running"),
            queued=read.count("queued"),
            final=read.count("final"),
            retryable=read.count("retryable"),
            eta_seconds=read.optional(read.count, "eta_seconds"),
            avg_reward=read.optional(read.number, "avg_reward"),
            pass_hat_ks=read.pass_hat_ks("pass_hat_ks"),
            max_k=read.count("max_k"),
            tasks_scored=read.count("tasks_scored"),
            successes=read.count("successes"),
            reward_by_basis=read.mapping("reward_by_basis", read.number_value),
            termination_reasons=read.mapping("termination_reasons", read.count_value),
            mean_messages=read.optional(read.number, "mean_messages"),
            mean_tool_calls=read.optional(read.number, "mean_tool_calls"),
            mean_duration_s=read.optional(read.number, "mean_duration_s"),
            cost_usd=read.optional(read.money, "cost_usd"),
            mean_cost_usd=read.optional(read.money, "mean_cost_usd"),
            user_cost_usd=read.optional(read.money, "user_cost_usd"),
            total_cost_usd=read.optional(read.money, "total_cost_usd"),
            unpriced_runs=read.count("unpriced_runs"),
            mean_total_cost_usd=read.optional(read.money, "mean_total_cost_usd"),
            prompt_tokens=read.count("prompt_tokens"),
            completion_tokens=read.count("completion_tokens"),
            user_prompt_tokens=read.count("user_prompt_tokens"),
            user_completion_tokens=read.count("user_completion_tokens"),
            reward_by_task=read.reward_by_task("reward_by_task"),
            computed_at=read.moment("computed_at"),
        )


def _unversioned_shape(data: Mapping[str, Any]) -> int:
    """Which shape a summary without ``version`` has: 1 with the customer's keys (read
    as version 2: the keys are the same), 0 without any of them (refused)."""
    if not data:
        raise SummaryUnreadable("no summary yet: the evaluation has not ended")
    present = [key in data for key in _CUSTOMER_KEYS]
    if all(present):
        return 2
    if not any(present):
        raise SummaryUnreadable("summary of before the customer's calls were counted")
    raise SummaryUnreadable("summary with some of the customer's keys and not others")


def _money_text(amount: Decimal | None) -> str | None:
    return None if amount is None else str(amount)


class _Reader:
    """Typed reads of the keys of one stored summary; each raises ``SummaryUnreadable``
    naming the key, for one missing or of the wrong type."""

    def __init__(self, data: Mapping[str, Any]):
        self.data = data

    def _value(self, key: str) -> Any:
        if key not in self.data:
            raise SummaryUnreadable(f"summary without {key!r}")
        return self.data[key]

    def optional(self, read: Callable[[str], T], key: str) -> T | None:
        return None if self._value(key) is None else read(key)

    def count(self, key: str) -> int:
        return self.count_value(key, self._value(key))

    def number(self, key: str) -> float:
        return self.number_value(key, self._value(key))

    @staticmethod
    def count_value(key: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise SummaryUnreadable(f"{key}: {value!r} is not a count")
        return value

    @staticmethod
    def number_value(key: str, value: Any) -> float:
        # An integral mean (statistics.mean of ints) stays the int it was written as.
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise SummaryUnreadable(f"{key}: {value!r} is not a number")
        return value

    def money(self, key: str) -> Decimal:
        value = self._value(key)
        if not isinstance(value, str):
            raise SummaryUnreadable(f"{key}: {value!r} is not an amount as text")
        try:
            amount = Decimal(value)
        except InvalidOperation:
            raise SummaryUnreadable(f"{key}: {value!r} is not an amount") from None
        if not amount.is_finite():
            raise SummaryUnreadable(f"{key}: {value!r} is not an amount")
        return amount

    def moment(self, key: str) -> datetime:
        value = self._value(key)
        try:
            return datetime.fromisoformat(value)
        except (TypeError, ValueError):
            raise SummaryUnreadable(f"{key}: {value!r} is not an ISO 8601 time") from None

    def mapping(self, key: str, read_value: Callable[[str, Any], T]) -> dict[str, T]:
        value = self._value(key)
        if not isinstance(value, dict):
            raise SummaryUnreadable(f"{key}: {value!r} is not an object")
        return {str(name): read_value(f"{key}.{name}", item) for name, item in value.items()}

    def pass_hat_ks(self, key: str) -> dict[int, float]:
        by_text = self.mapping(key, self.number_value)
        if not all(k.isascii() and k.isdigit() and int(k) >= 1 for k in by_text):
            raise SummaryUnreadable(f"{key}: {list(by_text)} are not all k ≥ 1")
        return {int(k): value for k, value in by_text.items()}

    def reward_by_task(self, key: str) -> tuple[TaskReward, ...]:
        rows = self._value(key)
        if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
            raise SummaryUnreadable(f"{key}: {rows!r} is not a list of objects")
        out = []
        for i, row in enumerate(rows):
            task = _Reader(row)
            task_id = task._value("task_id")
            if not isinstance(task_id, str):
                raise SummaryUnreadable(f"{key}[{i}].task_id: {task_id!r} is not text")
            out.append(
                TaskReward(
                    task_id=task_id, reward=task.number("reward"), trials=task.count("trials")
                )
            )
        return tuple(out)
