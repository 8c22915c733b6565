"""τ² 1.x's own reviewer behind auto-review: for the same conversation, the studio's
review sends the reviewer what ``tau2 review --mode full|user`` sends, in order (the
review, then in full mode τ²'s authentication classifier), and τ²'s errors become
pending auto labels on the messages of the turns τ² named.

The conversation is one ``tau2 run`` wrote (airline 27, solved by the gold script),
imported as τ² results; ``tau2 review`` reads that same file. The scripted server plays
τ²'s reviewer and classifier by their prompts. stella is staff.
"""

from __future__ import annotations

import json

import pytest
from django.db import transaction

from apps.connections.llm_routes import route_resolve
from apps.evaluations.imports import evaluation_import
from apps.runs import autoreview
from apps.runs.models import AutoReview, ReviewLabel
from tests.support.evaluations import tau2_run_file
from tests.support.llm_server import Reply
from tests.support.scripts import AGENT_MODEL, gold_script
from tests.support.tau2_cli import tau2_cli_review

pytestmark = [pytest.mark.upstream, pytest.mark.slow]

# The first words of τ² 1.x's prompts (tau2.evaluator.review_llm_judge*, auth_classifier).
FULL = "Assess this conversation to determine if the user simulator or the agent"
USER_ONLY = "Assess this conversation to determine if the user simulator made any errors"
AUTH = "Classify the user authentication outcome"

ERRORS = {
    "errors": [
        {
            "source": "agent",
            "error_tags": ["tool_call_argument_error", "irrelevant_tool_call"],
            "severity": "critical",
            "turn_idx": 2,
            "reasoning": "It looked the customer up before asking for the id.",
            "correct_behavior": "Ask for the user id first.",
        },
        {
            "source": "user",
            "error_tags": ["revealed_info_early"],
            "severity": "critical_helped",
            "turn_idx": 1,
            "reasoning": "The customer gave its id unasked.",
            "correct_behavior": "Wait to be asked.",
        },
    ],
    "summary": "Two slips; the task was done.",
}
USER_ERRORS = {
    "errors": [
        {
            "error_tags": ["hallucination"],
            "severity": "minor",
            "turn_idx": 3,
            "reasoning": "It named a zip code its scenario does not have.",
        }
    ],
    "summary": "One small invention.",
}
AUTH_ANSWER = {"status": "succeeded", "reasoning": "The agent checked the user id."}


def reviewer_and_classifier(request):
    system = str(request.messages[0].get("content") or "")
    if system.lstrip().startswith("# Goal\n" + FULL):
        return Reply(content=json.dumps(ERRORS), usage=(1200, 90))
    if system.lstrip().startswith("# Goal\n" + USER_ONLY):
        return Reply(content="```json\n" + json.dumps(USER_ERRORS) + "\n```", usage=(1000, 40))
    if AUTH in system:
        return Reply(content=json.dumps(AUTH_ANSWER), usage=(800, 20))
    raise AssertionError(f"not a reviewer's call: {system[:120]!r}")


@pytest.fixture(scope="module")
def tau2_file(tmp_path_factory, scripted_llm_session):
    """airline 27, one trial, as ``tau2 run`` 1.x writes it (the gold conversation)."""
    gold_script(scripted_llm_session)
    try:
        return tau2_run_file(
            scripted_llm_session,
            tmp_path_factory.mktemp("tau2-run"),
            task_ids=("27",),
            num_trials=1,
        )
    finally:
        scripted_llm_session.reset()


def review_now(run, by, mode):
    with transaction.atomic():
        review = autoreview.autoreview_request(
            run=run,
            by=by,
            reviewer=route_resolve(AGENT_MODEL, user=by, role="reviewer"),
            mode=mode,
        )
        autoreview.autoreview_execute(review_id=review.pk)
    review.refresh_from_db()
    return review


def bodies(requests):
    """What the reviewer was sent, call by call: the messages, and the other fields but
    the model's name and the endpoint's own (its key, its base URL are not in a body)."""
    return [{key: value for key, value in r.body.items() if key != "model"} for r in requests]


