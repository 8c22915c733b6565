"""τ²-bench as an environment for TRL's ``GRPOTrainer(environment_factory=...)``.

TRL (1.16) makes one environment per generation with a no-argument constructor, pools
the instances and, per rollout, calls ``reset(**row)`` with the dataset row's columns
(the string it returns is appended to the prompt's last message), exposes every public
*function of the class* (``inspect.getmembers(type(env), inspect.isfunction)``, not the
instance's attributes) other than ``reset`` and ``get_reward`` as a tool — its schema
read by transformers' ``get_json_schema`` from the signature, the type hints and the
docstring's ``Args:`` — and calls ``get_reward()`` once the rollout is over.

The tools depend on the domain, so there is one class per domain:
:func:`tau2_environment` makes it (``tau2_environment(domain="airline")`` is the class
to pass), with one method per τ² tool of the domain plus ``respond_to_user`` — the
agent's tools as this server's OpenEnv API serves them
(:func:`tau2_env.faces.agent_session.tool_specs`). ``done`` is not offered: τ²'s agent has no
such tool, and a rollout ends when the model answers without a tool call;
:meth:`Tau2Environment.get_reward` then ends the conversation (``done``) and returns
τ²'s reward. :func:`tau2_environments` maps several domains to their classes, for TRL's
multi-environment mode (the dataset's ``environment`` column). A knowledge domain's
retrieval configuration (``tau2 run --retrieval-config``; banking_knowledge on τ² 1.x)
changes the agent's tools, so it has a class of its own too:
``tau2_environment(domain="banking_knowledge", retrieval_config="grep_only")``, whose
episodes the server plays with that configuration (the default class: the domain's
default, bm25).

The schemas the methods give through ``get_json_schema`` are τ²'s ``openai_schema``
except for what ``get_json_schema`` cannot express: ``title`` keys, ``default`` values,
the fields of a nested τ² model (``$defs``/``$ref``: such an item is an ``object``, as
τ²'s own ``anyOf`` with a free object also admits), line breaks inside an argument's
description (``get_json_schema`` joins its lines with a space). See
``tests/tau2_env/test_trl_environment.py``, which pins each of these per tool.

Each instance holds one OpenEnv session over ``/ws`` (this package's
:class:`~tau2_env.faces.client.Tau2Env`), opened by the constructor with the studio key
(``Authorization: Bearer …``) and, when given, the training session's name
(``X-Tau2-Training-Session``). Configuration: ``TAU2_URL``, ``TAU2_API_KEY`` and
``TAU2_TRAINING_SESSION`` from the environment, or the constructor's keyword arguments
(``functools.partial(cls, url=…)`` is a factory TRL accepts).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import re
from collections.abc import Iterable, Mapping
from types import GenericAlias
from typing import Any, ClassVar, Literal, Union

from openenv.core.env_server.mcp_types import CallToolAction

# isort: off
# τ² only through tau2_env.llm._tau2 first (quiet import, local litellm price list).
from tau2_env.faces import agent_session
from tau2_env.engine import catalog
from tau2.agent.llm_agent import AGENT_INSTRUCTION, SYSTEM_PROMPT
from tau2.orchestrator.orchestrator import DEFAULT_FIRST_AGENT_MESSAGE

# isort: on
from tau2_env.faces.client import Tau2Env

__all__ = [
    "API_KEY_ENV",
    "GREETING",
    "TRAINING_SESSION_ENV",
    "TRAINING_SESSION_HEADER",
    "URL_ENV",
    "Tau2Environment",
    "agent_system_prompt",
    "tau2_environment",
    "tau2_environments",
]

URL_ENV = "TAU2_URL"
API_KEY_ENV = "TAU2_API_KEY"
TRAINING_SESSION_ENV = "TAU2_TRAINING_SESSION"
TRAINING_SESSION_HEADER = "X-Tau2-Training-Session"

# What τ²'s orchestrator has the agent say first, before the customer's opening.
GREETING: str = DEFAULT_FIRST_AGENT_MESSAGE.content or ""

# The server's tools that are not offered as methods (see the module docstring).
_NOT_OFFERED = frozenset({agent_session.DONE})


def agent_system_prompt(policy: str) -> str:
    """τ²'s system prompt of its LLM agent (``LLMAgent.system_prompt``) for ``policy``."""
    return SYSTEM_PROMPT.format(domain_policy=policy, agent_instruction=AGENT_INSTRUCTION)


