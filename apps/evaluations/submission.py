"""A taubench.com leaderboard submission from the team's evaluations.

:func:`submission_plan` reads which evaluations may make one submission (one completed
evaluation of the whole ``base`` split per domain, all with the same agent and customer
in the same places, the same LLM arguments and the same trials) and says, in words, what
is missing or why a choice is refused. :func:`submission_draft` builds the trajectories:
each evaluation's τ² results file exactly as ``?format=tau2`` downloads it
(:func:`apps.evaluations.exports.evaluation_export_tau2`, which τ²'s ``Results.load``
reads), scored by τ²'s own ``compute_metrics``. ``submission.json``, the .zip and τ²'s own
``tau2 submit validate`` / ``verify-trajs`` come from :mod:`tau2_env.engine.submission`.

Nothing here writes a key, a token or an endpoint: the results files are the export's,
which names models as τ² does and carries only τ² llm_args checked when chosen.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import Count
from django.utils import timezone
from django.utils.text import slugify

from apps.accounts.access import can_control
from apps.evaluations import exports
from apps.evaluations.models import Evaluation
from apps.runs.models import Run
from tau2_env.engine import catalog
from tau2_env.engine import submission as tau2_submission
from tau2_env.engine.submission import Check, Details, DomainScores
from tau2_env.llm.llm_args import (
    DEFAULT_AGENT_ARGS,
    DEFAULT_USER_ARGS,
    LLMArgsError,
    llm_args_label,
    llm_args_of,
)

__all__ = [
    "DOMAINS",
    "Draft",
    "Plan",
    "Slot",
    "evaluation_problems",
    "submission_checks",
    "submission_details",
    "submission_draft",
    "submission_initial",
    "submission_json",
    "submission_plan",
    "submission_zip",
]

DOMAINS = tau2_submission.DOMAINS
SPLIT = tau2_submission.SPLIT
# Finished with every run in place: a studio evaluation that completed, or a `tau2 run`
# file imported whole.
ELIGIBLE = (Evaluation.Status.COMPLETED, Evaluation.Status.IMPORTED)
CANDIDATES_PER_DOMAIN = 25
NEAR_MISSES = 3
SHOWN_TASKS = 5


@dataclass(frozen=True)
class Slot:
    """One domain of the submission: the evaluations the person may put there (newest
    first), the one chosen, and — when there is none — ``missing`` says why, with a few
    of their evaluations of that domain that fall short and what each lacks."""

    domain: str
    candidates: tuple[Evaluation, ...]
    chosen: Evaluation | None
    missing: str = ""
    near_misses: tuple[tuple[Evaluation, tuple[str, ...]], ...] = ()

    @property
    def options(self) -> list[tuple[Evaluation, bool]]:
        """(evaluation, fits) for the page's choice: the candidates, and a chosen
        evaluation that cannot be submitted (the refusals say why)."""
        options = [(e, True) for e in self.candidates]
        if self.chosen is not None and self.chosen not in self.candidates:
            options.insert(0, (self.chosen, False))
        return options


@dataclass(frozen=True)
class Plan:
    """The chosen evaluations, why they cannot make one submission (``refusals``), and
    what taubench.com expects beyond τ²'s checks that they lack (``notes``)."""

    slots: tuple[Slot, ...]
    refusals: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def chosen(self) -> list[Evaluation]:
        return [slot.chosen for slot in self.slots if slot.chosen is not None]

    @property
    def ok(self) -> bool:
        return bool(self.chosen) and not self.refusals

    def query(self) -> dict[str, str]:
        """The choice as the page's query string (``?airline=12&retail=&telecom=14``)."""
        return {slot.domain: str(slot.chosen.pk) if slot.chosen else "" for slot in self.slots}


# ---------------------------------------------------------------- reading the choice


