"""Review by an LLM (τ²'s ``tau2 review``): staff start it for a run or an evaluation's
runs; the reviewer model (the scripted server, answering JSON) reads the conversation,
the task's user scenario and the policy; its findings are pending auto labels pointing
at messages, which reviewers accept, edit or dismiss. Its tokens and cost are metered.

alice owns the runs (a member: no reviewer); stella is staff (the suite's ``staff``,
with a Hugging Face token in the vault).
"""

from __future__ import annotations

import json
import time
from decimal import Decimal

import pytest
from django.core.exceptions import PermissionDenied
from django.db import transaction

from apps.inference.pricing import cost_usd
from apps.inference.selectors import resolve_agent_model
from apps.runs import autoreview
from apps.runs.models import AutoReview, ReviewLabel, Run, RunEvent
from apps.runs.review import review_queue
from apps.runs.selectors import labelled
from tau2_env.engine import review as tau2_review
from tests.support.connections import CONNECTION_KEY, STAFF_TOKEN, openai_compatible_connection
from tests.support.evaluations import stored_evaluation
from tests.support.llm_server import Reply
from tests.support.review import stored_run
from tests.support.scripts import AGENT_MODEL

HTMX = {"HTTP_HX_REQUEST": "true"}

FINDINGS = {
    "summary": "The customer asked for a refund its scenario never mentions.",
    "findings": [
        {
            "message": 1,
            "source": "user",
            "severity": "critical",
            "category": "user_instruction_deviation",
            "justification": "The scenario wants a certificate; the customer asked for a refund.",
        },
        {
            "message": 2,
            "source": "agent",
            "severity": "minor",
            "category": "hallucination",
            "justification": "The agent named a flight number no tool returned.",
        },
        {
            "message": None,
            "source": "agent",
            "severity": "critical_hindered",
            "category": "policy violation",
            "justification": "It never confirmed before writing, as the policy requires.",
        },
    ],
}


# τ² 1.x's reviewer (tau2.evaluator.review_llm_judge) and its authentication classifier,
# by their prompts' first words: where τ² has a reviewer, auto-review is τ²'s
# (tests/runs/test_autoreview_tau2.py compares it with ``tau2 review``).
TAU2_REVIEWER = "Assess this conversation to determine if the user simulator or the agent"
TAU2_CLASSIFIER = "Classify the user authentication outcome"
# τ²'s severities for each side.
_TAU2_SEVERITY = {
    "user": {"critical": "critical_hindered", "critical_hindered": "critical_hindered"},
    "agent": {"critical_hindered": "critical", "critical_helped": "critical"},
}


def tau2_answer(answer: dict) -> dict:
    """The studio reviewer's answer ``answer`` in τ²'s reviewer's words (``errors``, each
    with its ``turn_idx`` the message's place in order, its tags and τ²'s severities)."""
    return {
        "summary": answer.get("summary", ""),
        "errors": [
            {
                "source": f["source"],
                "error_tags": [{"policy violation": "guideline_violation"}.get(c, c)]
                if (c := f["category"])
                else [],
                "severity": _TAU2_SEVERITY[f["source"]].get(f["severity"], f["severity"]),
                "turn_idx": f["message"],
                "reasoning": f["justification"],
            }
            for f in answer["findings"]
        ],
    }


def reviewer(llm_server, answer, *, usage=(900, 120)):
    """The scripted server plays the reviewer: ``answer`` (JSON-dumped unless a string), in
    τ²'s reviewer's words when τ²'s reviewer asks; τ²'s classifier (it follows τ²'s full
    review) is answered at no tokens, so the review's tokens are the reviewer's."""

    def responder(request):
        if TAU2_CLASSIFIER in request.text():
            return Reply(content='{"status": "not_needed", "reasoning": "-"}', usage=(0, 0))
        if TAU2_REVIEWER in request.text():
            said = answer if isinstance(answer, str) else json.dumps(tau2_answer(answer))
            return Reply(content=said, usage=usage)
        assert tau2_review.MARKER in request.text(), "only the reviewer calls here"
        return Reply(content=answer if isinstance(answer, str) else json.dumps(answer), usage=usage)

    llm_server.responder = responder


def reviewer_requests(llm_server):
    return [
        r
        for r in llm_server.chat_requests()
        if tau2_review.MARKER in r.text() or TAU2_REVIEWER in r.text()
    ]


# The studio's own reviewer runs where τ² has none (0.2); its prompt and its reading of the
# answer are tested here, τ² 1.x's in test_autoreview_tau2.py.
studio_reviewer = pytest.mark.legacy_tau2


