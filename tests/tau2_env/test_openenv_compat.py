"""What OpenEnv clients written elsewhere expect of the server: ``openenv validate``, the
original OpenEnv Space's conventions (tool arguments as JSON text, its environment name), clean 4xx
answers over HTTP, and a ``/schema`` that describes the state really returned."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from openenv.core.env_server.mcp_types import CallToolAction

from tau2_env import Tau2Env
from tests.support.llm_server import text

VISITOR_TOKEN = "hf_visitor_token_compat_3333333"
OPENENV_CLI = Path(sys.executable).with_name("openenv")


def test_openenv_validate_passes_every_check(asgi_server, llm_server):
    result = subprocess.run(
        [str(OPENENV_CLI), "validate", "--url", asgi_server.url, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    report = json.loads(result.stdout)
    failed = [c["id"] for c in report["criteria"] if not c["passed"]]
    assert failed == [], result.stdout
    assert {c["id"] for c in report["criteria"]} >= {
        "openapi_version_available",
        "health_endpoint",
        "metadata_endpoint",
        "schema_endpoint",
        "mcp_endpoint",
        "mode_endpoint_consistency",
    }
    assert report["passed"] is True and result.returncode == 0
    assert report["mode"] == "simulation"


async def test_docs_serve_swagger_ui_from_this_site(asgi_server):
    async with httpx.AsyncClient(base_url=asgi_server.url) as client:
        docs = await client.get("/docs")
        spec = (await client.get("/openapi.json")).json()
        bundle = await client.get(
            "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js"
        )
    assert docs.status_code == 200 and "swagger-ui" in docs.text
    assert "cdn.jsdelivr" not in docs.text
    assert "script-src 'self' 'sha256-" in docs.headers["content-security-policy"]
    assert bundle.status_code == 200
    assert {"/reset", "/step", "/state", "/schema"} <= set(spec["paths"])


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        ({"domain": "nowhere", "hf_token": VISITOR_TOKEN}, 400, "Unknown domain 'nowhere'"),
        ({"task_id": "no-such-task", "hf_token": VISITOR_TOKEN}, 400, "no-such-task"),
        ({"split": "nowhere", "hf_token": VISITOR_TOKEN}, 400, "Unknown split 'nowhere'"),
        ({"task_id": "2", "hf_token": 12345}, 400, "hf_token must be a string"),
        ({"task_id": "2", "seed": "x", "hf_token": VISITOR_TOKEN}, 422, "seed"),
        ({"task_id": "2"}, 401, "HF_TOKEN"),
    ],
)
async def test_http_reset_answers_4xx_json_for_bad_input(
    asgi_server, llm_server, body, status, says
):
    async with httpx.AsyncClient(base_url=asgi_server.url) as client:
        response = await client.post("/reset", json=body)
    assert response.status_code == status, response.text
    assert says in json.dumps(response.json()["detail"])
    assert VISITOR_TOKEN not in response.text
    assert llm_server.chat_requests() == []


@pytest.mark.parametrize(
    "body",
    [
        {"action": {"type": "call_tool", "tool_name": "done", "arguments": 7}},
        {"action": {"type": "call_tool", "arguments": {}}},
        {"action": 42},  # text is a gym-style action; a number is nothing
        {"action": ["done"]},
        {},
    ],
)
async def test_http_step_answers_4xx_json_for_bad_input(asgi_server, llm_server, body):
    async with httpx.AsyncClient(base_url=asgi_server.url) as client:
        response = await client.post("/step", json=body)
    assert 400 <= response.status_code < 500, response.text
    assert response.json()["detail"]


async def test_tool_arguments_may_be_given_as_json_text(asgi_server, llm_server):
    llm_server.add(text("Hi, I'm noah_muller_9847."))
    arguments = json.dumps({"user_id": "noah_muller_9847"})
    async with Tau2Env(base_url=asgi_server.url) as env:
        await env.reset(task_id="2", hf_token=VISITOR_TOKEN)
        # The original Space's server accepted this frame over /ws; openenv's model refuses it.
        await env._send({"type": "step", "data": _call("get_user_details", arguments)})
        as_text = await env._receive()
        as_object = await env.step(
            CallToolAction(tool_name="get_user_details", arguments={"user_id": "noah_muller_9847"})
        )
        await env._send({"type": "step", "data": _call("get_user_details", "[1, 2]")})
        not_an_object = await env._receive()

    observation = as_text["data"]["observation"]
    assert observation["result"]["is_error"] is False
    assert json.loads(observation["data"])["user_id"] == "noah_muller_9847"
    assert observation["data"] == as_object.observation.result["data"]
    assert not_an_object["type"] == "error"
    assert not_an_object["data"]["code"] == "VALIDATION_ERROR"


async def test_schema_describes_the_state_returned_once_done(asgi_server, llm_server):
    llm_server.add(text("Hi."), text("Bye. ###STOP###"))
    async with httpx.AsyncClient(base_url=asgi_server.url) as client:
        schema = (await client.get("/schema")).json()["state"]
    async with Tau2Env(base_url=asgi_server.url) as env:
        await env.reset(task_id="2", hf_token=VISITOR_TOKEN)
        await env.call_tool("respond_to_user", message="Goodbye.")
        await env._send({"type": "state"})  # the raw frame: the client keeps base fields only
        state = (await env._receive())["data"]

    assert state["done"] is True and state["reward_info"]["reward"] == state["reward"]
    declared = set(schema["properties"])
    assert set(state) <= declared, set(state) - declared
    assert {"reward_info", "reward", "termination_reason", "task_id", "domain"} <= declared


@pytest.mark.parametrize("name", ["tau2", "tau2_env", "tau2-env"])
async def test_the_task_api_answers_to_the_original_spaces_environment_name(asgi_server, name):
    async with httpx.AsyncClient(base_url=asgi_server.url) as client:
        splits = await client.get(f"/{name}/splits")
        count = await client.post(f"/{name}/num_tasks", json={"split": "test"})
        task = await client.post(f"/{name}/task", json={"split": "test", "index": 0})
        listed = await client.get("/list_environments")
    assert splits.status_code == 200, splits.text
    assert {"name": "test", "type": "test"} in splits.json()
    assert count.json()["num_tasks"] == 20  # airline's test split
    assert task.json()["task"]["id"]
    assert listed.json() == ["tau2"]


def _call(tool: str, arguments: str) -> dict:
    return {"type": "call_tool", "tool_name": tool, "arguments": arguments}
