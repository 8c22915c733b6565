"""An LLM's review of one τ²-bench conversation (upstream τ²'s ``tau2 review``).

The reviewer reads the domain's policy, the task's user scenario (what the simulated
customer was told to do), the outcome and the conversation, each message numbered with
its ``seq``, and answers in JSON: findings, each with a ``source`` (``agent`` or
``user``: the simulated customer), a ``severity`` (``minor`` / ``critical``; upstream's
``critical_helped`` / ``critical_hindered`` read as critical), a ``category`` from
upstream's tags, the message it points at and a justification.

:func:`review_messages` builds the request, :func:`review_parse` reads the answer, and
:func:`review_run` does both over one route (role ``judge``: metered like τ²'s NL
judge). An answer that is not that JSON, or names a message the conversation does not
have, raises :class:`ReviewReplyError` with a readable reason: nothing half-read. No
Django here: the app stores what this returns.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tau2_env.engine import catalog, episodes
from tau2_env.llm import compat, gateway, tau2_gen
from tau2_env.llm.llm_args import ROLE_KEY

__all__ = [
    "CATEGORIES",
    "MARKER",
    "MODES",
    "SEVERITIES",
    "SOURCES",
    "Finding",
    "Review",
    "ReviewReplyError",
    "review_messages",
    "review_parse",
    "review_run",
    "review_run_tau2",
    "tau2_reviews",
]

# The first words of the reviewer's instructions (tests' scripted servers answer by them).
MARKER = "You review one conversation of τ²-bench"

SOURCES = ("agent", "user")
# What each severity the reviewer may say is stored as.
SEVERITIES = {
    "minor": "minor",
    "benign": "minor",
    "critical": "critical",
    "critical_helped": "critical",
    "critical_hindered": "critical",
}
# Upstream τ²'s review tags, with what people call them.
CATEGORIES: dict[str, str] = {
    "hallucination": "a claim or a value not backed by the policy, the tools' results or "
    "the conversation",
    "guideline_violation": "an action or answer the domain policy forbids (policy violation)",
    "tool_call_argument_error": "a tool called with wrong arguments",
    "premature_termination": "the conversation ended before the task was done",
    "missed_required_action": "an action the task needed was never taken",
    "wrong_sequence": "the right actions in the wrong order",
    "user_instruction_deviation": "the simulated customer did not follow its scenario "
    "(asked for something else, revealed what it should not, gave up, invented facts)",
    "other": "anything else worth a person's look",
    # τ² 1.x's reviewer has these tags too.
    "incorrect_interpretation": "misread a tool's result or a message",
    "revealed_info_early": "shared information before it was appropriate or verified",
    "inconsistent_behavior": "contradicted an earlier statement or action",
    "tool_call_schema_error": "a tool called by a wrong name, or with missing or mistyped "
    "arguments",
    "irrelevant_tool_call": "a tool call with nothing to do with the task at that point",
}
# Other names a reviewer may use for the same tags.
_CATEGORY_ALIASES = {
    "policy_violation": "guideline_violation",
    "wrong_tool_arguments": "tool_call_argument_error",
    "tool_argument_error": "tool_call_argument_error",
    "premature_end": "premature_termination",
    "wrong_order": "wrong_sequence",
    "user_deviation": "user_instruction_deviation",
    "simulator_deviation": "user_instruction_deviation",
    "user_simulator_deviation": "user_instruction_deviation",
}
# What a review reads: both sides ("full": the agent and the simulated customer) or the
# simulated customer only ("user"), as ``tau2 review --mode``.
MODES = {"full": "the agent and the customer", "user": "the simulated customer only"}

# Longest text of one message the reviewer reads (a tool's result can be long).
MESSAGE_CHARS = 4000


class ReviewReplyError(ValueError):
    """The reviewer's answer could not be used; ``str()`` says why, for people.
    ``usage``: the tokens of the call that answered it (it was made, and paid for)."""

    usage: gateway.Usage = gateway.Usage()


@dataclass(frozen=True)
class Finding:
    """One error the reviewer found: ``seq`` the message it points at (``None``: the
    conversation as a whole), ``severity`` ``minor`` or ``critical``, ``category`` one of
    :data:`CATEGORIES`."""

    seq: int | None
    source: str
    severity: str
    category: str
    justification: str


@dataclass(frozen=True)
class Review:
    """``authentication``: τ²'s classification of the customer's authentication
    (``status``: succeeded, failed or not_needed; ``reasoning``), from τ² 1.x's full review
    only."""

    findings: tuple[Finding, ...]
    summary: str = ""
    authentication: Mapping[str, str] | None = None


@dataclass(frozen=True)
class ReviewOutcome:
    """What :func:`review_run` returns: the review, and the reviewer call's tokens."""

    review: Review
    usage: gateway.Usage