def _trial_counts(evaluations: Sequence[Evaluation]) -> dict[int, dict[str, int]]:
    """``{evaluation id: {task id: completed runs}}``: the runs its τ² file holds."""
    counts: dict[int, dict[str, int]] = defaultdict(dict)
    rows = (
        Run.objects.filter(evaluation__in=[e.pk for e in evaluations], status=Run.Status.COMPLETED)
        .values_list("evaluation_id", "task__task_id")
        .annotate(n=Count("id"))
    )
    for evaluation_id, task_id, n in rows:
        counts[evaluation_id][task_id] = n
    return counts


def _tasks(ids: Sequence[str]) -> str:
    shown = ", ".join(ids[:SHOWN_TASKS])
    return shown + (f" and {len(ids) - SHOWN_TASKS} more" if len(ids) > SHOWN_TASKS else "")


def evaluation_problems(
    evaluation: Evaluation, *, user, counts: Mapping[str, int] | None = None
) -> list[str]:
    """Why ``evaluation`` cannot be a domain of a submission by ``user``, in words (empty:
    it can). ``counts`` are its completed runs per task (read when not given)."""
    if not can_control(user, owner_id=evaluation.created_by_id):
        return [
            f"it was started by {evaluation.created_by.get_username()}: only its starter "
            "or staff may submit it"
        ]
    if evaluation.domain not in DOMAINS:
        return [f"taubench.com has no {evaluation.domain} domain (it ranks {', '.join(DOMAINS)})"]
    problems = []
    if evaluation.status not in ELIGIBLE:
        problems.append(f"it is {evaluation.get_status_display()}, not completed")
    base = catalog.get_domain(evaluation.domain).splits[SPLIT]
    if set(evaluation.task_ids) != set(base):
        where = f"the {evaluation.split} split" if evaluation.split else "a chosen list"
        covered = len(set(evaluation.task_ids) & set(base))
        problems.append(
            f"it ran {len(evaluation.task_ids)} tasks of {where}, not the whole {SPLIT} split "
            f"({covered} of its {len(base)} tasks)"
        )
    provenance = evaluation.provenance or {}
    ours = catalog.catalogue_hash()
    if provenance.get("task_set_hash") != ours:
        problems.append(
            f"it ran on another τ² task set ({str(provenance.get('task_set_hash'))[:16]}) "
            f"than the installed τ²'s ({ours}), which verify-trajs checks every task against"
        )
    if (provenance.get("import") or {}).get("tasks_differ"):
        problems.append("the results file it was imported from defines some tasks differently")
    if set(evaluation.task_ids) == set(base):
        if counts is None:
            counts = _trial_counts([evaluation]).get(evaluation.pk, {})
        short = [t for t in base if counts.get(t, 0) != evaluation.num_trials]
        if short:
            problems.append(
                f"{len(short)} of its tasks do not have {evaluation.num_trials} completed "
                f"trial{'s' if evaluation.num_trials != 1 else ''} (task {_tasks(short)}): "
                "retry its failed runs"
            )
    return problems


def _where(connection) -> str:
    return connection.name if connection is not None else "the Hugging Face router"


def _args(value, default) -> str:
    try:
        return llm_args_label(llm_args_of(value, default=default))
    except LLMArgsError:
        return json.dumps(value, sort_keys=True)


def _sides(evaluation: Evaluation) -> dict[str, tuple[str, str]]:
    """What must be the same across a submission's evaluations: (key, words) per aspect."""
    agent = (evaluation.agent_model, evaluation.agent_connection_id)
    user = (evaluation.user_model, evaluation.user_connection_id)
    agent_args = (
        "its own program's"
        if evaluation.external_agent
        else _args(evaluation.agent_llm_args, DEFAULT_AGENT_ARGS)
    )
    user_args = _args(evaluation.user_llm_args, DEFAULT_USER_ARGS)
    kind = "custom (the team's own agent)" if evaluation.external_agent else "standard (τ²'s agent)"
    return {
        "kind of agent": (kind, kind),
        "agent model": (
            repr(agent),
            f"{evaluation.agent_model} on {_where(evaluation.agent_connection)}",
        ),
        "agent's LLM arguments": (agent_args, agent_args),
        "customer model": (
            repr(user),
            f"{evaluation.user_model} on {_where(evaluation.user_connection)}",
        ),
        "customer's LLM arguments": (user_args, user_args),
        "number of trials": (str(evaluation.num_trials), str(evaluation.num_trials)),
    }


