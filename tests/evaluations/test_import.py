"""Importing a results file written by τ²'s own ``tau2 run``: read with τ²'s model, every
conversation re-scored by τ²'s evaluator, stored rewards that differ flagged, bad files
refused with nothing stored. Through the page it is a job a worker does
(``tests/evaluations/test_import_jobs.py`` follows the job itself).

alice (signed in) imports; charlie (anonymous) may not. The good files are written by
``tau2 run`` itself, in a subprocess, against the scripted LLM (airline 27 solved, 2 not).
"""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client, override_settings

from apps.evaluations.imports import evaluation_import
from apps.evaluations.models import Evaluation
from apps.evaluations.summary import EvaluationSummary
from apps.runs import endings
from apps.runs.models import Run, RunEvent
from tau2_env.engine.evaluation import trial_seeds
from tau2_env.generations import tau2_generation
from tests.support.evaluations import results_file, tau2_run_file
from tests.support.jobs import followed
from tests.support.people import ALICE_TOKEN
from tests.support.scripts import GOLD_CERTIFICATE, gold_script

UNSOLVED = "19"  # in the file, unsolved by the gold conversation (τ² 0.2 and 1.0.1)


@pytest.fixture(scope="module")
def tau2_file(tmp_path_factory, scripted_llm_session) -> bytes:
    """airline 27 and 2 × 2 trials, seed 300, as ``tau2 run`` writes them."""
    gold_script(scripted_llm_session)
    try:
        path = tau2_run_file(scripted_llm_session, tmp_path_factory.mktemp("tau2-run"))
    finally:
        scripted_llm_session.reset()
    return path.read_bytes()


def upload(client: Client, data: bytes, *, name: str = "results.json", **fields):
    return client.post(
        "/evaluations/import/",
        {"file": SimpleUploadedFile(name, data, content_type="application/json"), **fields},
    )


def nothing_stored() -> bool:
    return not (Evaluation.objects.exists() or Run.objects.exists() or RunEvent.objects.exists())


@pytest.mark.slow
def test_a_tau2_run_file_imports_and_tau2_scores_every_conversation_the_same(alice, tau2_file):
    from tau2.data_model.simulation import Results
    from tau2.metrics.agent_metrics import compute_metrics

    written = Results.model_validate_json(tau2_file)
    if tau2_generation() == "0.2":  # τ² 0.2 writes the agent's llm_args, key and all
        assert "dummy_key" in tau2_file.decode()

    evaluation = evaluation_import(user=alice, data=tau2_file, name="tau2 CLI")

    assert evaluation.status == Evaluation.Status.IMPORTED and evaluation.name == "tau2 CLI"
    assert evaluation.domain == "airline" and sorted(evaluation.task_ids) == [UNSOLVED, "27"]
    assert evaluation.split == "" and not evaluation.full_split
    assert evaluation.agent_model == "openai/scripted-agent"
    assert evaluation.user_model == "openai/scripted-customer"
    assert (evaluation.num_trials, evaluation.seed) == (2, 300)
    assert evaluation.trial_seeds == trial_seeds(300, 2)
    runs = {(r.task.task_id, r.trial): r for r in evaluation.runs.select_related("task")}
    assert len(runs) == len(written.simulations) == 4
    for sim in written.simulations:
        run = runs[(sim.task_id, sim.trial)]
        assert run.status == Run.Status.COMPLETED and run.kind == Run.Kind.MODEL
        assert run.seed == sim.seed == evaluation.trial_seeds[sim.trial]
        assert run.reward == sim.reward_info.reward
        assert (
            run.reward_info["reward_breakdown"]
            == sim.reward_info.model_dump(mode="json")["reward_breakdown"]
        )
        assert run.provenance["rescore"] == {
            "status": "equal",
            "stored_reward": sim.reward_info.reward,
            "rescored_reward": sim.reward_info.reward,
        }
        assert run.termination_reason == sim.termination_reason.value
        events = list(run.events.order_by("seq"))
        assert [e.message["role"] for e in events] == [m.role for m in sim.messages]
        assert [e.kind for e in events][:3] == ["agent", "customer", "agent"]
        # get_user_details, then (τ² 0.2's gold) send_certificate
        assert run.n_messages == len(events) and run.n_tool_calls == 1 + GOLD_CERTIFICATE
        # The loop mark is stored as for a run that ends here (none: a gold conversation).
        assert run.loop_length == endings.measured_loop(run.pk) == 0
    assert {t: runs[(t, 0)].reward for t in ("27", UNSOLVED)} == {"27": 1.0, UNSOLVED: 0.0}

    report = evaluation.provenance["import"]
    assert report["rescored"] == 4 and report["differs"] == [] and report["not_rescored"] == []
    assert report["tasks_differ"] == []  # the file's tasks are this catalogue's
    theirs = compute_metrics(written)
    summary = EvaluationSummary.from_json(evaluation.summary)
    assert summary.pass_hat_ks == theirs.pass_hat_ks
    assert summary.avg_reward == pytest.approx(theirs.avg_reward)

    # τ²'s file held the agent's key and endpoint; nothing of them was kept.
    stored = json.dumps(
        [evaluation.provenance, [r.provenance for r in runs.values()]], ensure_ascii=False
    )
    assert "dummy_key" not in stored and "api_base" not in stored and "127.0.0.1" not in stored


