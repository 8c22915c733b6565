"""Turn stored τ² messages and reward info into what run pages show."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.db.models import Q
from django.template.loader import render_to_string

from apps.accounts.access import can_control, can_review
from apps.inference.pricing import money_label
from apps.runs import lineage
from apps.runs.models import Run, RunEvent
from tau2_env import jsonbounds
from tau2_env.llm.llm_args import DEFAULT_AGENT_ARGS, DEFAULT_USER_ARGS, llm_args_label

# τ²'s markers that end a conversation (``tau2.user.base`` STOP, TRANSFER, OUT_OF_SCOPE;
# an agent's stop, ``tau2_env.engine.episodes.AGENT_STOP``, is STOP too), and how the page says
# what happened. They are control words, not text: as Markdown ``###STOP###`` would
# become a heading.
STOP_MARKERS = {
    "###STOP###": "ended the conversation",
    "###TRANSFER###": "asked for a transfer to a human agent",
    "###OUT-OF-SCOPE###": "ended the conversation: out of scope",
}
_MARKER_RE = re.compile("|".join(re.escape(m) for m in STOP_MARKERS))


def split_stop_marker(content: str) -> tuple[str, str]:
    """``content`` without τ²'s stop markers, and what the first one said (or ``""``)."""
    found = _MARKER_RE.search(content)
    if found is None:
        return content, ""
    return _MARKER_RE.sub("", content).strip(), STOP_MARKERS[found.group(0)]


def shown_json(text: str) -> Any:
    """``text`` read as JSON to be shown (a tool's result, a call's arguments: what a
    model, a tool or an imported file wrote), by the bounded reader; raises
    ``ValueError`` for text to show as it is — not JSON, or nested too deep to parse
    without a ``RecursionError``."""
    return jsonbounds.loads(text, max_bytes=_SHOWN_MAX_BYTES, max_int_digits=1000)


# Larger text is shown as it is, not parsed and indented.
_SHOWN_MAX_BYTES = 1024 * 1024


def _pretty(value: Any) -> str:
    if isinstance(value, str):
        try:
            value = shown_json(value)
        except ValueError:
            return value
    return json.dumps(value, indent=2, ensure_ascii=False)


def reasoning_of(message: dict[str, Any]) -> str:
    """A model's reasoning behind ``message`` (τ²'s message JSON), or ``""``.

    τ² keeps the provider's reply in ``raw_data``: litellm's choice (``to_dict()``, τ² 0.2)
    or its whole response (``choices[0]``, τ² 1.x), whose ``message`` has
    ``reasoning_content`` (OpenAI-style reasoning models, and litellm's join of
    Anthropic's thinking) and, for Anthropic, ``thinking_blocks``. Model output: the
    templates escape it.
    """
    raw = message.get("raw_data")
    if not isinstance(raw, dict):
        return ""
    reply = raw.get("message")
    if not isinstance(reply, dict):
        choices = raw.get("choices")
        first = choices[0] if isinstance(choices, list) and choices else None
        reply = first.get("message") if isinstance(first, dict) else None
    if not isinstance(reply, dict):
        return ""
    text = reply.get("reasoning_content")
    if isinstance(text, str) and text.strip():
        return text.strip()
    blocks = reply.get("thinking_blocks")
    if not isinstance(blocks, list):
        return ""
    parts, redacted = [], 0
    for block in blocks:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "redacted_thinking":
            redacted += 1
        elif isinstance(block.get("thinking"), str) and block["thinking"].strip():
            parts.append(block["thinking"].strip())
    if redacted:
        parts.append(
            f"({redacted} thinking block{'s' if redacted > 1 else ''} redacted by the provider)"
        )
    return "\n\n".join(parts)


# Scripts written without spaces between words (Chinese, Japanese): counted in characters.
_UNSPACED = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


def reasoning_size(text: str) -> str:
    """``120 words`` (or ``1,204 characters`` for text not written in words, such as
    Chinese), for the collapsed reasoning's summary."""
    if _UNSPACED.search(text):
        return f"{len(text):,} character{'' if len(text) == 1 else 's'}"
    words = len(text.split())
    return f"{words:,} word{'' if words == 1 else 's'}"


