"""A provider reply holding a NUL character (which PostgreSQL cannot store) ends the run
or the play session with a readable reason: never SQL text, never a stuck session, and
never a silently changed conversation (nothing of that turn is stored).

alice runs the model and plays; the scripted LLM answers over real HTTP, a real Celery
worker drives the run.
"""

from __future__ import annotations

import pytest

from apps.runs.models import Run
from tests.support.llm_server import text
from tests.support.scripts import finished, play, refresh_agent_models, run_start, wait_for

pytestmark = pytest.mark.slow

NUL_REPLY = "Hi, I'm ethan_martin_2396\x00 and my flight was delayed."


def _readable(error: str, who: str) -> None:
    assert error.startswith(f"{who} reply contained a NUL character"), error
    for sql in ("PostgreSQL", "0x00", "DataError", "Internal error", "Traceback"):
        assert sql not in error


@pytest.mark.parametrize(
    ("agent", "customer", "who", "stored"),
    [
        ([], [NUL_REPLY], "The customer's", ["agent"]),
        (["Hello\x00, look."], ["Hi, I'm ethan."], "The agent model's", ["agent", "customer"]),
    ],
)  # fmt: skip
def test_a_reply_with_a_nul_fails_the_run_with_a_readable_reason(
    agent, customer, who, stored, celery_worker, llm_server, alice_client
):
    refresh_agent_models()
    play(llm_server, agent=[text(r) for r in agent], customer=[text(r) for r in customer])
    run = wait_for(run_start(alice_client), finished)
    assert (run.status, run.failure) == ("failed", "provider")
    _readable(run.error, who)
    # What τ² saw up to the reply is stored as it was; the reply itself is not.
    assert list(run.events.order_by("seq").values_list("kind", flat=True)) == stored
    page = alice_client.get(f"/runs/{run.pk}/").content.decode()
    assert "contained a NUL character" in page and "PostgreSQL" not in page


def test_a_customer_reply_with_a_nul_ends_the_play_session_readably(
    celery_worker, llm_server, alice_client
):
    play(llm_server, agent=[], customer=[text(NUL_REPLY)])
    form = {"domain": "airline", "task_id": "27", "split": "base"}
    response = alice_client.post("/play/new/", form)
    assert response.status_code == 302
    run = Run.objects.get(pk=int(response["Location"].rstrip("/").split("/")[-1]))
    run = wait_for(run, finished)
    assert (run.status, run.play_phase) == ("failed", "ended")
    _readable(run.error, "The customer's")
    state = alice_client.get(f"/play/{run.pk}/state/").json()["state"]
    assert state["final"] and not state["can_act"]
    assert "contained a NUL character" in alice_client.get(f"/runs/{run.pk}/").content.decode()
