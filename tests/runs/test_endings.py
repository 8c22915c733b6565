"""How a run ended, said on its page (issue 33): the limit that ended it and that τ² scores
it 0, a conversation gone round in a loop (a mark, never a change to τ²'s run or score),
and the call a Stop waits for. alice owns the runs."""

from __future__ import annotations

import re
from datetime import timedelta
from html import unescape

from django.utils import timezone

from apps.runs import endings, presenters
from apps.runs.models import Run, RunEvent
from tests.support.evaluations import stored_evaluation
from tests.support.review import stored_run


def say(role: str, text: str) -> dict:
    return {"role": role, "content": text}


def loop_of(n: int, *, agent: str = "How can I help?", customer: str = "How can I help?") -> list:
    return [
        say("assistant" if i % 2 == 0 else "user", agent if i % 2 == 0 else customer)
        for i in range(n)
    ]


def repeat(run: Run, messages: list[dict]) -> None:
    start = run.events.count()
    RunEvent.objects.bulk_create(
        RunEvent(
            run=run,
            seq=start + i,
            kind="agent" if m["role"] == "assistant" else "customer",
            message=m,
        )
        for i, m in enumerate(messages)
    )


def test_a_run_ended_by_the_step_limit_says_so_and_that_tau2_scores_it_0(alice, alice_client):
    run = stored_run(alice, reward=0.0)
    Run.objects.filter(pk=run.pk).update(
        termination_reason="max_steps",
        max_steps=200,
        reward_info={"reward": 0.0, "reward_basis": None},
    )
    page = unescape(alice_client.get(f"/runs/{run.pk}/").content.decode())
    said = re.findall(r'data-testid="limit-ending"[^>]*>([^<]+)<', page)
    assert said == ["Ended by τ²'s step limit (200 steps): τ² scores a conversation it ended so 0"]
    assert "Basis: —" not in page
    assert 'data-testid="reward-limit"' in page


def test_the_error_limit_names_its_count_and_other_endings_stay_as_they_were(alice):
    run = stored_run(alice, reward=0.0)
    run.termination_reason, run.max_errors = "too_many_errors", 10
    assert endings.limit_ending(run) == (
        "Ended by τ²'s error limit (10 tool errors): τ² scores a conversation it ended so 0"
    )
    run.termination_reason = "user_stop"
    assert endings.limit_ending(run) == ""
    html = unescape(presenters.status_html(run, user=alice))
    assert "ended: user_stop" in html and "limit-ending" not in html


def test_a_conversation_that_repeats_itself_is_marked_on_its_page(alice, alice_client):
    run = stored_run(alice, reward=0.0, messages=4)
    repeat(run, loop_of(30))
    Run.objects.filter(pk=run.pk).update(termination_reason="max_steps")
    page = unescape(alice_client.get(f"/runs/{run.pk}/").content.decode())
    assert re.findall(r'data-testid="loop-mark"[^>]*>([^<]+)<', page) == [
        "looped: the last 30 messages repeat"
    ]
    run.refresh_from_db()
    assert run.reward == 0.0 and run.termination_reason == "max_steps"  # τ²'s, untouched


def test_a_two_line_cycle_and_a_cycle_with_a_tool_call_are_loops_too():
    assert endings.loop_length(loop_of(8, agent="Sorry?", customer="I said hi.")) == 8
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"name": "get_user", "arguments": {"id": 1}}],
    }
    tool = {"role": "tool", "content": "no such user"}
    cycle = [call, tool, say("assistant", "I could not find you."), say("user", "Try again.")]
    assert endings.loop_length([say("user", "hi"), *cycle * 3]) == 12


def test_an_ordinary_conversation_and_a_short_repeat_are_not_loops(alice):
    run = stored_run(alice, messages=20)  # "line 0", "line 1", …
    assert endings.run_loop(run) == 0
    assert endings.loop_length(loop_of(5)) == 0
    # One side repeating a tool call while the other says nothing is not a conversation.
    call = {"role": "assistant", "content": None, "tool_calls": [{"name": "f", "arguments": {}}]}
    assert endings.loop_length([call, {"role": "tool", "content": "x"}] * 4) == 0


def test_the_evaluation_says_how_many_runs_looped(alice, alice_client):
    evaluation = stored_evaluation(alice, outcomes={"27": [0.0, 1.0]}, split="")
    first, second = Run.objects.filter(evaluation=evaluation).order_by("trial")
    repeat(first, loop_of(12))
    repeat(second, [say("assistant", "Hello"), say("user", "Bye")])
    page = alice_client.get(f"/evaluations/{evaluation.pk}/").content.decode()
    rows = re.findall(r'data-testid="terminations-looped"[^>]*><th>([^<]+)</th><td>(\d+)<', page)
    assert rows == [("looped: the last 12 messages repeat", "1")]


def test_stop_says_it_waits_for_the_call_in_flight_and_since_when(alice):
    run = stored_run(
        alice, status="running", messages=3
    )  # the agent spoke last: the customer's turn
    run.kind, run.stop_requested = Run.Kind.MODEL, True
    run.started_at = timezone.now() - timedelta(seconds=90)
    Run.objects.filter(pk=run.pk).update(started_at=run.started_at)
    RunEvent.objects.filter(run=run, seq=2).update(
        created_at=timezone.now() - timedelta(seconds=40)
    )
    html = unescape(presenters.status_html(run, user=alice))
    waits = re.findall(r'data-testid="stop-waits"[^>]*>(.+?)</span></span>', html)
    assert len(waits) == 1
    assert re.sub(r"<[^>]+>", "", waits[0]) in {
        "waiting for the customer's call in flight, 40 s",
        "waiting for the customer's call in flight, 41 s",
    }
    assert "Stopping…" in html

    RunEvent.objects.create(run=run, seq=3, kind="customer", message=say("user", "hello?"))
    call = endings.in_flight(run)
    assert call is not None and call.side == "agent"
    run.status = Run.Status.STOPPED
    assert endings.in_flight(run) is None