_INSTRUCTIONS = f"""{MARKER}-bench: a customer-service agent (the "agent") helping a \
simulated customer (the "user", an LLM playing a scenario) under a domain policy.

Find the errors in it. For each say who made it ("agent" or "user": the simulated \
customer), how much it matters ("critical": it changed or could change the task's \
outcome; "minor": it did not), its category, the number of the message it is in, and why.

Categories:
{chr(10).join(f"- {name}: {what}" for name, what in CATEGORIES.items())}

Answer with one JSON object and nothing else:
{{"summary": "one or two sentences",
 "findings": [{{"message": <the message's number, or null for the conversation as a \
whole>, "source": "agent" | "user", "severity": "minor" | "critical", "category": \
"<one of the categories>", "justification": "why, citing the policy or the scenario"}}]}}
An empty "findings" list says the conversation has no error."""


def _text(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= MESSAGE_CHARS else text[:MESSAGE_CHARS] + " …(cut)"


def _render(seq: int, message: Mapping[str, Any]) -> str:
    role: Any = message.get("role")  # whatever the transcript held
    who = {"assistant": "agent", "user": "user", "tool": "tool result"}.get(role, str(role))
    lines = [
        f"[message {seq}] {who}:"
        + (f" {_text(message['content'])}" if message.get("content") else "")
    ]
    for call in message.get("tool_calls") or ():
        args = json.dumps(call.get("arguments") or {}, ensure_ascii=False, sort_keys=True)
        lines.append(f"  calls {call.get('name')}({_text(args)})")
    return "\n".join(lines)


def review_messages(
    *,
    policy: str,
    scenario: Any,
    trace: Iterable[tuple[int, Mapping[str, Any]]],
    outcome: str,
) -> list[dict[str, str]]:
    """The reviewer's request: instructions, then the policy, the user scenario, the
    outcome and the conversation (``trace``: ``(seq, τ² message JSON)`` in order)."""
    conversation = "\n".join(_render(seq, message) for seq, message in trace)
    scenario_text = (
        scenario
        if isinstance(scenario, str)
        else json.dumps(scenario, ensure_ascii=False, indent=1, sort_keys=True)
    )
    body = (
        f"# Domain policy (the agent's)\n{policy}\n\n"
        f"# User scenario (the simulated customer's instructions)\n{scenario_text}\n\n"
        f"# Outcome\n{outcome}\n\n"
        f"# Conversation\n{conversation}"
    )
    return [{"role": "system", "content": _INSTRUCTIONS}, {"role": "user", "content": body}]


_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)


def review_parse(text: str | None, *, seqs: Iterable[int]) -> Review:
    """The review in the reviewer's answer ``text``; ``seqs`` the conversation's message
    numbers. Raises :class:`ReviewReplyError` (readable) for anything but the asked JSON,
    a finding of an unknown source, severity or category, a missing justification, or
    a message that does not exist."""
    known = set(seqs)
    raw = (text or "").strip()
    fenced = _FENCE.match(raw)
    if fenced:
        raw = fenced.group(1)
    if not raw:
        raise ReviewReplyError("The reviewer answered nothing.")
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ReviewReplyError(
            f"The reviewer's answer is not JSON ({exc.msg} at character {exc.pos}): {raw[:160]!r}"
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("findings"), list):
        raise ReviewReplyError(
            'The reviewer\'s answer is JSON but not an object with a "findings" list.'
        )
    findings = [_finding(i, item, known) for i, item in enumerate(data["findings"], 1)]
    summary = data.get("summary")
    return Review(findings=tuple(findings), summary=summary if isinstance(summary, str) else "")


