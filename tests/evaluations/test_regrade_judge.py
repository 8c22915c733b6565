"""A re-grade with τ²'s NL-assertion judge (apps.evaluations.regrade, jobs ``REGRADE``).

On τ² 1.0.1, 112 of retail's 114 tasks are scored on DB and NL_ASSERTION: without a judge a
re-grade re-scores almost none of them. τ² 0.2 (this suite's default) has no task scored
on NL_ASSERTION, so the newer task set is played here by airline task 19 with τ² 1.x's kind
of reward basis (DB + NL_ASSERTION; its NL assertion is τ²'s own, "Agent cancels
reservation Z7GOZK"). The older evaluation holds three conversations of it: one that
solved it, stored as failed; one that did nothing, stored as a pass; one solved.

alice picks the judge as a run's judge is picked (the same picker), on her own Hugging
Face token or on a connection she may use; the scripted server answers as the judge. bob's
personal connection is not hers to pick. On τ² 1.0.1 (marked ``upstream``) the judge's
request is compared with what ``tau2 evaluate-trajs --fresh-tasks`` sends.
"""

from __future__ import annotations

import json
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from apps.evaluations.models import Evaluation, EvaluationJob
from apps.runs import budgets
from apps.runs.models import Run
from apps.tasks.models import Task
from tau2_env.engine import catalog
from tau2_env.engine.results import NO_JUDGE
from tests.support.connections import openai_compatible_connection
from tests.support.evaluations import (
    conversation,
    older_task_set_evaluation,
    stored_evaluation,
)
from tests.support.jobs import followed, job_of
from tests.support.llm_server import error, text
from tests.support.nl_judge import is_judge_request, judge_reply, judge_requests
from tests.support.people import ALICE_TOKEN

TASK = "19"
JUDGE = "scripted/judge"
JUDGE_USAGE = (1_000, 100)


@pytest.fixture
def older(alice, llm_server) -> Evaluation:
    return older_task_set_evaluation(alice, llm_server, task_id=TASK)


@pytest.fixture
def judged_task(older, monkeypatch):
    """Task 19 as a τ² 1.x task set scores it: on DB and NL_ASSERTION (catalogue and row)."""
    from tau2.data_model.tasks import RewardType

    original = catalog.get_tau2_task
    task = original("airline", TASK)
    criteria = task.evaluation_criteria.model_copy(
        update={"reward_basis": [RewardType.DB, RewardType.NL_ASSERTION]}
    )
    judged = task.model_copy(update={"evaluation_criteria": criteria})

    def get_tau2_task(domain, task_id):
        if (domain, str(task_id)) == ("airline", TASK):
            return judged
        return original(domain, task_id)

    monkeypatch.setattr(catalog, "get_tau2_task", get_tau2_task)
    row = Task.objects.get(domain_id="airline", task_id=TASK)
    basis = row.reward_basis
    row.reward_basis = ["DB", "NL_ASSERTION"]
    row.save(update_fields=["reward_basis"])
    yield judged
    row.reward_basis = basis
    row.save(update_fields=["reward_basis"])


@pytest.fixture
def judge_meets(llm_server):
    """The scripted server judges every assertion met; nothing else is asked."""

    def responder(request):
        assert is_judge_request(request), request.body
        return judge_reply(request, usage=JUDGE_USAGE)

    llm_server.responder = responder


def _regrade(client, older, held_jobs, **form):
    response = client.post(f"/evaluations/{older.pk}/regrade/", form)
    return followed(client, response, held_jobs)


def _new_runs(job) -> dict[int, Run]:
    return {r.trial: r for r in Run.objects.filter(evaluation=job.evaluation)}


def test_without_a_judge_the_page_says_one_would_score_them_and_each_is_refused_in_words(
    alice_client, older, judged_task, held_jobs, llm_server
):
    page = alice_client.get(older.get_absolute_url()).content.decode()
    assert 'data-testid="regrade-form"' in page
    assert 'data-testid="judge-picker"' in page  # the run form's judge picker
    assert "No judge: those tasks are not re-scored" in page
    assert "3 of its runs are of tasks whose reward needs τ²'s NL-assertion judge" in page

    job, _ = _regrade(alice_client, older, held_jobs, judge_model="")

    assert job.status == EvaluationJob.Status.DONE
    runs = _new_runs(job)
    for trial, run in runs.items():
        assert run.provenance["rescore"]["status"] == "not_rescored", trial
        assert run.provenance["rescore"]["note"] == NO_JUDGE
        assert run.judge_model == "" and run.judge_prompt_tokens == 0
    assert judge_requests(llm_server) == []
    report = job.evaluation.provenance["import"]
    assert report["judge"] == "" and report["judged"] == 0
    shown = alice_client.get(job.evaluation.get_absolute_url()).content.decode()
    assert "no judge was chosen" in shown


