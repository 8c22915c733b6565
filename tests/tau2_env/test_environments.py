"""Fresh environments: copy-on-access databases equal τ²'s own, never shared."""

from __future__ import annotations

import copy
import pickle
import threading

import pytest
from tau2.data_model.message import ToolCall  # conftest imported τ² via tau2_env.llm._tau2

from tau2_env.engine import environments
from tau2_env.engine.environments import CopyOnAccessDict, fresh_environment
from tau2_env.llm import compat
from tau2_env.llm._tau2 import registry


def _tau2_environment(domain: str):
    return compat.tau2_constructor(domain)()


def _apply(environment, actions) -> None:
    for action in actions or ():
        environment.get_response(
            ToolCall(id="call", name=action.name, arguments=action.arguments, requestor="assistant")
        )


def _write_tasks(domain: str, limit: int | None = None):
    tasks = [
        task
        for task in registry.get_tasks_loader(domain)("base")
        if task.evaluation_criteria and task.evaluation_criteria.actions
    ]
    return tasks[:limit] if limit else tasks


@pytest.mark.parametrize("domain", ["airline", "retail", "telecom"])
def test_a_fresh_environment_equals_tau2s_own_and_is_new_each_time(domain):
    first = fresh_environment(domain)
    second = fresh_environment(domain)

    assert first is not second
    assert first.tools.db is not second.tools.db
    assert first.get_db_hash() == second.get_db_hash() == _tau2_environment(domain).get_db_hash()
    assert first.get_policy() == _tau2_environment(domain).get_policy()


def test_a_change_in_one_environment_is_seen_by_no_other():
    changed = fresh_environment("airline")
    untouched = fresh_environment("airline")
    reservation_id = untouched.tools.db.users["mia_li_3668"].reservations[0]
    assert untouched.tools.db.reservations[reservation_id].status != "cancelled"

    result = changed.get_response(
        ToolCall(id="c", name="cancel_reservation", arguments={"reservation_id": reservation_id})
    )

    assert not result.error
    assert changed.tools.db.reservations[reservation_id].status == "cancelled"
    assert untouched.tools.db.reservations[reservation_id].status != "cancelled"
    assert fresh_environment("airline").tools.db.reservations[reservation_id].status != (
        "cancelled"
    )
    assert fresh_environment("airline").get_db_hash() == _tau2_environment("airline").get_db_hash()


@pytest.mark.parametrize("domain", ["airline", "retail"])
def test_expected_actions_leave_the_database_tau2s_would(domain):
    for task in _write_tasks(domain, limit=6):
        ours, theirs = fresh_environment(domain), _tau2_environment(domain)
        _apply(ours, task.evaluation_criteria.actions)
        _apply(theirs, task.evaluation_criteria.actions)
        assert ours.get_db_hash() == theirs.get_db_hash(), task.id
    assert fresh_environment(domain).get_db_hash() == _tau2_environment(domain).get_db_hash()


@pytest.mark.slow
@pytest.mark.parametrize("domain", ["airline", "retail"])
def test_every_base_tasks_expected_actions_leave_the_database_tau2s_would(domain):
    for task in _write_tasks(domain):
        ours, theirs = fresh_environment(domain), _tau2_environment(domain)
        _apply(ours, task.evaluation_criteria.actions)
        _apply(theirs, task.evaluation_criteria.actions)
        assert ours.get_db_hash() == theirs.get_db_hash(), task.id
    assert fresh_environment(domain).get_db_hash() == _tau2_environment(domain).get_db_hash()


def test_many_fresh_environments_in_a_row_are_all_fresh():
    kept = [fresh_environment("airline") for _ in range(50)]
    users = [environment.tools.db.users["mia_li_3668"] for environment in kept]
    for user in users:
        user.reservations.append("NEW001")

    assert len({id(user) for user in users}) == 50
    assert all(user.reservations.count("NEW001") == 1 for user in users)
    assert "NEW001" not in fresh_environment("airline").tools.db.users["mia_li_3668"].reservations


class _Row:
    def __init__(self, value):
        self.value = value


def _shared_and_dict():
    shared = {"a": _Row(1), "b": _Row(2), "c": _Row(3)}
    return shared, CopyOnAccessDict(shared, lambda key: _Row(shared[key].value))


def test_the_dict_never_hands_out_a_shared_row():
    shared, rows = _shared_and_dict()
    handed = [
        rows["a"],
        rows.get("b"),
        *rows.values(),
        *(value for _, value in rows.items()),
        *rows.copy().values(),
        *copy.deepcopy(rows).values(),
        *pickle.loads(pickle.dumps(rows)).values(),  # noqa: S301 - our own bytes
        rows.pop("c"),
    ]
    assert not any(row is original for row in handed for original in shared.values())
    assert type(copy.deepcopy(rows)) is dict
    assert rows.get("missing", "default") == "default"


def test_the_dict_keeps_what_is_written_to_it():
    shared, rows = _shared_and_dict()
    row = _Row(9)
    rows["a"] = row
    rows.setdefault("d", _Row(4))
    rows |= {"e": _Row(5)}

    assert rows["a"] is row and rows["d"].value == 4 and rows["e"].value == 5
    assert set(rows) == {"a", "b", "c", "d", "e"}
    assert set(shared) == {"a", "b", "c"} and shared["a"].value == 1


def test_scoring_builds_fresh_environments_only_inside_its_scope():
    constructor = registry.get_env_constructor
    with environments.fresh_environments_for_tau2("airline"):
        inside = constructor("airline")()
        seen_by_another_thread = []
        thread = threading.Thread(
            target=lambda: seen_by_another_thread.append(constructor("airline")())
        )
        thread.start()
        thread.join()
    outside = constructor("airline")()

    assert isinstance(inside.tools.db.users, CopyOnAccessDict)
    assert not isinstance(seen_by_another_thread[0].tools.db.users, CopyOnAccessDict)
    assert not isinstance(outside.tools.db.users, CopyOnAccessDict)
    assert inside.get_db_hash() == outside.get_db_hash()