def _differences(evaluations: Sequence[Evaluation]) -> list[str]:
    """What differs between ``evaluations`` that τ²'s validate (or pass^k) needs equal."""
    sides = [(e, _sides(e)) for e in evaluations]
    differences = []
    for aspect in sides[0][1] if sides else ():
        if len({s[aspect][0] for _, s in sides}) > 1:
            each = "; ".join(f"{e.domain} #{e.pk}: {s[aspect][1]}" for e, s in sides)
            differences.append(f"Not the same {aspect} across them ({each}).")
    return differences


def _candidates(*, user, domain: str) -> list[Evaluation]:
    """The person's newest evaluations of ``domain`` likely to fit (finished over a whole
    split), then a few others (to say what they lack)."""
    rows = Evaluation.objects.select_related(
        "created_by", "agent_connection", "user_connection"
    ).filter(domain=domain)
    if not user.is_staff:
        rows = rows.filter(created_by=user)
    rows = rows.order_by("-created_at", "-id")
    likely = list(rows.filter(status__in=ELIGIBLE, full_split=True)[:CANDIDATES_PER_DOMAIN])
    return likely + list(rows.exclude(pk__in=[e.pk for e in likely])[:NEAR_MISSES])


def _explicit(
    picks: Mapping[str, str], seen: dict[str, list[Evaluation]]
) -> tuple[dict[str, Evaluation | None], list[str]]:
    """The evaluations ``picks`` name (None: the domain left out), added to ``seen``,
    and what is wrong with a pick that names none of its domain."""
    explicit: dict[str, Evaluation | None] = {}
    refusals = []
    for domain in (d for d in DOMAINS if d in picks):
        raw = (picks[domain] or "").strip()
        explicit[domain] = None
        if not raw:
            continue
        if not (raw.isascii() and raw.isdigit()) or len(raw) > 12:
            refusals.append(f"{domain}: {raw[:20]!r} is not an evaluation number.")
            continue
        pk = int(raw)
        found = next((e for e in seen[domain] if e.pk == pk), None) or (
            Evaluation.objects.select_related("created_by", "agent_connection", "user_connection")
            .filter(pk=pk)
            .first()
        )
        if found is None:
            refusals.append(f"{domain}: there is no evaluation #{pk}.")
        elif found.domain != domain:
            refusals.append(f"{domain}: #{pk} is an evaluation of {found.domain}.")
        else:
            explicit[domain] = found
            seen[domain] = [found, *[e for e in seen[domain] if e.pk != pk]]
    return explicit, refusals


