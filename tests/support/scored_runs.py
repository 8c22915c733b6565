"""Scored runs of airline/27 made of given tool calls (diagnosis and compare tests).

The engine plays each in-process (the scripted customer opens, the agent's tool calls run
on τ²'s environment, τ² scores the end) and the run is stored as the runner stores one.
Task 27 expects ``get_user_details`` then a $150 ``send_certificate`` on τ² 0.2; on 1.x
the lookup alone (the customer is owed no certificate), so there any certificate is an
extra write.
"""

from __future__ import annotations

from typing import Any

from apps.runs.models import Run, RunEvent
from apps.tasks.models import Task
from tau2_env.engine.episodes import Episode, messages_to_json
from tau2_env.llm import gateway
from tests.support.llm_server import ScriptedLLM, text
from tests.support.scripts import GOLD_CALLS

USER = "ethan_martin_2396"
LOOKUP = ("get_user_details", {"user_id": USER})
EXTRA_READ = ("get_reservation_details", {"reservation_id": "NO6JO3"})
# The gold run's calls, as each τ² expects: 0.2 the lookup and the $150 certificate, 1.x
# the lookup alone.
GOLD = list(GOLD_CALLS)


def certificate(amount: int) -> tuple[str, dict[str, Any]]:
    return ("send_certificate", {"user_id": USER, "amount": amount})


def stored_run(
    user, llm_server: ScriptedLLM, calls: list[tuple[str, dict[str, Any]]], *, model: str
) -> Run:
    """``user``'s completed, scored run of airline/27 whose agent made ``calls``."""
    llm_server.add(text(f"My flight was delayed; I'm {USER}."))
    route = gateway.Route(
        provider="hf", model="scripted/customer", base_url=llm_server.base_url, api_key="hf_x7"
    )
    episode = Episode(domain="airline", task_id="27", user_llm=route)
    episode.start()
    for name, arguments in calls:
        episode.call_tool(name, arguments)
    episode.finish()
    messages = messages_to_json(episode.messages)
    run = Run.objects.create(
        task=Task.objects.get(domain_id="airline", task_id="27"),
        domain="airline",
        created_by=user,
        agent_model=model,
        user_model="u/m",
        status=Run.Status.COMPLETED,
        termination_reason=episode.termination_reason.value,
        reward=episode.reward,
        reward_info=episode.reward_info.model_dump(mode="json"),
        n_messages=len(messages),
    )
    kinds = {"assistant": "agent", "user": "customer", "tool": "tool_result"}
    for seq, message in enumerate(messages):
        RunEvent.objects.create(run=run, seq=seq, kind=kinds[message["role"]], message=message)
    return run
