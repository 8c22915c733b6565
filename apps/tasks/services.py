"""Writes to the catalogue: copying τ²-bench's tasks into the database."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from django.db import connection, transaction

from apps.tasks.models import CatalogueLoad, Domain, Split, Task, Tool
from tau2_env.engine import catalog

logger = logging.getLogger(__name__)

_TASK_FIELDS = [
    "position",
    "title",
    "purpose",
    "reason_for_call",
    "known_info",
    "unknown_info",
    "task_instructions",
    "persona",
    "ticket",
    "reward_basis",
    "expected_calls",
    "changes_db",
    "tool_names",
    "evaluation_criteria",
    "raw",
    "search_text",
]


@dataclass
class LoadReport:
    tau2_version: str
    task_set_hash: str
    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    changed: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    record: CatalogueLoad | None = None


def search_text_for(info: catalog.TaskInfo) -> str:
    """What the explorer's search looks through, lower-cased: title, reason, id, tool names."""
    return "\n".join(
        [info.task_id, info.title, info.reason_for_call, " ".join(info.tool_names)]
    ).lower()


def _tool_rows(domain: Domain, tools: tuple[catalog.ToolInfo, ...]) -> list[Tool]:
    return [
        Tool(
            domain=domain,
            name=t.name,
            requestor=t.requestor,
            description=t.description,
            schema=t.schema,
            kind=t.kind if t.kind in Tool.Kind.values else Tool.Kind.GENERIC,
            position=i,
        )
        for i, t in enumerate(tools)
    ]


@transaction.atomic
def _domain_load(*, info: catalog.DomainInfo, position: int) -> None:
    domain, _ = Domain.objects.update_or_create(
        name=info.name,
        defaults={"policy": info.policy, "position": position, "content_hash": info.content_hash},
    )

    tools = _tool_rows(domain, info.tools) + _tool_rows(domain, info.user_tools)
    Tool.objects.bulk_create(
        tools,
        update_conflicts=True,
        unique_fields=["domain", "requestor", "name"],
        update_fields=["description", "schema", "kind", "position"],
    )
    keep = {(t.requestor, t.name) for t in tools}
    stale_tools = [t.pk for t in domain.tools.all() if (t.requestor, t.name) not in keep]
    Tool.objects.filter(pk__in=stale_tools).delete()

    infos = catalog.load_domain_tasks(info.name)
    Task.objects.bulk_create(
        [
            Task(
                domain=domain,
                task_id=t.task_id,
                position=i,
                title=t.title[:500],
                purpose=t.purpose,
                reason_for_call=t.reason_for_call,
                known_info=t.known_info,
                unknown_info=t.unknown_info,
                task_instructions=t.task_instructions,
                persona=t.persona,
                ticket=t.ticket,
                reward_basis=list(t.reward_basis),
                expected_calls=t.expected_calls,
                changes_db=t.changes_db,
                tool_names=list(t.tool_names),
                evaluation_criteria=t.evaluation_criteria,
                raw=t.raw,
                search_text=search_text_for(t),
            )
            for i, t in enumerate(infos)
        ],
        update_conflicts=True,
        unique_fields=["domain", "task_id"],
        update_fields=_TASK_FIELDS,
        batch_size=500,
    )
    Task.objects.filter(domain=domain).exclude(task_id__in=[t.task_id for t in infos]).delete()
    task_pks = dict(Task.objects.filter(domain=domain).values_list("task_id", "pk"))

    Split.objects.filter(domain=domain).exclude(name__in=list(info.splits)).delete()
    through = Task.splits.through
    through.objects.filter(split__domain=domain).delete()
    for name, ids in info.splits.items():
        split, _ = Split.objects.update_or_create(
            domain=domain, name=name, defaults={"size": len(ids)}
        )
        through.objects.bulk_create(
            [through(task_id=task_pks[i], split_id=split.pk) for i in ids], batch_size=1000
        )


def catalogue_load(*, domains: list[str] | None = None, force: bool = False) -> LoadReport:
    """Copy the installed τ²'s domains, splits, tools and tasks into the database.

    Idempotent: a domain whose content hash matches the stored one is left untouched
    unless ``force``. Returns what was loaded; always records a ``CatalogueLoad``.
    """
    names = catalog.domain_names()
    wanted = names if not domains else [d for d in names if d in domains]
    unknown = sorted(set(domains or []) - set(names))
    if unknown:
        raise KeyError(f"Unknown domain(s) {', '.join(unknown)}; τ² has {', '.join(names)}")

    report = LoadReport(
        tau2_version=catalog.tau2_version(), task_set_hash=catalog.catalogue_hash(names)
    )
    stored = dict(Domain.objects.values_list("name", "content_hash"))
    for name in wanted:
        info = catalog.get_domain(name)
        report.counts[name] = {split: len(ids) for split, ids in info.splits.items()}
        if not force and stored.get(name) == info.content_hash:
            report.unchanged.append(name)
            continue
        _domain_load(info=info, position=names.index(name))
        report.changed.append(name)
        logger.info("Loaded τ² domain %s: %s", name, report.counts[name])

    # Every domain says which τ² it came from, changed or not (telecom's tasks are the
    # same in τ² 0.2 and 1.0.1: unchanged, yet now from another release).
    Domain.objects.filter(name__in=wanted).update(
        tau2_version=report.tau2_version, task_set_hash=report.task_set_hash
    )
    if report.changed:
        # Fresh statistics, or the planner guesses a 2,285-task split holds a dozen rows.
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
    report.record = CatalogueLoad.objects.create(
        tau2_version=report.tau2_version,
        task_set_hash=report.task_set_hash,
        counts=report.counts,
        changed_domains=report.changed,
    )
    return report
