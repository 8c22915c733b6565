"""An evaluation's τ² results file, imported, keeps what it holds: every side's tokens
(the agent's and the customer's, as τ² records them on each message) and each side's
cost, so the totals are the same after export → import as before; and an imported
evaluation's title says each thing once.

alice imports a file ``tau2 run`` itself wrote against the scripted LLM (airline 27 and
2 × 2 trials), exports it as τ², and imports that again.
"""

from __future__ import annotations

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from apps.evaluations.exports import evaluation_export_tau2
from apps.evaluations.imports import evaluation_import
from apps.evaluations.summary import EvaluationSummary
from apps.runs.models import Run
from tests.support.evaluations import tau2_run_file
from tests.support.jobs import followed
from tests.support.scripts import gold_script

pytestmark = pytest.mark.slow

TOTALS = (
    "prompt_tokens",
    "completion_tokens",
    "user_prompt_tokens",
    "user_completion_tokens",
    "cost_usd",
    "user_cost_usd",
)


@pytest.fixture(scope="module")
def tau2_file(tmp_path_factory, scripted_llm_session) -> bytes:
    gold_script(scripted_llm_session)
    try:
        path = tau2_run_file(scripted_llm_session, tmp_path_factory.mktemp("tau2-run"))
    finally:
        scripted_llm_session.reset()
    # τ² prices the scripted models at $0; a priced model's file says what each side cost.
    data = json.loads(path.read_bytes())
    for i, sim in enumerate(data["simulations"]):
        sim["agent_cost"], sim["user_cost"] = 0.0125 + i / 1000, 0.0031 + i / 1000
    return json.dumps(data).encode()


def file_tokens(data: bytes) -> dict[str, int]:
    """Each side's tokens summed over the file's messages, as τ² wrote them."""
    sums = {"assistant": [0, 0], "user": [0, 0]}
    for sim in json.loads(data)["simulations"]:
        for message in sim["messages"]:
            usage = message.get("usage") or {}
            if message["role"] in sums:
                sums[message["role"]][0] += usage.get("prompt_tokens") or 0
                sums[message["role"]][1] += usage.get("completion_tokens") or 0
    return {
        "prompt_tokens": sums["assistant"][0],
        "completion_tokens": sums["assistant"][1],
        "user_prompt_tokens": sums["user"][0],
        "user_completion_tokens": sums["user"][1],
    }


def totals(evaluation) -> dict:
    runs = Run.objects.filter(evaluation=evaluation).order_by("trial", "task__task_id")
    return {
        name: [getattr(run, name) for run in runs]
        if "cost" in name
        else sum(getattr(run, name) for run in runs)
        for name in TOTALS
    }


def test_an_import_counts_the_customers_tokens_and_cost_too(alice, tau2_file):
    written = file_tokens(tau2_file)
    assert written["user_prompt_tokens"] > 0 and written["user_completion_tokens"] > 0
    evaluation = evaluation_import(user=alice, data=tau2_file)
    got = totals(evaluation)
    assert {k: got[k] for k in written} == written
    summary = EvaluationSummary.from_json(evaluation.summary)
    assert summary.tokens == sum(written.values())
    simulations = sorted(
        json.loads(tau2_file)["simulations"], key=lambda s: (s["trial"], s["task_id"])
    )
    assert [float(c) for c in got["user_cost_usd"]] == pytest.approx(
        [s["user_cost"] for s in simulations], abs=1e-6
    )
    assert [float(c) for c in got["cost_usd"]] == pytest.approx(
        [s["agent_cost"] for s in simulations], abs=1e-6
    )
    # Each event keeps its own message's tokens, the customer's included.
    per_event = Run.objects.filter(evaluation=evaluation).values_list(
        "events__prompt_tokens", flat=True
    )
    assert sum(per_event) == written["prompt_tokens"] + written["user_prompt_tokens"]


def test_export_then_import_keeps_every_total(alice, tau2_file):
    first = evaluation_import(user=alice, data=tau2_file, name="from tau2 run")
    exported = json.dumps(evaluation_export_tau2(first)).encode()
    assert file_tokens(exported) == file_tokens(tau2_file)
    second = evaluation_import(user=alice, data=exported, name="round trip")
    assert totals(second) == totals(first)
    before = EvaluationSummary.from_json(first.summary)
    after = EvaluationSummary.from_json(second.summary)
    assert after.tokens == before.tokens == sum(file_tokens(tau2_file).values())
    assert (after.cost_usd, after.user_cost_usd, after.total_cost_usd) == (
        before.cost_usd,
        before.user_cost_usd,
        before.total_cost_usd,
    )


def test_an_imported_evaluations_title_says_each_thing_once(
    alice, alice_client, tau2_file, held_jobs
):
    response = alice_client.post(
        "/evaluations/import/",
        {"file": SimpleUploadedFile("airline-run.json", tau2_file, "application/json")},
    )
    job, _ = followed(alice_client, response, held_jobs)
    page = alice_client.get(job.evaluation.get_absolute_url()).content.decode()
    title = page.split('data-testid="evaluation-title">', 1)[1].split("</h1>", 1)[0]
    assert title == "Imported from airline-run.json: openai/scripted-agent on airline"
    assert title.count("openai/scripted-agent") == 1
