"""τ²'s natural-language judge, as a scripted server answers it.

τ² asks its NL-assertion judge (``NLAssertionsEvaluator.evaluate_nl_assertions``, the same
prompt in 0.2 and 1.x) with a system prompt naming ``expectedOutcome`` and a user
message ending in ``expectedOutcomes:`` and the task's assertions as a Python list. On τ²
1.x every retail task but two is scored on NL_ASSERTION, so any scripted conversation of
retail meets the judge; :func:`judge_reply` answers it as a judge who found each of the
asked assertions met (or not), echoing them as τ² expects.
"""

from __future__ import annotations

import ast
import json
from typing import Any

from tests.support.llm_server import RecordedRequest, Reply, text

__all__ = ["asked_assertions", "is_judge_request", "judge_reply", "judge_requests"]

_MARK = "expectedOutcomes:"


def is_judge_request(request: RecordedRequest) -> bool:
    return "expectedOutcome" in request.text() and not request.body.get("tools")


def asked_assertions(request: RecordedRequest) -> list[str]:
    """The assertions the judge was asked about, as τ² listed them."""
    asked = request.text().rsplit(_MARK, 1)[-1].strip()
    value = ast.literal_eval(asked)
    return [str(a) for a in value]


def judge_reply(
    request: RecordedRequest,
    *,
    met: bool = True,
    reasoning: str = "scripted judge",
    **reply: Any,
) -> Reply:
    """The judge's verdict on every asked assertion: ``met`` for each."""
    results = [
        {"expectedOutcome": assertion, "reasoning": reasoning, "metExpectation": met}
        for assertion in asked_assertions(request)
    ]
    if reply:
        return Reply(content=json.dumps({"results": results}), **reply)
    return text(json.dumps({"results": results}))


def judge_requests(llm: Any) -> list[RecordedRequest]:
    return [r for r in llm.chat_requests() if is_judge_request(r)]
