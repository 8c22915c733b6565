"""A race of three scripted agent models on task airline/27, for race tests.

The scripted LLM answers each agent model its own way (by the request's ``model``), and
one customer answers every lane alike:

* ``FAST``: the gold path (look the customer up, send the $150 certificate; on τ² 1.x,
  which owes none, say so), quickly;
* ``EXTRA``: the gold path with an extra read (the lookup twice), slower;
* ``WRONG``: sends $100 instead of $150 (reward 0), slowest.
"""

from __future__ import annotations

import time

from tests.support.llm_server import RecordedRequest, ScriptedLLM, error, text, tool_call
from tests.support.scripts import GOLD_CERTIFICATE, GOLD_CLOSING, GOLD_TASK, is_agent_request

FAST = "deepseek-ai/DeepSeek-V4.1-Flash:novita"
EXTRA = "Qwen/Qwen3-32B:cerebras"
WRONG = "deepseek-ai/DeepSeek-V4.1-Flash"
RACE_MODELS = (FAST, EXTRA, WRONG)
CUSTOMER = "deepseek-ai/DeepSeek-V4.1-Flash"
USER_ID = "ethan_martin_2396"
_LOOKUP = ("get_user_details", {"user_id": USER_ID})
# model -> (seconds per agent reply, reads before the certificate, its amount)
_PLANS = {FAST: (0.05, 1, 150), EXTRA: (0.4, 2, 150), WRONG: (1.0, 1, 100)}


def race_script(llm: ScriptedLLM, *, slower: float = 1.0) -> None:
    """Script the three lanes (stateless: each reply follows from the conversation so far);
    ``slower`` multiplies every agent delay (a browser watching wants time to see them go)."""

    def responder(request: RecordedRequest):
        if not is_agent_request(request):
            if "certificate" in request.text():
                return text("Thanks, that's all. ###STOP###")
            return text(f"Hi, my flight was delayed and I want compensation. I'm {USER_ID}.")
        model = request.body.get("model")
        if model not in _PLANS:
            return error(500, f"scripted LLM: no plan for agent model {model!r}")
        delay, reads, amount = _PLANS[model]
        time.sleep(delay * slower)
        called = [
            call["function"]["name"]
            for message in request.messages
            if message.get("role") == "assistant"
            for call in message.get("tool_calls") or []
        ]
        if len(called) < reads:
            return tool_call(_LOOKUP[0], **_LOOKUP[1])
        # τ² 1.x's task 27 owes no certificate: there only WRONG sends one (and fails).
        sends = amount != 150 or GOLD_CERTIFICATE
        if sends and "send_certificate" not in called:
            return tool_call("send_certificate", user_id=USER_ID, amount=amount)
        return text("I have sent you a certificate. Anything else?" if sends else GOLD_CLOSING)

    llm.responder = responder


def start_race(client, models, *, seed: int = 11):
    """POST the race form as ``client``'s person; returns the response."""
    return client.post(
        "/races/new/",
        {
            "domain": GOLD_TASK[0],
            "task_id": GOLD_TASK[1],
            "agent_model": list(models),
            "user_model": CUSTOMER,
            "max_steps": 30,
            "seed": seed,
        },
    )
