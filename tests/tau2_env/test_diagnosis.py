"""The database diff and the expected-action trace (tau2_env.engine.diagnosis).

Golden replays (every task's expected actions, played through the engine as the
faithfulness suite plays them) have an empty diff and every call matching; a replay with
one wrong argument names exactly that field and marks that call as the first divergent
write; an extra read and a missing expected action show as such.
"""

from __future__ import annotations

import time

import pytest

from tau2_env.engine import catalog, diagnosis, scoring
from tau2_env.engine.episodes import Episode
from tau2_env.llm import gateway
from tests.support.llm_server import text, tool_call
from tests.support.trajectories import (
    CUSTOMER_DID_IT,
    CUSTOMER_OPENING,
    CustomerScript,
    drive_engine,
    phone_request,
)

DOMAINS = ("airline", "retail", "telecom")
TOKEN = "hf_diagnosis_token_7"


def _route(llm_server) -> gateway.Route:
    return gateway.Route(
        provider="hf", model="scripted/customer", base_url=llm_server.base_url, api_key=TOKEN
    )


def _golden(llm_server, domain: str, task_id: str) -> Episode:
    task = catalog.get_tau2_task(domain, task_id)
    episode = Episode(domain=domain, task=task, user_llm=_route(llm_server))
    drive_engine(episode, task, CustomerScript(llm_server))
    return episode


def _base_tasks() -> list[tuple[str, str]]:
    return [(d, t) for d in DOMAINS for t in catalog.get_domain(d).splits["base"]]