def review_now(run, by, model=AGENT_MODEL):
    """Ask for a review and run it in this process (the worker's code), before it commits:
    the queued task, sent on commit, finds it done (a session's worker may be running)."""
    from apps.connections.llm_routes import route_resolve

    with transaction.atomic():
        review = autoreview.autoreview_request(
            run=run, by=by, reviewer=route_resolve(model, user=by, role="reviewer")
        )
        autoreview.autoreview_execute(review_id=review.pk)
    review.refresh_from_db()
    return review


@pytest.fixture
def talk(alice):
    """A finished airline run of four messages (agent, customer, agent, customer)."""
    return stored_run(alice, messages=4, reward=0.0)


# --- on the worker ------------------------------------------------------------------------


@studio_reviewer
@pytest.mark.slow
def test_a_run_reviewed_on_the_worker_gets_pending_auto_labels_on_the_right_messages(
    celery_worker, llm_server, talk, staff, staff_client
):
    reviewer(llm_server, FINDINGS)
    page = staff_client.get(f"/runs/{talk.pk}/").content.decode()
    assert 'data-testid="autoreview-form"' in page and 'data-testid="reviewer-picker"' in page

    response = staff_client.post(f"/runs/{talk.pk}/autoreview/", {"reviewer_model": AGENT_MODEL})
    assert response.status_code == 302 and response["Location"].endswith("#auto-review")
    review = AutoReview.objects.get(run=talk)
    deadline = time.monotonic() + 60
    while review.status in (AutoReview.Status.QUEUED, AutoReview.Status.RUNNING):
        assert time.monotonic() < deadline, f"the review is still {review.status}"
        time.sleep(0.1)
        review.refresh_from_db()
    assert review.status == AutoReview.Status.DONE, review.error

    labels = {
        (label.event.seq if label.event else None): label
        for label in ReviewLabel.objects.filter(run=talk).select_related("event")
    }
    assert set(labels) == {1, 2, None}
    assert all(
        label.origin == "auto" and label.status == "pending" and label.auto_review == review
        for label in labels.values()
    )
    assert (labels[1].source, labels[1].category, labels[1].severity, labels[1].kind) == (
        "user",
        "user_sim_error",
        "critical",
        "user_instruction_deviation",
    )
    assert (labels[2].source, labels[2].category, labels[2].severity, labels[2].kind) == (
        "agent",
        "agent_error",
        "benign",
        "hallucination",
    )
    assert labels[None].kind == "guideline_violation" and labels[None].severity == "critical"
    assert "never mentions" in review.summary

    # What the reviewer read: the policy, the task's user scenario and the numbered messages,
    # on stella's own token (she asked), with τ²'s temperature 0.
    (request,) = reviewer_requests(llm_server)
    assert request.token == STAFF_TOKEN
    body = request.text()
    assert "Domain policy" in body and "Airline Agent Policy" in body
    assert "User scenario" in body and "[message 3] user: line 3" in body
    assert request.body["temperature"] == 0.0

    # Metered at the reviewer model's price.
    prices = resolve_agent_model(AGENT_MODEL).prices
    assert (review.prompt_tokens, review.completion_tokens) == (900, 120)
    assert review.cost_usd == round(
        cost_usd(prompt_tokens=900, completion_tokens=120, prices=prices), 6
    )

    # The run page shows each pending finding beside its message, with its decisions.
    page = staff_client.get(f"/runs/{talk.pk}/").content.decode()
    slot = page[page.index('id="review-1"') :]
    slot = slot[: slot.index("</div>")]
    assert "auto-review · pending" in slot and "asked for a refund" in slot
    assert 'data-testid="accept-finding"' in slot and 'data-testid="dismiss-finding"' in slot
    assert 'data-testid="auto-review-cost"' in page


# --- deciding -------------------------------------------------------------------------------