class Tau2Environment:
    """One OpenEnv session on a τ²-bench server, driven the way TRL drives environments.

    Not used directly: :func:`tau2_environment` makes its subclass for a domain, whose
    public functions are that domain's tools. One caller at a time (TRL's loop, or one
    thread of its asynchronous trainer's pool).
    """

    domain: ClassVar[str] = ""
    # A knowledge domain's retrieval configuration the episodes are played with ("": the
    # domain has none).
    retrieval_config: ClassVar[str] = ""

    def __init__(
        self,
        *,
        url: str | None = None,
        api_key: str | None = None,
        training_session: str | None = None,
    ) -> None:
        if not type(self).domain:
            raise TypeError("Use tau2_environment(domain=...) to get the class of a domain.")
        url = url or os.environ.get(URL_ENV)
        if not url:
            raise ValueError(
                f"No τ²-bench server: set {URL_ENV} (e.g. http://localhost:8000) or pass url=."
            )
        self._url = url
        self._headers: dict[str, str] = {}
        api_key = api_key or os.environ.get(API_KEY_ENV)
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        training_session = training_session or os.environ.get(TRAINING_SESSION_ENV)
        if training_session:
            self._headers[TRAINING_SESSION_HEADER] = training_session
        self._client: Any = None
        self._started = False
        self._done = False
        self._reward: float | None = None
        self._verdict: dict[str, Any] = {}
        self._connect()

    def __repr__(self) -> str:  # no key in it
        return f"<{type(self).__name__} {self._url}>"

    # ------------------------------------------------------------ TRL's contract

    def reset(
        self,
        *,
        domain: str | None = None,
        task_id: str | int | None = None,
        split: str | None = None,
        seed: int | None = None,
        prompt: Any = None,
        retrieval_config: str | None = None,
        **columns: Any,
    ) -> str:
        """Start a conversation on the row's task (``task_id``; else one of ``split``
        drawn with ``seed``) and return what the model needs of the opening.

        When the row's ``prompt`` already holds τ²'s system prompt of this domain (as
        :func:`tau2_env.faces.training_data.prompt_dataset` writes it, followed by τ²'s greeting
        and an empty user turn), that is the customer's first message, so that the model
        sees the conversation τ²'s agent sees; otherwise τ²'s system prompt (its
        instructions and the domain's policy), a blank line and the customer's first
        message. Other columns are ignored. Raises ``ValueError`` for a row of another
        domain or retrieval configuration (its tools are another's), ``RuntimeError``
        with the server's words when it refuses the reset.
        """
        if domain is not None and domain != self.domain:
            raise ValueError(
                f"A {domain!r} row reached the {self.domain!r} environment: its tools are "
                f"{self.domain}'s. Use tau2_environments() and the dataset's environment column."
            )
        if retrieval_config and retrieval_config != self.retrieval_config:
            raise ValueError(
                f"A row of retrieval configuration {retrieval_config!r} reached the "
                f"{self.retrieval_config or 'no-retrieval'} environment of {self.domain}: its "
                f"tools are another's. Use tau2_environment(domain={self.domain!r}, "
                f"retrieval_config={retrieval_config!r})."
            )
        self._started, self._done, self._reward, self._verdict = False, False, None, {}
        arguments = {
            "domain": self.domain,
            "task_id": task_id,
            "split": split,
            "seed": seed,
            "retrieval_config": self.retrieval_config or None,
        }
        arguments = {k: v for k, v in arguments.items() if v is not None}
        result = self._reset_once_more_on_a_lost_connection(arguments)
        metadata = result.observation.metadata or {}
        self._started = True
        if result.done:
            self._ended(result.reward, metadata)
        opening = metadata.get("user_message") or ""
        system = agent_system_prompt(metadata.get("policy") or "")
        if _holds_system_prompt(prompt, system):
            return opening
        return f"{system}\n\n{opening}"

    def get_reward(self) -> float | None:
        """τ²'s reward of the conversation: ended first (the server's ``done``) if the
        model stopped without the customer ending it. ``None`` when τ² gave no score
        (the conversation failed outside the model, e.g. the customer's LLM was away;
        TRL leaves such a rollout out of this reward)."""
        if self._started and not self._done:
            try:
                self._call(agent_session.DONE, {})
            except ConnectionError:
                return None
        return self._reward

    @property
    def verdict(self) -> dict[str, Any]:
        """The ended conversation's verdict as the server gave it (``termination_reason``,
        τ²'s ``reward_info`` when scored, ``error`` when not, ``messages``: the whole
        conversation in τ²'s JSON); empty while it is open. A property, so not a tool."""
        return dict(self._verdict)

    # ---------------------------------------------------------------- internals

    def _call(self, name: str, arguments: Mapping[str, Any]) -> str:
        """Call the server's tool ``name``; returns its text (τ²'s, errors included)."""
        if not self._started:
            return f"Error: {agent_session.NOT_STARTED_MESSAGE}"
        try:
            result = self._client.step(CallToolAction(tool_name=name, arguments=dict(arguments)))
        except Exception as exc:
            self._done = True  # the server abandons a session whose connection is lost
            raise ConnectionError(f"The τ²-bench session was lost: {exc}") from None
        observation = result.observation
        if result.done:
            self._ended(result.reward, observation.metadata or {})
        return _tool_text(observation)

    def _ended(self, reward: float | None, metadata: dict[str, Any]) -> None:
        self._done, self._reward, self._verdict = True, reward, metadata

    def _connect(self) -> None:
        client = Tau2Env(base_url=self._url, headers=dict(self._headers)).sync()
        try:
            client.connect()
        except Exception as exc:
            _close_quietly(client)
            raise ConnectionError(
                f"Could not open a τ²-bench session at {self._url}: {_refusal(exc)}"
            ) from None
        self._client = client

    def _reset_once_more_on_a_lost_connection(self, arguments: dict[str, Any]) -> Any:
        """The server's reset; a connection the server closed meanwhile (idle between
        TRL's batches, a restart) is opened again once. Its refusals are raised."""
        try:
            return self._client.reset(**arguments)
        except RuntimeError:  # the server's error frame: a refusal, not a lost connection
            raise
        except Exception:
            _close_quietly(self._client)
            self._connect()
            return self._client.reset(**arguments)

    def _close(self) -> None:
        """Close the session (TRL never does: the server frees it when the process ends)."""
        if self._client is not None:
            _close_quietly(self._client)
            self._client = None

    def __enter__(self) -> Tau2Environment:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._close()


