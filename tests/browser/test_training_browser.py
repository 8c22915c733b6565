"""alice watches a training session's page in Chromium while her trainer plays: each
episode that lands (a real OpenEnv episode over ``/ws`` with her studio key, scored by τ²)
grows the reward curve and its moving average, and the numbers beside it, without a
reload."""

from __future__ import annotations

import json
import threading

import pytest
from playwright.sync_api import expect
from websockets.sync.client import connect

from apps.agents.credentials import install
from apps.agents.services import api_key_create
from tests.support.browser import page_signed_in_as
from tests.support.scored_runs import certificate
from tests.support.scripts import GOLD_CALLS, GOLD_CERTIFICATE, GOLD_CLOSING, gold_script
from tests.support.training import training_episodes

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _episode(base_url: str, raw: str, *, solve: bool) -> float | None:
    """One episode of airline task 27 in training session "grpo", solved (τ²'s reward 1)
    or failed (0): ended at once with ``done`` on τ² 0.2; on 1.x, whose task 27 expects
    reads only (so ending at once keeps the expected database), after a $150 certificate
    none is owed. Returns the reward."""
    url = base_url.replace("http://", "ws://") + "/ws"
    headers = {"Authorization": f"Bearer {raw}", "X-Tau2-Training-Session": "grpo"}
    owed_none = () if GOLD_CERTIFICATE else (certificate(150),)
    calls = [*owed_none, ("done", {})]
    if solve:
        # Task 27 as each τ² expects it: 0.2 the lookup and the $150 certificate, 1.x the
        # lookup alone (and the answer that none is owed).
        closing = "Your certificate is sent." if GOLD_CERTIFICATE else GOLD_CLOSING
        calls = [*GOLD_CALLS, ("respond_to_user", {"message": closing})]
    with connect(url, additional_headers=headers) as ws:
        ws.send(json.dumps({"type": "reset", "data": {"task_id": "27", "split": "train"}}))
        ws.recv()
        for name, arguments in calls:
            data = {"type": "call_tool", "tool_name": name, "arguments": arguments}
            ws.send(json.dumps({"type": "step", "data": data}))
            answer = json.loads(ws.recv())
    return answer["data"]["reward"]


def test_the_training_page_grows_its_curve_as_episodes_land(page, alice, base_url, llm_server):
    install()
    gold_script(llm_server)
    problems = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    _, raw = api_key_create(user=alice, name="trainer", max_sessions=64)
    assert _episode(base_url, raw, solve=True) == 1.0
    (first,) = training_episodes(count=1)
    page = page_signed_in_as(page, alice, base_url)

    page.goto(f"/training/{first.session_id}/")
    curve = page.get_by_test_id("reward-curve")
    expect(curve).to_have_attribute("data-points", "1")
    expect(page.get_by_test_id("stat-episodes")).to_have_text("1")
    rewards = []
    trainer = threading.Thread(
        target=lambda: rewards.append(_episode(base_url, raw, solve=False)), daemon=True
    )
    trainer.start()

    # The second episode lands while the page stays open: no reload.
    expect(curve).to_have_attribute("data-points", "2", timeout=30_000)
    trainer.join(timeout=30)
    expect(page.get_by_test_id("stat-episodes")).to_have_text("2")
    expect(page.get_by_test_id("stat-mean")).to_have_text("0.500")
    drawn = page.evaluate("() => window.tau2Training.chart.data.datasets.map((d) => d.data)")
    assert rewards == [0.0]
    assert drawn == [[1.0, 0.0], [1.0, 0.5]]  # each reward, and the moving average
    second = training_episodes(count=2)[1]
    link = page.locator(f'[data-testid="episode-row"][data-run-id="{second.run_id}"] a')
    expect(link).to_have_attribute("href", f"/runs/{second.run_id}/")
    assert problems == []
