"""Why a run scored what it did: its database against the expected one, its tool calls
against the expected actions.

Two views beside τ²'s verdict, never part of it (the scorer computes what it always has):

* :func:`db_diff` — the run's final databases against the ones τ²'s expected actions
  produce, as records added and removed and fields changed, each with a readable path
  (``reservations.NO6JO3.flights[1].date``). Both sides are the environments τ²'s own
  ``EnvironmentEvaluator`` builds when it scores (:func:`final_environments`): the run's
  side replays its tool calls, the expected side comes from the scorer's once-per-task
  cache (:meth:`tau2_env.engine.scoring.ExpectedEnvironment.shared_environment`). Telecom's
  customer has a phone database too; τ² compares both, so both are diffed.
* :func:`action_trace` — each tool call of the conversation marked as matching an
  expected action (by τ²'s own ``Action.compare_with_tool_call``), an extra read, an
  extra write, or a write with different arguments; expected actions never called are
  listed at their place; the first write that leaves the expected path is flagged.

:func:`diagnose` gives both at once, as :class:`Diagnosis` (``as_json()`` for storage and
export). Everything here only reads environments and messages.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import threading
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import cachetools

# isort: off
from tau2_env.llm._tau2 import registry
from tau2.data_model.message import AssistantMessage, Message, ToolCall, UserMessage
from tau2.data_model.tasks import Action, RewardType, Task
from tau2.environment.environment import Environment
from tau2.environment.toolkit import ToolType
from tau2.evaluator.evaluator_env import EnvironmentEvaluator

# isort: on
from tau2_env.engine import catalog, environments, scoring
from tau2_env.engine.episodes import messages_from_json

__all__ = [
    "Change",
    "Diagnosis",
    "Step",
    "action_trace",
    "db_diff",
    "diagnose",
    "final_environments",
]

ChangeKind = Literal["added", "removed", "changed"]
StepKind = Literal["match", "extra_read", "extra_write", "extra_call", "wrong_args", "missing"]

STEP_LABELS: dict[str, str] = {
    "match": "matches expected",
    "extra_read": "extra read",
    "extra_write": "extra write",
    "extra_call": "extra call",
    "wrong_args": "write with different arguments",
    "missing": "expected, never called",
}

_MISSING = object()  # a key or item one side lacks


@dataclass(frozen=True)
class Change:
    """One difference between the run's database and the expected one.

    ``path`` is readable (``users.mia_li_3668.payment_methods.gift_card_7``); ``kind`` is
    ``added`` (only the run has it), ``removed`` (only the expected database has it) or
    ``changed``; ``expected`` and ``actual`` are JSON values (``None`` on the side that
    lacks it). ``db`` is ``agent`` or ``user`` (telecom's customer's phone).
    """

    db: str
    path: str
    kind: ChangeKind
    expected: Any = None
    actual: Any = None

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Step:
    """One line of the expected-action trace.

    A tool call of the conversation (``call_index`` counts them from 0, ``message_index``
    is its message's place in the conversation) or, for ``kind == "missing"``, an
    expected action nobody called (``call_index`` and ``message_index`` are ``None``).
    ``action_index``/``action_id`` name the expected action it matches, misses or (for
    ``wrong_args``) differs from in the arguments ``differing_args``. ``tool_type`` is
    τ²'s ``ToolType`` value of the tool (``None`` for a tool the domain lacks).
    """

    kind: StepKind
    name: str
    arguments: dict[str, Any]
    requestor: str
    tool_type: str | None
    call_index: int | None = None
    message_index: int | None = None
    call_id: str | None = None
    action_index: int | None = None
    action_id: str | None = None
    differing_args: tuple[str, ...] = ()
    divergent: bool = False

    @property
    def label(self) -> str:
        return STEP_LABELS[self.kind]

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["differing_args"] = list(self.differing_args)
        data["label"] = self.label
        return data


@dataclass(frozen=True)
class Diagnosis:
    """Both views of one scored conversation.

    ``db_match`` is τ²'s own database check (``None`` when τ² builds no environment for
    the task); ``db_scored`` says whether the task's reward counts it (telecom's base
    tasks score env assertions instead). ``changes`` is empty when the check holds.
    ``first_divergent`` is the first divergent write of ``steps`` (``None`` if none).
    """

    db_match: bool | None
    db_scored: bool = True
    changes: list[Change] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)

    @property
    def first_divergent(self) -> Step | None:
        return next((s for s in self.steps if s.divergent), None)

    @property
    def missing(self) -> list[Step]:
        return [s for s in self.steps if s.kind == "missing"]

    def as_json(self) -> dict[str, Any]:
        divergent = self.first_divergent
        return {
            "db_match": self.db_match,
            "db_scored": self.db_scored,
            "changes": [c.as_json() for c in self.changes],
            "steps": [s.as_json() for s in self.steps],
            "first_divergent_write": divergent.as_json() if divergent else None,
        }


# ------------------------------------------------------------------ database diff


def db_diff(actual_db: Any, expected_db: Any, *, db: str = "agent") -> list[Change]:
    """The differences of ``actual_db`` from ``expected_db`` (τ² ``DB`` models, or their
    dumps), in the order of the database's fields and records.

    Records of a collection (a dict of rows, or a list of rows with an ``…_id`` first
    field, as telecom's) are named by their key; rows both sides share untouched (the
    same object, as copy-on-access environments of one process share the pristine
    rows) are skipped without being serialised.
    """
    if actual_db is None and expected_db is None:
        return []
    changes: list[Change] = []
    names = _field_names(actual_db) or _field_names(expected_db)
    for name in names:
        actual = _get_field(actual_db, name)
        expected = _get_field(expected_db, name)
        if actual is expected:
            continue
        if isinstance(actual, dict) and isinstance(expected, dict):
            _diff_collection(changes, db, name, actual, expected)
            continue
        actual, expected = _dump(actual), _dump(expected)
        keyed_actual, keyed_expected = _keyed_rows(actual), _keyed_rows(expected)
        if keyed_actual is not None and keyed_expected is not None:
            _diff_collection(changes, db, name, keyed_actual, keyed_expected)
        else:
            _diff_value(changes, db, name, actual, expected)
    return changes


def _field_names(db: Any) -> list[str]:
    if db is None:
        return []
    if isinstance(db, dict):
        return list(db)
    return list(type(db).model_fields)


def _get_field(db: Any, name: str) -> Any:
    if db is None:
        return _MISSING
    if isinstance(db, dict):
        return db.get(name, _MISSING)
    return getattr(db, name, _MISSING)


def _dump(value: Any) -> Any:
    if value is _MISSING:
        return value
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if isinstance(value, dict):
        # dict.items: a copy-on-access collection must not copy rows to be read.
        return {str(k): _dump(v) for k, v in dict.items(value)}
    if isinstance(value, list | tuple):
        return [_dump(v) for v in value]
    return value


def _keyed_rows(value: Any) -> dict[str, Any] | None:
    """A list of records with a unique ``…_id`` first field, keyed by it (else ``None``)."""
    if not isinstance(value, list) or not value or not all(isinstance(v, dict) for v in value):
        return None
    first = next(iter(value[0]), "")
    if not first.endswith("_id"):
        return None
    keys = [row.get(first) for row in value]
    if len(set(map(str, keys))) != len(keys):
        return None
    return {str(k): row for k, row in zip(keys, value, strict=True)}


def _diff_collection(
    changes: list[Change], db: str, name: str, actual: dict, expected: dict
) -> None:
    # dict.get / dict.keys bypass a copy-on-access dict's copying: an untouched row is
    # the very object the other side holds, and is skipped unread.
    keys = list(dict.keys(actual)) + [k for k in dict.keys(expected) if k not in actual]
    for key in keys:
        row_actual = dict.get(actual, key, _MISSING)
        row_expected = dict.get(expected, key, _MISSING)
        if row_actual is row_expected:
            continue
        _diff_value(changes, db, f"{name}.{key}", _dump(row_actual), _dump(row_expected))


def _diff_value(changes: list[Change], db: str, path: str, actual: Any, expected: Any) -> None:
    if actual == expected:
        return
    if actual is _MISSING:
        changes.append(Change(db=db, path=path, kind="removed", expected=expected))
    elif expected is _MISSING:
        changes.append(Change(db=db, path=path, kind="added", actual=actual))
    elif isinstance(actual, dict) and isinstance(expected, dict):
        for key in list(actual) + [k for k in expected if k not in actual]:
            _diff_value(
                changes,
                db,
                f"{path}.{key}",
                actual.get(key, _MISSING),
                expected.get(key, _MISSING),
            )
    elif isinstance(actual, list) and isinstance(expected, list):
        for index in range(max(len(actual), len(expected))):
            _diff_value(
                changes,
                db,
                f"{path}[{index}]",
                actual[index] if index < len(actual) else _MISSING,
                expected[index] if index < len(expected) else _MISSING,
            )
    else:
        changes.append(Change(db=db, path=path, kind="changed", expected=expected, actual=actual))


def final_environments(
    *, domain: str, task: Task, messages: Sequence[Message | dict[str, Any]]
) -> tuple[Any, Any, bool | None]:
    """The run's final environment, the expected one, and τ²'s database check.

    Built by τ²'s own ``EnvironmentEvaluator.calculate_reward`` over ``messages`` (the
    whole conversation, as scored), with the environments it constructs kept: the run's
    (its tool calls replayed on the task's initial state) and the expected one (the
    task's expected actions), the latter from the scorer's once-per-task cache.
    Returns ``(None, None, None)`` when τ² builds none (the task expects nothing of the
    environment). Raises what τ²'s replay raises (e.g. a stored tool result that the
    replay does not reproduce), as scoring would.
    """
    built: list[Any] = []
    trajectory = messages_from_json(messages)
    with environments.fresh_environments_for_tau2(domain), scoring.expected_side_cached():
        constructor = registry.get_env_constructor(domain)

        def capture(**kwargs: Any) -> Any:
            environment = constructor(**kwargs)
            built.append(environment)
            return environment

        info = EnvironmentEvaluator.calculate_reward(
            environment_constructor=capture,
            task=task,
            full_trajectory=trajectory,
            solo_mode=False,
        )
    if len(built) < 2:
        return None, None, None
    actual, expected = built[0], built[1]
    if isinstance(expected, scoring.ExpectedEnvironment):
        expected = expected.shared_environment()
    db_match = info.db_check.db_match if info.db_check is not None else None
    return actual, expected, db_match


def _syncs(environment: Any) -> bool:
    """Whether the domain syncs the customer's phone with the agent's records."""
    return type(environment).sync_tools is not Environment.sync_tools


_MAX_SYNCED = 256


def _task_key(domain: str, task: Task) -> str:
    return hashlib.sha256(
        json.dumps(
            [domain, catalog.tau2_version(), task.model_dump(mode="json")],
            sort_keys=True,
            default=str,
        ).encode()
    ).hexdigest()


@cachetools.cached(cachetools.LRUCache(maxsize=_MAX_SYNCED), key=_task_key, lock=threading.Lock())
def _expected_as_played(domain: str, task: Task) -> Any:
    """The task's expected actions played as a conversation plays them, for domains
    that sync (telecom): built once per task and shared (read it, never change it).

    τ²'s orchestrator calls ``sync_tools`` after every tool call (telecom: line status
    and roaming onto the phone, the payment request the agent sent, a paid bill back
    into the records); its gold environment never does, so there the customer's
    ``make_payment`` finds no request and nothing syncs. Diffing against that would
    show τ²'s gold shortcut as changes in every golden telecom run (whose reward
    does not count the database). This is the same initial state and the same
    expected actions, each followed by the sync a conversation does.
    """
    environment = environments.fresh_environment(domain)
    initial = task.initial_state
    environment.set_state(
        initialization_data=initial.initialization_data if initial else None,
        initialization_actions=initial.initialization_actions if initial else None,
        message_history=(initial.message_history or []) if initial else [],
    )
    criteria = task.evaluation_criteria
    for action in (criteria.actions or []) if criteria is not None else []:
        with contextlib.suppress(Exception):  # as τ²'s evaluator does
            environment.make_tool_call(
                tool_name=action.name, requestor=action.requestor, **action.arguments
            )
        environment.sync_tools()
    return environment


def _databases(environment: Any) -> tuple[Any, Any]:
    tools, user_tools = environment.tools, getattr(environment, "user_tools", None)
    return (
        tools.db if tools is not None else None,
        user_tools.db if user_tools is not None else None,
    )


# ------------------------------------------------------------ expected-action trace


@functools.cache
def _tool_types(domain: str) -> dict[tuple[str, str], str]:
    """(requestor, tool name) → τ²'s ``ToolType`` value, for the agent's and the
    customer's tools of ``domain`` (read once per process)."""
    environment = environments.fresh_environment(domain)
    types = {}
    for requestor, toolkit in (("assistant", environment.tools), ("user", environment.user_tools)):
        if toolkit is not None:
            for name in toolkit.tools:
                types[(requestor, name)] = ToolType(toolkit.tool_type(name)).value
    return types