def _holds_system_prompt(prompt: Any, system: str) -> bool:
    """Whether a row's conversational ``prompt`` starts with ``system`` as its system message."""
    if not isinstance(prompt, list) or not prompt or not isinstance(prompt[0], Mapping):
        return False
    first = prompt[0]
    return first.get("role") == "system" and first.get("content") == system


def _tool_text(observation: Any) -> str:
    """A tool's text from openenv's ``CallToolObservation`` (the server's ``data``)."""
    result = getattr(observation, "result", None)
    if isinstance(result, Mapping):
        data = result.get("data")
        if isinstance(data, str):
            return data
        texts = [c.get("text", "") for c in result.get("content") or [] if isinstance(c, Mapping)]
        return "".join(texts)
    error = getattr(observation, "error", None)
    if error is not None:
        return f"Error: {error.message}"
    return "" if result is None else str(result)


def _refusal(exc: BaseException) -> str:
    """The server's words in a failed connection (its JSON-RPC error), else the error."""
    response = getattr(exc, "response", None)
    if response is not None:
        try:
            return str(response.json()["error"]["message"])
        except Exception:  # no JSON error in it: its status, then
            return f"HTTP {response.status_code}"
    return str(exc) or type(exc).__name__


def _close_quietly(client: Any) -> None:
    with contextlib.suppress(Exception):  # best effort: the server reaps the session anyway
        client.close()


# ------------------------------------------------------------------ the tools

_SCALARS: dict[str, Any] = {
    "string": str,
    "integer": int,
    "number": float,
    "boolean": bool,
    "null": type(None),
}


def _hint(schema: Any) -> Any:
    """The type hint whose ``get_json_schema`` reading is nearest to JSON ``schema``."""
    if not isinstance(schema, Mapping):
        return Any
    if "enum" in schema:
        return Literal[tuple(schema["enum"])]
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return Union[tuple(_hint(option) for option in schema[key])]  # noqa: UP007
    if "$ref" in schema:
        return dict  # a τ² model's fields cannot be written as a type hint
    kind: Any = schema.get("type")  # a name, a list of them, or none
    if isinstance(kind, list):
        return Union[tuple(_SCALARS.get(k, Any) for k in kind)]  # noqa: UP007
    if kind == "array":
        items = schema.get("items")
        return GenericAlias(list, (_hint(items),)) if items else list
    if kind == "object":
        extra = schema.get("additionalProperties")
        return GenericAlias(dict, (str, _hint(extra))) if isinstance(extra, Mapping) else dict
    return _SCALARS.get(kind, Any)


def _docstring(description: str, properties: Mapping[str, Any]) -> str:
    """A Google-style docstring that ``get_json_schema`` reads back as ``description``
    and each property's description (continuation lines indented deeper)."""
    if not properties:
        return description
    lines = [description, "", "Args:"]
    for name, schema in properties.items():
        text = str(schema.get("description") or schema.get("title") or name)
        first, *rest = text.splitlines() or [""]
        lines.append(f"    {name}: {first}")
        lines.extend(f"        {line}" for line in rest)
    return "\n".join(lines)