@pytest.mark.slow
def test_a_tampered_reward_is_flagged_and_the_run_keeps_tau2s(
    alice, alice_client, tau2_file, held_jobs
):
    data = json.loads(tau2_file)
    tampered = next(s for s in data["simulations"] if s["task_id"] == UNSOLVED and s["trial"] == 1)
    tampered["reward_info"]["reward"] = 1.0  # that task was not solved

    job, page = followed(alice_client, upload(alice_client, json.dumps(data).encode()), held_jobs)

    evaluation = Evaluation.objects.get()
    assert job.status == "done" and job.evaluation == evaluation
    assert f'href="{evaluation.get_absolute_url()}" data-testid="job-evaluation"' in page
    run = evaluation.runs.get(task__task_id=UNSOLVED, trial=1)
    assert run.reward == 0.0
    assert run.provenance["rescore"] == {
        "status": "differs",
        "stored_reward": 1.0,
        "rescored_reward": 0.0,
    }
    assert evaluation.provenance["import"]["differs"] == [
        {"run_id": run.pk, "task_id": UNSOLVED, "trial": 1, "stored": 1.0, "rescored": 0.0}
    ]
    others = evaluation.runs.exclude(pk=run.pk)
    assert {r.provenance["rescore"]["status"] for r in others} == {"equal"}

    # The job's page says how it re-scored.
    assert "Imported 4 simulations; τ² scored 4 of them again." in page
    assert "1 stored reward differs from τ²&#x27;s re-score" in page
    assert f"task {UNSOLVED} trial 1: file 1.0, τ² 0.0" in page
    listed = alice_client.get("/evaluations/").content.decode()
    assert 'data-testid="reward-differs"' in listed
    csv_rows = alice_client.get(f"/evaluations/{evaluation.pk}.csv").content.decode()
    assert f"{run.pk},{UNSOLVED},1," in csv_rows and ",differs," in csv_rows
    detail = alice_client.get(evaluation.get_absolute_url()).content.decode()
    assert 'data-testid="rescore-differs"' in detail
    assert f"task {UNSOLVED}, trial 1</a>: file 1.0, re-scored 0.0" in detail


@pytest.mark.slow
def test_a_conversation_whose_tool_results_were_edited_keeps_the_files_reward_and_says_why(
    alice, tau2_file
):
    data = json.loads(tau2_file)
    edited = next(s for s in data["simulations"] if s["task_id"] == "27" and s["trial"] == 0)
    next(m for m in edited["messages"] if m["role"] == "tool")["content"] = '{"user_id": "x"}'

    evaluation = evaluation_import(user=alice, data=json.dumps(data).encode())

    run = evaluation.runs.get(task__task_id="27", trial=0)
    if tau2_generation() != "0.2":
        # τ² 1.x replays only the tools that write (Environment.set_state skips reads), so
        # the edited result of get_user_details is nothing τ² checks: scored as before.
        assert run.provenance["rescore"]["status"] == "equal"
        return
    assert run.reward == 1.0  # the file's, as nothing else is known
    assert run.provenance["rescore"]["status"] == "not_rescored"
    assert "do not replay" in run.provenance["rescore"]["note"]
    (entry,) = evaluation.provenance["import"]["not_rescored"]
    assert (entry["task_id"], entry["trial"]) == ("27", 0)
    assert evaluation.provenance["import"]["rescored"] == 3


def test_a_task_whose_reward_needs_the_nl_judge_is_not_rescored_and_no_llm_is_called(
    llm_server,
):
    from tau2.data_model.tasks import RewardType

    from tau2_env.engine import catalog
    from tau2_env.engine.results import read_results, rescore

    task = catalog.get_tau2_task("airline", "27")
    criteria = task.evaluation_criteria.model_copy(
        update={"reward_basis": [RewardType.DB, RewardType.NL_ASSERTION]}
    )
    judged = task.model_copy(update={"evaluation_criteria": criteria})
    data = json.dumps(results_file()).encode()
    simulation = read_results(data, max_bytes=len(data)).simulations[0]

    verdict = rescore(
        domain="airline", task=judged, simulation=simulation, max_steps=20, max_errors=10
    )

    assert verdict.status == "not_rescored" and verdict.reward_info is None
    assert "NL-assertion judge" in verdict.note
    assert llm_server.chat_requests() == []


