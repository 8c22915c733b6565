"""Import a results file written by ``tau2 run`` as an evaluation marked imported.

The file is read with τ²'s own ``Results`` model, its domain and every task must be in
our catalogue, and every conversation is scored again with τ²'s evaluator through the
engine: the runs keep the re-scored reward, and a stored reward that differs is flagged
on the run (``provenance["rescore"]``) and on the evaluation (``provenance["import"]``).
A bad file stores nothing: one the bounded reader refuses (too deep, a NUL, an integer
too long, NaN) or holding a number its column, or a date, cannot hold (the field named).

Each simulation's content hash (:func:`simulation_hash`) is kept on its run
(``provenance["simulation_hash"]``) and the file's on the evaluation
(``provenance["simulations_hash"]``): the same simulations imported again are stored
(a person may want them), named as repeats of the evaluations that already hold them
(``provenance["import"]["repeats"]``), and never pooled as new trials by the leaderboard.

A conversation whose task's reward needs τ²'s NL-assertion judge is re-scored only when
the import names a judge (:class:`ImportJudge`: a re-grade's, picked by the person as a
run's judge is): τ²'s own evaluator judges it along that route, and the judge's tokens
and cost are kept on its run (``judge_*``, ``judged_at``) where the budgets count them.
Without a judge, or once the judge's budget is reached or its provider refuses it, the
conversation is not re-scored and its run says why, in words.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from apps.bounds import column_range
from apps.connections.models import Connection
from apps.evaluations import selectors
from apps.evaluations.exports import scrub
from apps.evaluations.models import Evaluation
from apps.inference.pricing import PricePair, cost_usd
from apps.runs import budgets, endings
from apps.runs.events import event_kind
from apps.runs.models import MAX_TRIALS, Run, RunEvent
from apps.tasks.models import Domain, Task
from apps.tasks.selectors import task_set_installed
from tau2_env import jsonbounds
from tau2_env.engine import catalog
from tau2_env.engine.evaluation import DEFAULT_SEED, trial_seeds
from tau2_env.engine.results import (
    MAX_DEPTH,
    MAX_INT_DIGITS,
    NO_JUDGE,
    Rescore,
    ResultsFileError,
    needs_judge,
    read_results,
    rescore,
    same_task,
)
from tau2_env.llm import gateway
from tau2_env.llm.gateway import ROUTE_KEYS

_CENT = Decimal("0.000001")
# The largest cost Run.cost_usd and RunEvent.cost_usd hold (12 digits, 6 decimals).
_MAX_COST = Decimal("999999.999999")
# Dates every time zone can show: a day inside what a datetime holds.
_EARLIEST = datetime.min.replace(tzinfo=UTC) + timedelta(days=1)
_LATEST = datetime.max.replace(tzinfo=UTC) - timedelta(days=1)
# Which split an exact task set is called, when several splits hold the same tasks.
_SPLIT_PREFERENCE = ("test", "base", "train")


@dataclass(frozen=True)
class ImportJudge:
    """τ²'s NL-assertion judge an import calls: ``model`` on ``connection`` (``None``:
    Hugging Face's router), ``value`` as the picker names it, the ``route`` to it (on the
    importer's credentials), and its ``prices`` (``None``: unpriced)."""

    model: str
    connection: Connection | None
    value: str
    route: gateway.Route
    prices: PricePair | None


def _judged_rescores(*, user, results, domain: str, judge: ImportJudge | None, progress):
    """Each simulation's :class:`Rescore`, in the file's order: with ``judge`` for tasks
    that need it, until its budget is reached or its provider refuses it for good (then
    the rest are not judged, their note saying why)."""
    info = results.info
    scores: list[Rescore] = []
    stopped = ""  # why the judge is asked no more
    spent = Decimal(0)  # this import's judge spend so far (not stored yet: budgets cannot see it)
    for sim in results.simulations:
        task = catalog.get_tau2_task(domain, sim.task_id)
        route = None
        if judge is not None and not stopped and needs_judge(task):
            stopped = (
                budgets.judge_refusal(
                    connection=judge.connection,
                    model=judge.model,
                    prices=judge.prices,
                    user=user,
                    pending=spent,
                )
                or ""
            )
            route = None if stopped else judge.route
        score = rescore(
            domain=domain,
            task=task,
            simulation=sim,
            max_steps=info.max_steps,
            max_errors=info.max_errors,
            judge_llm=route,
        )
        if stopped and score.note == NO_JUDGE:
            score = replace(score, note=f"not judged: {stopped}")
        if score.judge_stop:
            stopped = f"the judge failed on an earlier conversation ({score.judge_stop})"
        if judge is not None and score.judge_usage.calls:
            usage = score.judge_usage
            cost = cost_usd(
                prompt_tokens=usage.prompt_tokens,
                completion_tokens=usage.completion_tokens,
                prices=judge.prices,
            )
            spent += cost or Decimal(0)
        scores.append(score)
        if progress is not None:
            progress(len(scores), len(results.simulations))
    return scores


