"""The catalogue of τ²-bench: domains, splits, tasks, policies and tools.

A read-only view of what the installed τ² provides, shaped for people (titles,
chips, "changes the database") and for storage. Framework-free: the Django app
`apps.tasks` copies it into its tables with `manage.py load_tasks`, and the engine
reads tasks from here.

τ²'s task loaders re-read their JSON on every call (telecom's 2,285 tasks take
about a second), so everything here is cached per process.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tau2_env.generations import task_set_version, tau2_version
from tau2_env.llm import compat, embeddings, tau2_gen
from tau2_env.llm._tau2 import registry

__all__ = [
    "Document",
    "DomainInfo",
    "agent_policy",
    "agent_tools",
    "RetrievalConfig",
    "TaskInfo",
    "ToolInfo",
    "catalogue_hash",
    "default_retrieval_config",
    "document_search",
    "documents",
    "domain_names",
    "get_domain",
    "get_task",
    "load_domain_tasks",
    "results_policy",
    "retrieval_configs",
    "retrieval_embedder",
    "retrieval_refusal",
    "skipped_domains",
    "task_documents",
    "task_set_version",
    "tau2_version",
    "title_from",
]

# The split every domain has: all of its tasks. τ²'s mock domain declares no
# splits, so it gets this one only.
BASE_SPLIT = "base"

_SENTENCE_END = re.compile(r"(?<=[.!?])\s")


@dataclass(frozen=True)
class ToolInfo:
    """One tool of a domain, as the agent (or, in telecom, the customer) sees it."""

    name: str
    description: str
    schema: dict[str, Any]  # the OpenAI function schema τ² sends to models
    kind: str  # "read" | "write" | "think" | "generic", from τ²'s ToolType
    requestor: str  # "assistant" (the agent's tools) or "user" (the customer's phone)


@dataclass(frozen=True)
class TaskInfo:
    """A task with the fields the explorer and the task page show.

    ``raw`` is τ²'s own ``Task.model_dump(mode="json")``; everything else is derived
    from it and from the domain's tool types.
    """

    domain: str
    task_id: str
    title: str
    purpose: str
    reason_for_call: str
    known_info: str
    unknown_info: str
    task_instructions: str
    persona: str
    ticket: str
    reward_basis: tuple[str, ...]
    expected_actions: tuple[dict[str, Any], ...]
    tool_names: tuple[str, ...]
    changes_db: bool
    raw: dict[str, Any] = field(repr=False)

    @property
    def expected_calls(self) -> int:
        return len(self.expected_actions)

    @property
    def evaluation_criteria(self) -> dict[str, Any]:
        return self.raw.get("evaluation_criteria") or {}


@dataclass(frozen=True)
class DomainInfo:
    name: str
    policy: str
    tools: tuple[ToolInfo, ...]
    user_tools: tuple[ToolInfo, ...]
    splits: dict[str, tuple[str, ...]]  # split name -> task ids, in τ²'s order
    content_hash: str  # sha256 over tasks, splits, policy and tool schemas

    def tool_kinds(self) -> dict[tuple[str, str], str]:
        """``{(requestor, tool name): kind}`` for the agent's and the customer's tools."""
        return {(t.requestor, t.name): t.kind for t in (*self.tools, *self.user_tools)}


def title_from(text: str) -> str:
    """The first sentence of ``text``, on one line; the whole text if it has one sentence."""
    flat = " ".join((text or "").split())
    if not flat:
        return ""
    return _SENTENCE_END.split(flat, maxsplit=1)[0]


def domain_names() -> list[str]:
    """Every domain the installed τ² registers, in its order (mock, airline, retail, …),
    but those this server leaves out (:func:`skipped_domains`)."""
    return [d for d in registry.get_domains() if d not in tau2_gen.CATALOGUE_SKIPS]


def skipped_domains() -> dict[str, str]:
    """The domains the installed τ² registers that the catalogue leaves out, each with
    why (e.g. one whose environment cannot be built offline)."""
    return {d: why for d, why in tau2_gen.CATALOGUE_SKIPS.items() if d in registry.get_domains()}


@dataclass(frozen=True)
class RetrievalConfig:
    """One way a knowledge domain's agent reaches its documents (``tau2 run
    --retrieval-config``), and why this server cannot run it (``refusal``; ``None``: it
    runs here). ``embedder``: the embedding model τ² declares for it (e.g.
    ``text-embedding-3-large``), ``embedder_type`` its provider (``openai``,
    ``openrouter``); both "" for one that embeds nothing (it runs offline). One that
    embeds runs with its embeddings on a connection model a run names."""

    name: str
    refusal: str | None
    embedder: str = ""
    embedder_type: str = ""

    @property
    def available(self) -> bool:
        return self.refusal is None

    @property
    def embeds(self) -> bool:
        return bool(self.embedder)


def retrieval_configs(domain: str) -> tuple[RetrievalConfig, ...]:
    """The retrieval configurations of ``domain`` in τ²'s order (none for a domain
    without a knowledge base, and on τ² 0.2)."""
    embedders = tau2_gen.RETRIEVAL_EMBEDDERS.get(domain, {})
    return tuple(
        RetrievalConfig(
            name=name,
            refusal=why,
            embedder=embedders.get(name, ("", ""))[1],
            embedder_type=embedders.get(name, ("", ""))[0],
        )
        for name, why in tau2_gen.RETRIEVAL_CONFIGS.get(domain, {}).items()
    )


def retrieval_embedder(*, domain: str, retrieval_config: str | None) -> str | None:
    """The embedding model τ² declares for ``domain``'s ``retrieval_config`` (``None``:
    it embeds nothing, or is unknown)."""
    found = tau2_gen.RETRIEVAL_EMBEDDERS.get(domain, {}).get(retrieval_config or "")
    return found[1] if found else None


def default_retrieval_config(domain: str) -> str | None:
    """The retrieval configuration ``domain`` runs with when none is chosen (an offline
    one; ``None`` for a domain without retrieval configurations)."""
    return tau2_gen.DEFAULT_RETRIEVAL_CONFIGS.get(domain)


def retrieval_refusal(
    *, domain: str, retrieval_config: str | None, embeddings: bool | None = None
) -> str | None:
    """Why ``domain`` cannot run with ``retrieval_config`` here (``None``: it can; for a
    knowledge domain, ``None`` means its default). ``embeddings``: whether the run names
    a connection model for its embeddings — one that embeds needs one, one that does not
    takes none; ``None``: not asked (what the configuration itself allows)."""
    known = tau2_gen.RETRIEVAL_CONFIGS.get(domain, {})
    if retrieval_config is None:
        if embeddings:
            return (
                f"{domain}'s default retrieval configuration embeds nothing: it takes no "
                "embeddings model"
            )
        return None
    if not known:
        return f"{domain} has no retrieval configurations (asked for {retrieval_config!r})"
    if retrieval_config not in known:
        return (
            f"Unknown retrieval configuration {retrieval_config!r} for {domain}; "
            f"known: {', '.join(known)}"
        )
    if known[retrieval_config] is not None or embeddings is None:
        return known[retrieval_config]
    embedder = retrieval_embedder(domain=domain, retrieval_config=retrieval_config)
    if embedder and not embeddings:
        kind = tau2_gen.RETRIEVAL_EMBEDDERS[domain][retrieval_config][0]
        provider = {"openai": "OpenAI", "openrouter": "OpenRouter"}.get(kind, kind)
        return (
            f"{retrieval_config} embeds its documents and the agent's searches with "
            f"{provider} embeddings ({embedder}): choose an embeddings model on one of your "
            "connections for it"
        )
    if embeddings and not embedder:
        return (
            f"{retrieval_config} embeds nothing: an embeddings model is only for the "
            "configurations that embed"
        )
    return None


# The longest wall-clock timeout a run may be given (a week), in seconds.
MAX_TIMEOUT = 7 * 24 * 3600


def timeout_refusal(timeout: float | None) -> str | None:
    """Why a conversation cannot be given ``timeout`` seconds of wall clock here, as
    ``tau2 run --timeout`` gives each simulation (``None``: it can; no timeout always
    can). Refused in words: on τ² 0.2, which has no --timeout; a timeout that is not a
    number of seconds above 0 and at most :data:`MAX_TIMEOUT`."""
    if timeout is None:
        return None
    if tau2_gen.TIMEOUT_REFUSAL is not None:
        return f"No timeout here: {tau2_gen.TIMEOUT_REFUSAL}."
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        return f"The timeout must be a number of seconds, not {timeout!r}."
    if not 0 < timeout <= MAX_TIMEOUT:  # NaN fails this too
        return f"The timeout must be more than 0 and at most {MAX_TIMEOUT} seconds."
    return None


@dataclass(frozen=True)
class Document:
    """One document of a domain's knowledge base (banking_knowledge's policies and
    product sheets), as its agent retrieves it."""

    id: str
    title: str
    content: str


@functools.cache
def documents(domain: str) -> tuple[Document, ...]:
    """The documents of ``domain``'s knowledge base in τ²'s order (none for a domain
    without one, and on τ² 0.2)."""
    return tuple(Document(**doc) for doc in tau2_gen.knowledge_documents(domain))


def document_search(domain: str, query: str) -> list[Document]:
    """``domain``'s documents whose id, title or text contain every word of ``query``
    (any case), those with every word in the title first; all of them for no words."""
    words = query.lower().split()
    if not words:
        return list(documents(domain))
    found = [
        d
        for d in documents(domain)
        if all(w in f"{d.id} {d.title} {d.content}".lower() for w in words)
    ]
    return sorted(found, key=lambda d: not all(w in d.title.lower() for w in words))


def task_documents(domain: str, refs: Iterable[str]) -> list[tuple[str, Document | None]]:
    """Each of a task's ``required_documents`` (ids or titles, as τ²'s golden retrieval
    reads them) with its document (``None``: not in the knowledge base)."""
    by_title = {d.title: d for d in documents(domain)}
    by_id = {d.id: d for d in documents(domain)}
    return [(ref, by_title.get(ref) or by_id.get(ref)) for ref in refs]


@functools.cache
def results_policy(domain: str, retrieval_config: str = "") -> str:
    """The policy a results file of ``domain`` played with ``retrieval_config`` records
    in its ``info``, as ``tau2 run`` writes it (a knowledge domain's: its configuration's
    prompt; otherwise the domain's policy)."""
    own = tau2_gen.results_policy(domain, retrieval_config or None)
    return own if own is not None else get_domain(domain).policy


@functools.cache
def _environment(domain: str):
    default = default_retrieval_config(domain)
    if default is not None:
        # A knowledge domain's tools and policy depend on its retrieval configuration:
        # the catalogue shows those of its default (τ²'s constructor default may not
        # build offline).
        return tau2_gen.build_environment(domain=domain, env_kwargs={"retrieval_variant": default})
    return registry.get_env_constructor(domain)()


@functools.cache
def _variant_environment(domain: str, retrieval_config: str):
    refusal = retrieval_refusal(domain=domain, retrieval_config=retrieval_config)
    if refusal:
        raise ValueError(refusal)
    # Read for its tools and policy only: one that embeds is built without embedding
    # anything (its tools' schemas and its prompt do not depend on the vectors).
    compat.install()
    with embeddings.listing():
        return tau2_gen.build_environment(
            domain=domain, env_kwargs={"retrieval_variant": retrieval_config}
        )


def _played_default(domain: str, retrieval_config: str) -> bool:
    return not retrieval_config or retrieval_config == default_retrieval_config(domain)


@functools.cache
def agent_tools(domain: str, retrieval_config: str = "") -> tuple[ToolInfo, ...]:
    """The agent's tools of ``domain`` played with ``retrieval_config``, in τ²'s order: a
    knowledge domain's depend on it (bm25's ``KB_search``, grep_only's ``grep``, none
    for no_knowledge); "" or any other domain: :func:`get_domain`'s. Raises ``KeyError``
    for an unknown domain, ``ValueError`` for a configuration it cannot run here."""
    if _played_default(domain, retrieval_config):
        return get_domain(domain).tools
    return _tool_infos(_variant_environment(domain, retrieval_config).tools, "assistant")


def agent_policy(domain: str, retrieval_config: str = "") -> str:
    """The policy ``domain``'s agent reads when played with ``retrieval_config`` (a
    knowledge domain's prompt depends on it); "" or any other domain: :func:`get_domain`'s.
    Raises as :func:`agent_tools` does."""
    if _played_default(domain, retrieval_config):
        return get_domain(domain).policy
    return _variant_environment(domain, retrieval_config).get_policy()


def _tool_infos(toolkit, requestor: str) -> tuple[ToolInfo, ...]:
    if toolkit is None:
        return ()
    from tau2.environment.toolkit import get_tool_types

    kinds = get_tool_types(toolkit)
    infos = []
    for name, tool in toolkit.get_tools().items():
        schema = tool.openai_schema
        infos.append(
            ToolInfo(
                name=name,
                description=schema.get("function", {}).get("description", "") or "",
                schema=schema,
                kind=str(getattr(kinds.get(name), "value", kinds.get(name) or "generic")),
                requestor=requestor,
            )
        )
    return tuple(infos)


@functools.cache
def _raw_tasks(domain: str) -> tuple[Any, ...]:
    """τ²'s Task objects of a domain, all of them (every split)."""
    loader = registry.get_tasks_loader(domain)
    if registry.get_task_splits_loader(domain) is None:
        return tuple(loader())
    return tuple(loader(task_split_name=None))


@functools.cache
def get_domain(domain: str) -> DomainInfo:
    """The domain's policy, tools and splits. Raises ``KeyError`` for an unknown domain."""
    if domain in tau2_gen.CATALOGUE_SKIPS:
        raise KeyError(tau2_gen.CATALOGUE_SKIPS[domain])
    if domain not in domain_names():
        raise KeyError(f"Unknown τ²-bench domain {domain!r}; known: {', '.join(domain_names())}")
    env = _environment(domain)
    tools = _tool_infos(env.tools, "assistant")
    user_tools = _tool_infos(getattr(env, "user_tools", None), "user")
    tasks = _raw_tasks(domain)
    splits_loader = registry.get_task_splits_loader(domain)
    known = {t.id for t in tasks}
    if splits_loader is None:
        splits = {BASE_SPLIT: tuple(t.id for t in tasks)}
    else:
        # Keep τ²'s order of ids, and only ids that exist as tasks.
        splits = {
            name: tuple(i for i in ids if i in known) for name, ids in splits_loader().items()
        }
    policy = env.get_policy()
    digest = hashlib.sha256()
    for part in (
        [_stable(t.model_dump(mode="json")) for t in tasks],
        splits,
        policy,
        [t.schema for t in (*tools, *user_tools)],
    ):
        digest.update(json.dumps(part, sort_keys=True, ensure_ascii=False).encode())
    return DomainInfo(
        name=domain,
        policy=policy,
        tools=tools,
        user_tools=user_tools,
        splits=splits,
        content_hash=digest.hexdigest(),
    )


def _stable(value: Any) -> Any:
    """``value`` without message timestamps, which τ² stamps with the time of loading."""
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if k != "timestamp"}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