def _finding(number: int, item: Any, known: set[int]) -> Finding:
    where = f"Finding {number} of the reviewer's answer"
    if not isinstance(item, dict):
        raise ReviewReplyError(f"{where} is not an object.")
    seq = item.get("message", item.get("seq"))
    if isinstance(seq, str) and seq.strip().isdigit():
        seq = int(seq)
    if seq is not None and (isinstance(seq, bool) or not isinstance(seq, int)):
        raise ReviewReplyError(f"{where} names the message {seq!r}, which is not a number.")
    if seq is not None and seq not in known:
        last = max(known) if known else None
        raise ReviewReplyError(
            f"{where} points at message {seq}, which the conversation does not have "
            + (f"(its messages are 0 to {last})." if last is not None else "(it has none).")
        )
    source = str(item.get("source", "")).strip().lower()
    if source in ("customer", "user_simulator", "simulator"):
        source = "user"
    if source not in SOURCES:
        raise ReviewReplyError(f"{where} has the source {source!r}; it must be agent or user.")
    severity = SEVERITIES.get(str(item.get("severity", "")).strip().lower())
    if severity is None:
        raise ReviewReplyError(
            f"{where} has the severity {item.get('severity')!r}; it must be minor or critical."
        )
    category = str(item.get("category", item.get("tag", ""))).strip().lower().replace(" ", "_")
    category = _CATEGORY_ALIASES.get(category, category)
    if category not in CATEGORIES:
        raise ReviewReplyError(
            f"{where} has the category {item.get('category')!r}; it must be one of "
            + ", ".join(CATEGORIES)
            + "."
        )
    justification = item.get("justification")
    if not isinstance(justification, str) or not justification.strip():
        raise ReviewReplyError(f"{where} gives no justification.")
    return Finding(
        seq=seq,
        source=source,
        severity=severity,
        category=category,
        justification=justification.strip(),
    )


def review_run(
    *,
    route: gateway.Route,
    messages: list[dict[str, str]],
    seqs: Iterable[int],
    llm_args: Mapping[str, Any] | None = None,
) -> ReviewOutcome:
    """Ask the reviewer on ``route`` (role ``judge``, τ²'s default temperature 0 unless
    ``llm_args`` say otherwise) and read its answer.

    Raises :class:`ReviewReplyError` for an unusable answer and ``llm.LLMCallError``
    (readable, key-free) for a failed call. Either way nothing is returned to store.
    """
    args = dict(llm_args) if llm_args is not None else {"temperature": 0.0}
    with gateway.conversation(user=route, judge=route), gateway.metered() as meter:
        response = gateway.routed_completion(
            messages=messages, **args, **{ROLE_KEY: gateway.ROLE_JUDGE}
        )
        usage = meter.of(gateway.ROLE_JUDGE)
    try:
        text = response.choices[0].message.content
    except (AttributeError, IndexError, TypeError):
        text = None
    try:
        review = review_parse(text, seqs=seqs)
    except ReviewReplyError as exc:
        # The call was made and paid for: the error says so, the caller keeps the usage.
        exc.usage = usage
        raise
    return ReviewOutcome(review=review, usage=usage)


# --- τ² 1.x's own reviewer ---------------------------------------------------------------


def tau2_reviews() -> tuple[str, ...]:
    """The modes τ²'s own reviewer has where it is installed (1.x: ``full``, ``user``);
    none on τ² 0.2, whose reviews are the studio's (:func:`review_run`, ``full``)."""
    return tuple(tau2_gen.REVIEW_MODES)


