"""Scoring faster without scoring differently: the per-task cache of τ²'s expected side,
the database hash of copy-on-access environments, and turn numbers as τ² gives them."""

from __future__ import annotations

import pytest

# isort: off
from tau2_env.llm._tau2 import registry  # noqa: F401
from tau2.data_model.message import ToolCall
from tau2.utils.utils import get_dict_hash

# isort: on
from tau2_env.engine import catalog, environments, scoring
from tau2_env.engine.episodes import Episode
from tau2_env.generations import tau2_generation
from tau2_env.llm import compat, gateway
from tests.support.llm_server import text
from tests.support.trajectories import tau2_reward_info

TOKEN = "hf_scoring_token_123456"


def _route(llm_server) -> gateway.Route:
    return gateway.Route(
        provider="hf", model="org/customer", base_url=llm_server.base_url, api_key=TOKEN
    )


def _certificate_episode(llm_server, *, amount: int) -> Episode:
    """Airline task 27 (a certificate of $150 is expected), played with ``amount``."""
    llm_server.add(text("My flight was delayed; I'm ethan_martin_2396."))
    episode = Episode(domain="airline", task_id="27", user_llm=_route(llm_server))
    episode.start()
    episode.call_tool("get_user_details", {"user_id": "ethan_martin_2396"})
    episode.call_tool("send_certificate", {"user_id": "ethan_martin_2396", "amount": amount})
    return episode


@pytest.mark.parametrize("amount", [150, 149], ids=["expected", "one-wrong-argument"])
def test_a_score_from_the_cached_expected_side_equals_tau2s_own(llm_server, amount):
    scoring.cache_clear()
    first = _certificate_episode(llm_server, amount=amount)
    first.finish()
    second = _certificate_episode(llm_server, amount=amount)
    second.finish()

    task = catalog.get_tau2_task("airline", "27")
    for episode in (first, second):
        assert episode.reward_info.model_dump(mode="json") == tau2_reward_info(
            domain="airline", task=task, messages=episode.messages
        )
    # τ² 0.2's task 27 expects the $150 certificate; 1.0.1's expects none to be sent.
    expected = 1.0 if amount == 150 and tau2_generation() == "0.2" else 0.0
    assert first.reward == second.reward == expected
    # The second score read the expected side from the cache instead of replaying it.
    assert scoring.cache_info()["hits"] >= 1


def test_the_stand_in_builds_the_real_environment_for_anything_but_hashes():
    stand_in = scoring.ExpectedEnvironment("airline")
    stand_in.set_state(initialization_data=None, initialization_actions=None, message_history=[])
    stand_in.make_tool_call(
        tool_name="send_certificate", requestor="assistant", user_id="ethan_martin_2396", amount=5
    )
    user = stand_in.tools.db.users["ethan_martin_2396"]  # not a hash: the real environment

    assert any(p.amount == 5 for p in user.payment_methods.values() if hasattr(p, "amount"))
    assert stand_in.get_db_hash() == get_dict_hash(stand_in.tools.db.model_dump())


@pytest.mark.parametrize("domain", ["airline", "retail"])
def test_a_copy_on_access_database_hashes_as_tau2_hashes_it(domain):
    environment = environments.fresh_environment(domain)
    assert environment.get_db_hash() == get_dict_hash(environment.tools.db.model_dump())

    # After a write, a deletion-free change of one row, and reads of others.
    if domain == "airline":
        call = ToolCall(
            id="c1",
            name="send_certificate",
            arguments={"user_id": "ethan_martin_2396", "amount": 150},
            requestor="assistant",
        )
    else:
        user_id = next(iter(environment.tools.db.users))
        call = ToolCall(
            id="c1", name="get_user_details", arguments={"user_id": user_id}, requestor="assistant"
        )
    assert not environment.get_response(call).error
    assert environment.get_db_hash() == get_dict_hash(environment.tools.db.model_dump())
    fresh = environments.fresh_environment(domain)
    assert (fresh.get_db_hash() == environment.get_db_hash()) == (domain == "retail")


def test_stored_messages_carry_turn_numbers_as_tau2s_trajectory_does(llm_server):
    episode = _certificate_episode(llm_server, amount=150)
    episode.finish()

    stored = episode.messages_json()
    assert [m["turn_idx"] for m in stored] == list(range(len(stored)))
    trajectory = episode.simulation_run().messages
    assert [m.turn_idx for m in trajectory] == [m["turn_idx"] for m in stored]
    assert [m.content for m in trajectory] == [m["content"] for m in stored]


def test_a_telecom_environment_from_the_loaded_databases_equals_tau2s_own():
    ours, theirs = environments.fresh_environment("telecom"), compat.tau2_constructor("telecom")()
    assert ours.get_db_hash() == theirs.get_db_hash()
    assert ours.get_user_db_hash() == theirs.get_user_db_hash()
    assert ours.get_policy() == theirs.get_policy()
    assert ours.tools.db is not environments.fresh_environment("telecom").tools.db


def test_a_booking_that_adds_a_row_still_hashes_as_tau2_hashes_it():
    environment = environments.fresh_environment("airline")
    before = len(environment.tools.db.reservations)
    booking = {
        "user_id": "mia_li_3668",
        "origin": "JFK",
        "destination": "SEA",
        "flight_type": "one_way",
        "cabin": "economy",
        "flights": [{"flight_number": "HAT136", "date": "2024-05-20"}],
        "passengers": [{"first_name": "Mia", "last_name": "Li", "dob": "1990-04-05"}],
        "payment_methods": [{"payment_id": "certificate_7504069", "amount": 152}],
        "total_baggages": 0,
        "nonfree_baggages": 0,
        "insurance": "no",
    }
    call = ToolCall(id="b1", name="book_reservation", arguments=booking, requestor="assistant")
    assert not environment.get_response(call).error
    assert len(environment.tools.db.reservations) == before + 1
    assert environment.get_db_hash() == get_dict_hash(environment.tools.db.model_dump())