def submission_plan(*, user, picks: Mapping[str, str]) -> Plan:
    """The submission ``user`` can make from ``picks`` (``{domain: evaluation id}``, as
    the page's query string: an id picks it, ``""`` leaves the domain out, no entry
    picks for them — the newest evaluation that fits with the others)."""
    seen = {domain: _candidates(user=user, domain=domain) for domain in DOMAINS}
    explicit, refusals = _explicit(picks, seen)
    everyone = {e.pk: e for rows in seen.values() for e in rows}
    counts = _trial_counts(list(everyone.values()))
    problems = {
        pk: evaluation_problems(e, user=user, counts=counts.get(pk, {}))
        for pk, e in everyone.items()
    }
    for domain, evaluation in explicit.items():
        if evaluation is not None and problems[evaluation.pk]:
            refusals.append(
                f"{domain}: #{evaluation.pk} cannot be submitted: "
                + "; ".join(problems[evaluation.pk])
                + "."
            )
    fit = {domain: [e for e in rows if not problems[e.pk]] for domain, rows in seen.items()}
    chosen = _choose(explicit=explicit, fit=fit)
    slots = []
    for domain in DOMAINS:
        missing = ""
        if not fit[domain]:
            missing = f"no completed evaluation of the whole {SPLIT} split"
            if not seen[domain]:
                missing += f" (no evaluation of {domain} yet)"
        elif chosen[domain] is None:
            missing = "left out" if domain in explicit else "none fits with the others"
        near = [(e, tuple(problems[e.pk])) for e in seen[domain] if problems[e.pk]]
        slots.append(
            Slot(
                domain=domain,
                candidates=tuple(fit[domain]),
                chosen=chosen[domain],
                missing=missing,
                near_misses=tuple(near[:NEAR_MISSES]) if not fit[domain] else (),
            )
        )
    picked = [e for e in chosen.values() if e is not None]
    refusals.extend(_differences(picked))
    if not picked and not refusals:
        refusals.append(
            "No evaluation is chosen: a submission needs at least one completed "
            f"evaluation of a whole {SPLIT} split."
        )
    return Plan(slots=tuple(slots), refusals=tuple(refusals), notes=tuple(_notes(slots, picked)))


def _choose(
    *, explicit: Mapping[str, Evaluation | None], fit: Mapping[str, list[Evaluation]]
) -> dict[str, Evaluation | None]:
    """The explicit picks, and for each other domain the newest fitting evaluation with
    the same agent, customer, arguments and trials as the first pick (or the newest)."""
    chosen = dict(explicit)
    anchors = [e for e in explicit.values() if e is not None]
    if not anchors:
        newest = sorted(
            (e for rows in fit.values() for e in rows),
            key=lambda e: (e.created_at, e.pk),
            reverse=True,
        )
        anchors = newest[:1]
    key = _key(anchors[0]) if anchors else None
    for domain in DOMAINS:
        if domain not in chosen:
            rows = fit[domain] if key is not None else []
            chosen[domain] = next((e for e in rows if _key(e) == key), None)
    return chosen


def _key(evaluation: Evaluation) -> dict[str, str]:
    return {aspect: value[0] for aspect, value in _sides(evaluation).items()}


def _count(items: Sequence[str]) -> str:
    """How many, in a word (τ² 0.2 submits three domains, 1.x four)."""
    return {3: "three", 4: "four"}.get(len(items), str(len(items)))


def _notes(slots: Sequence[Slot], picked: Sequence[Evaluation]) -> list[str]:
    """What taubench.com expects that τ²'s own checks do not enforce, and these lack."""
    notes = []
    left = [slot.domain for slot in slots if slot.chosen is None]
    if picked and left:
        notes.append(
            f"taubench.com ranks a model on all {_count(DOMAINS)} domains ({', '.join(DOMAINS)}), "
            f"and τ²'s README asks for all {_count(DOMAINS)}: {', '.join(left)} "
            f"{'is' if len(left) == 1 else 'are'} "
            "missing (τ²'s validate accepts fewer)."
        )
    trials = sorted({e.num_trials for e in picked})
    if trials and trials != [tau2_submission.PUBLISHED_TRIALS]:
        published = tau2_submission.PUBLISHED_TRIALS
        notes.append(
            f"taubench.com publishes pass^1 to pass^{published} and τ²'s instructions run "
            f"--num-trials {published}; these have {', '.join(map(str, trials))} trial(s) per "
            f"task, so submission.json holds pass^1 to pass^{min(min(trials), published)} only."
        )
    customers = set(settings.TAU2_LEADERBOARD_CUSTOMERS)
    others = sorted({e.user_model for e in picked if e.user_model not in customers})
    if others and customers:
        notes.append(
            f"taubench.com's scores use {' or '.join(sorted(customers))} as the customer "
            f"(user simulator); these use {', '.join(others)}, so their numbers are not "
            "comparable with its rows."
        )
    limits = sorted(
        {(e.max_steps, e.max_errors) for e in picked}
        - {(tau2_submission.MAX_STEPS, tau2_submission.MAX_ERRORS)}
    )
    if limits:
        notes.append(
            f"tau2 run's limits are max steps {tau2_submission.MAX_STEPS} and max errors "
            f"{tau2_submission.MAX_ERRORS}; these ran with "
            + ", ".join(f"{s} steps / {e} errors" for s, e in limits)
            + "."
        )
    return notes


