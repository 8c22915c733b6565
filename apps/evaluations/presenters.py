"""What the live evaluation page shows: one state, for the page, ``/state/`` and the socket.

The matrix and the charts travel as compact JSON the page script draws (a 2,285-task
telecom evaluation has ~9,000 cells: no template loop over them); progress and metrics
as small HTML fragments.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db.models import Count, F, Max, Q, Sum
from django.template.loader import render_to_string
from django.utils.safestring import mark_safe

from apps.evaluations import selectors
from apps.evaluations.estimates import dollars
from apps.evaluations.models import Evaluation
from apps.evaluations.summary import EvaluationSummary
from apps.runs import endings
from apps.runs.models import Run
from apps.tasks.models import Split
from tau2_env.engine.catalog import task_set_version
from tau2_env.engine.results import LEADERBOARD
from tau2_env.llm.llm_args import DEFAULT_USER_ARGS

# A cell of the matrix: [run id, status letter, reward or null] (null: no run).
STATUS_LETTERS = {
    Run.Status.QUEUED: "q",
    Run.Status.RUNNING: "r",
    Run.Status.COMPLETED: "c",
    Run.Status.FAILED: "f",
    Run.Status.STOPPED: "s",
}


# The state of an evaluation is computed once per change and kept here, whoever asks
# (the page, /state/, each viewer's socket): reading a 2,285-task × 4 evaluation's runs
# and τ²'s metrics takes ~200 ms, the check whether anything changed one query.
STATE_CACHE_SECONDS = 600
_JSON_SCRIPT_ESCAPES = {ord(">"): "\\u003E", ord("<"): "\\u003C", ord("&"): "\\u0026"}


@dataclass(frozen=True)
class LiveState:
    """``head``: the small fields and the progress and metrics fragments; ``data_json``:
    the matrix and the charts as one JSON text.

    ``version`` in ``head`` is the number of final runs (what
    ``events.evaluation_version`` counts), read from the same rows as the rest.
    """

    head: dict[str, Any]
    data_json: str

    def message(self) -> dict[str, Any]:
        """What the socket and ``/state/`` send: the head, ``matrix`` and ``charts``."""
        return {**self.head, **json.loads(self.data_json)}

    @property
    def data_script(self) -> str:
        """``data_json`` safe inside ``<script type="application/json">`` (as
        ``json_script`` escapes it), without serialising it again."""
        return mark_safe(self.data_json.translate(_JSON_SCRIPT_ESCAPES))  # noqa: S308


def evaluation_state(evaluation: Evaluation) -> LiveState:
    """The live state of ``evaluation``: the kept one if nothing changed since, else
    computed afresh (and kept)."""
    key = f"evaluation-state:{evaluation.pk}"
    stamp = _stamp(evaluation)
    kept = cache.get(key)
    if kept is not None and kept[0] == stamp:
        return LiveState(head=kept[1], data_json=kept[2])
    state = _compute(evaluation)
    cache.set(key, (stamp, state.head, state.data_json), STATE_CACHE_SECONDS)
    return state


def _stamp(evaluation: Evaluation) -> tuple:
    """What the state is made of, summed up in one query: the evaluation's status and
    error, and its runs' counts per status, last start / finish / dispatch, tokens,
    rewards and messages, and the critical user-simulator errors marked on them (a
    label added, accepted or dismissed). Any change the page shows changes one of them."""
    totals = Run.objects.filter(evaluation_id=evaluation.pk).aggregate(
        **{status: Count("id", filter=Q(status=status)) for status in Run.Status.values},
        dispatched=Count("dispatched_at"),
        last_started=Max("started_at"),
        last_finished=Max("finished_at"),
        last_dispatched=Max("dispatched_at"),
        tokens=Sum(F("prompt_tokens") + F("completion_tokens")),
        rewards=Sum("reward"),
        messages=Sum("n_messages"),
        # The runs with a critical user-simulator error: how many, and which (their ids
        # summed), so that a label added, accepted or dismissed is a change.
        sim_errors=Count("id", filter=selectors.SIM_ERROR),
        sim_error_ids=Sum("id", filter=selectors.SIM_ERROR),
    )
    return (evaluation.status, evaluation.error, tuple(sorted(totals.items())))


def _compute(evaluation: Evaluation) -> LiveState:
    runs = selectors.evaluation_runs(evaluation)
    summary = selectors.evaluation_summary(evaluation, runs)
    matrix = matrix_payload(evaluation, runs)
    head = {
        "type": "state",
        "evaluation_id": evaluation.pk,
        "version": summary.final,
        "status": evaluation.status,
        "final": evaluation.is_final,
        "retryable": summary.retryable,
        "progress_html": render_to_string(
            "includes/evaluation_progress.html",
            progress_context(
                evaluation,
                summary,
                sum(1 for r in runs if r["status"] == Run.Status.QUEUED and r["dispatched_at"]),
            ),
        ),
        "metrics_html": render_to_string(
            "includes/evaluation_metrics.html", metrics_context(evaluation, summary)
        ),
        # The paper's breakdowns, computed with the rest: the page replaces them with
        # every state, as a reload would show them.
        "breakdowns_html": render_to_string(
            "evaluations/_breakdowns.html", {"evaluation": evaluation}
        ),
    }
    data = {"matrix": matrix, "charts": charts_payload(evaluation, summary, matrix["tasks"])}
    return LiveState(head=head, data_json=json.dumps(data, separators=(",", ":")))


def matrix_payload(evaluation: Evaluation, runs: list[dict]) -> dict[str, Any]:
    """``{"k": trials, "tasks": [task id…], "cells": [cell…]}``, cells row by row (task
    ``i``'s trial ``t`` at ``i * k + t``)."""
    tasks, cells = [], []
    for row in selectors.evaluation_matrix(evaluation, runs):
        tasks.append(row["task_id"])
        cells.extend(
            [c["run_id"], STATUS_LETTERS.get(c["status"], "q"), c["reward"]] if c else None
            for c in row["cells"]
        )
    return {"k": evaluation.num_trials, "tasks": tasks, "cells": cells}


def charts_payload(
    evaluation: Evaluation, summary: EvaluationSummary, tasks: list[str]
) -> dict[str, Any]:
    """The pass^k curve (``[[k, pass^k]…]``) and each scored task's mean reward, best
    first (``[[task index, reward]…]``, indices into ``tasks``)."""
    index = {task_id: i for i, task_id in enumerate(tasks)}
    return {
        "k": evaluation.num_trials,
        "pass_hat_k": [[k, v] for k, v in sorted(summary.pass_hat_ks.items())],
        "reward_by_task": [
            [index[row.task_id], round(row.reward, 4)]
            for row in summary.reward_by_task
            if row.task_id in index
        ],
    }


def progress_context(
    evaluation: Evaluation, summary: EvaluationSummary, waiting_for_worker: int = 0
) -> dict[str, Any]:
    """``waiting_for_worker``: the queued runs handed to the workers (from the runs read)."""
    planned = summary.planned or 1
    segments = [
        ("completed", "done", summary.completed),
        ("failed", "failed", summary.failed),
        ("stopped", "stopped", summary.stopped),
        ("running", "running", summary.running),
        ("queued", "queued", summary.queued),
    ]
    return {
        "evaluation": evaluation,
        "m": summary,
        "segments": [
            {"key": key, "label": label, "count": count, "percent": round(100 * count / planned, 3)}
            for key, label, count in segments
            if count or key in ("completed", "running", "queued", "failed")
        ],
        "eta": duration_label(summary.eta_seconds),
        # Queued runs the dispatcher has handed to the workers, waiting for a free one:
        # the dispatcher filled the evaluation's concurrency, every worker is busy (issue
        # 33's "1 running · 2 queued" at concurrency 2 said neither).
        "waiting_for_worker": waiting_for_worker,
        # When the ETA ends, for the page to count it down between states (the state is
        # kept while nothing changes; its text would stand still).
        "eta_at": (
            (summary.computed_at + timedelta(seconds=summary.eta_seconds)).isoformat()
            if summary.eta_seconds is not None
            else ""
        ),
        "cost": _money(summary.total_cost_usd),  # every priced call: agent, customer, judge
        "agent_cost": _money(summary.cost_usd),
        "customer_cost": _money(summary.user_cost_usd),
        # τ²'s NL-assertion judge, when it was called (retail's NL assertions).
        "judged": bool(summary.judge_prompt_tokens or summary.judge_completion_tokens),
        "judge_cost": _money(summary.judge_cost_usd),
        "unpriced_runs": summary.unpriced_runs,
        "tokens": summary.tokens,
    }


def left_out(summary: EvaluationSummary | None) -> list[tuple[str, int]]:
    """The runs left out of τ²'s metrics, as (why, how many), in ``LEFT_OUT``'s order."""
    if summary is None or not summary.left_out:
        return []
    return [(selectors.LEFT_OUT.get(k, k), n) for k, n in summary.left_out.items() if n]


def clean_scores(summary: EvaluationSummary | None) -> list[dict[str, Any]]:
    """``[{"k", "all", "clean"}]``: pass^k over every scored run and without the runs
    with a critical user-simulator error (``None`` where that k is not there)."""
    if summary is None:
        return []
    clean = summary.clean_pass_hat_ks or {}
    ks = sorted(set(summary.pass_hat_ks) | set(clean))
    return [{"k": k, "all": summary.pass_hat(k), "clean": clean.get(k)} for k in ks]


def metrics_context(evaluation: Evaluation, summary: EvaluationSummary) -> dict[str, Any]:
    return {
        "left_out": left_out(summary),
        "clean_scores": clean_scores(summary),
        "evaluation": evaluation,
        "m": summary,
        "pass_hat_ks": [{"k": k, "value": v} for k, v in sorted(summary.pass_hat_ks.items())],
        "terminations": sorted(
            summary.termination_reasons.items(), key=lambda item: (-item[1], item[0])
        ),
        "loops": loops_view(evaluation),
        "mean_duration": duration_label(summary.mean_duration_s),
        "mean_cost": _money(summary.mean_total_cost_usd),
        "mean_agent_cost": _money(summary.mean_cost_usd),
    }


def loops_view(evaluation: Evaluation) -> list[dict[str, Any]]:
    """``[{"label", "count"}]``: the evaluation's ended runs whose conversation loops, by
    how many of their last messages repeat (``apps.runs.endings``, a mark stored as each
    run ended; τ²'s reasons above are as τ² gave them), longest first."""
    ended = Run.objects.filter(evaluation=evaluation, status__in=Run.FINAL)
    counts = Counter(endings.looped_runs(ended).values())
    return [
        {"label": endings.loop_label(n), "count": c}
        for n, c in sorted(counts.items(), reverse=True)
    ]


def duration_label(seconds: float | None) -> str:
    """``45 s``, ``12 min``, ``3 h 20 min``; ``""`` when unknown."""
    if seconds is None:
        return ""
    seconds = round(seconds)
    if seconds < 90:
        return f"{seconds} s"
    minutes = round(seconds / 60)
    if minutes < 90:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60} min"