def test_a_judge_on_alices_own_token_scores_them_and_its_tokens_are_kept(
    alice_client, older, judged_task, judge_meets, held_jobs, llm_server
):
    job, job_page = _regrade(alice_client, older, held_jobs, judge_model=JUDGE)

    assert job.status == EvaluationJob.Status.DONE, job.error
    assert f'<code data-testid="job-judge">{JUDGE}</code>' in job_page
    runs = _new_runs(job)
    # DB and the judge's verdict: the solved conversations pass, the idle one fails on DB.
    assert {t: r.reward for t, r in runs.items()} == {0: 1.0, 1: 0.0, 2: 1.0}
    for run in runs.values():
        assert run.provenance["rescore"]["status"] in ("equal", "differs")
        assert run.reward_info["reward_breakdown"]["NL_ASSERTION"] == 1.0
        assert run.reward_info["nl_assertions"][0]["nl_assertion"] == (
            "Agent cancels reservation Z7GOZK"
        )
        assert (run.judge_model, run.judge_connection) == (JUDGE, None)
        assert (run.judge_prompt_tokens, run.judge_completion_tokens) == JUDGE_USAGE
        assert run.judge_cost_usd is None  # not in the router's catalogue: unpriced, not $0
        assert run.judged_at is not None
    asked = judge_requests(llm_server)
    assert len(asked) == 3
    assert {r.token for r in asked} == {ALICE_TOKEN}  # her own token, never the server's
    assert {r.body["model"] for r in asked} == {JUDGE}
    assert {r.body.get("temperature") for r in asked} == {0.0}  # τ²'s judge arguments
    flips = {(f["trial"], f["direction"]) for f in job.evaluation.provenance["regrade"]["flips"]}
    assert flips == {(0, "passes now"), (1, "fails now")}
    report = job.evaluation.provenance["import"]
    assert (report["judge"], report["judged"], report["not_rescored"]) == (JUDGE, 3, [])
    shown = alice_client.get(job.evaluation.get_absolute_url()).content.decode()
    assert 'data-testid="regrade-judge"' in shown and JUDGE in shown


def test_a_judge_refused_by_its_provider_marks_each_rescore_and_the_job_still_ends(
    alice_client, older, judged_task, held_jobs, llm_server
):
    llm_server.responder = lambda request: error(402, "You have run out of credits.")

    job, page = _regrade(alice_client, older, held_jobs, judge_model=JUDGE)

    assert job.status == EvaluationJob.Status.DONE
    notes = [r.provenance["rescore"]["note"] for _, r in sorted(_new_runs(job).items())]
    assert notes[0].startswith("τ²'s NL-assertion judge failed (")
    assert "402" in notes[0] or "credit" in notes[0].lower()
    # Refused for good: asked once, the other conversations not judged, saying why.
    assert all(
        n.startswith("not judged: the judge failed on an earlier conversation") for n in notes[1:]
    )
    assert len(judge_requests(llm_server)) == 1
    assert all(r.reward is not None for r in _new_runs(job).values())  # the earlier ones kept
    assert ALICE_TOKEN not in page


def test_a_judge_reply_tau2_cannot_read_leaves_that_run_unscored_in_words(
    alice_client, older, judged_task, held_jobs, llm_server
):
    replies = iter([text("I think they all pass."), None, None])

    def responder(request):
        scripted = next(replies)
        return scripted or judge_reply(request)

    llm_server.responder = responder

    job, _ = _regrade(alice_client, older, held_jobs, judge_model=JUDGE)

    assert job.status == EvaluationJob.Status.DONE
    runs = _new_runs(job)
    assert runs[0].provenance["rescore"]["status"] == "not_rescored"
    assert runs[0].provenance["rescore"]["note"].startswith("τ²'s NL-assertion judge failed")
    # One bad reply is that conversation's: the judge is asked again for the next ones.
    assert runs[1].reward == 0.0 and runs[2].reward == 1.0
    assert runs[2].reward_info["reward_breakdown"]["NL_ASSERTION"] == 1.0