# ---------------------------------------------------------------- building it


@dataclass(frozen=True)
class Draft:
    """The trajectories of a submission, as τ²'s files, and what τ² computes from them.

    ``trajectories``: file name → its text; ``scores``: domain → τ²'s metrics of that file;
    ``agent_llm`` / ``user_llm``: the models the files name (what validate compares the
    model name and user simulator with); ``refusal``: what τ²'s own checks of the files
    taken together find wrong, or ``""``."""

    evaluations: tuple[Evaluation, ...]
    trajectories: dict[str, str]
    scores: dict[str, DomainScores]
    agent_llm: str
    user_llm: str
    refusal: str = ""
    finished: date | None = None
    tau2_versions: tuple[str, ...] = field(default=())

    def rows(self) -> list[dict]:
        """One row per domain for the page: its file, counts, pass^1…pass^4 (percent or
        None when it has fewer trials) and cost."""
        files = {name.split("-evaluation-")[0]: name for name in self.trajectories}
        return [
            {
                "domain": domain,
                "file": files.get(domain, ""),
                "scores": scores,
                "passes": [scores.pass_hat_ks.get(k) for k in tau2_submission.KS],
            }
            for domain, scores in self.scores.items()
        ]


def submission_draft(plan: Plan) -> Draft:
    """The trajectories of ``plan``'s chosen evaluations (``plan.ok`` must hold)."""
    if not plan.ok:
        raise ValueError("This plan cannot be built: " + " ".join(plan.refusals))
    texts: dict[str, str] = {}
    parsed = []
    problems = []
    for evaluation in plan.chosen:
        text = json.dumps(
            exports.evaluation_export_tau2(evaluation),
            cls=DjangoJSONEncoder,
            ensure_ascii=False,
            indent=2,
        )
        name = _trajectory_name(evaluation)
        texts[name] = text
        results = tau2_submission.trajectories_read(text)
        parsed.append(results)
        ablation = tau2_submission.ablation(results)
        if ablation:
            problems.append(f"{name}: {ablation}.")
        # verify-trajs' own rule, on the file itself: every task ran num_trials times.
        per_task: dict[str, int] = defaultdict(int)
        for simulation in results.simulations:
            per_task[simulation.task_id] += 1
        short = [t.id for t in results.tasks if per_task[t.id] != results.info.num_trials]
        if short:
            problems.append(
                f"{name} holds other than {results.info.num_trials} simulations of task "
                f"{_tasks(short)}."
            )
    refusal = tau2_submission.trajectory_set_problem(parsed)
    if refusal:
        problems.append(f"τ²'s check of the files together: {refusal}")
    finished = [e.finished_at.date() for e in plan.chosen if e.finished_at]
    return Draft(
        evaluations=tuple(plan.chosen),
        trajectories=texts,
        scores={
            r.info.environment_info.domain_name: tau2_submission.domain_scores(r) for r in parsed
        },
        agent_llm=parsed[0].info.agent_info.llm or "",
        user_llm=parsed[0].info.user_info.llm or "",
        refusal=" ".join(problems),
        finished=max(finished) if finished else None,
        tau2_versions=tuple(
            sorted({str((e.provenance or {}).get("tau2_version") or "") for e in plan.chosen})
        ),
    )