def event_view(event: RunEvent) -> dict[str, Any]:
    """One event as the templates want it: who speaks, text, tool calls, tool result, and
    the model's reasoning behind it (``reasoning``, ``""`` for none)."""
    message = event.message or {}
    reasoning = reasoning_of(message) if message.get("role") != "tool" else ""
    if reasoning and event.kind == RunEvent.Kind.CUSTOMER and _being_played(event):
        # τ²'s agent never sees the customer's reasoning: neither does the person playing
        # the agent, until the conversation is over.
        reasoning = ""
    content, ended = ("", "")
    if message.get("role") != "tool":
        content, ended = split_stop_marker(message.get("content") or "")
    return {
        "seq": event.seq,
        "kind": event.kind,
        "content": content,
        "ended": ended,
        "tool_calls": [
            {"id": c.get("id"), "name": c.get("name"), "arguments": _pretty(c.get("arguments"))}
            for c in message.get("tool_calls") or []
        ],
        "result": _pretty(message.get("content")) if message.get("role") == "tool" else "",
        "result_for": message.get("id") if message.get("role") == "tool" else "",
        "error": bool(message.get("error")),
        "reasoning": reasoning,
        "reasoning_size": reasoning_size(reasoning) if reasoning else "",
        "latency_ms": event.latency_ms,
        **timing_view(event.latency_ms, event.attempts),
        "tokens": event.prompt_tokens + event.completion_tokens,
        "cost": event.cost_usd,
    }


def duration_words(seconds: float) -> str:
    """``640 ms``, ``30.7 s``, ``8 min 17 s`` or ``1 h 2 min``: a model's time, for people."""
    if seconds < 1:
        return f"{round(seconds * 1000)} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = round(seconds)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60} min"


_SIDES = {"user": "customer", "agent": "agent", "judge": "judge"}


def timing_view(latency_ms: int | None, attempts: list[dict] | None) -> dict[str, Any]:
    """A message's model time for its header: ``took`` ("8 min 17 s", "" for none),
    ``attempts_n`` (0 when only one was made, or for runs stored before attempts were
    kept) and ``attempts_lines``, one per attempt in order ("customer: timed out after
    120 s, 2 min 0 s"), for the header's list of attempts (``includes/took.html``)."""
    tries = [a for a in attempts or [] if isinstance(a, dict)]
    lines = [
        f"{_SIDES.get(str(a.get('role')), a.get('role') or '?')}: "
        f"{a.get('said') or a.get('outcome') or '?'}, "
        f"{duration_words(float(a.get('seconds') or 0))}"
        for a in tries
    ]
    return {
        "took": duration_words(latency_ms / 1000) if latency_ms else "",
        "attempts_n": len(tries) if len(tries) > 1 else 0,
        "attempts_lines": lines,
    }


def _being_played(event: RunEvent) -> bool:
    """The event's run is a play session (a person is the agent) still going on."""
    run = event.run
    return run.kind == Run.Kind.HUMAN and not run.is_final


@dataclass(frozen=True)
class MessageMenu:
    """What each message of a run page offers besides itself (``includes/message_menu.html``):
    a link to it, "Fork here" (``can_fork``, at messages of ``fork_kinds``), "Label message"
    (``reviewer``), and, in a fork, which messages were copied from the parent (those before
    ``fork_seq``, from run ``parent_pk``, ``None`` once it was deleted).

    The run page and its live socket both build it with :func:`message_menu`, so a message
    that arrives live is the HTML a reload shows.
    """

    run_pk: int
    run_url: str
    can_fork: bool
    fork_kinds: tuple[str, ...]
    reviewer: bool
    fork_seq: int | None = None
    parent_pk: int | None = None

    def inherited(self, seq: int) -> bool:
        return self.fork_seq is not None and seq < self.fork_seq


def message_menu(*, run: Run, user, fork: dict | None = None) -> MessageMenu:
    """The :class:`MessageMenu` of ``run``'s messages for ``user`` (``fork``: the page's
    ``lineage.fork_context``, read again when not given)."""
    fork = fork if fork is not None else lineage.fork_context(user, run)
    return MessageMenu(
        run_pk=run.pk,
        run_url=run.get_absolute_url(),
        can_fork=fork["can_fork"],
        fork_kinds=tuple(fork["kinds"]),
        reviewer=can_review(user),
        fork_seq=run.fork_seq,
        parent_pk=run.parent_id,
    )