@pytest.fixture
def team_judge(llm_server, staff):
    """A team connection offering a priced judge, $10 input / $100 output per 1M tokens,
    with a monthly budget of $0.03: one judgement (1000 + 100 tokens) costs $0.02."""
    return openai_compatible_connection(
        llm_server,
        by=staff,
        name="Team judge",
        slug="team-judge",
        models=[("judge-7b", (Decimal("10"), Decimal("100")))],
        monthly_budget_usd=Decimal("0.03"),
    )


def test_a_judge_on_a_team_connection_is_charged_to_its_budget_in_the_month_it_judged(
    alice, alice_client, older, judged_task, judge_meets, team_judge, held_jobs, llm_server
):
    job, _ = _regrade(alice_client, older, held_jobs, judge_model="@team-judge/judge-7b")

    assert job.status == EvaluationJob.Status.DONE, job.error
    runs = _new_runs(job)
    judged = [r for r in runs.values() if r.judge_prompt_tokens]
    # $0.02 spent after the first; the second is asked ($0.04 ≥ $0.03 after it): then none.
    assert len(judged) == 2 and len(judge_requests(llm_server)) == 2
    assert {r.judge_cost_usd for r in judged} == {Decimal("0.020000")}
    assert {r.judge_connection_id for r in judged} == {team_judge.pk}
    (refused,) = [r for r in runs.values() if not r.judge_prompt_tokens]
    note = refused.provenance["rescore"]["note"]
    assert note.startswith("not judged: The connection “Team judge” has")
    assert "budget is reached" in note
    spend = budgets.connection_spend(connection=team_judge)
    assert spend.spent == Decimal("0.04")
    assert budgets.connection_spend(connection=team_judge, user=alice).spent == Decimal("0.04")
    # The conversations started long ago: the judge's spend is this month's all the same.
    Run.objects.filter(pk__in=[r.pk for r in judged]).update(
        started_at=timezone.now() - timedelta(days=70)
    )
    assert budgets.connection_spend(connection=team_judge).spent == Decimal("0.04")
    next_month = timezone.now() + timedelta(days=40)
    assert budgets.connection_spend(connection=team_judge, now=next_month).spent == 0

    # A spent budget refuses the next re-grade before anything is queued, in words.
    response = alice_client.post(
        f"/evaluations/{older.pk}/regrade/", {"judge_model": "@team-judge/judge-7b"}
    )
    assert response.status_code == 302 and response["Location"] == older.get_absolute_url()
    shown = alice_client.get(response["Location"]).content.decode()
    assert "budget is reached, so the judge was not asked" in shown
    assert EvaluationJob.objects.count() == 1


def test_an_unpriced_judge_on_a_budgeted_connection_is_refused_before_anything_is_queued(
    alice_client, older, judged_task, llm_server, staff, held_jobs
):
    openai_compatible_connection(
        llm_server,
        by=staff,
        name="Budgeted",
        slug="budgeted",
        models=["judge-unpriced"],
        monthly_budget_usd=Decimal("5"),
    )

    response = alice_client.post(
        f"/evaluations/{older.pk}/regrade/", {"judge_model": "@budgeted/judge-unpriced"}
    )

    assert response["Location"] == older.get_absolute_url()
    shown = alice_client.get(response["Location"]).content.decode()
    assert "has a budget, and no price for judge-unpriced" in shown
    assert not EvaluationJob.objects.exists() and held_jobs == []


def test_a_judge_on_bobs_own_connection_is_not_alices_to_pick(
    alice_client, bob, older, judged_task, llm_server, connections_cleared, held_jobs
):
    openai_compatible_connection(
        llm_server, by=bob, owner=bob, name="Bob's", slug="bobs", models=["judge-7b"]
    )

    response = alice_client.post(
        f"/evaluations/{older.pk}/regrade/", {"judge_model": "@bobs/judge-7b"}
    )

    assert response["Location"] == older.get_absolute_url()
    shown = alice_client.get(response["Location"]).content.decode()
    assert "There is no connection @bobs you may use" in shown
    assert not EvaluationJob.objects.exists()
    assert judge_requests(llm_server) == []


def test_a_judge_taken_away_before_the_worker_starts_fails_the_job_in_words(
    alice, alice_client, older, judged_task, llm_server, staff, held_jobs
):
    from apps.connections.models import Connection

    openai_compatible_connection(
        llm_server, by=staff, name="Soon gone", slug="soon-gone", models=["judge-7b"]
    )
    response = alice_client.post(
        f"/evaluations/{older.pk}/regrade/", {"judge_model": "@soon-gone/judge-7b"}
    )
    job = job_of(response)
    Connection.objects.filter(slug="soon-gone").update(deleted_at=timezone.now())

    held_jobs.run()

    job.refresh_from_db()
    assert job.status == EvaluationJob.Status.FAILED
    assert job.error.startswith("The NL judge @soon-gone/judge-7b cannot be used:")
    assert judge_requests(llm_server) == []