def evaluation_import(
    *,
    user,
    data: bytes,
    name: str = "",
    filename: str = "",
    progress: Callable[[int, int], None] | None = None,
    on_stored: Callable[[Evaluation], None] | None = None,
    judge: ImportJudge | None = None,
) -> Evaluation:
    """Store the ``tau2 run`` results file ``data`` as an imported evaluation of ``user``.

    Without a ``name`` it is called after the file (``filename``, as uploaded): the
    page's title adds the models and the domain itself, so the name does not repeat them.

    ``progress(done, total)`` is called as the simulations are re-scored (before anything
    is written); ``on_stored(evaluation)`` inside the transaction that stores it, once
    everything is written: whatever it raises undoes the import (a worker's job that is
    no longer its own stores nothing). ``judge``: τ²'s NL-assertion judge for the tasks
    whose reward needs it (none: those are not re-scored).

    Returns the evaluation (status ``IMPORTED``) with one completed run per simulation:
    its messages as events and τ²'s re-scored reward. Raises ``ValidationError`` with a
    message for a person — nothing stored — when the file is too large, empty, not
    JSON, not τ²'s results format, of an unknown domain or task, or inconsistent.
    """
    if len(data) > max_upload_bytes():
        raise ValidationError(too_large(len(data)))
    try:
        results = read_results(data, max_bytes=max_upload_bytes())
    except ResultsFileError as exc:
        raise ValidationError(str(exc)) from None
    _check_numbers(results)
    info = results.info
    domain = info.environment_info.domain_name
    if not Domain.objects.filter(name=domain).exists():
        known = ", ".join(Domain.objects.values_list("name", flat=True))
        raise ValidationError(f"Unknown domain {domain!r}: this server has {known}.")
    if not results.simulations:
        raise ValidationError("The file has no simulations to import.")
    if not 1 <= info.num_trials <= MAX_TRIALS:
        raise ValidationError(
            f"The file has {info.num_trials} trials; an evaluation holds 1 to {MAX_TRIALS}."
        )
    if info.max_steps < 1 or info.max_errors < 1:
        raise ValidationError("The file's step and error limits must be at least 1.")
    task_ids = _task_order(results)
    tasks = {t.task_id: t for t in Task.objects.filter(domain_id=domain, task_id__in=task_ids)}
    missing = [t for t in task_ids if t not in tasks]
    if missing:
        shown = ", ".join(repr(t) for t in missing[:5]) + (" …" if len(missing) > 5 else "")
        raise ValidationError(f"No task {shown} in {domain} on this server.")
    trials = _trials(results)

    # Re-score before anything is written: CPU only, and the judge's calls if one is named.
    scores = _judged_rescores(
        user=user, results=results, domain=domain, judge=judge, progress=progress
    )
    judged_at = timezone.now()
    differing_tasks = sorted(
        {t.id for t in results.tasks if t.id in tasks and not same_task(domain, t)}
    )
    split = _split_of(domain, task_ids)
    seed = info.seed if info.seed is not None else DEFAULT_SEED
    seeds = _seeds(results, trials, seed, info.num_trials)
    _, our_hash = task_set_installed()
    digests = _simulation_hashes(data, results)
    repeats = _repeats(digests)
    agent_model = (info.agent_info.llm or info.agent_info.implementation or "unknown")[:255]
    user_model = (info.user_info.llm or info.user_info.implementation or "unknown")[:255]
    # Each side's τ² llm_args as the file records them, without what names a key or an
    # endpoint (tau2 run writes api_base and api_key there): ranked by them, exported again.
    agent_llm_args = _llm_args(info.agent_info.llm_args)
    user_llm_args = _llm_args(info.user_info.llm_args)

    with transaction.atomic():
        evaluation = Evaluation.objects.create(
            name=(name or _default_name(filename)).strip()[:200],
            status=Evaluation.Status.IMPORTED,
            created_by=user,
            finished_at=timezone.now(),
            domain=domain,
            split=split,
            full_split=bool(split),
            task_ids=task_ids,
            agent_model=agent_model,
            agent_provider=agent_model.split(":", 1)[1] if ":" in agent_model else "",
            user_model=user_model,
            agent_llm_args=agent_llm_args,
            user_llm_args=user_llm_args,
            num_trials=info.num_trials,
            seed=seed,
            trial_seeds=seeds,
            max_steps=info.max_steps,
            max_errors=info.max_errors,
            concurrency=1,
            provenance={
                "source": "tau2 run import",
                # Scored again with this server's τ²; ranked with this catalogue only
                # when the file's tasks are this catalogue's, to the letter.
                "tau2_version": catalog.tau2_version(),
                "task_set_hash": our_hash if not differing_tasks else f"file:{_digest(results)}",
                "agent_prices": None,
                "simulations_hash": _digest_of(digests),
                "import": {
                    # Evaluations that already hold some of these very simulations (by id,
                    # as text: how many of them): the leaderboard counts each once.
                    "repeats": repeats,
                    "file_tau2": info.git_commit,
                    "file_seed": info.seed,
                    "agent": scrub(info.agent_info.model_dump(mode="json")),
                    "user": scrub(
                        info.user_info.model_dump(
                            mode="json", exclude={"global_simulation_guidelines"}
                        )
                    ),
                    "simulations": len(results.simulations),
                    "rescored": sum(s.reward_info is not None for s in scores),
                    # τ²'s NL judge the importer named, and how many it judged.
                    "judge": judge.value if judge is not None else "",
                    "judged": sum(bool(s.judge_usage.calls) for s in scores),
                    "differs": [],
                    "not_rescored": [],
                    "tasks_differ": differing_tasks,
                },
            },
        )
        runs = Run.objects.bulk_create(
            _run(evaluation, tasks[sim.task_id], sim, trial, score, info, digest, judge, judged_at)
            for sim, trial, score, digest in zip(
                results.simulations, trials, scores, digests, strict=True
            )
        )
        RunEvent.objects.bulk_create(
            (
                event
                for run, sim in zip(runs, results.simulations, strict=True)
                for event in _events(run, sim)
            ),
            batch_size=2000,
        )
        report = evaluation.provenance["import"]
        for run, trial, score in zip(runs, trials, scores, strict=True):
            where = {"run_id": run.pk, "task_id": run.task.task_id, "trial": trial}
            if score.differs:
                report["differs"].append(
                    {**where, "stored": score.stored, "rescored": score.reward}
                )
            elif score.reward_info is None:
                report["not_rescored"].append({**where, "reason": score.note})
        evaluation.summary = selectors.evaluation_metrics(evaluation)
        evaluation.save(update_fields=["provenance", "summary"])
        if on_stored is not None:
            on_stored(evaluation)
    return evaluation