def _tool_method(spec: Mapping[str, Any]) -> Any:
    """A method calling the server's tool ``spec["name"]`` with the arguments it is given
    (all of them, as the model wrote them: τ² checks them and answers in its words),
    whose signature, annotations and docstring describe ``spec["input_schema"]``."""
    name = spec["name"]
    schema = spec.get("input_schema") or {}
    properties: Mapping[str, Any] = schema.get("properties") or {}
    required = set(schema.get("required") or ())

    def tool(self: Tau2Environment, **arguments: Any) -> str:
        return self._call(name, arguments)

    parameters = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {}
    for argument, argument_schema in properties.items():
        annotations[argument] = _hint(argument_schema)
        default = (
            inspect.Parameter.empty
            if argument in required
            else (argument_schema.get("default") if isinstance(argument_schema, Mapping) else None)
        )
        parameters.append(
            inspect.Parameter(
                argument,
                inspect.Parameter.KEYWORD_ONLY,  # any order of required and optional
                default=default,
                annotation=annotations[argument],
            )
        )
    tool.__name__ = name
    tool.__doc__ = _docstring(spec.get("description") or name, properties)
    tool.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    # No return annotation: get_json_schema would add a "return" key τ² does not have.
    tool.__annotations__ = annotations
    return tool


_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _camel(text: str) -> str:
    return "".join(p.capitalize() for p in re.split(r"[^0-9A-Za-z]+", text))


def _class_name(domain: str, retrieval_config: str = "") -> str:
    """``Tau2AirlineEnv``; a retrieval configuration other than the domain's default
    named too: ``Tau2BankingKnowledgeGrepOnlyEnv``."""
    other = retrieval_config and retrieval_config != catalog.default_retrieval_config(domain)
    return "Tau2" + _camel(domain) + (_camel(retrieval_config) if other else "") + "Env"


def tau2_environment(*, domain: str, retrieval_config: str | None = None) -> type[Tau2Environment]:
    """The environment class of ``domain`` for ``GRPOTrainer(environment_factory=...)``:
    a :class:`Tau2Environment` with one method per agent tool of the domain (τ²'s and
    ``respond_to_user``), played with ``retrieval_config`` (a knowledge domain's, as
    ``tau2 run --retrieval-config``; None: the domain's default) and its tools. The
    same class each time; it pickles by name (TRL's asynchronous trainer sends its
    factory to a child process). Raises ``KeyError`` for an unknown domain,
    ``ValueError`` saying why for a retrieval configuration the domain has not or this
    server cannot run."""
    if domain not in catalog.domain_names():
        raise KeyError(f"Unknown domain {domain!r}; known: {', '.join(catalog.domain_names())}")
    refusal = catalog.retrieval_refusal(domain=domain, retrieval_config=retrieval_config)
    if refusal is not None:
        raise ValueError(refusal)
    config = retrieval_config or catalog.default_retrieval_config(domain) or ""
    return _environment_class(domain, config)


@functools.cache
def _environment_class(domain: str, retrieval_config: str) -> type[Tau2Environment]:
    specs = agent_session.tool_specs(domain, retrieval_config)
    namespace: dict[str, Any] = {
        "domain": domain,
        "retrieval_config": retrieval_config,
        "__module__": __name__,
    }
    for spec in specs:
        name = spec["name"]
        if name in _NOT_OFFERED:
            continue
        if not _IDENTIFIER.match(name) or name.startswith("_") or hasattr(Tau2Environment, name):
            raise ValueError(f"τ² tool {name!r} of {domain!r} cannot be a method")
        namespace[name] = _tool_method(spec)
    name = _class_name(domain, retrieval_config)
    namespace["__qualname__"] = name
    played = f" with retrieval configuration {retrieval_config}" if retrieval_config else ""
    namespace["__doc__"] = (
        f"τ²-bench's {domain} domain{played} for TRL: one method per agent tool "
        f"(see tau2_env.faces.trl_environment)."
    )
    for function in namespace.values():
        if inspect.isfunction(function):
            function.__qualname__ = f"{name}.{function.__name__}"
    return type(name, (Tau2Environment,), namespace)


def tau2_environments(domains: Iterable[str] | None = None) -> dict[str, type[Tau2Environment]]:
    """``{domain: class}`` of ``domains`` (default: airline, retail, telecom, those the
    installed τ² has), for TRL's multi-environment ``environment_factory``: each row's
    ``environment`` column names its domain."""
    known = catalog.domain_names()
    if domains is None:
        domains = [d for d in ("airline", "retail", "telecom") if d in known]
    return {domain: tau2_environment(domain=domain) for domain in domains}


def __getattr__(name: str) -> Any:
    """A domain's class by its name (``Tau2AirlineEnv``, ``Tau2BankingKnowledgeGrepOnlyEnv``),
    so that pickle finds it."""
    for domain in catalog.domain_names():
        if _class_name(domain) == name:
            return tau2_environment(domain=domain)
        for config in catalog.retrieval_configs(domain):
            if config.refusal is None and _class_name(domain, config.name) == name:
                return tau2_environment(domain=domain, retrieval_config=config.name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
