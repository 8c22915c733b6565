"""Drive a task's expected actions through the engine or the API, and score with τ² alone.

Shared by the faithfulness tests: the scripted customer performs telecom's customer-side
actions (``requestor == "user"``) on their phone when the agent asks, and the agent says
the task's must-tell information with ``respond_to_user``.
"""

from __future__ import annotations

import contextlib
from collections import deque
from typing import Any

# isort: off
from tau2_env.llm._tau2 import registry  # noqa: F401  (τ² through its quiet import, first)
from tau2.data_model.simulation import SimulationRun, TerminationReason
from tau2.data_model.tasks import Task
from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation
from tau2.utils.utils import get_now

# isort: on

from tau2_env.engine.episodes import messages_from_json
from tau2_env.llm import gateway
from tau2_env.llm.gateway import Route
from tests.support.llm_server import Reply, ScriptedLLM, text, tool_call
from tests.support.nl_judge import is_judge_request, judge_reply

CUSTOMER_OPENING = "Hi, I need some help please."
CUSTOMER_ACK = "Okay, thanks."
CUSTOMER_DID_IT = "Done, I did that on my phone."


class CustomerScript:
    """The scripted customer: planned replies first, then a polite acknowledgement.

    τ²'s NL judge, asked on the same route (the customer's, by default), finds every
    assertion met: a golden replay does what the task expects.
    """

    def __init__(self, llm: ScriptedLLM) -> None:
        self.planned: deque[Reply] = deque()
        llm.responder = self._reply

    def _reply(self, request: Any) -> Reply:
        if is_judge_request(request):
            return judge_reply(request)
        return self.planned.popleft() if self.planned else text(CUSTOMER_ACK)

    def will(self, *replies: Reply) -> None:
        self.planned.extend(replies)


def plan(task: Task) -> list[tuple[str, Any]]:
    """The agent's moves for ``task``: ``("tool"|"phone", action)`` or ``("say", text)``."""
    criteria = task.evaluation_criteria
    moves: list[tuple[str, Any]] = []
    for action in criteria.actions or []:
        moves.append(("phone" if action.requestor == "user" else "tool", action))
    if criteria.communicate_info:
        moves.append(("say", "To confirm: " + "; ".join(criteria.communicate_info)))
    return moves


def phone_request(action: Any) -> str:
    return f"Please run {action.name} on your phone with {action.arguments}."


def drive_engine(episode: Any, task: Task, customer: CustomerScript) -> None:
    """Play ``task``'s expected actions on ``episode`` (in-process) and finish it."""
    customer.will(text(CUSTOMER_OPENING))
    episode.start()
    for kind, move in plan(task):
        if kind == "tool":
            episode.call_tool(move.name, dict(move.arguments))
        elif kind == "phone":
            customer.will(tool_call(move.name, **move.arguments), text(CUSTOMER_DID_IT))
            episode.say(phone_request(move))
        else:
            episode.say(move)
    episode.finish()


async def drive_api(env: Any, task: Task, customer: CustomerScript) -> Any:
    """Play ``task``'s expected actions through the OpenEnv client; returns the last step."""
    from openenv.core.env_server.mcp_types import CallToolAction

    for kind, move in plan(task):
        if kind == "tool":
            await env.call_tool(move.name, **move.arguments)
        elif kind == "phone":
            customer.will(tool_call(move.name, **move.arguments), text(CUSTOMER_DID_IT))
            await env.call_tool("respond_to_user", message=phone_request(move))
        else:
            await env.call_tool("respond_to_user", message=move)
    return await env.step(CallToolAction(tool_name="done", arguments={}))


def tau2_reward_info(
    *, domain: str, task: Task, messages: list[Any], judge: Route | None = None
) -> dict[str, Any]:
    """τ²'s own verdict on a finished trajectory (agent stop), as JSON.

    ``judge`` is the route τ²'s NL judge is asked on (a task with NL assertions in its
    reward basis needs one: every retail task of τ² 1.x), as the product's episode asks it.
    """
    trajectory = messages_from_json(messages)
    simulation = SimulationRun(
        id="faithfulness",
        task_id=task.id,
        start_time=get_now(),
        end_time=get_now(),
        duration=0.0,
        termination_reason=TerminationReason.AGENT_STOP,
        messages=trajectory,
    )
    routes = gateway.conversation(user=judge) if judge is not None else contextlib.nullcontext()
    with routes:
        info = evaluate_simulation(
            simulation=simulation,
            task=task,
            evaluation_type=EvaluationType.ALL,
            solo_mode=False,
            domain=domain,
        )
    return info.model_dump(mode="json")


def has_nl_judge(task: Task) -> bool:
    basis = {str(getattr(b, "value", b)) for b in task.evaluation_criteria.reward_basis or ()}
    return "NL_ASSERTION" in basis
