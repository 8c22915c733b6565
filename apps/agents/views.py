"""Agents' pages: "Connect an agent" (copy-paste snippets for this server) and the OpenEnv
playground (an episode played by hand over ``/ws``, frame by frame).

They live together in ``apps/agents`` with the playground's credentials
(:mod:`apps.agents.playground`): both are about outside agents on the OpenEnv and MCP
faces, neither about accounts, runs or play sessions.
"""

from __future__ import annotations

import json

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from apps.accounts.access import signin_required_to_start
from apps.accounts.shown_once import secret_hold, secret_take
from apps.agents import services as key_services
from apps.agents.forms import ApiKeyForm, PlaygroundForm
from apps.agents.models import ApiKey
from apps.agents.selectors import api_keys_for
from apps.tasks.selectors import domain_list

KEY_PLACEHOLDER = "tau2s_PASTE_YOUR_KEY"  # never a real key: the page is the same for all
EXAMPLE_SEED = 7  # a task of the split drawn reproducibly, so each snippet plays one

OPENENV_SNIPPET = """\
import asyncio

from openenv.core.env_server.mcp_types import CallToolAction
from tau2_env import Tau2Env

KEY = "{key}"  # a studio API key: {keys_url}


async def main():
    headers = {{"Authorization": f"Bearer {{KEY}}"}}
    async with Tau2Env(base_url="{base}", headers=headers) as env:
        result = await env.reset(domain="{domain}", split="{split}", seed={seed})
        print("customer:", result.observation.metadata["user_message"])
        tools = await env.list_tools()
        print("tools:", [tool.name for tool in tools])
        reply = await env.call_tool("respond_to_user", message="Hello! How can I help?")
        print("customer:", reply)
        result = await env.step(CallToolAction(tool_name="done", arguments={{}}))
        print("done:", result.done, "reward:", result.reward)


asyncio.run(main())
"""

GENERIC_SNIPPET = """\
from openenv import GenericEnvClient

KEY = "{key}"  # a studio API key: {keys_url}

headers = {{"Authorization": f"Bearer {{KEY}}"}}
with GenericEnvClient(base_url="{base}", headers=headers).sync() as env:
    result = env.reset(domain="{domain}", split="{split}", seed={seed})
    print("customer:", result.observation["metadata"]["user_message"])
    result = env.step(
        {{
            "type": "call_tool",
            "tool_name": "respond_to_user",
            "arguments": {{"message": "Hello! How can I help?"}},
        }}
    )
    print("customer:", result.observation["result"]["data"])
    result = env.step({{"type": "call_tool", "tool_name": "done", "arguments": {{}}}})
    print("done:", result.done, "reward:", result.reward)
"""

MCP_SNIPPET = """\
import asyncio

import httpx
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

KEY = "{key}"  # a studio API key: {keys_url}
URL = "{mcp_url}"


async def main():
    headers = {{"Authorization": f"Bearer {{KEY}}"}}
    async with (
        httpx.AsyncClient(headers=headers, timeout=300) as http,
        streamable_http_client(URL, http_client=http) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        tools = (await session.list_tools()).tools
        print("tools:", [tool.name for tool in tools])
        opening = (await session.call_tool("start", {{}})).structuredContent
        print("customer:", opening["user_message"])
        reply = await session.call_tool("respond_to_user", {{"message": "Hello! How can I help?"}})
        print("customer:", reply.content[0].text)
        final = (await session.call_tool("done", {{}})).structuredContent
        print("done:", final["done"], "reward:", final.get("reward"))


asyncio.run(main())
"""


# Your own agent through a whole evaluation (its page links here with ?evaluation=<id>).
EVALUATION_PLACEHOLDER = 0
EVALUATION_OPENENV_SNIPPET = """\
import asyncio

from tau2_env import Tau2Env

KEY = "{key}"  # a studio API key: {keys_url}
EVALUATION = {evaluation}  # the evaluation's id: its page says it


async def play(env, opening):
    # Your agent goes here: opening["policy"], opening["user_message"], the domain's tools.
    reply = await env.call_tool("respond_to_user", message="Hello! How can I help?")
    print("customer:", reply)
    return await env.call_tool("done")


async def main():
    headers = {{"Authorization": f"Bearer {{KEY}}"}}
    async with Tau2Env(base_url="{base}", headers=headers) as env:
        # The next episode until every one is played; waits while the rest are taken.
        while (result := await env.next_episode(evaluation=EVALUATION)) is not None:
            opening = result.observation.metadata
            await play(env, opening)
            print("played task", opening["task_id"], "trial", opening["trial"])


asyncio.run(main())
"""

EVALUATION_MCP_SNIPPET = """\
import asyncio

import httpx
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

KEY = "{key}"  # a studio API key: {keys_url}
EVALUATION = {evaluation}  # the evaluation's id: its page says it
URL = "{base}/agent/mcp"


async def play(session, opening):
    # Your agent goes here: opening["policy"], opening["user_message"], the domain's tools.
    reply = await session.call_tool("respond_to_user", {{"message": "Hello! How can I help?"}})
    print("customer:", reply.content[0].text)
    return (await session.call_tool("done", {{}})).structuredContent


async def main():
    headers = {{"Authorization": f"Bearer {{KEY}}"}}
    async with httpx.AsyncClient(headers=headers, timeout=300) as http:
        while True:  # one MCP session per episode, until every one is played
            async with (
                streamable_http_client(URL, http_client=http) as (read, write, _),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                started = await session.call_tool("start", {{"evaluation": EVALUATION}})
                answer = started.structuredContent or {{}}
                if started.isError and answer.get("status") == 429:  # the rest are taken
                    await asyncio.sleep(answer.get("retry_after", 5))
                    continue
                if started.isError:  # 410: every episode played; else the reason
                    print(started.content[0].text)
                    return
                final = await play(session, answer)
                print("task", answer["task_id"], "trial", answer["trial"], final.get("reward"))


asyncio.run(main())
"""


