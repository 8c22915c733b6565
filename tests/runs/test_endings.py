"""How a run ended, said on its page (issue 33): the limit that ended it and that τ² scores
it 0, a conversation gone round in a loop (a mark, never a change to τ²'s run or score),
and the call a Stop waits for. alice owns the runs."""

from __future__ import annotations

import re
from datetime import timedelta
from html import unescape

import pytest
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
    assert "ended: the customer ended it (user_stop)" in html and "limit-ending" not in html


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


# --- The loop mark, stored as a run ends ----------------------------------------------------
# The evaluation's "How the runs ended" read up to LOOP_TAIL messages of every ended run on
# each view; the mark is now measured once, where every run ends (run_finish: model runs,
# agent episodes, scored play sessions; a stopped session; a Stop before the start), and
# the pages read Run.loop_length.


def _looping_and_plain(alice) -> tuple[Run, Run]:
    looping = stored_run(alice, status=Run.Status.RUNNING, reward=None, messages=4)
    repeat(looping, loop_of(14))
    plain = stored_run(alice, status=Run.Status.RUNNING, reward=None, messages=20)
    return looping, plain


def test_a_run_ending_stores_the_same_mark_its_messages_give(alice):
    from apps.runs.lifecycle import run_finish

    looping, plain = _looping_and_plain(alice)
    before = {run.pk: endings.run_loop(run) for run in (looping, plain)}  # read live
    assert before == {looping.pk: 14, plain.pk: 0}
    for run in (looping, plain):
        assert run.loop_length is None  # still going: measured, not stored
        assert run_finish(run=run, status=Run.Status.COMPLETED, termination_reason="max_steps")
        run.refresh_from_db()
        assert run.loop_length == before[run.pk] == endings.run_loop(run)
    # A mark, never τ²'s: the ending is as the driver gave it.
    assert looping.termination_reason == "max_steps" and looping.reward is None


def test_a_stopped_play_session_and_a_run_stopped_before_its_start_store_it_too(alice):
    from apps.play.services import PlayRefused, play_say
    from apps.runs.services import run_stop

    session = stored_run(alice, status=Run.Status.RUNNING, reward=None, messages=2)
    repeat(session, loop_of(8, agent="Sorry?", customer="I said hi."))
    Run.objects.filter(pk=session.pk).update(kind=Run.Kind.HUMAN, stop_requested=True)
    session.refresh_from_db()
    with pytest.raises(PlayRefused, match="stopped"):
        play_say(run=session, text="Hello?")
    queued = stored_run(alice, status=Run.Status.QUEUED, reward=None, messages=0)
    run_stop(run=queued, by=alice)
    session.refresh_from_db()
    queued.refresh_from_db()
    assert (session.status, session.loop_length) == (Run.Status.STOPPED, 8)
    assert (queued.status, queued.loop_length) == (Run.Status.STOPPED, 0)


def test_the_run_page_reads_the_stored_mark_once_the_run_ended(alice, alice_client):
    run = stored_run(alice, reward=0.0, messages=4)
    repeat(run, loop_of(12))
    Run.objects.filter(pk=run.pk).update(loop_length=10)  # what was stored, not re-measured
    page = unescape(alice_client.get(f"/runs/{run.pk}/").content.decode())
    assert re.findall(r'data-testid="loop-mark"[^>]*>([^<]+)<', page) == [
        "looped: the last 10 messages repeat"
    ]


def _ended_evaluation(alice, tasks: list[str], trials: int):
    """An evaluation of ``tasks`` × ``trials`` airline runs, each ended through run_finish
    with 14 messages; every other one loops."""
    from apps.runs.lifecycle import run_finish

    outcomes = {task_id: [0.0] * trials for task_id in tasks}
    evaluation = stored_evaluation(alice, outcomes=outcomes, split="")
    for i, run in enumerate(Run.objects.filter(evaluation=evaluation).order_by("pk")):
        Run.objects.filter(pk=run.pk).update(status=Run.Status.RUNNING)
        repeat(run, loop_of(14) if i % 2 == 0 else [say("user", f"line {n}") for n in range(14)])
        run_finish(run=run, status=Run.Status.COMPLETED, termination_reason="max_steps")
    return evaluation