def message_view(event: RunEvent, *, menu: MessageMenu | None) -> dict[str, Any]:
    """:func:`event_view` with what its menu shows: ``menu`` and whether the message was
    copied from the fork's parent (``inherited``)."""
    view = event_view(event)
    view["menu"] = menu
    view["inherited"] = menu is not None and menu.inherited(event.seq)
    return view


def event_html(event: RunEvent, *, menu: MessageMenu | None = None) -> str:
    """One message as ``includes/run_event.html`` shows it: with ``menu`` as on the run page,
    without it as the play page, the admin and comparisons show messages."""
    return render_to_string("includes/run_event.html", {"e": message_view(event, menu=menu)})


def reward_view(reward_info: dict | None) -> dict[str, Any] | None:
    """τ²'s RewardInfo, grouped for the result panel."""
    if not reward_info:
        return None
    return {
        "reward": reward_info.get("reward"),
        "basis": reward_info.get("reward_basis") or [],
        "breakdown": reward_info.get("reward_breakdown") or {},
        "db": reward_info.get("db_check"),
        "env": reward_info.get("env_assertions") or [],
        "communicate": reward_info.get("communicate_checks") or [],
        "nl": reward_info.get("nl_assertions") or [],
        "actions": reward_info.get("action_checks") or [],
    }


def status_html(run: Run, *, user, request=None) -> str:
    """The status line (and the result once final) as ``user`` may act on it: Stop only
    for whoever started the run, or staff."""
    context = {
        "run": run,
        "result": reward_view(run.reward_info),
        "user": user,
        "can_stop": can_control(user, owner_id=run.created_by_id),
    }
    return render_to_string("includes/run_status.html", context, request=request)


def _role_cost(role: str, prompt: int, completion: int, cost: Decimal | None) -> dict[str, Any]:
    return {
        "role": role,
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "tokens": prompt + completion,
        "cost": cost,
        "label": money_label(cost) if prompt + completion else "no calls",
    }


def cost_view(run: Run) -> dict[str, Any]:
    """What the run's LLM calls cost, split by role, and in total.

    ``roles``: the agent's and the customer's calls (tokens, cost, a label); a person
    playing the agent makes no agent calls; τ²'s NL-assertion judge's (role ``judge``)
    and a knowledge domain's embeddings (role ``embeddings``) when they made any.
    ``judged``: the judge ran but was not metered (runs scored before
    it was: τ²'s evaluator does not report its tokens).
    ``total``: the priced roles' sum; ``complete`` is false when a role with calls has no
    price, and ``label`` then says so (``$0.0012 + unpriced``) — never a $0 for unknown.
    """
    roles = [
        _role_cost("agent", run.prompt_tokens, run.completion_tokens, run.cost_usd),
        _role_cost(
            "customer", run.user_prompt_tokens, run.user_completion_tokens, run.user_cost_usd
        ),
    ]
    # A person or an outside agent plays the agent: its calls are not this server's.
    if run.kind in (Run.Kind.HUMAN, Run.Kind.AGENT) and not roles[0]["tokens"]:
        roles = roles[1:]
    judge = _role_cost(
        "judge", run.judge_prompt_tokens, run.judge_completion_tokens, run.judge_cost_usd
    )
    if judge["tokens"]:
        roles.append(judge)
    # A knowledge domain's embeddings (its documents, the agent's searches).
    embedder = _role_cost("embeddings", run.embedding_prompt_tokens, 0, run.embedding_cost_usd)
    if embedder["tokens"]:
        roles.append(embedder)
    used = [r for r in roles if r["tokens"]]
    priced = [r["cost"] for r in used if r["cost"] is not None]
    complete = len(priced) == len(used)
    total = sum(priced, Decimal(0)) if priced else None
    if not used:
        label = "no calls" if run.is_final else "no calls yet"
    elif total is None:
        label = "unpriced"
    else:
        label = money_label(total) + ("" if complete else " + unpriced")
    return {
        "roles": roles,
        "tokens": sum(r["tokens"] for r in roles),
        "total": total if complete else None,
        "priced_part": total,
        "complete": complete,
        "label": label,
        "judged": bool((run.reward_info or {}).get("nl_assertions")) and not judge["tokens"],
    }