def review_run_tau2(
    *,
    route: gateway.Route,
    domain: str,
    task_id: str,
    trace: Iterable[tuple[int, Mapping[str, Any]]],
    mode: str,
    termination_reason: str | None = None,
    retrieval_config: str | None = None,
    user_llm: str | None = None,
    user_llm_args: Mapping[str, Any] | None = None,
) -> ReviewOutcome:
    """τ² 1.x's own review (``tau2 review --mode <mode>``) of a stored conversation
    (``trace``: ``(seq, τ² message JSON)`` in order), its calls on ``route`` (role
    ``judge``, metered). The conversation goes to τ² as ``get_trajectory`` hands it to
    ``tau2 run --auto-review`` (``turn_idx`` its place in order), the policy is its
    environment's (a knowledge domain's depends on the retrieval configuration).

    τ²'s errors become findings on the message of their turn (``None``: unknown or the
    whole conversation); their first tag known here is the category, the rest are named in
    the justification, with τ²'s ``correct_behavior``. An answer τ² could not read raises
    :class:`ReviewReplyError` with τ²'s words; an error of no known source is left out
    and counted in the summary."""
    if mode not in tau2_reviews():
        raise ValueError(f"τ²'s reviewer has no mode {mode!r} here; it has {tau2_reviews()!r}")
    compat.install()  # τ²'s calls along the route, never on the server's keys
    pairs = list(trace)
    seq_of_turn = {turn: seq for turn, (seq, _) in enumerate(pairs)}
    messages = episodes.messages_from_json(dict(message) for _, message in pairs)
    for turn, message in enumerate(messages):
        message.turn_idx = turn
    task = catalog.get_tau2_task(domain, task_id)
    env_kwargs = tau2_gen.environment_kwargs(
        domain=domain, task=task, retrieval_config=retrieval_config
    )
    policy = (
        tau2_gen.build_environment(domain=domain, env_kwargs=env_kwargs).get_policy()
        if env_kwargs
        else catalog.get_domain(domain).policy
    )
    with gateway.conversation(user=route, judge=route), gateway.metered() as meter:
        result = tau2_gen.review(
            messages=messages,
            task=task,
            ended=termination_reason,
            mode=mode,
            policy=policy,
            user_llm=user_llm,
            user_llm_args=dict(user_llm_args) if user_llm_args is not None else None,
            review_model=route.litellm_model,
        )
        usage = meter.of(gateway.ROLE_JUDGE)
    if result["unreadable"]:
        error = ReviewReplyError(f"τ²'s reviewer could not read the answer: {result['unreadable']}")
        error.usage = usage
        raise error
    findings = []
    unknown = 0
    for error in result["errors"]:
        if error["source"] not in SOURCES:
            unknown += 1
            continue
        findings.append(_finding_of_tau2(error, seq_of_turn))
    summary = result["summary"]
    if unknown:
        summary = (
            f"{summary} ({unknown} finding{'s' if unknown != 1 else ''} naming neither the "
            "agent nor the customer left out.)"
        ).strip()
    return ReviewOutcome(
        review=Review(
            findings=tuple(findings), summary=summary, authentication=result["authentication"]
        ),
        usage=usage,
    )


def _finding_of_tau2(error: Mapping[str, Any], seq_of_turn: Mapping[int, int]) -> Finding:
    tags = [str(tag).strip().lower() for tag in error["tags"] if str(tag).strip()]
    known = [tag for tag in tags if tag in CATEGORIES]
    category = known[0] if known else "other"
    severity = error["severity"]
    words = [
        {
            "critical_helped": "It helped the agent.",
            "critical_hindered": "It hindered the agent.",
        }.get(severity or "", ""),
        error["reasoning"].strip(),
    ]
    if [tag for tag in tags if tag != category]:
        words.append(f"(τ²'s tags: {', '.join(tags)})")
    if error["correct_behavior"].strip():
        words.append(f"Instead: {error['correct_behavior'].strip()}")
    if severity is None:
        words.append("(τ² gave no severity: kept as minor.)")
    turn = error["turn_idx"]
    return Finding(
        seq=seq_of_turn.get(turn) if isinstance(turn, int) else None,
        source=error["source"],
        severity=SEVERITIES.get(str(severity or "").lower(), "minor"),
        category=category,
        justification=" ".join(word for word in words if word) or "(τ² gave no reasoning)",
    )