def trial_twice() -> dict:
    data = results_file(num_trials=2, simulations=2)
    data["simulations"][1]["trial"] = 0
    return data


BAD_FILES = {
    "not JSON": (b'{"info": {"num_trials": 1', "The file is not JSON"),
    "not UTF-8": (b"\xff\xfe\x00garbage", "The file is not JSON"),
    "empty": (b"", "The file is empty"),
    "blank": (b"  \n ", "The file is empty"),
    "a list": (b"[1, 2, 3]", "This is not a τ² results file"),
    "wrong schema": (
        json.dumps({"info": {"num_trials": "many"}, "simulations": [{}]}).encode(),
        "This is not a τ² results file (info.",
    ),
    "unknown domain": (
        json.dumps(results_file(domain="banking")).encode(),
        "Unknown domain &#x27;banking&#x27;",
    ),
    "unknown task": (
        json.dumps(results_file(task_id="no-such-task")).encode(),
        "No task &#x27;no-such-task&#x27; in airline",
    ),
    "no simulations": (
        json.dumps(results_file(simulations=0)).encode(),
        "The file has no simulations",
    ),
    "too many trials": (
        json.dumps(results_file(num_trials=9)).encode(),
        "The file has 9 trials",
    ),
    "a trial twice": (json.dumps(trial_twice()).encode(), "has two simulations of trial 0"),
}


@pytest.mark.parametrize("kind", list(BAD_FILES))
def test_a_bad_file_gets_a_clear_error_on_its_jobs_page_and_stores_nothing(
    alice_client, held_jobs, kind
):
    data, error = BAD_FILES[kind]

    job, body = followed(alice_client, upload(alice_client, data), held_jobs)

    assert job.status == "failed" and job.evaluation is None
    assert 'data-testid="job-error"' in body and error in body, body[-3000:]
    assert 'data-status="failed"' in body and "hx-get" not in body  # no more polling
    assert bytes(job.upload) == b""  # the file is not kept once the job ended
    assert nothing_stored()


def test_an_oversized_file_is_refused_before_it_is_read(alice, alice_client):
    data = json.dumps(results_file()).encode()
    with override_settings(TAU2_EVAL_MAX_UPLOAD_BYTES=len(data) - 1):
        response = upload(alice_client, data)
        with pytest.raises(ValidationError, match="largest results file accepted"):
            evaluation_import(user=alice, data=data)
    assert response.status_code == 400
    assert "the largest results file accepted is" in response.content.decode()
    assert nothing_stored()


def test_a_file_that_fails_while_being_stored_leaves_nothing_behind(
    alice, monkeypatch, committed_db
):
    def broken(*args, **kwargs):
        raise RuntimeError("the database went away")

    monkeypatch.setattr(RunEvent.objects, "bulk_create", broken)
    with pytest.raises(RuntimeError):
        evaluation_import(user=alice, data=json.dumps(results_file(simulations=1)).encode())
    assert nothing_stored()


def test_a_small_file_of_an_agent_error_imports_with_its_zero_reward(alice):
    evaluation = evaluation_import(user=alice, data=json.dumps(results_file()).encode())

    run = evaluation.runs.get()
    assert run.reward == 0.0 and run.termination_reason == "agent_error"
    assert run.provenance["rescore"]["status"] == "equal"
    assert EvaluationSummary.from_json(evaluation.summary).pass_hat_ks == {1: 0.0}


def test_an_import_of_a_whole_split_is_ranked_on_the_leaderboard(alice, alice_client):
    from tau2_env.engine import catalog

    split = list(catalog.get_domain("airline").splits["test"])
    data = results_file(simulations=len(split))
    for sim, task_id in zip(data["simulations"], split, strict=True):
        sim.update(task_id=task_id, trial=0)

    evaluation = evaluation_import(user=alice, data=json.dumps(data).encode())

    assert (evaluation.split, evaluation.full_split) == ("test", True)
    assert evaluation.task_ids == split
    page = alice_client.get("/leaderboard/?domain=airline").content.decode()
    assert 'data-agent="openai/agent"' in page and f'href="/evaluations/{evaluation.pk}/"' in page


def test_charlie_cannot_import(committed_db):
    charlie = Client()
    assert charlie.get("/evaluations/import/").status_code == 302
    response = upload(charlie, json.dumps(results_file()).encode())
    assert response.status_code == 302 and "/accounts/sign-in/" in response["Location"]
    assert nothing_stored()


def test_the_import_page_explains_what_happens_to_the_file(alice_client):
    page = alice_client.get("/evaluations/import/").content.decode()
    assert 'data-testid="import-form"' in page and "scored again with τ²" in page
    assert ALICE_TOKEN not in page