def catalogue_hash(domains: Iterable[str] | None = None) -> str:
    """A short hash of the whole task set (every domain's tasks, splits, policy and tools)."""
    digest = hashlib.sha256()
    for name in sorted(domains or domain_names()):
        digest.update(f"{name}:{get_domain(name).content_hash}\n".encode())
    return digest.hexdigest()[:16]


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list | tuple):
        return "\n".join(str(v) for v in value)
    return str(value)


def _task_info(domain: str, task: Any, kinds: dict[tuple[str, str], str]) -> TaskInfo:
    raw = task.model_dump(mode="json")
    scenario = raw.get("user_scenario") or {}
    instructions = scenario.get("instructions")
    if isinstance(instructions, dict):
        reason = _text(instructions.get("reason_for_call"))
        known = _text(instructions.get("known_info"))
        unknown = _text(instructions.get("unknown_info"))
        task_instructions = _text(instructions.get("task_instructions"))
    else:  # τ²'s mock domain gives its instructions as one free text
        reason, known, unknown, task_instructions = _text(instructions), "", "", ""
    description = raw.get("description") or {}
    criteria = raw.get("evaluation_criteria") or {}
    actions = tuple(criteria.get("actions") or ())
    changes_db = any(
        kinds.get((a.get("requestor") or "assistant", a.get("name"))) == "write" for a in actions
    )
    return TaskInfo(
        domain=domain,
        task_id=str(raw["id"]),
        title=title_from(reason) or title_from(_text(description.get("purpose"))) or raw["id"],
        purpose=_text(description.get("purpose")),
        reason_for_call=reason,
        known_info=known,
        unknown_info=unknown,
        task_instructions=task_instructions,
        persona=_text(scenario.get("persona")),
        ticket=_text(raw.get("ticket")),
        reward_basis=tuple(criteria.get("reward_basis") or ()),
        expected_actions=actions,
        tool_names=tuple(dict.fromkeys(a.get("name") for a in actions if a.get("name"))),
        changes_db=changes_db,
        raw=raw,
    )


@functools.cache
def load_domain_tasks(domain: str) -> tuple[TaskInfo, ...]:
    """Every task of ``domain`` (all splits), in τ²'s order."""
    kinds = get_domain(domain).tool_kinds()
    return tuple(_task_info(domain, t, kinds) for t in _raw_tasks(domain))


@functools.cache
def _tasks_by_id(domain: str) -> dict[str, TaskInfo]:
    return {t.task_id: t for t in load_domain_tasks(domain)}


@functools.cache
def _raw_by_id(domain: str) -> dict[str, Any]:
    return {t.id: t for t in _raw_tasks(domain)}


def get_task(domain: str, task_id: str) -> TaskInfo:
    """One task. Raises ``KeyError`` with a readable message when it does not exist."""
    try:
        return _tasks_by_id(domain)[str(task_id)]
    except KeyError:
        raise KeyError(f"No task {task_id!r} in domain {domain!r}") from None


def get_tau2_task(domain: str, task_id: str):
    """τ²'s own ``Task`` object (shared, do not mutate). Raises ``KeyError`` if unknown."""
    try:
        return _raw_by_id(domain)[str(task_id)]
    except KeyError:
        raise KeyError(f"No task {task_id!r} in domain {domain!r}") from None