def reasoning_roles(run: Run) -> list[str]:
    """The roles (``agent``, ``customer``) of ``run`` with a message a model reasoned
    for: their completion tokens, as providers count them, include the reasoning's, and
    the cost prices them (one query)."""
    # Where reasoning_of finds it: in the choice τ² 0.2 keeps, or the response 1.x keeps.
    reasoned = Q(message__raw_data__message__reasoning_content__gt="") | Q(
        message__raw_data__choices__0__message__reasoning_content__gt=""
    )
    kinds = set(
        RunEvent.objects.filter(
            reasoned,
            run_id=run.pk,
            kind__in=(RunEvent.Kind.AGENT, RunEvent.Kind.CUSTOMER),
        )
        .values_list("kind", flat=True)
        .distinct()
    )
    return [role for kind, role in _ROLES if kind in kinds]


_ROLES = ((RunEvent.Kind.AGENT, "agent"), (RunEvent.Kind.CUSTOMER, "customer"))
# Where a side ran when it names no connection.
ROUTER = "Hugging Face Inference Providers"
IMPORTED = "as an imported tau2 run file names it"


@dataclass(frozen=True)
class SideView:
    """Where one side of a run or an evaluation ran, for pages (never a key).

    ``model`` as its provider names it (``""`` for a person or an outside agent);
    ``where`` the connection (``Our vLLM (OpenAI-compatible endpoint)``), Hugging Face's
    router, or who played it; ``connection`` its name (``""``: none); ``llm_args`` τ²'s
    arguments it ran with (τ²'s default for rows from before they could be chosen),
    ``args_label`` them for people, ``default_args`` whether they are τ²'s default.
    """

    role: str
    model: str
    where: str
    connection: str = ""
    llm_args: dict[str, Any] | None = None
    args_label: str = ""
    default_args: bool = False

    @property
    def played_by_model(self) -> bool:
        return bool(self.model)


_NAMED_ARGS = ("temperature", "top_p", "max_tokens", "reasoning_effort")


def ordered_args(args: dict[str, Any]) -> dict[str, Any]:
    """``args`` in the order people read them: the named arguments as the forms list them,
    then the provider extras by name (PostgreSQL's jsonb keeps its own order)."""
    named = [k for k in _NAMED_ARGS if k in args]
    return {k: args[k] for k in [*named, *sorted(k for k in args if k not in _NAMED_ARGS)]}


def _side(*, role: str, model: str, connection, llm_args, default, imported: bool) -> SideView:
    args = ordered_args(dict(default) if llm_args is None else dict(llm_args))
    if connection is not None:
        where = connection.where_label + (" — deleted since" if connection.is_deleted else "")
    else:
        where = IMPORTED if imported else ROUTER
    return SideView(
        role=role,
        model=model,
        where=where,
        connection=connection.name if connection is not None else "",
        llm_args=args,
        args_label=llm_args_label(args),
        default_args=args == dict(default),  # 0 and 0.0 are one temperature
    )


def side_views(row) -> list[SideView]:
    """The agent's and the customer's :class:`SideView` of ``row``, a run or an
    evaluation (both name each side's model, connection and τ² llm_args alike)."""
    kind = getattr(row, "kind", Run.Kind.MODEL)
    imported = (row.provenance or {}).get("source") == "tau2 run import"
    if kind == Run.Kind.HUMAN:
        agent = SideView(role="agent", model="", where="a person")
    elif kind == Run.Kind.AGENT:
        agent = SideView(role="agent", model="", where="an outside agent, over the API")
    else:
        agent = _side(
            role="agent",
            model=row.agent_model,
            connection=row.agent_connection,
            llm_args=row.agent_llm_args,
            default=DEFAULT_AGENT_ARGS,
            imported=imported,
        )
    customer = _side(
        role="customer",
        model=row.user_model,
        connection=row.user_connection,
        llm_args=row.user_llm_args,
        default=DEFAULT_USER_ARGS,
        imported=imported,
    )
    return [agent, customer]