def test_findings_wait_in_the_queue_until_a_person_accepts_edits_or_dismisses_them(
    llm_server, talk, alice, alice_client, staff, staff_client
):
    reviewer(llm_server, FINDINGS)
    review = review_now(talk, staff)
    assert review.status == AutoReview.Status.DONE
    by_seq = {
        (label.event.seq if label.event else None): label
        for label in ReviewLabel.objects.filter(run=talk).select_related("event")
    }

    # Pending findings count for nothing: the run is still unlabelled and in the queue.
    assert talk in review_queue()
    assert not Run.objects.filter(labelled(), pk=talk.pk).exists()
    queue = staff_client.get("/runs/review/").content.decode()
    assert queue.count('data-testid="pending-finding"') == 3
    assert f'data-run-id="{talk.pk}"' in queue

    # alice is no reviewer: she may not decide.
    assert alice_client.post(f"/runs/{talk.pk}/labels/{by_seq[1].pk}/accept/").status_code == 403
    with pytest.raises(PermissionDenied):
        autoreview.finding_accept(label=by_seq[1], by=alice)

    accepted = staff_client.post(f"/runs/{talk.pk}/labels/{by_seq[1].pk}/accept/", **HTMX)
    assert accepted.status_code == 200
    assert 'data-status="accepted"' in accepted.content.decode()
    dismissed = staff_client.post(f"/runs/{talk.pk}/labels/{by_seq[2].pk}/dismiss/")
    assert dismissed.status_code == 302
    edited = staff_client.post(
        f"/runs/{talk.pk}/labels/{by_seq[None].pk}/edit/",
        {
            f"finding-{by_seq[None].pk}-source": "user",
            f"finding-{by_seq[None].pk}-severity": "benign",
            f"finding-{by_seq[None].pk}-kind": "premature_termination",
            f"finding-{by_seq[None].pk}-justification": "The customer stopped early.",
        },
    )
    assert edited.status_code == 302

    one, two, whole = (ReviewLabel.objects.get(pk=by_seq[k].pk) for k in (1, 2, None))
    assert (one.status, one.origin, one.decided_by) == ("accepted", "auto", staff)
    assert (two.status, two.decided_by) == ("dismissed", staff)
    # The edited finding is stella's now, its category following its new source.
    assert (whole.origin, whole.status, whole.created_by) == ("human", "accepted", staff)
    assert (whole.source, whole.category, whole.severity, whole.kind) == (
        "user",
        "user_sim_error",
        "benign",
        "premature_termination",
    )
    assert whole.justification == "The customer stopped early." and whole.auto_review == review

    # The accepted critical user-simulator error counts; the dismissed one never does.
    assert Run.objects.filter(
        labelled(category="user_sim_error", severity="critical"), pk=talk.pk
    ).exists()
    assert not Run.objects.filter(labelled(category="agent_error"), pk=talk.pk).exists()
    assert talk not in review_queue()
    assert 'data-testid="pending-finding"' not in staff_client.get("/runs/review/").content.decode()
    # Decided findings have no more buttons.
    page = staff_client.get(f"/runs/{talk.pk}/").content.decode()
    assert 'data-testid="accept-finding"' not in page


def test_only_staff_start_a_review(llm_server, talk, alice, alice_client):
    from apps.connections.llm_routes import route_resolve

    response = alice_client.post(f"/runs/{talk.pk}/autoreview/", {"reviewer_model": AGENT_MODEL})
    assert response.status_code == 403
    with pytest.raises(PermissionDenied):
        autoreview.autoreview_request(
            run=talk, by=alice, reviewer=route_resolve(AGENT_MODEL, user=alice, role="reviewer")
        )
    assert (
        'data-testid="autoreview-form"'
        not in alice_client.get(f"/runs/{talk.pk}/").content.decode()
    )
    assert not AutoReview.objects.exists()


# --- a reply that cannot be used --------------------------------------------------------------


@studio_reviewer
@pytest.mark.parametrize(
    ("answer", "says"),
    [
        ("Sure! The agent made two mistakes.", "is not JSON"),
        ({"issues": []}, 'not an object with a "findings" list'),
        (
            {"findings": [{**FINDINGS["findings"][0], "message": 9}]},
            "points at message 9, which the conversation does not have (its messages are 0 to 3)",
        ),
        ({"findings": [{**FINDINGS["findings"][0], "source": "judge"}]}, "must be agent or user"),
        ({"findings": [{**FINDINGS["findings"][0], "category": "rudeness"}]}, "must be one of"),
        (
            {
                "findings": [
                    FINDINGS["findings"][0],
                    {**FINDINGS["findings"][1], "justification": ""},
                ]
            },
            "Finding 2",
        ),
    ],
)
def test_a_reply_the_review_cannot_use_fails_it_readably_and_stores_nothing(
    llm_server, talk, staff, staff_client, answer, says
):
    reviewer(llm_server, answer, usage=(700, 40))
    review = review_now(talk, staff)
    assert review.status == AutoReview.Status.FAILED
    assert review.error.startswith("The reviewer's answer could not be used:")
    assert says in review.error
    assert not ReviewLabel.objects.filter(run=talk).exists()  # nothing half-stored
    # The call was made: its tokens are metered all the same.
    assert (review.prompt_tokens, review.completion_tokens) == (700, 40)
    page = staff_client.get(f"/runs/{talk.pk}/").content.decode()
    assert 'data-testid="auto-review-error"' in page and "could not be used" in page


