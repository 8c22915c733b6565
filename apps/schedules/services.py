"""Writes of schedules: make one from an evaluation, edit its cron, pause, resume, delete
(beat's row with it), and repeat it once per tick.

A repetition is started exactly as ``POST /api/evaluations/`` starts one: the stored start
request through the evaluation form (as the schedule's owner: the connections they may
use) and ``apps.evaluations.services.evaluation_start`` (their budgets and caps). When
it finishes it is judged against the pinned baseline like any evaluation.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime
from urllib.parse import parse_qs

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from django_celery_beat.models import CrontabSchedule, PeriodicTask

from apps.accounts.access import can_control, can_start
from apps.accounts.vault import SignInRequired
from apps.connections.picker import llm_args_initial
from apps.evaluations import services as evaluations
from apps.evaluations.forms import EvaluationForm
from apps.evaluations.models import Evaluation
from apps.schedules.crons import PRESETS, Cron, CronError, cron_last_tick, cron_parse
from apps.schedules.models import EvaluationSchedule
from apps.tasks.models import Split

logger = logging.getLogger(__name__)

TASK = "schedules.repeat"


def start_request_of(evaluation: Evaluation) -> dict[str, str]:
    """The evaluation form's fields (the start request the API takes) that start another
    evaluation with ``evaluation``'s settings: its domain, split and tasks (the explorer
    search it came from, if any), both sides and the judge on their routes with τ²'s LLM
    arguments, the mode, trials, seed, limits (the timeout too) and concurrency."""
    spec = evaluation.spec
    data: dict[str, object] = {
        "domain": evaluation.domain,
        "split": evaluation.split,
        "agent_model": spec.agent.value,
        "user_model": spec.customer.value,
        "judge_model": spec.judge.value if spec.judge is not None else "",
        "mode": spec.mode,
        "retrieval_config": spec.retrieval_config,
        "num_trials": evaluation.num_trials,
        "seed": spec.seed,
        "max_steps": spec.max_steps,
        "max_errors": spec.max_errors,
        **({"timeout": spec.timeout} if spec.timeout is not None else {}),
        "concurrency": evaluation.concurrency,
        **llm_args_initial(spec.agent.llm_args, side="agent"),
        **llm_args_initial(spec.customer.llm_args, side="user"),
    }
    if evaluation.external_agent:  # the team's own agent: its clients pull the episodes
        data.update(agent_model="", external_agent=spec.agent.model)
    query = parse_qs(evaluation.query or "")
    if evaluation.split and query and not evaluation.full_split:
        data.update(q=query.get("q", [""])[0], kind=query.get("kind", [""])[0])
    elif not evaluation.full_split:
        data["task_ids"] = " ".join(evaluation.task_ids)
        if not evaluation.split:  # a chosen list: the form still asks for one of the splits
            data["split"] = (
                Split.objects.filter(domain_id=evaluation.domain)
                .order_by("-size", "name")
                .values_list("name", flat=True)
                .first()
                or ""
            )
    return {name: "" if value is None else str(value) for name, value in data.items()}


def _start_form(*, owner, spec: dict, name: str = "") -> EvaluationForm:
    """The evaluation form bound to ``spec`` for ``owner`` (validated)."""
    form = EvaluationForm({**spec, "name": name}, user=owner)
    form.is_valid()
    return form


def _form_refusal(form: EvaluationForm) -> str:
    """The form's messages as one sentence per field, labelled."""
    said = []
    for field, errors in form.errors.items():
        label = form.fields[field].label if field in form.fields else ""
        said.append(f"{label}: {' '.join(errors)}" if label else " ".join(errors))
    return " ".join(said)


def _crontab_for(cron: Cron) -> CrontabSchedule:
    crontab, _ = CrontabSchedule.objects.get_or_create(**cron.fields, timezone=settings.TIME_ZONE)
    return crontab


def _cron_of(*, preset: str, cron: str) -> tuple[str, Cron]:
    """The preset and the parsed expression; raises ``ValidationError`` on ``cron``."""
    if preset in PRESETS:
        return preset, cron_parse(PRESETS[preset])
    try:
        return EvaluationSchedule.Preset.CUSTOM, cron_parse(cron)
    except CronError as exc:
        raise ValidationError({"cron": str(exc)}) from None


def schedule_create(
    *, evaluation: Evaluation, by, preset: str, cron: str = "", name: str = ""
) -> EvaluationSchedule:
    """Repeat ``evaluation`` on a schedule, as ``by`` (who must be able to start it now:
    the same checks as the form's, with its messages). Raises ``ValidationError`` for a
    malformed cron, an imported evaluation, or a start the form refuses;
    ``PermissionDenied`` if ``by`` may not start evaluations."""
    if not can_start(by):
        raise PermissionDenied("Sign in to repeat an evaluation on a schedule.")
    if evaluation.status == Evaluation.Status.IMPORTED:
        raise ValidationError("An imported evaluation has no settings of this server to repeat.")
    preset, parsed = _cron_of(preset=preset, cron=cron)
    spec = start_request_of(evaluation)
    form = _start_form(owner=by, spec=spec)
    if form.errors:
        raise ValidationError(f"It could not start as you now: {_form_refusal(form)}")
    name = (name or "").strip()[:160] or (evaluation.name or f"Evaluation {evaluation.pk}")[:160]
    with transaction.atomic():
        task = PeriodicTask.objects.create(
            name=f"evaluation-schedule {timezone.now().isoformat()} {by.pk}",
            task=TASK,
            crontab=_crontab_for(parsed),
            description=f"Repeats evaluation {evaluation.pk}",
        )
        schedule = EvaluationSchedule.objects.create(
            owner=by,
            source=evaluation,
            spec=spec,
            name=name,
            preset=preset,
            cron=parsed.text,
            periodic_task=task,
        )
        # The task takes only the schedule's id.
        task.name = f"evaluation-schedule-{schedule.pk}"
        task.kwargs = json.dumps({"schedule_id": schedule.pk})
        task.save()
    return schedule


