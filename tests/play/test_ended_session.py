"""An ended play session looks ended: alice opens her finished session and finds the
conversation, the reward and no controls; the end she chose is a mark, not a bubble."""

import pytest

from apps.runs.models import Run, RunEvent
from apps.tasks.models import Task

pytestmark = pytest.mark.django_db


def _session(alice, *, status, phase) -> Run:
    run = Run.objects.create(
        kind=Run.Kind.HUMAN,
        task=Task.objects.get(domain_id="airline", task_id="27"),
        domain="airline",
        created_by=alice,
        agent_model="a person",
        user_model="u/m",
        status=status,
        play_phase=phase,
        n_messages=3,
    )
    lines = [
        ("agent", "assistant", "Hi! How can I help you today?"),
        ("customer", "user", "My flight was delayed."),
        ("agent", "assistant", "###STOP###"),  # τ² records the player's done() so
    ]
    for seq, (kind, role, content) in enumerate(lines):
        RunEvent.objects.create(
            run=run, seq=seq, kind=kind, message={"role": role, "content": content}
        )
    return run


def test_an_ended_session_keeps_no_controls_and_no_stop_bubble(alice, alice_client, catalogue):
    run = _session(alice, status=Run.Status.COMPLETED, phase=Run.PlayPhase.ENDED)
    run.termination_reason = "agent_stop"
    run.reward, run.reward_info = 0.0, {"reward": 0.0, "db_check": {"db_match": False}}
    run.save()

    page = alice_client.get(f"/play/{run.pk}/").content.decode()

    assert 'data-testid="session-ended"' in page and 'data-testid="reward"' in page
    for control in ("play-controls", "say-text", "tool-panel", "call-tool", 'data-testid="end"'):
        assert control not in page, control
    assert "The agent ended the conversation" in page
    assert "STOP" not in page.replace("data-testid", "")


def test_an_open_session_has_its_controls(alice, alice_client, catalogue):
    run = _session(alice, status=Run.Status.RUNNING, phase=Run.PlayPhase.YOUR_TURN)
    run.events.filter(seq=2).delete()
    Run.objects.filter(pk=run.pk).update(n_messages=2)

    page = alice_client.get(f"/play/{run.pk}/").content.decode()

    assert 'data-testid="play-controls"' in page and 'data-testid="say-text"' in page
    assert 'data-testid="session-ended"' not in page
