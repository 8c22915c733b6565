"""Connections for tests: stella (staff), and connections on the scripted LLM server.

* ``staff`` / ``staff_client``: stella, staff (and superuser, so the admin opens for her),
  committed with a Hugging Face token in the vault like alice and bob.
* :func:`openai_compatible_connection`: a team (or, with ``owner=``, personal) connection
  to the scripted server (``llm_server``) with :data:`CONNECTION_KEY`, offering
  :data:`CONNECTION_MODEL` unless told otherwise; its owner, slug, headers and team
  settings may be given.
* ``connections_cleared``: no connection left over from an earlier test, before and
  after (the suite's ``committed_db`` deletes people and runs: personal connections go
  with their owners, team ones would stay).
"""

from __future__ import annotations

import pytest
from django.test import Client

from tau2_env.generations import tau2_generation
from tests.support.people import person, signed_in

__all__ = [
    "CONNECTION_KEY",
    "CONNECTION_MODEL",
    "STAFF_TOKEN",
    "connections_cleared",
    "openai_compatible_connection",
    "reasoning_effort_sent",
    "staff",
    "staff_client",
]

STAFF_TOKEN = "hf_oauth_stella_0011223344556677"
# Shaped like an OpenAI key, so that the suite's redaction of key-shaped text is not what
# keeps it out of pages and logs: tests look for its distinctive middle as well.
CONNECTION_KEY = "sk-conn-CANARY-7d41c9e2b8a05f36"
CONNECTION_MODEL = "our-finetune-7b"

# Whether ``tau2 run`` sends ``reasoning_effort`` to a model litellm does not know on an
# OpenAI-compatible server (``openai/<model>`` with ``api_base``), as the product must
# (tests/connections/test_faithfulness.py holds the two bodies equal). τ² sets
# ``litellm.drop_params``; τ² 0.2's litellm passes the argument on all the same, τ² 1.0.1's
# (litellm 1.82.6) drops it: it keeps ``reasoning_effort`` only for models it knows reason.
_UNKNOWN_MODELS_GET_REASONING_EFFORT = tau2_generation() == "0.2"


def reasoning_effort_sent(effort: str) -> str | None:
    """The ``reasoning_effort`` a request to :data:`CONNECTION_MODEL` (or another model
    litellm does not know) carries when ``effort`` is set: ``effort`` on τ² 0.2, none on
    1.x."""
    return effort if _UNKNOWN_MODELS_GET_REASONING_EFFORT else None


def openai_compatible_connection(
    llm,
    *,
    by,
    name: str = "Our vLLM",
    api_key: str = CONNECTION_KEY,
    models=(CONNECTION_MODEL,),
    owner=None,
    slug: str = "",
    headers=None,
    base_url: str | None = None,
    **team,
):
    """A connection of kind ``openai_compatible`` at ``llm.base_url`` (the scripted
    server's ``/v1``; ``base_url``: another endpoint), created by ``by`` through the
    service, as the pages do; ``team``: the fields of
    ``apps.connections.services.TeamSettings``."""
    from apps.connections.services import ConnectionFields, TeamSettings, connection_create

    fields = ConnectionFields(
        name=name,
        base_url=base_url or llm.base_url,
        api_key=api_key,
        headers=headers,
        models=tuple(models),
        team=TeamSettings(**team) if team else None,
    )
    return connection_create(by=by, kind="openai_compatible", owner=owner, slug=slug, fields=fields)


def _clear_connections() -> None:
    from apps.connections.models import Connection
    from apps.evaluations.models import Evaluation
    from apps.races.models import Race
    from apps.runs.models import Run

    # What names a connection protects it: the rows that name one go first.
    Race.objects.filter(user_connection__isnull=False).delete()
    Evaluation.objects.exclude(
        agent_connection=None, user_connection=None, embedding_connection=None
    ).delete()
    Run.objects.exclude(
        agent_connection=None,
        user_connection=None,
        judge_connection=None,
        embedding_connection=None,
    ).delete()
    Connection.objects.all().delete()


@pytest.fixture
def connections_cleared(committed_db):
    _clear_connections()
    yield
    _clear_connections()


@pytest.fixture
def staff(committed_db, connections_cleared):
    user = person("stella", STAFF_TOKEN)
    user.is_staff = user.is_superuser = True
    user.save(update_fields=["is_staff", "is_superuser"])
    return user


@pytest.fixture
def staff_client(staff) -> Client:
    return signed_in(staff)