def test_the_evaluation_page_reads_the_marks_in_queries_that_do_not_grow_with_its_runs(
    alice, alice_client
):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    small = _ended_evaluation(alice, ["27"], 2)
    big = _ended_evaluation(alice, ["27", "2", "3", "4", "5", "6"], 4)
    read = {}
    for evaluation in (small, big):
        with CaptureQueriesContext(connection) as queries:
            page = alice_client.get(f"/evaluations/{evaluation.pk}/").content.decode()
        rows = re.findall(
            r'data-testid="terminations-looped"[^>]*><th>([^<]+)</th><td>(\d+)<', page
        )
        read[evaluation.pk] = (len(queries.captured_queries), rows, queries.captured_queries)
    assert read[small.pk][1] == [("looped: the last 14 messages repeat", "1")]
    assert read[big.pk][1] == [("looped: the last 14 messages repeat", "12")]
    assert read[big.pk][0] == read[small.pk][0]
    # No run's messages are read for the marks any more.
    assert not [q for q in read[big.pk][2] if '"runs_runevent"."message"' in q["sql"]]


def test_runs_that_ended_before_the_column_get_their_mark_from_the_migration(alice, monkeypatch):
    import importlib

    from django.apps import apps

    migration = importlib.import_module("apps.runs.migrations.0017_run_loop_length")
    monkeypatch.setattr(migration, "BATCH", 2)  # several batches
    looping, plain = _looping_and_plain(alice)
    silent = stored_run(alice, status=Run.Status.STOPPED, reward=None, messages=0)
    Run.objects.filter(pk__in=[looping.pk, plain.pk]).update(status=Run.Status.COMPLETED)
    going = stored_run(alice, status=Run.Status.RUNNING, reward=None, messages=2)
    assert not Run.objects.filter(loop_length__isnull=False).exists()

    migration.measure_ended_runs(apps, None)

    stored = dict(Run.objects.values_list("pk", "loop_length"))
    assert stored == {looping.pk: 14, plain.pk: 0, silent.pk: 0, going.pk: None}
    assert stored[looping.pk] == endings.measured_loop(looping.pk)  # the mark as it was


def test_a_run_tried_again_is_measured_afresh_until_it_ends_again(alice):
    run = stored_run(alice, status=Run.Status.RUNNING, reward=None, messages=20)
    # Its first end stored a mark; an evaluation's retry queued it again, and it goes on.
    Run.objects.filter(pk=run.pk).update(loop_length=12)
    run.refresh_from_db()
    assert endings.run_loop(run) == 0


def test_every_termination_reason_of_both_generations_is_said_in_words():
    from tau2_env.engine.episodes import TerminationReason

    reasons = [reason.value for reason in TerminationReason]
    for reason in reasons:
        assert endings.ending_words(reason).endswith(f"({reason})"), reason
        assert endings.ending_words(reason) != reason, f"{reason} has no words"
    # 1.x's own reasons, whichever τ² is installed.
    for reason in ("timeout", "infrastructure_error", "context_window_exceeded"):
        assert endings.ending_words(reason) != reason
    assert endings.ending_words("something_new") == "something_new"


def test_how_the_runs_ended_says_each_reason_in_words(alice, alice_client):
    from apps.evaluations.services import _summarise

    evaluation = stored_evaluation(alice, outcomes={"0": [1.0], "1": [0.0]})
    evaluation.runs.update(termination_reason="user_stop")
    _summarise(evaluation.pk)
    page = unescape(alice_client.get(f"/evaluations/{evaluation.pk}/").content.decode())
    assert (
        '<th title="τ²\'s termination reason: user_stop">the customer ended it (user_stop)</th>'
        in page
    )