def agents_url(request) -> str:
    """Where agents connect: ``TAU2_AGENTS_URL``, else this site's URL as the request
    reached it (the front proxy routes the agent faces there); no trailing slash."""
    return settings.TAU2_AGENTS_URL or request.build_absolute_uri("/").rstrip("/")


def _snippets(request) -> dict[str, str]:
    """The page's snippets, filled with the agents' URL (:func:`agents_url`)."""
    base = agents_url(request)
    domain, split = settings.TAU2_DOMAIN, settings.TAU2_SPLIT
    mcp_url = f"{base}/agent/mcp?domain={domain}&split={split}&seed={EXAMPLE_SEED}"
    evaluation = request.GET.get("evaluation", "")
    fields = {
        "evaluation": int(evaluation) if evaluation.isdigit() else EVALUATION_PLACEHOLDER,
        "key": KEY_PLACEHOLDER,
        "keys_url": request.build_absolute_uri(reverse("keys:list")),
        "base": base,
        "domain": domain,
        "split": split,
        "seed": EXAMPLE_SEED,
        "mcp_url": mcp_url,
    }
    config = {
        "mcpServers": {
            "tau2-bench": {
                "type": "http",
                "url": mcp_url,
                "headers": {"Authorization": f"Bearer {KEY_PLACEHOLDER}"},
            }
        }
    }
    return {
        "openenv": OPENENV_SNIPPET.format(**fields),
        "generic": GENERIC_SNIPPET.format(**fields),
        "mcp": MCP_SNIPPET.format(**fields),
        "mcp_config": json.dumps(config, indent=2) + "\n",
        "evaluation_openenv": EVALUATION_OPENENV_SNIPPET.format(**fields),
        "evaluation_mcp": EVALUATION_MCP_SNIPPET.format(**fields),
        "base": base,
        "mcp_url": mcp_url,
    }


def connect(request):
    """How to connect an agent to this server: OpenEnv, the MCP SDK, an MCP client's
    configuration file — each snippet runs as printed once a studio key is pasted in."""
    return render(
        request,
        "agents/connect.html",
        {
            "snippets": _snippets(request),
            "key_placeholder": KEY_PLACEHOLDER,
            "require_key": settings.TAU2_AGENT_API_REQUIRE_KEY,
        },
    )


@signin_required_to_start
def playground(request):
    """An OpenEnv episode by hand: reset, call any tool from a form built from its JSON
    schema, the raw frames both ways (``static/js/agents_playground.js`` on ``/ws``, on
    the person's own session: :mod:`apps.agents.playground`)."""
    domains = [
        {
            "name": domain.name,
            "splits": [split.name for split in domain.splits.all()],
            "tasks": list(domain.tasks.order_by("pk").values_list("task_id", flat=True)),
        }
        for domain in domain_list()
    ]
    return render(
        request,
        "agents/playground.html",
        {
            "domains": domains,
            "form": PlaygroundForm(user=request.user),
            "default_domain": settings.TAU2_DOMAIN,
            "default_split": settings.TAU2_SPLIT,
        },
    )


# The session's slot for a key just made, until the keys page has shown it.
_NEW_KEY = "agents.new_key"


def _keys_page(request, *, form: ApiKeyForm, created_key: str = "", status: int = 200):
    response = render(
        request,
        "agents/keys.html",
        {
            "keys": api_keys_for(user=request.user),
            "agents_url": agents_url(request),
            "created_key": created_key,
            "form": form,
            "name_error": " ".join(form.errors.get("name", [])),
            "sessions_error": " ".join(form.errors.get("max_sessions", [])),
            "require_key": settings.TAU2_AGENT_API_REQUIRE_KEY,
            "sessions_default": settings.TAU2_SESSIONS_PER_CLIENT,
            "sessions_max": settings.TAU2_SESSIONS_PER_KEY_MAX,
        },
        status=status,
    )
    response["Cache-Control"] = "no-store"  # a new key is on this page once, never cached
    return response


@signin_required_to_start
@require_http_methods(["GET", "POST"])
def api_keys(request):
    """The person's studio API keys; POST creates one (with its own cap of sessions at
    once, if given) and redirects here, where the next GET shows it, this once
    (POST/redirect/GET: a reload makes no second key)."""
    if request.method == "GET":
        return _keys_page(
            request, form=ApiKeyForm(), created_key=secret_take(request, slot=_NEW_KEY)
        )
    form = ApiKeyForm(request.POST)
    if not form.is_valid():
        return _keys_page(request, form=form, status=400)
    try:
        _, raw = key_services.api_key_create(
            user=request.user,
            name=form.cleaned_data["name"],
            max_sessions=form.cleaned_data["max_sessions"],
            scope=form.cleaned_data["scope"],
        )
    except ValidationError as exc:
        for field, errors in exc.message_dict.items():
            for error in errors:
                form.add_error(field, error)
        return _keys_page(request, form=form, status=400)
    secret_hold(request, slot=_NEW_KEY, secret=raw)
    return redirect("keys:list")


@signin_required_to_start
@require_POST
def api_key_revoke(request, pk: int):
    try:
        key = key_services.api_key_revoke(user=request.user, pk=pk)
    except ApiKey.DoesNotExist:
        raise Http404("You have no such API key.") from None
    messages.info(request, f"The API key “{key.name}” is revoked: agents using it are refused.")
    return redirect("keys:list")