def test_a_reviewer_that_fails_fails_the_review_in_words(llm_server, talk, staff):
    llm_server.responder = lambda request: Reply(status=401, error_message="bad key")
    review = review_now(talk, staff)
    assert review.status == AutoReview.Status.FAILED
    assert review.error.startswith("The reviewer's call failed:") and "401" in review.error
    assert review.cost_usd is None and not ReviewLabel.objects.filter(run=talk).exists()


@studio_reviewer
def test_a_fenced_json_answer_with_upstream_words_is_read():
    answer = "```json\n" + json.dumps(FINDINGS) + "\n```"
    review = tau2_review.review_parse(answer, seqs=range(4))
    assert [f.severity for f in review.findings] == ["critical", "minor", "critical"]
    assert [f.category for f in review.findings] == [
        "user_instruction_deviation",
        "hallucination",
        "guideline_violation",
    ]
    assert tau2_review.review_parse('{"findings": []}', seqs=[]).findings == ()


# --- on a connection, and over an evaluation ----------------------------------------------------


@pytest.fixture
def host(llm_server, staff):
    """A team connection offering a priced reviewer model; the reviews that name it go
    before the suite clears the connections (a connection is never deleted under them)."""
    yield openai_compatible_connection(
        llm_server,
        by=staff,
        name="Review host",
        models=[("reviewer-7b", (Decimal("2"), Decimal("8")))],
    )
    AutoReview.objects.exclude(reviewer_connection=None).delete()


def test_a_reviewer_on_a_connection_uses_its_key_and_its_price(llm_server, talk, staff, host):
    reviewer(llm_server, {"findings": []}, usage=(1000, 100))
    review = review_now(talk, staff, model=f"@{host.slug}/reviewer-7b")
    assert review.status == AutoReview.Status.DONE and review.reviewer_connection == host
    (request,) = reviewer_requests(llm_server)
    assert (request.token, request.body["model"]) == (CONNECTION_KEY, "reviewer-7b")
    assert review.cost_usd == Decimal("0.002800")  # 1000 × $2 + 100 × $8 per 1M
    assert CONNECTION_KEY not in json.dumps(list(AutoReview.objects.values()), default=str)


def test_an_unpriced_reviewer_is_metered_unpriced_never_free(llm_server, talk, staff, staff_client):
    reviewer(llm_server, {"findings": []})
    review = review_now(talk, staff, model="some-org/unlisted-reviewer")
    assert review.status == AutoReview.Status.DONE
    assert review.prompt_tokens == 900 and review.cost_usd is None
    row = staff_client.get(f"/runs/{talk.pk}/").content.decode()
    assert "unpriced" in row[row.index('data-testid="auto-review-cost"') :][:200]


def wait_for_reviews(expected: int):
    """Until ``expected`` auto-reviews exist and none is queued or running."""
    deadline = time.monotonic() + 60
    while True:
        reviews = list(AutoReview.objects.values_list("status", flat=True))
        if len(reviews) == expected and not set(reviews) & {"queued", "running"}:
            return reviews
        assert time.monotonic() < deadline, f"the reviews are still {reviews}"
        time.sleep(0.1)


@pytest.mark.slow
def test_staff_review_an_evaluations_failures_or_all_its_runs_on_the_worker(
    celery_worker, llm_server, alice, staff, staff_client, alice_client
):
    reviewer(llm_server, {"findings": [FINDINGS["findings"][2]]})
    evaluation = stored_evaluation(alice, outcomes={"27": [1.0, 0.0], "28": ["failed", 1.0]})
    for run in evaluation.runs.all():
        RunEvent.objects.bulk_create(
            RunEvent(run=run, seq=seq, kind="agent", message={"role": "assistant", "content": "hi"})
            for seq in range(2)
        )
        Run.objects.filter(pk=run.pk).update(n_messages=2)
    page = staff_client.get(f"/evaluations/{evaluation.pk}/").content.decode()
    assert 'data-testid="evaluation-autoreview-form"' in page
    assert (
        'data-testid="evaluation-autoreview"'
        not in alice_client.get(f"/evaluations/{evaluation.pk}/").content.decode()
    )
    url = f"/runs/autoreview/evaluations/{evaluation.pk}/"
    assert alice_client.post(url, {"reviewer_model": AGENT_MODEL}).status_code == 403

    response = staff_client.post(url, {"reviewer_model": AGENT_MODEL, "which": "failures"})
    assert response.status_code == 302
    assert response["Location"] == f"/evaluations/{evaluation.pk}/#auto-review"
    assert wait_for_reviews(2) == ["done", "done"]
    failures = set(
        evaluation.runs.filter(pk__in=AutoReview.objects.values("run")).values_list(
            "task__task_id", "trial"
        )
    )
    assert failures == {("27", 1), ("28", 0)}
    assert ReviewLabel.objects.filter(origin="auto", status="pending").count() == 2

    staff_client.post(url, {"reviewer_model": AGENT_MODEL, "which": "all"})
    assert wait_for_reviews(2 + 4) == ["done"] * 6
    assert set(AutoReview.objects.values_list("requested_by", flat=True)) == {staff.pk}
    assert ReviewLabel.objects.filter(origin="auto").count() == 2 + 4