def _money(value: Decimal | None) -> str:
    """``$1.23``, ``$0.00042`` (a run may cost a fraction of a cent: never shown as $0),
    or ``""`` when unpriced."""
    if value is None:
        return ""
    return dollars(value)


# --- comparable to taubench.com's leaderboard -----------------------------------------

IMPORTED_SOURCE = "tau2 run import"


@dataclass(frozen=True)
class Comparability:
    """Whether an evaluation's numbers can stand beside taubench.com's leaderboard.

    ``reasons`` says, in words, every way it differs (empty when ``comparable``);
    ``via`` names the connection when the customer is one of the leaderboard's models
    on a connection other than OpenAI's (the same name, another door).
    """

    comparable: bool
    reasons: tuple[str, ...] = ()
    via: str = ""

    @property
    def label(self) -> str:
        if not self.comparable:
            return "not comparable to taubench.com"
        return "comparable to taubench.com" + (f" (customer via {self.via})" if self.via else "")


def either(names: Sequence[str]) -> str:
    """``gpt-4.1 or gpt-5.2``."""
    names = list(names)
    if len(names) <= 1:
        return names[0] if names else "the leaderboard's customer"
    return ", ".join(names[:-1]) + " or " + names[-1]


def _value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, int | str) and not isinstance(value, bool):
        return str(value)
    return json.dumps(value)