def max_upload_bytes() -> int:
    """The largest results file accepted (``TAU2_EVAL_MAX_UPLOAD_BYTES``)."""
    return settings.TAU2_EVAL_MAX_UPLOAD_BYTES


def too_large(size: int) -> str:
    return (
        f"The file is {_size(size)}; the largest results file accepted is "
        f"{_size(max_upload_bytes())}."
    )


def _size(n: int) -> str:
    return f"{n / (1024 * 1024):.1f} MB" if n >= 1024 * 1024 else f"{n / 1024:.0f} KB"


def _task_order(results) -> list[str]:
    """The simulated tasks, in the order of the file's task list (τ²'s order), then any
    simulated task the list lacks."""
    simulated = {sim.task_id for sim in results.simulations}
    ordered = [t.id for t in results.tasks if t.id in simulated]
    ordered += [sim.task_id for sim in results.simulations]
    return list(dict.fromkeys(ordered))


def _trials(results) -> list[int]:
    """Each simulation's trial number (τ² writes it; a file without one is numbered in
    order per task). Raises ``ValidationError`` when two simulations claim the same task
    and trial, or a trial is beyond the file's ``num_trials``."""
    seen: dict[str, set[int]] = {}
    out = []
    for sim in results.simulations:
        taken = seen.setdefault(sim.task_id, set())
        trial = sim.trial
        if trial is None:
            trial = next(i for i in range(len(taken) + 1) if i not in taken)
        if not 0 <= trial < results.info.num_trials:
            raise ValidationError(
                f"Task {sim.task_id!r} has a simulation of trial {trial}, but the file has "
                f"{results.info.num_trials} trials (0 to {results.info.num_trials - 1})."
            )
        if trial in taken:
            raise ValidationError(f"Task {sim.task_id!r} has two simulations of trial {trial}.")
        taken.add(trial)
        out.append(trial)
    return out