def test_each_run_of_an_evaluation_is_reviewed_as_it_ends_until_staff_stop_it(
    llm_server, alice, staff, staff_client, alice_client
):
    """``tau2 run --auto-review`` for an evaluation: the runs ended are queued at once, each
    later one as it ends (the runs' settled hook), on the reviewer, mode and prices asked
    for, until staff stop it; the reviews made stay."""
    from apps.runs import hooks
    from apps.runs.models import StandingReview

    evaluation = stored_evaluation(alice, outcomes={"27": [1.0, 0.0]})
    for run in evaluation.runs.all():
        RunEvent.objects.bulk_create(
            RunEvent(run=run, seq=seq, kind="agent", message={"role": "assistant", "content": "hi"})
            for seq in range(2)
        )
        Run.objects.filter(pk=run.pk).update(n_messages=2)
    url = f"/runs/autoreview/evaluations/{evaluation.pk}/"
    assert (
        alice_client.post(url, {"reviewer_model": AGENT_MODEL, "which": "each"}).status_code == 403
    )

    response = staff_client.post(url, {"reviewer_model": AGENT_MODEL, "which": "each"})
    assert response.status_code == 302
    standing = StandingReview.objects.get(evaluation=evaluation)
    assert (standing.requested_by, standing.reviewer_model, standing.mode) == (
        staff,
        AGENT_MODEL,
        "full",
    )
    assert AutoReview.objects.filter(run__evaluation=evaluation).count() == 2
    page = staff_client.get(f"/evaluations/{evaluation.pk}/").content.decode()
    assert 'data-testid="standing-review"' in page and AGENT_MODEL in page
    assert 'data-testid="stop-standing-review"' in page
    # Asked again: the runs already reviewed by that model are not queued twice.
    staff_client.post(url, {"reviewer_model": AGENT_MODEL, "which": "each"})
    assert AutoReview.objects.filter(run__evaluation=evaluation).count() == 2

    # A run of the evaluation ends: its review is queued with the standing one's settings.
    later = stored_run(alice, messages=2, reward=0.0)
    Run.objects.filter(pk=later.pk).update(evaluation=evaluation)
    later.refresh_from_db()
    hooks.run_settled(later)
    (review,) = AutoReview.objects.filter(run=later)
    assert (review.requested_by, review.reviewer_model, review.mode, review.status) == (
        staff,
        AGENT_MODEL,
        "full",
        AutoReview.Status.QUEUED,
    )
    assert (review.price_input, review.price_output) == (
        standing.price_input,
        standing.price_output,
    )
    # A run of no evaluation, or without messages, is not reviewed.
    alone = stored_run(alice, messages=2)
    hooks.run_settled(alone)
    silent = stored_run(alice, messages=0)
    Run.objects.filter(pk=silent.pk).update(evaluation=evaluation)
    silent.refresh_from_db()
    hooks.run_settled(silent)
    assert not AutoReview.objects.filter(run__in=[alone, silent]).exists()

    # Stopped: the next run that ends is not reviewed; the reviews made stay.
    assert alice_client.post(f"{url}stop/").status_code == 403
    assert staff_client.post(f"{url}stop/").status_code == 302
    assert not StandingReview.objects.filter(evaluation=evaluation).exists()
    last = stored_run(alice, messages=2)
    Run.objects.filter(pk=last.pk).update(evaluation=evaluation)
    last.refresh_from_db()
    hooks.run_settled(last)
    assert not AutoReview.objects.filter(run=last).exists()
    assert AutoReview.objects.filter(run__evaluation=evaluation).count() == 3
    page = staff_client.get(f"/evaluations/{evaluation.pk}/").content.decode()
    assert 'data-testid="standing-review"' not in page