@pytest.mark.parametrize("mode", ["full", "user"])
def test_the_studio_sends_what_tau2_review_sends_and_stores_its_findings(
    mode, tau2_file, llm_server, staff
):
    llm_server.responder = reviewer_and_classifier
    reviewed = tau2_cli_review(
        tau2_file, mode=mode, review_model="openai/scripted-reviewer", api_base=llm_server.base_url
    )
    theirs = llm_server.chat_requests()
    assert len(theirs) == (2 if mode == "full" else 1)

    evaluation = evaluation_import(user=staff, data=tau2_file.read_bytes(), name="tau2 run")
    run = evaluation.runs.get()
    llm_server.reset()
    llm_server.responder = reviewer_and_classifier
    review = review_now(run, staff, mode)
    ours = llm_server.chat_requests()

    assert review.status == AutoReview.Status.DONE, review.error
    assert review.reviewer == AutoReview.Reviewer.TAU2 and review.mode == mode
    assert bodies(ours) == bodies(theirs)
    assert [r.body["model"] for r in theirs] == ["scripted-reviewer"] * len(theirs)

    simulation = reviewed["simulations"][0]
    said = simulation["review" if mode == "full" else "user_only_review"]
    events = {e.seq: e for e in run.events.all()}
    labels = sorted(review.findings.all(), key=lambda label: label.event.seq)
    assert [(label.event.seq, label.status, label.origin) for label in labels] == [
        (e["turn_idx"], ReviewLabel.Status.PENDING, ReviewLabel.Origin.AUTO)
        for e in sorted(said["errors"], key=lambda e: e["turn_idx"])
    ]
    # τ²'s turns are the conversation's places in order: the label sits on that message.
    for label in labels:
        assert label.event_id == events[label.event.seq].pk
    if mode == "full":
        user, agent = labels  # turn 1, turn 2
        assert (agent.source, agent.severity, agent.kind) == (
            "agent",
            ReviewLabel.Severity.CRITICAL,
            "tool_call_argument_error",
        )
        assert "irrelevant_tool_call" in agent.justification
        assert "Instead: Ask for the user id first." in agent.justification
        assert (user.source, user.severity, user.kind) == (
            "user",
            ReviewLabel.Severity.CRITICAL,
            "revealed_info_early",
        )
        assert user.justification.startswith("It helped the agent.")
        auth = simulation["auth_classification"]
        assert (
            review.authentication
            == {"status": auth["status"], "reasoning": auth["reasoning"]}
            == AUTH_ANSWER
        )
        assert review.summary == said["summary"]
        assert (review.prompt_tokens, review.completion_tokens) == (1200 + 800, 90 + 20)
    else:
        (label,) = labels
        assert (label.source, label.severity, label.kind) == (
            "user",
            ReviewLabel.Severity.BENIGN,
            "hallucination",
        )
        assert review.authentication is None and review.summary == said["summary"]


def test_an_answer_tau2_cannot_read_fails_the_review_in_its_words(tau2_file, llm_server, staff):
    evaluation = evaluation_import(user=staff, data=tau2_file.read_bytes(), name="tau2 run")
    run = evaluation.runs.get()
    llm_server.responder = lambda request: Reply(content="Looks fine to me.", usage=(500, 5))
    review = review_now(run, staff, "user")
    assert review.status == AutoReview.Status.FAILED
    assert "τ²'s reviewer could not read the answer: Failed to parse LLM response" in review.error
    assert not review.findings.exists()
    assert (review.prompt_tokens, review.completion_tokens) == (500, 5)  # paid for


def test_the_form_offers_both_of_tau2s_modes(staff):
    from apps.runs.views.review_forms import autoreview_form

    form = autoreview_form(staff)
    assert [value for value, _ in form.fields["mode"].choices] == ["full", "user"]
    assert autoreview.modes() == {"full": None, "user": None}