def _sample() -> list[tuple[str, str]]:
    """The first, middle and last base task of each domain."""
    sample = []
    for domain in DOMAINS:
        ids = catalog.get_domain(domain).splits["base"]
        sample += [(domain, ids[0]), (domain, ids[len(ids) // 2]), (domain, ids[-1])]
    return sample


def _assert_golden(episode: Episode, domain: str) -> None:
    assert episode.reward == 1.0, episode.reward_info
    result = diagnosis.diagnose(domain=domain, task=episode.task, messages=episode.messages)
    assert result.changes == []
    check = episode.reward_info.db_check
    assert result.db_match == (check.db_match if check is not None else None)
    if result.db_scored:
        assert result.db_match is True
    expected = episode.task.evaluation_criteria.actions or []
    assert [s.kind for s in result.steps] == ["match"] * len(expected)
    assert [s.action_index for s in result.steps] == list(range(len(expected)))
    assert result.first_divergent is None


@pytest.mark.parametrize(("domain", "task_id"), _sample(), ids=[f"{d}-{t}" for d, t in _sample()])
def test_a_golden_replay_has_no_db_change_and_every_call_matches(llm_server, domain, task_id):
    _assert_golden(_golden(llm_server, domain, task_id), domain)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("domain", "task_id"), _base_tasks(), ids=[f"{d}-{t}" for d, t in _base_tasks()]
)
def test_every_golden_replay_has_no_db_change_and_every_call_matches(llm_server, domain, task_id):
    _assert_golden(_golden(llm_server, domain, task_id), domain)


def _certificate(llm_server, *, amount: int, look_up_twice: bool = False) -> Episode:
    """Airline task 27: get_user_details, then send_certificate of $150 is expected."""
    llm_server.add(text("My flight was delayed; I'm ethan_martin_2396."))
    episode = Episode(domain="airline", task_id="27", user_llm=_route(llm_server))
    episode.start()
    episode.call_tool("get_user_details", {"user_id": "ethan_martin_2396"})
    if look_up_twice:
        episode.call_tool("get_reservation_details", {"reservation_id": "NO6JO3"})
    episode.call_tool("send_certificate", {"user_id": "ethan_martin_2396", "amount": amount})
    episode.finish()
    return episode


# τ² 0.2's airline/27 expects a $150 certificate, 1.0.1's none
@pytest.mark.legacy_tau2
def test_one_wrong_argument_names_exactly_that_field_and_that_call(llm_server):
    episode = _certificate(llm_server, amount=149)
    assert episode.reward == 0.0

    result = diagnosis.diagnose(domain="airline", task=episode.task, messages=episode.messages)

    assert result.db_match is False
    [change] = result.changes
    assert change.db == "agent"
    assert change.path.startswith("users.ethan_martin_2396.payment_methods.certificate_")
    assert change.path.endswith(".amount")
    assert (change.kind, change.expected, change.actual) == ("changed", 150.0, 149.0)
    lookup, send, missing = result.steps
    assert lookup.kind == "match" and lookup.action_index == 0
    assert send.kind == "wrong_args" and send.label == "write with different arguments"
    assert send.differing_args == ("amount",)
    assert send.action_id == episode.task.evaluation_criteria.actions[1].action_id
    assert result.first_divergent == send
    # τ²'s verdict says the same: the expected send_certificate was never matched.
    assert (missing.kind, missing.action_index) == ("missing", 1)


# τ² 0.2's airline/27 expects a $150 certificate, 1.0.1's none
@pytest.mark.legacy_tau2
def test_an_extra_read_is_an_extra_read_and_does_not_diverge(llm_server):
    episode = _certificate(llm_server, amount=150, look_up_twice=True)
    assert episode.reward == 1.0

    result = diagnosis.diagnose(domain="airline", task=episode.task, messages=episode.messages)

    assert result.changes == []
    assert [s.kind for s in result.steps] == ["match", "extra_read", "match"]
    assert result.steps[1].name == "get_reservation_details"
    assert result.first_divergent is None


# τ² 0.2's airline/27 expects a $150 certificate, 1.0.1's none
@pytest.mark.legacy_tau2
def test_a_missing_expected_action_is_listed_at_its_place(llm_server):
    llm_server.add(text("My flight was delayed; I'm ethan_martin_2396."))
    episode = Episode(domain="airline", task_id="27", user_llm=_route(llm_server))
    episode.start()
    episode.call_tool("get_user_details", {"user_id": "ethan_martin_2396"})
    episode.finish()

    result = diagnosis.diagnose(domain="airline", task=episode.task, messages=episode.messages)

    assert [(s.kind, s.name) for s in result.steps] == [
        ("match", "get_user_details"),
        ("missing", "send_certificate"),
    ]
    assert result.steps[1].call_index is None
    [change] = result.changes
    assert change.kind == "removed"  # the certificate only the expected database has
    assert change.path.startswith("users.ethan_martin_2396.payment_methods.certificate_")


# τ² 0.2's airline/27 expects a $150 certificate, 1.0.1's none
@pytest.mark.legacy_tau2
def test_an_extra_write_is_the_first_divergent_write():
    task = catalog.get_tau2_task("airline", "27")
    messages = [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [_call("a", "get_user_details", user_id="ethan_martin_2396")],
        },
        {"role": "tool", "id": "a", "content": "{}", "requestor": "assistant"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [_call("b", "cancel_reservation", reservation_id="NO6JO3")],
        },
        {"role": "tool", "id": "b", "content": "{}", "requestor": "assistant"},
    ]
    steps = diagnosis.action_trace(messages, task, domain="airline")
    assert [s.kind for s in steps] == ["match", "extra_write", "missing"]
    assert steps[1].divergent and steps[1].tool_type == "write"
    assert steps[1].message_index == 2


def _call(call_id: str, name: str, **arguments) -> dict:
    return {"id": call_id, "name": name, "arguments": arguments, "requestor": "assistant"}


def test_db_diff_names_added_removed_and_changed_fields_with_readable_paths():
    expected = {
        "reservations": {"NO6JO3": {"flights": [{"date": "2024-05-01"}, {"date": "2024-05-02"}]}},
        "users": {"a": {"name": "A"}},
    }
    actual = {
        "reservations": {"NO6JO3": {"flights": [{"date": "2024-05-01"}, {"date": "2024-05-09"}]}},
        "users": {"b": {"name": "B"}},
    }
    changes = diagnosis.db_diff(actual, expected)
    assert [(c.path, c.kind, c.expected, c.actual) for c in changes] == [
        ("reservations.NO6JO3.flights[1].date", "changed", "2024-05-02", "2024-05-09"),
        ("users.b", "added", None, {"name": "B"}),
        ("users.a", "removed", {"name": "A"}, None),
    ]


def test_telecom_records_in_lists_are_named_by_their_id():
    expected = {"lines": [{"line_id": "L1", "status": "Active"}, {"line_id": "L2", "status": "x"}]}
    actual = {"lines": [{"line_id": "L1", "status": "Suspended"}, {"line_id": "L2", "status": "x"}]}
    [change] = diagnosis.db_diff(actual, expected)
    assert (change.path, change.expected, change.actual) == (
        "lines.L1.status",
        "Active",
        "Suspended",
    )


def test_diagnosis_is_cheap_and_reuses_the_expected_side(llm_server, capsys):
    """Time per diagnosis of a finished golden run: the expected side comes from the
    scorer's cache (no new miss), the rest is τ²'s replay of the run's calls."""
    timings = {}
    for domain, task_id in (("airline", "27"), ("retail", "0"), ("telecom", "0")):
        task_id = (
            task_id
            if task_id in catalog.get_domain(domain).splits["base"]
            else (catalog.get_domain(domain).splits["base"][0])
        )
        episode = _golden(llm_server, domain, task_id)
        diagnosis.diagnose(domain=domain, task=episode.task, messages=episode.messages)
        before = scoring.cache_info()
        started = time.perf_counter()
        for _ in range(5):
            diagnosis.diagnose(domain=domain, task=episode.task, messages=episode.messages)
        timings[domain] = (time.perf_counter() - started) / 5
        assert scoring.cache_info()["misses"] == before["misses"]
    with capsys.disabled():
        print("\ndiagnosis per run:", {d: f"{t * 1000:.1f} ms" for d, t in timings.items()})
    # Tens of milliseconds alone (retail's replay copies every customer row when the
    # agent looks one up by name, as scoring's does); generous for a loaded machine.
    assert max(timings.values()) < 3.0


TELECOM_TASK = (
    "[mms_issue]airplane_mode_on|bad_network_preference|data_usage_exceeded[PERSONA:None]"
)


def test_telecom_diffs_the_records_and_the_customers_phone(llm_server):
    """Expected: the phone leaves airplane mode and prefers 4G/5G, the agent refuels 2 GB.
    Played: airplane mode off, the network preference never set, 1 GB refuelled."""
    task = catalog.get_tau2_task("telecom", TELECOM_TASK)
    toggle, prefer, refuel = task.evaluation_criteria.actions
    customer = CustomerScript(llm_server)
    customer.will(text(CUSTOMER_OPENING))
    episode = Episode(domain="telecom", task=task, user_llm=_route(llm_server))
    episode.start()
    customer.will(tool_call(toggle.name, **toggle.arguments), text(CUSTOMER_DID_IT))
    episode.say(phone_request(toggle))
    episode.call_tool(refuel.name, {**refuel.arguments, "gb_amount": 1.0})
    episode.finish()

    result = diagnosis.diagnose(domain="telecom", task=task, messages=episode.messages)

    paths = {(c.db, c.path): c for c in result.changes}
    refuelled = paths[("agent", "lines.L1002.data_refueling_gb")]
    assert refuelled.actual == refuelled.expected - 1.0
    preference = paths[("user", "device.network_mode_preference")]
    assert preference.expected == prefer.arguments["mode"]
    assert [(s.kind, s.requestor, s.action_index) for s in result.steps] == [
        ("match", "user", 0),
        ("missing", "user", 1),
        ("wrong_args", "assistant", 2),
        ("missing", "assistant", 2),
    ]
    assert result.steps[2].differing_args == ("gb_amount",)
    assert result.first_divergent == result.steps[2]
    assert result.db_scored is False


def test_the_expected_environment_is_built_once_per_task_and_shared():
    def stand_in(amount: int) -> scoring.ExpectedEnvironment:
        expected = scoring.ExpectedEnvironment("airline")
        expected.set_state(
            initialization_data=None, initialization_actions=None, message_history=[]
        )
        expected.make_tool_call(
            tool_name="send_certificate",
            requestor="assistant",
            user_id="ethan_martin_2396",
            amount=amount,
        )
        return expected

    first, again, other = stand_in(150), stand_in(150), stand_in(149)
    shared = first.shared_environment()
    assert again.shared_environment() is shared
    assert other.shared_environment() is not shared
    # The very state τ²'s hashes describe, and not the stand-in's own environment.
    assert shared.get_db_hash() == first.get_db_hash() != other.get_db_hash()
    assert first.tools is not shared.tools