def submission_details(values: Mapping, *, user_simulator: str) -> Details:
    """The form's values (cleaned, its prefill, or a check job's copy of them) as τ²'s
    submission details; ``evaluation_date`` a date or its ISO text."""
    when = values.get("evaluation_date") or None
    return Details(
        model_name=values.get("model_name") or "",
        organization=values.get("organization") or "",
        submitting_organization=values.get("submitting_organization") or "",
        submission_type=values.get("submission_type") or "standard",
        reasoning_effort=values.get("reasoning_effort") or "",
        email=values.get("email") or "",
        contact_name=values.get("contact_name") or "",
        github=values.get("github") or "",
        is_new=bool(values.get("is_new")),
        evaluation_date=date.fromisoformat(when) if isinstance(when, str) else when,
        tau2_bench_version=values.get("tau2_bench_version") or "",
        notes=values.get("notes") or "",
        user_simulator=user_simulator,
        submission_date=timezone.localdate(),
    )


def submission_initial(draft: Draft) -> dict:
    """The form's prefill: what the evaluations know (the model as the files name it,
    the date they finished, τ²'s version, a factual note on how they ran)."""
    first = draft.evaluations[0]
    versions = [v for v in draft.tau2_versions if v]
    if first.external_agent:  # taubench.com's "custom" submissions: a team's own system
        return {
            "model_name": draft.agent_llm,
            "submission_type": "custom",
            "evaluation_date": draft.finished,
            "tau2_bench_version": versions[0] if len(versions) == 1 else "",
            "notes": (
                f"Evaluated with tau2-studio on the {SPLIT} split, {first.num_trials} "
                f"trial{'s' if first.num_trials != 1 else ''} per task, user simulator "
                f"{draft.user_llm} ({_args(first.user_llm_args, DEFAULT_USER_ARGS)}); the "
                f"agent, {first.agent_model}, is the team's own program, which played each "
                f"episode over the studio's MCP/OpenEnv faces; max steps {first.max_steps}, "
                f"max errors {first.max_errors}."
            ),
        }
    return {
        "model_name": draft.agent_llm,
        "evaluation_date": draft.finished,
        "tau2_bench_version": versions[0] if len(versions) == 1 else "",
        "notes": (
            f"Evaluated with tau2-studio on the {SPLIT} split, {first.num_trials} "
            f"trial{'s' if first.num_trials != 1 else ''} per task, user simulator "
            f"{draft.user_llm} ({_args(first.user_llm_args, DEFAULT_USER_ARGS)}), agent LLM "
            f"arguments {_args(first.agent_llm_args, DEFAULT_AGENT_ARGS)}, max steps "
            f"{first.max_steps}, max errors {first.max_errors}."
        ),
    }


def submission_json(draft: Draft, details: Details) -> str:
    """``submission.json`` of ``draft`` with ``details`` (τ²'s schema; raises
    :class:`tau2_env.engine.submission.SubmissionInvalid`)."""
    return tau2_submission.submission_json(
        details=details, scores=draft.scores, trajectory_files=_trajectory_files(draft)
    )


def _trajectory_files(draft: Draft) -> dict[str, str]:
    """Each domain's trajectories file in the folder, by domain."""
    return {e.domain: _trajectory_name(e) for e in draft.evaluations}


def _trajectory_name(evaluation: Evaluation) -> str:
    return f"{evaluation.domain}-evaluation-{evaluation.pk}.json"


def folder_name(details: Details) -> str:
    return f"tau2-submission-{slugify(details.model_name)[:60] or 'model'}"


def submission_zip(draft: Draft, details: Details) -> tuple[str, bytes]:
    """(file name, bytes) of the folder as a .zip: ``<folder>/submission.json`` and
    ``<folder>/trajectories/<domain>-evaluation-<id>.json``."""
    root = folder_name(details)
    data = tau2_submission.folder_zip(
        root=root, submission=submission_json(draft, details), trajectories=draft.trajectories
    )
    return f"{root}.zip", data


def submission_checks(draft: Draft, details: Details) -> list[Check]:
    """The installed τ²'s ``tau2 submit validate`` and ``verify-trajs`` on the folder."""
    return tau2_submission.checks_run(
        submission=submission_json(draft, details), trajectories=draft.trajectories
    )