def test_an_import_of_a_tau2_results_file_can_name_the_judge_too(
    alice_client, older, judged_task, judge_meets, held_jobs, llm_server
):
    from django.core.files.uploadedfile import SimpleUploadedFile

    from apps.evaluations import exports

    data = json.dumps(exports.evaluation_export_tau2(older)).encode()
    page = alice_client.get("/evaluations/import/").content.decode()
    assert 'data-testid="judge-picker"' in page

    response = alice_client.post(
        "/evaluations/import/",
        {
            "file": SimpleUploadedFile("older.json", data, content_type="application/json"),
            "judge_model": JUDGE,
        },
    )
    job, _ = followed(alice_client, response, held_jobs)

    assert job.kind == EvaluationJob.Kind.IMPORT and job.status == EvaluationJob.Status.DONE
    runs = _new_runs(job)
    assert {t: r.reward for t, r in runs.items()} == {0: 1.0, 1: 0.0, 2: 1.0}
    assert all(r.judge_model == JUDGE and r.judge_prompt_tokens for r in runs.values())
    assert len(judge_requests(llm_server)) == 3
    assert job.evaluation.provenance["import"]["judged"] == 3


@pytest.mark.upstream
def test_the_judge_asks_what_tau2_evaluate_trajs_fresh_tasks_asks(
    alice, alice_client, llm_server, staff, held_jobs, tmp_path
):
    """τ² 1.0.1's retail, scored on DB and NL_ASSERTION: the re-grade's judge requests are
    the bodies ``tau2 evaluate-trajs --fresh-tasks`` sends for the same conversations (its
    judge is τ²'s fixed model; here the connection offers that very model), and the
    verdicts are its verdicts."""
    from tau2.config import DEFAULT_LLM_NL_ASSERTIONS  # τ²'s own judge model (1.0.1: gpt-4.1)

    from apps.evaluations import exports
    from tau2_env.engine.results import needs_judge
    from tests.support.tau2_cli import tau2_cli_evaluate_trajs

    task_id = next(
        t
        for t in catalog.get_domain("retail").splits["base"]
        if needs_judge(task := catalog.get_tau2_task("retail", t))
        and task.evaluation_criteria.nl_assertions  # one the judge is asked about
    )
    solved = conversation(llm_server, domain="retail", task_id=task_id, solve=True)
    idle = conversation(llm_server, domain="retail", task_id=task_id, solve=False)
    older = stored_evaluation(
        alice,
        outcomes={task_id: [solved, idle]},
        domain="retail",
        split="",
        task_set_hash="tau2-0.2-retail",
    )
    older.provenance["tau2_version"] = "0.2.1.dev0"
    older.save(update_fields=["provenance"])
    openai_compatible_connection(
        llm_server, by=staff, name="Judge", slug="judge", models=[DEFAULT_LLM_NL_ASSERTIONS]
    )
    verdicts = iter([True, False, True, False])  # each side's two judgements alike
    llm_server.responder = lambda request: judge_reply(request, met=next(verdicts))
    before = len(llm_server.chat_requests())

    job, _ = _regrade(
        alice_client, older, held_jobs, judge_model=f"@judge/{DEFAULT_LLM_NL_ASSERTIONS}"
    )
    ours = [r.body for r in llm_server.chat_requests()[before:]]
    results = tmp_path / "older.json"
    results.write_text(json.dumps(exports.evaluation_export_tau2(older)))
    theirs_file = tau2_cli_evaluate_trajs(results, api_base=llm_server.base_url)
    theirs = [r.body for r in llm_server.chat_requests()[before + len(ours) :]]

    assert job.status == EvaluationJob.Status.DONE, job.error
    assert len(ours) == 2
    assert ours == theirs
    runs = _new_runs(job)
    for sim in theirs_file["simulations"]:
        run = runs[sim["trial"]]
        mine, tau2s = run.reward_info, sim["reward_info"]
        assert mine["reward"] == tau2s["reward"]
        assert mine["reward_breakdown"] == tau2s["reward_breakdown"]
        assert mine["nl_assertions"] == tau2s["nl_assertions"]
    assert runs[0].reward_info["reward_breakdown"]["NL_ASSERTION"] == 1.0
    assert runs[1].reward_info["reward_breakdown"]["NL_ASSERTION"] == 0.0