def _tool_calls(messages: Iterable[Message]) -> list[tuple[int, ToolCall]]:
    """Every tool call τ²'s evaluators count (the agent's and the customer's), with its
    message's index."""
    calls: list[tuple[int, ToolCall]] = []
    for index, message in enumerate(messages):
        if isinstance(message, AssistantMessage | UserMessage) and message.is_tool_call():
            calls.extend((index, call) for call in message.tool_calls)
    return calls


def _differing_args(action: Action, call: ToolCall) -> tuple[str, ...]:
    """The arguments τ²'s comparison looks at on which ``call`` differs from ``action``."""
    names = action.compare_args
    if names is None:
        names = list(call.arguments) + [k for k in action.arguments if k not in call.arguments]
    return tuple(
        name
        for name in names
        if call.arguments.get(name, _MISSING) != action.arguments.get(name, _MISSING)
    )


def action_trace(
    messages: Sequence[Message | dict[str, Any]], task: Task, *, domain: str
) -> list[Step]:
    """Each tool call of ``messages`` against ``task``'s expected actions, in order, with
    the expected actions never called inserted at their place.

    A call matches the first expected action not yet matched that τ²'s
    ``compare_with_tool_call`` accepts. Otherwise it is a write with different arguments
    (a write tool named like an unmatched expected action: the one with the fewest
    differing arguments), an extra write, an extra read, or an extra call (τ²'s
    ``think``/``generic`` tools, or a tool the domain lacks). An expected action is
    listed as missing exactly when τ²'s ``ActionEvaluator`` finds no call for it. The
    first write that is extra or has different arguments is ``divergent``.
    """
    trajectory = messages_from_json(messages)
    criteria = task.evaluation_criteria
    expected: list[Action] = list(criteria.actions or []) if criteria is not None else []
    types = _tool_types(domain)
    calls = _tool_calls(trajectory)
    matched: dict[int, int] = {}  # expected action index → step index
    steps: list[Step] = []
    divergent_seen = False
    for call_index, (message_index, call) in enumerate(calls):
        requestor = call.requestor or "assistant"
        tool_type = types.get((requestor, call.name))
        base = {
            "name": call.name,
            "arguments": dict(call.arguments),
            "requestor": requestor,
            "tool_type": tool_type,
            "call_index": call_index,
            "message_index": message_index,
            "call_id": call.id,
        }
        hit = next(
            (
                i
                for i, action in enumerate(expected)
                if i not in matched and action.compare_with_tool_call(call)
            ),
            None,
        )
        if hit is not None:
            matched[hit] = len(steps)
            steps.append(
                Step(kind="match", action_index=hit, action_id=expected[hit].action_id, **base)
            )
            continue
        if tool_type != ToolType.WRITE.value:
            kind: StepKind = "extra_read" if tool_type == ToolType.READ.value else "extra_call"
            steps.append(Step(kind=kind, **base))
            continue
        near = [
            (len(_differing_args(action, call)), i)
            for i, action in enumerate(expected)
            if i not in matched and action.name == call.name
        ]
        divergent = not divergent_seen
        divergent_seen = True
        if near:
            _, i = min(near)
            steps.append(
                Step(
                    kind="wrong_args",
                    action_index=i,
                    action_id=expected[i].action_id,
                    differing_args=_differing_args(expected[i], call),
                    divergent=divergent,
                    **base,
                )
            )
        else:
            steps.append(Step(kind="extra_write", divergent=divergent, **base))
    # τ² counts an expected action as done when any call matches it, even one that
    # already matched another (identical) expected action.
    found = {
        i
        for i, action in enumerate(expected)
        if any(action.compare_with_tool_call(call) for _, call in calls)
    }
    missing = [i for i in range(len(expected)) if i not in found]
    return _insert_missing(steps, expected, missing, types)