def _may_change(schedule: EvaluationSchedule, by) -> None:
    if not can_control(by, owner_id=schedule.owner_id):
        raise PermissionDenied("Only whoever made this schedule, or staff, may change it.")


def schedule_edit(
    *, schedule: EvaluationSchedule, by, preset: str, cron: str = "", name: str = ""
) -> EvaluationSchedule:
    """Give ``schedule`` another cron (and name); beat reads the change at its next sync."""
    _may_change(schedule, by)
    preset, parsed = _cron_of(preset=preset, cron=cron)
    with transaction.atomic():
        schedule.preset, schedule.cron = preset, parsed.text
        if name.strip():
            schedule.name = name.strip()[:160]
        schedule.save(update_fields=["preset", "cron", "name"])
        task = schedule.periodic_task
        task.crontab = _crontab_for(parsed)
        task.save()
    return schedule


def schedule_set_enabled(*, schedule: EvaluationSchedule, by, enabled: bool) -> None:
    """Pause (``enabled=False``: no tick starts anything) or resume ``schedule``."""
    _may_change(schedule, by)
    with transaction.atomic():
        EvaluationSchedule.objects.filter(pk=schedule.pk).update(enabled=enabled)
        task = schedule.periodic_task
        task.enabled = enabled
        task.save()
    schedule.enabled = enabled


def schedule_delete(*, schedule: EvaluationSchedule, by) -> None:
    """Delete ``schedule`` and beat's row; the evaluations it started stay."""
    _may_change(schedule, by)
    with transaction.atomic():
        task = schedule.periodic_task
        schedule.delete()
        task.delete()


def repetition_name(schedule: EvaluationSchedule, tick: datetime) -> str:
    """``<name> · nightly 2026-12-04`` (weekly, or "scheduled" for a cron of one's own)."""
    label = schedule.preset if schedule.preset in PRESETS else "scheduled"
    return f"{schedule.name} · {label} {tick:%Y-%m-%d}"[:200]


def _refusal(schedule: EvaluationSchedule, form: EvaluationForm | None) -> str:
    owner = schedule.owner
    if not can_start(owner):
        return (
            f"{owner.get_username()} may no longer start evaluations (their account is inactive)."
        )
    if form is not None and form.errors:
        return f"{owner.get_username()} may no longer start it: {_form_refusal(form)}"
    return ""


def schedule_repeat(*, schedule_id: int, now: datetime | None = None) -> Evaluation | None:
    """Start the repetition of schedule ``schedule_id`` for the tick ``now`` belongs to,
    once: returns it, or None when the schedule is gone or paused, the tick already ran
    (a duplicate or late message), or the owner may no longer start it (``last_error``
    then says why, in words). Of two messages for one tick, one UPDATE lets exactly one go
    on; the other waits on the row and then finds the tick taken."""
    now = timezone.localtime(now or timezone.now())
    schedule = EvaluationSchedule.objects.select_related("owner").filter(pk=schedule_id).first()
    if schedule is None or not schedule.enabled:
        return None
    tick = cron_last_tick(cron_parse(schedule.cron), now)
    if tick is None:
        return None
    with transaction.atomic():
        claimed = (
            EvaluationSchedule.objects.filter(pk=schedule_id, enabled=True)
            .filter(Q(last_tick__isnull=True) | Q(last_tick__lt=tick))
            .update(last_tick=tick, last_run_at=timezone.now())
        )
        if not claimed:
            return None
        owner = schedule.owner
        form = None
        if can_start(owner):
            form = _start_form(
                owner=owner, spec=schedule.spec, name=repetition_name(schedule, tick)
            )
        refusal = _refusal(schedule, form)
        evaluation = None
        if not refusal:
            try:
                evaluation = evaluations.evaluation_start(user=owner, data=form.cleaned_data)
            except ValidationError as exc:
                refusal = f"{owner.get_username()} may no longer start it: {' '.join(exc.messages)}"
            except SignInRequired as exc:
                refusal = f"{owner.get_username()} may no longer start it: {exc}"
        if refusal:
            logger.warning("Schedule %s started nothing for %s: %s", schedule_id, tick, refusal)
            EvaluationSchedule.objects.filter(pk=schedule_id).update(last_error=refusal)
            return None
        EvaluationSchedule.objects.filter(pk=schedule_id).update(
            last_evaluation=evaluation, last_error=""
        )
    logger.info("Schedule %s started evaluation %s for %s", schedule_id, evaluation.pk, tick)
    return evaluation
