"""One credentials resolver for both agent faces, and the episode hooks it hands out.

The web project will plug a resolver in (studio API keys, a recorder that stores each
episode as a run); here a test resolver stands in for it: the key ``studio_key_alice``
runs the customer on Alice's token and records her episodes, other keys are refused.
"""

from __future__ import annotations

import json
import threading

import httpx
import pytest
from websockets.asyncio.client import connect

from tau2_env.engine import episodes
from tau2_env.gate import access
from tests.support.llm_server import text
from tests.support.mcp_client import mcp_session
from tests.support.scripts import gold_script
from tests.support.threads import record_threads

ALICE_KEY = "studio_key_alice"
ALICE_TOKEN = "hf_alice_vault_token_44444444"
GOLD_USER = "ethan_martin_2396"


class Recorder:
    """Episode hooks that remember what they heard."""

    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []
        self.lock = threading.Lock()

    def on_start(self, episode, *, face):
        with self.lock:
            self.events.append(("start", (face, episode.task.id, len(episode.messages))))

    def on_hop(self, episode, messages):
        with self.lock:
            self.events.append(("hop", messages))

    def on_done(self, episode):
        with self.lock:
            self.events.append(("done", (episode.reward, episode.messages_json())))

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.events]


@pytest.fixture
def recorder():
    recorder = Recorder()

    def resolve(request: access.ClientRequest) -> access.Credentials:
        key = access.bearer_token(request.headers)
        if key is None:
            return access.default_resolver(request)
        if key != ALICE_KEY:
            raise access.CredentialsRefused("Unknown API key.")
        return access.Credentials(client="key:alice", hf_token=ALICE_TOKEN, hooks=recorder)

    access.set_credentials_resolver(resolve)
    yield recorder
    access.set_credentials_resolver(None)


# τ² 0.2's airline/27 expects a $150 certificate, 1.0.1's none
@pytest.mark.legacy_tau2
async def test_a_keyed_mcp_episode_runs_on_the_keys_token_and_is_heard_hop_by_hop(
    asgi_server, llm_server, recorder
):
    gold_script(llm_server)
    async with mcp_session(f"{asgi_server.url}/agent/mcp?task_id=27", token=ALICE_KEY) as session:
        await session.call_tool("start", {})
        await session.call_tool("get_user_details", {"user_id": GOLD_USER})
        await session.call_tool("send_certificate", {"user_id": GOLD_USER, "amount": 150})
        final = await session.call_tool("respond_to_user", {"message": "Your certificate is sent."})

    assert final.structuredContent["reward"] == 1.0
    assert {r.token for r in llm_server.chat_requests()} == {ALICE_TOKEN}
    assert recorder.kinds() == ["start", "hop", "hop", "hop", "done"]
    (face, task_id, opening), *_ = [data for kind, data in recorder.events if kind == "start"]
    assert (face, task_id) == ("mcp", "27")
    heard = [m for kind, hop in recorder.events if kind == "hop" for m in hop]
    reward, messages = recorder.events[-1][1]
    assert reward == 1.0
    assert messages[opening:] == heard  # every message after the opening, once, in order
    assert [m["turn_idx"] for m in messages] == list(range(len(messages)))


async def test_a_keyed_openenv_session_goes_through_the_same_resolver(
    asgi_server, llm_server, recorder
):
    llm_server.add(text("Hi, I need help."), text("Thanks, bye! ###STOP###"))
    ws_url = asgi_server.ws_url("/ws")
    headers = {"Authorization": f"Bearer {ALICE_KEY}"}
    async with connect(ws_url, additional_headers=headers) as ws:
        await ws.send(json.dumps({"type": "reset", "data": {"task_id": "2"}}))
        reset = json.loads(await ws.recv())
        step = {"type": "call_tool", "tool_name": "respond_to_user"}
        step["arguments"] = {"message": "Anything else?"}
        await ws.send(json.dumps({"type": "step", "data": step}))
        ended = json.loads(await ws.recv())

    assert reset["type"] == "observation" and ended["data"]["done"] is True
    assert {r.token for r in llm_server.chat_requests()} == {ALICE_TOKEN}
    assert recorder.kinds() == ["start", "hop", "done"]
    assert recorder.events[0][1][0] == "openenv"
    assert ALICE_TOKEN not in json.dumps([reset, ended])


async def test_a_recorded_episodes_tool_calls_run_off_the_event_loop_an_unrecorded_ones_on_it(
    asgi_server, llm_server, recorder, monkeypatch
):
    # A recorder's hooks may do I/O (the web project stores each hop): its episode's
    # tool calls stay in the episode pool; an unrecorded episode's are answered on the
    # event loop (the uvicorn thread), where its respond_to_user still never runs.
    where = record_threads(monkeypatch, episodes.Episode, "call_tool", "say")
    llm_server.add(text("Hi, I need help."), text("Hi, I need help too."), text("My id is x."))
    tool = {"type": "call_tool", "tool_name": "get_user_details"}
    tool["arguments"] = {"user_id": GOLD_USER}
    respond = {"type": "call_tool", "tool_name": "respond_to_user"}
    respond["arguments"] = {"message": "Your user id?"}
    answers = {}
    for who, headers, reset in (
        ("keyed", {"Authorization": f"Bearer {ALICE_KEY}"}, {"task_id": "2"}),
        ("unrecorded", None, {"task_id": "2", "hf_token": "hf_visitor_token_5555555555"}),
    ):
        async with connect(asgi_server.ws_url("/ws"), additional_headers=headers) as ws:
            await ws.send(json.dumps({"type": "reset", "data": reset}))
            assert json.loads(await ws.recv())["type"] == "observation"
            await ws.send(json.dumps({"type": "step", "data": tool}))
            answers[who] = json.loads(await ws.recv())["data"]["observation"]["result"]
            if who == "unrecorded":
                await ws.send(json.dumps({"type": "step", "data": respond}))
                said = json.loads(await ws.recv())["data"]["observation"]["result"]["data"]
                assert said == "My id is x."

    assert json.loads(answers["keyed"]["data"]) == json.loads(answers["unrecorded"]["data"])
    assert answers["keyed"]["data"].startswith('{"user_id": "ethan_martin_2396"')
    assert [name for name, _ in where] == ["call_tool", "call_tool", "say"]
    (_, keyed), (_, unrecorded), (_, said) = where
    assert keyed.startswith("tau2-episode") and said.startswith("tau2-episode")
    assert unrecorded.startswith("uvicorn-")
    assert recorder.kinds() == ["start", "hop", "done"]  # its hop heard; closed at the end


async def test_a_refused_key_is_refused_on_every_face(asgi_server, llm_server, recorder):
    bad = {"Authorization": "Bearer studio_key_mallory"}
    async with httpx.AsyncClient(base_url=asgi_server.url, headers=bad) as client:
        reset = await client.post("/reset", json={"task_id": "2"})
        mcp = await client.post(
            "/agent/mcp",
            headers={"Accept": "application/json, text/event-stream"},
            json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}},
        )
    ws_url = asgi_server.ws_url("/ws")
    async with connect(ws_url, additional_headers=bad) as ws:
        refused = json.loads(await ws.recv())

    assert reset.status_code == 401 and reset.json()["detail"] == "Unknown API key."
    assert mcp.status_code == 401 and mcp.json()["error"]["message"] == "Unknown API key."
    assert refused["type"] == "error" and refused["data"]["message"] == "Unknown API key."
    assert llm_server.chat_requests() == []
    assert recorder.events == []