def _insert_missing(
    steps: list[Step], expected: list[Action], missing: list[int], types: dict
) -> list[Step]:
    """``steps`` with each missing expected action placed after the last call that tried
    it with other arguments, or else before the first call that matches or tries a
    later expected action (else at the end)."""
    after: dict[int, list[Step]] = {}  # step index → missing steps to put after it
    before: dict[int, list[Step]] = {}
    for i in missing:
        action = expected[i]
        step = Step(
            kind="missing",
            name=action.name,
            arguments=dict(action.arguments),
            requestor=action.requestor,
            tool_type=types.get((action.requestor, action.name)),
            action_index=i,
            action_id=action.action_id,
        )
        tried = [n for n, s in enumerate(steps) if s.kind == "wrong_args" and s.action_index == i]
        later = [
            n
            for n, s in enumerate(steps)
            if s.kind in ("match", "wrong_args")
            and s.action_index is not None
            and s.action_index > i
        ]
        if tried:
            after.setdefault(tried[-1], []).append(step)
        elif later:
            before.setdefault(later[0], []).append(step)
        else:
            after.setdefault(len(steps) - 1, []).append(step)
    result: list[Step] = []
    for n, step in enumerate(steps):
        result.extend(before.get(n, ()))
        result.append(step)
        result.extend(after.get(n, ()))
    result.extend(after.get(-1, ()))  # no calls at all
    return result


# ------------------------------------------------------------------------ both


def diagnose(*, domain: str, task: Task, messages: Sequence[Message | dict[str, Any]]) -> Diagnosis:
    """The database diff and the expected-action trace of a finished conversation.

    The diff is computed only when τ²'s own database check fails; in domains that sync
    the phone with the records, against the expected actions played as a conversation
    plays them (see :func:`_expected_as_played`). Raises what τ²'s replay of
    ``messages`` raises.
    """
    trajectory = messages_from_json(messages)
    actual, expected, db_match = final_environments(domain=domain, task=task, messages=trajectory)
    changes: list[Change] = []
    if db_match is False:
        if _syncs(expected):
            expected = _expected_as_played(domain, task)
        (agent_actual, user_actual), (agent_expected, user_expected) = (
            _databases(actual),
            _databases(expected),
        )
        changes = db_diff(agent_actual, agent_expected, db="agent") + db_diff(
            user_actual, user_expected, db="user"
        )
    criteria = task.evaluation_criteria
    basis = set(criteria.reward_basis or ()) if criteria is not None else set()
    return Diagnosis(
        db_match=db_match,
        db_scored=RewardType.DB in basis,
        changes=changes,
        steps=action_trace(trajectory, task, domain=domain),
    )