def leaderboard_split_size(domain: str) -> int | None:
    """How many tasks ``domain``'s leaderboard split has (``None``: no such split)."""
    return (
        Split.objects.filter(domain_id=domain, name=LEADERBOARD.split)
        .values_list("size", flat=True)
        .first()
    )


def comparability(
    evaluation: Evaluation,
    *,
    split_size: int | None = None,
    customers: Sequence[str] | None = None,
) -> Comparability:
    """Whether ``evaluation`` ran as taubench.com's leaderboard runs, and if not, why not.

    Comparable when all of these hold (anything else is a reason, each said):

    * the customer is one of ``customers`` (``settings.TAU2_LEADERBOARD_CUSTOMERS``) on
      an OpenAI connection — or on another connection under exactly that name (then
      ``via`` names it) — or, in an imported ``tau2 run`` file, named so by litellm's
      name for OpenAI's model (``gpt-4.1`` or ``openai/gpt-4.1``);
    * the customer's τ² llm_args are τ²'s default (``{"temperature": 0.0}``; None on
      older rows is that default);
    * the tasks are the domain's whole leaderboard split (τ²'s default split, ``base``;
      ``split_size`` its size, read from the catalogue when not given), as this server's
      catalogue defines them;
    * the limits are ``tau2 run``'s defaults (200 steps, 10 tool errors);
    * at least as many trials as the leaderboard's pass^1 … pass^4 take (4);
    * the tasks are the task sets of the τ² release taubench.com's current results run
      on (``settings.TAU2_LEADERBOARD_TAU2_VERSION``): any other is its legacy list.
    """
    customers = list(settings.TAU2_LEADERBOARD_CUSTOMERS if customers is None else customers)
    wanted = either(customers)
    provenance = evaluation.provenance or {}
    imported = provenance.get("source") == IMPORTED_SOURCE
    reasons: list[str] = []
    via = ""

    current = settings.TAU2_LEADERBOARD_TAU2_VERSION
    ran_on = task_set_version(str(provenance.get("tau2_version") or ""))
    if not ran_on:
        reasons.append(
            "the τ² release it ran on is not recorded; taubench.com's current results run "
            f"τ² {current}"
        )
    elif ran_on != current:
        reasons.append(
            f"legacy task set (τ² {ran_on}): taubench.com lists such results as legacy; its "
            f"current ones run τ² {current}"
        )

    model, connection = evaluation.user_model, evaluation.user_connection
    if connection is not None:
        if connection.kind == "openai":
            if model not in customers:
                reasons.append(f"customer is {model} on {connection.name}, not {wanted}")
        elif model in customers:
            via = connection.name
        else:
            reasons.append(
                f"customer is {model} on {connection.where_label}, not {wanted} on OpenAI"
            )
    elif imported:
        if model.removeprefix("openai/") not in customers:
            reasons.append(f"customer is {model} (as the imported file names it), not {wanted}")
    else:
        reasons.append(f"customer is {model} on Hugging Face, not {wanted}")

    args = dict(DEFAULT_USER_ARGS) if evaluation.user_llm_args is None else evaluation.user_llm_args
    expected = LEADERBOARD.user_llm_args
    for key, want in expected.items():
        if key not in args:
            reasons.append(
                f"customer {key} not set (the provider's default), the leaderboard uses "
                f"{_value(want)}"
            )
        elif args[key] != want:
            reasons.append(
                f"customer {key} {_value(args[key])}, the leaderboard uses {_value(want)}"
            )
    for key, value in args.items():
        if key not in expected:
            reasons.append(f"customer {key} {_value(value)}, the leaderboard sets none")

    split = LEADERBOARD.split
    if split_size is None:
        split_size = leaderboard_split_size(evaluation.domain)
    tasks = len(evaluation.task_ids)
    if split_size is None:
        reasons.append(f"{evaluation.domain} has no {split} split, which the leaderboard uses")
    elif not (evaluation.full_split and evaluation.split == split):
        if evaluation.full_split:
            reasons.append(
                f"the whole {evaluation.split} split ({tasks} tasks), the leaderboard uses "
                f"the {split} split ({split_size} tasks)"
            )
        else:
            reasons.append(
                f"{tasks} of {split_size} tasks (the leaderboard uses the whole {split} split)"
            )
    differ = (provenance.get("import") or {}).get("tasks_differ") or []
    if differ:
        reasons.append(
            f"the file's definitions of {len(differ)} task{'s' if len(differ) != 1 else ''} "
            "differ from τ²'s"
        )

    if evaluation.max_steps != LEADERBOARD.max_steps:
        reasons.append(
            f"step limit {evaluation.max_steps}, the leaderboard uses τ²'s {LEADERBOARD.max_steps}"
        )
    if evaluation.max_errors != LEADERBOARD.max_errors:
        reasons.append(
            f"error limit {evaluation.max_errors}, the leaderboard uses τ²'s "
            f"{LEADERBOARD.max_errors}"
        )
    if evaluation.timeout is not None:
        reasons.append(
            f"timeout {evaluation.timeout:g} s, the leaderboard runs tau2 run without one"
        )
    if evaluation.num_trials < LEADERBOARD.trials:
        trials = evaluation.num_trials
        reasons.append(
            f"{trials} trial{'s' if trials != 1 else ''}, the leaderboard runs "
            f"{LEADERBOARD.trials} (pass^1 … pass^{LEADERBOARD.trials})"
        )
    return Comparability(comparable=not reasons, reasons=tuple(reasons), via=via)