def _seeds(results, trials: list[int], seed: int, k: int) -> list[int]:
    """Each trial's seed as the file's simulations record it, else as τ² derives it."""
    derived = trial_seeds(seed, k)
    recorded: dict[int, int] = {}
    for sim, trial in zip(results.simulations, trials, strict=True):
        if sim.seed is not None:
            recorded.setdefault(trial, sim.seed)
    return [recorded.get(trial, derived[trial]) for trial in range(k)]


def _split_of(domain: str, task_ids: list[str]) -> str:
    """The split whose tasks are exactly ``task_ids`` ('' if none is)."""
    wanted = set(task_ids)
    splits = catalog.get_domain(domain).splits
    matching = [name for name, ids in splits.items() if set(ids) == wanted]
    for name in (*_SPLIT_PREFERENCE, *sorted(matching)):
        if name in matching:
            return name
    return ""


def simulation_hash(raw: Any) -> str:
    """The content hash of one τ² simulation: SHA-256 of its JSON as the file holds it
    (keys sorted, no spaces) — the same conversation imported twice has the same hash.
    The file's text, not τ²'s model of it: the model fills the stamps a file leaves out
    with the time it was read."""
    text = json.dumps(raw, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _simulation_hashes(data: bytes, results) -> list[str]:
    """Each simulation's :func:`simulation_hash`, in the file's order (``data`` was read
    by the bounded reader already: it is JSON of τ²'s shape)."""
    raw = jsonbounds.loads(
        data.decode("utf-8-sig"),
        max_bytes=max_upload_bytes(),
        max_depth=MAX_DEPTH,
        max_int_digits=MAX_INT_DIGITS,
    )["simulations"]
    if len(raw) != len(results.simulations):  # never, for a file read_results accepted
        raise ValidationError("The file's simulations could not be read twice alike.")
    return [simulation_hash(sim) for sim in raw]


def _digest_of(digests: list[str]) -> str:
    """The hash of a set of simulations: of their hashes, sorted (order-free)."""
    return hashlib.sha256(",".join(sorted(digests)).encode()).hexdigest()


def _repeats(digests: list[str]) -> dict[str, int]:
    """Which stored evaluations already hold some of these simulations: id → how many."""
    found = (
        Run.objects.filter(provenance__simulation_hash__in=list(set(digests)))
        .values_list("evaluation_id", "provenance__simulation_hash")
        .distinct()
    )
    counts: dict[str, int] = {}
    for evaluation_id, _ in found:
        if evaluation_id is not None:
            counts[str(evaluation_id)] = counts.get(str(evaluation_id), 0) + 1
    return dict(sorted(counts.items(), key=lambda item: int(item[0])))


def _digest(results) -> str:
    """A short hash of the file's own task definitions (its task set)."""
    tasks = sorted((t.model_dump(mode="json") for t in results.tasks), key=lambda t: t["id"])
    text = json.dumps(tasks, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _default_name(filename: str) -> str:
    # A browser sends the file's own name; anything before a slash is not part of it.
    base = filename.replace("\\", "/").rsplit("/", 1)[-1].strip()
    return f"Imported from {base}" if base else "Imported tau2 run file"


def _check_numbers(results) -> None:
    """Raise ``ValidationError`` naming the field of any number the import stores that
    its column cannot hold: the step and error limits, the seeds, every message's token
    counts and cost, each side's cost, and a simulation's end (start plus duration)."""
    info = results.info
    for name in ("max_steps", "max_errors"):
        _in_range(getattr(info, name), f"info.{name}", (1, column_range(Evaluation, name)[1]))
    if info.seed is not None:
        _in_range(info.seed, "info.seed", column_range(Evaluation, "seed"))
    # A run's token sums stay far inside their bigint columns: at most 2**31 a message,
    # and fewer than 2**31 messages fit in an upload.
    tokens = column_range(RunEvent, "prompt_tokens")
    for i, sim in enumerate(results.simulations):
        where = f"simulations[{i}]"
        if sim.seed is not None:
            _in_range(sim.seed, f"{where}.seed", column_range(Run, "seed"))
        _times(sim, where)
        _money(sim.agent_cost, f"{where}.agent_cost")
        _money(sim.user_cost, f"{where}.user_cost")
        for j, message in enumerate(sim.messages):
            usage = getattr(message, "usage", None) or {}
            for name in ("prompt_tokens", "completion_tokens"):
                _tokens(usage.get(name), f"{where}.messages[{j}].usage.{name}", tokens)
            _money(getattr(message, "cost", None), f"{where}.messages[{j}].cost")


def _in_range(value: int, field: str, bounds: tuple[int, int]) -> None:
    low, high = bounds
    if not low <= value <= high:
        raise ValidationError(f"{field} is {value!r}; it must be {low} to {high}.")


def _tokens(value, field: str, bounds: tuple[int, int]) -> None:
    """A token count as the import has always read it (``int(value or 0)``: a float is
    truncated, "12" is 12), within ``bounds``."""
    try:
        count = int(value or 0)
    except (TypeError, ValueError, OverflowError):
        raise ValidationError(
            f"{field} is {value!r}; it must be a whole number from {bounds[0]} to {bounds[1]}."
        ) from None
    _in_range(count, field, bounds)


def _times(sim, where: str) -> tuple[datetime | None, datetime | None]:
    """When ``sim`` started and finished; ``ValidationError`` if either is not a date
    every time zone can show (a day's margin on the years 1 to 9999)."""
    started = _when(sim.start_time)
    if started is None:
        return None, None
    if not _EARLIEST <= started <= _LATEST:
        raise ValidationError(
            f"{where}.start_time is {sim.start_time!r}; it must be a date from "
            f"{_EARLIEST.date().isoformat()} to {_LATEST.date().isoformat()}."
        )
    try:
        finished = started + timedelta(seconds=max(sim.duration, 0.0))
    except OverflowError:
        finished = None
    if finished is None or finished > _LATEST:
        raise ValidationError(
            f"{where}.duration is {sim.duration!r} s: it would end after "
            f"{_LATEST.date().isoformat()}."
        )
    return started, finished


def _when(value: str | None) -> datetime | None:
    """τ²'s timestamps are naive ISO local times of the machine that ran it: read as UTC."""
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _money(value: float | None, field: str) -> Decimal | None:
    """A cost in the columns' dollars (6 decimals); ``ValidationError`` naming ``field``
    when they cannot hold it."""
    if value is None:
        return None
    try:
        amount = Decimal(str(value)).quantize(_CENT)
    except InvalidOperation:
        amount = None
    if amount is None or not 0 <= amount <= _MAX_COST:
        raise ValidationError(f"{field} is {value!r}; it must be 0 to {_MAX_COST} USD.")
    return amount


def _llm_args(args: dict | None) -> dict | None:
    if args is None:
        return None
    return {k: v for k, v in scrub(args).items() if k not in ROUTE_KEYS}


def _usage(message) -> tuple[int, int]:
    usage = getattr(message, "usage", None) or {}
    return int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)


def _side_usage(sim, kind: str) -> tuple[int, int]:
    """The prompt and completion tokens of one side's messages (``kind``: the agent's or
    the customer's, as a live run counts them in ``apps.runs.events``)."""
    usages = [_usage(m) for m in sim.messages if event_kind({"role": m.role}) == kind]
    return sum(p for p, _ in usages), sum(c for _, c in usages)


def _judge_columns(score: Rescore, judge: ImportJudge | None, judged_at) -> dict[str, Any]:
    """A run's judge columns when ``judge`` judged its conversation (else none)."""
    usage = score.judge_usage
    if judge is None or not usage.calls:
        return {}
    return {
        "judge_model": judge.model,
        "judge_connection": judge.connection,
        "judge_prompt_tokens": usage.prompt_tokens,
        "judge_completion_tokens": usage.completion_tokens,
        "judge_cost_usd": _money(
            cost_usd(
                prompt_tokens=usage.prompt_tokens,
                completion_tokens=usage.completion_tokens,
                prices=judge.prices,
            ),
            "judge cost",
        ),
        "judged_at": judged_at,
    }


def _run(
    evaluation: Evaluation,
    task: Task,
    sim,
    trial: int,
    score: Rescore,
    info,
    digest: str,
    judge: ImportJudge | None = None,
    judged_at=None,
) -> Run:
    started, finished = _times(sim, "")
    agent_prompt, agent_completion = _side_usage(sim, RunEvent.Kind.AGENT)
    user_prompt, user_completion = _side_usage(sim, RunEvent.Kind.CUSTOMER)
    rescore = {"status": score.status, "stored_reward": score.stored}
    if score.reward_info is not None:
        rescore["rescored_reward"] = score.reward
    if score.note:
        rescore["note"] = score.note
    # Not re-scored: the file's verdict is all there is, and the run says so.
    reward_info = score.reward_info
    if reward_info is None and sim.reward_info is not None:
        reward_info = sim.reward_info.model_dump(mode="json")
    reward = reward_info["reward"] if reward_info is not None else None
    return Run(
        kind=Run.Kind.MODEL,
        status=Run.Status.COMPLETED,
        task=task,
        domain=task.domain_id,
        created_by=evaluation.created_by,
        agent_model=evaluation.agent_model,
        agent_provider=evaluation.agent_provider,
        user_model=evaluation.user_model,
        user_provider="import",
        agent_llm_args=evaluation.agent_llm_args,
        user_llm_args=evaluation.user_llm_args,
        max_steps=info.max_steps,
        max_errors=info.max_errors,
        seed=sim.seed,
        given_seed=evaluation.seed,
        seed_trial=trial,
        evaluation=evaluation,
        trial=trial,
        started_at=started,
        finished_at=finished,
        termination_reason=sim.termination_reason.value,
        # The loop mark, as a run that ends here stores it (its messages as stored below).
        loop_length=endings.loop_length(
            [m.model_dump(mode="json") for m in sim.messages[-endings.LOOP_TAIL :]]
        ),
        reward=min(max(reward, 0.0), 1.0) if reward is not None else None,
        reward_info=reward_info,
        n_messages=len(sim.messages),
        n_tool_calls=sum(len(m.tool_calls or []) for m in sim.messages if m.role != "tool"),
        prompt_tokens=agent_prompt,
        completion_tokens=agent_completion,
        cost_usd=_money(sim.agent_cost, "agent_cost"),
        # The customer's, as τ² records them on its messages and in user_cost.
        user_prompt_tokens=user_prompt,
        user_completion_tokens=user_completion,
        user_cost_usd=_money(sim.user_cost, "user_cost"),
        **_judge_columns(score, judge, judged_at),
        provenance={
            "tau2_version": evaluation.provenance["tau2_version"],
            "task_set_hash": evaluation.provenance["task_set_hash"],
            "domain": task.domain_id,
            "task_id": task.task_id,
            "source": "tau2 run import",
            "simulation_id": sim.id[:200],
            "simulation_hash": digest,
            "agent": {"implementation": "tau2 run", "model": evaluation.agent_model},
            "user": {"implementation": "tau2 run", "model": evaluation.user_model},
            "args": {
                "max_steps": info.max_steps,
                "max_errors": info.max_errors,
                "seed": evaluation.seed,
                "trial": trial,
                "trial_seed": sim.seed,
                "temperature": (info.agent_info.llm_args or {}).get("temperature"),
            },
            "rescore": rescore,
        },
    )


_PRICED_KINDS = (RunEvent.Kind.AGENT, RunEvent.Kind.CUSTOMER)


def _events(run: Run, sim) -> list[RunEvent]:
    events = []
    for seq, message in enumerate(sim.messages):
        data: dict[str, Any] = message.model_dump(mode="json")
        kind = event_kind(data)
        prompt, completion = _usage(message)
        events.append(
            RunEvent(
                run=run,
                seq=seq,
                kind=kind,
                message=data,
                prompt_tokens=prompt,
                completion_tokens=completion,
                cost_usd=_money(message.cost, "cost") if kind in _PRICED_KINDS else None,
            )
        )
    return events
