"""The paper's breakdowns on the evaluation page and in the API: pass^1 by number of
expected actions, by persona, by telecom issue type and sub-issue, read-only vs write,
each with its n and a 95% bootstrap interval; and the Default vs No-User vs Oracle-plan
comparison once the team has all three for one agent model and domain.

The scripted-LLM evaluation: nine telecom tasks (one per issue type and persona), each
conversation played through the engine against the scripted customer
(``tests.support.evaluations.conversation``: the task's expected actions on the tasks
whose persona is not Hard, a greeting and a goodbye on the others) and scored by τ².
alice (signed in) reads the page and the API; charlie (anonymous) is sent to sign in.
"""

from __future__ import annotations

import re
from collections import defaultdict

import pytest

from apps.evaluations import breakdowns
from apps.evaluations.models import Evaluation
from tau2_env.engine import catalog
from tau2_env.engine.evaluation import bootstrap_pass_hat_k, compute_metrics
from tau2_env.generations import tau2_generation
from tests.support.evaluations import Conversation, conversation, stored_evaluation

GROUP_ROW = re.compile(
    r'<tr data-testid="breakdown-group" data-group="([^"]*)" data-n="(\d+)">(.*?)</tr>', re.S
)


def telecom_picks() -> list[str]:
    """One base task per (issue type, persona), in τ²'s order."""
    picked: dict[tuple[str, str], str] = {}
    for task_id in catalog.get_domain("telecom").splits["base"]:
        key = (breakdowns.issue_type_of(task_id), breakdowns.persona_of(task_id))
        picked.setdefault(key, task_id)
    assert len(picked) == 9
    return list(picked.values())


_PLAYED: dict[str, Conversation] = {}


@pytest.fixture
def telecom_conversations(llm_server) -> dict[str, Conversation]:
    """The nine picks played through the engine against the scripted customer: the
    expected actions on the tasks whose persona is not Hard, a greeting and a goodbye
    on the others; τ² scored each (played once for the module)."""
    if not _PLAYED:
        for task_id in telecom_picks():
            _PLAYED[task_id] = conversation(
                llm_server,
                domain="telecom",
                task_id=task_id,
                solve=breakdowns.persona_of(task_id) != "Hard",
            )
    return dict(_PLAYED)


@pytest.fixture
def telecom_evaluation(alice, telecom_conversations) -> Evaluation:
    return stored_evaluation(
        alice,
        domain="telecom",
        split="base",
        outcomes={task_id: [talk] for task_id, talk in telecom_conversations.items()},
    )


def page_groups(body: str, key: str) -> dict[str, tuple[int, str]]:
    """The groups of breakdown ``key`` on the page: label → (n, the row's text)."""
    start = body.index(f'data-testid="breakdown-{key}"')
    end = body.index("</figure>", start)
    return {
        label: (int(n), re.sub(r"<[^>]+>", " ", row))
        for label, n, row in GROUP_ROW.findall(body[start:end])
    }


def test_the_page_of_a_scripted_llm_evaluation_shows_every_breakdown_with_its_n(
    alice_client, telecom_evaluation
):
    evaluation = telecom_evaluation
    runs = {r.task.task_id: r for r in evaluation.runs.select_related("task")}
    assert len(runs) == 9
    # The scripted agent solved exactly the tasks it played through (τ² scored them).
    rewards = {t: [r.reward] for t, r in runs.items()}
    assert {t for t, r in rewards.items() if r == [1.0]} == {
        t for t in runs if breakdowns.persona_of(t) != "Hard"
    }

    body = alice_client.get(evaluation.get_absolute_url()).content.decode()
    assert 'data-testid="breakdowns"' in body
    assert 'data-testid="evaluation-mode"' in body
    assert "mode default (llm_agent + user_simulator)" in body

    tasks = {t: catalog.get_tau2_task("telecom", t) for t in runs}
    infos = {t.task_id: t for t in catalog.load_domain_tasks("telecom")}
    expected: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for task_id in evaluation.task_ids:  # the order the page bootstraps in
        count = len(tasks[task_id].evaluation_criteria.actions)
        bucket = next(
            label
            for label, low, high in breakdowns.ACTION_BUCKETS
            if low <= count and (high is None or count <= high)
        )
        expected["expected_actions"][bucket].append(task_id)
        expected["persona"][breakdowns.persona_of(task_id)].append(task_id)
        issue = breakdowns.ISSUE_TYPES[breakdowns.issue_type_of(task_id)]
        expected["issue_type"][issue].append(task_id)
        for fault in breakdowns.sub_issues_of(task_id):
            expected["sub_issue"][fault].append(task_id)
        expected["kind"]["write" if infos[task_id].changes_db else "read-only"].append(task_id)

    assert set(expected["persona"]) == {"None", "Easy", "Hard"}
    assert len(expected["issue_type"]) == 3 and len(expected["kind"]) == 2
    for key, groups in expected.items():
        shown = page_groups(body, key)
        for label, members in groups.items():
            n, row = shown[label]
            assert n == len(members), (key, label)
            assert f"n = {n} task" in row
            sub = {t: rewards[t] for t in members}
            pass_1 = compute_metrics(sub).pass_hat_ks[1]
            low, high = bootstrap_pass_hat_k(sub, ks=[1], samples=1000)[1]
            assert f"{pass_1:.3f}" in row and f"{low:.3f} – {high:.3f}" in row, (key, label)
        # Groups no task fell in still show, with n = 0.
        assert all(shown[label][0] == 0 for label in set(shown) - set(groups))
    persona = page_groups(body, "persona")
    assert persona["Hard"][0] == 3 and "0.000" in persona["Hard"][1]
    assert persona["Easy"][0] == 3 and "1.000" in persona["Easy"][1]
    assert set(page_groups(body, "expected_actions")) == {"0–1", "2–3", "4–6", "7+"}


def test_the_api_gives_the_same_breakdowns(alice_client, telecom_evaluation):
    data = alice_client.get(f"/api/evaluations/{telecom_evaluation.pk}/").json()
    assert data["mode"] == "default"
    by_key = {b["key"]: b for b in data["breakdowns"]}
    assert list(by_key) == ["expected_actions", "persona", "issue_type", "sub_issue", "kind"]
    ours = {b.key: b for b in breakdowns.evaluation_breakdowns(telecom_evaluation)}
    for key, breakdown in by_key.items():
        assert breakdown["applies"] is True
        assert breakdown["groups"] == [g.as_json() for g in ours[key].groups]
    persona = {g["label"]: g for g in by_key["persona"]["groups"]}
    assert persona["Hard"]["n"] == 3 and persona["Hard"]["pass_1"] == 0.0
    assert persona["Hard"]["ci95"] == [0.0, 0.0]
    assert sum(g["n"] for g in by_key["kind"]["groups"]) == 9


def test_an_airline_evaluation_says_which_breakdowns_do_not_apply(alice, alice_client):
    evaluation = stored_evaluation(alice, outcomes={"27": [1.0, 1.0], "2": [0.0, 1.0]})
    body = alice_client.get(evaluation.get_absolute_url()).content.decode()
    actions = page_groups(body, "expected_actions")
    # τ² 0.2: 27 expects 2 actions, 2 expects 4. 1.x: 27 expects 1, 2 expects 3.
    in_groups = (actions["0–1"][0], actions["2–3"][0], actions["4–6"][0], actions["7+"][0])
    assert in_groups == ((0, 1, 1, 0) if tau2_generation() == "0.2" else (1, 1, 0, 0))
    for label in ("persona", "issue_type", "sub_issue"):
        start = body.index(f'data-testid="breakdown-{label}"')
        section = body[start : body.index("</figure>", start)]
        assert "Not for airline" in section and "breakdown-group" not in section
    kind = page_groups(body, "kind")
    assert kind["write"][0] + kind["read-only"][0] == 2
    assert 'data-testid="mode-comparison"' not in body  # the team has one mode only
    assert "mode default (llm_agent + user_simulator)" in body


def test_the_page_compares_default_no_user_and_oracle_plan_when_the_team_has_all_three(
    alice, alice_client
):
    task = telecom_picks()[0]  # one task of telecom's base split
    made = {}
    for mode, outcome in (("default", 0.0), ("no_user", 1.0), ("oracle_plan", 1.0)):
        evaluation = stored_evaluation(
            alice, domain="telecom", split="base", outcomes={task: [outcome]}
        )
        Evaluation.objects.filter(pk=evaluation.pk).update(mode=mode)
        made[mode] = evaluation
    other_model = stored_evaluation(
        alice, domain="telecom", split="base", outcomes={task: [1.0]}, agent_model="org/other"
    )

    body = alice_client.get(made["default"].get_absolute_url()).content.decode()
    table = body[body.index('data-testid="mode-comparison"') :]
    table = table[: table.index("</table>")]
    rows = re.findall(r'data-mode="(\w+)">(.*?)</tr>', table, re.S)
    assert [mode for mode, _ in rows] == ["default", "no_user", "oracle_plan"]
    text = {mode: re.sub(r"<[^>]+>", " ", row) for mode, row in rows}
    assert "this one" in text["default"] and "0.000" in text["default"]
    assert "1.000" in text["no_user"] and "n = 1 task" in text["oracle_plan"]
    assert made["no_user"].get_absolute_url() in table

    # Another agent model has one mode only: no comparison on its page.
    body = alice_client.get(other_model.get_absolute_url()).content.decode()
    assert 'data-testid="mode-comparison"' not in body


def test_charlie_is_sent_to_sign_in(alice, client):
    evaluation = stored_evaluation(alice, outcomes={"27": [1.0]})
    response = client.get(evaluation.get_absolute_url())
    assert response.status_code == 302 and "breakdown" not in response.content.decode()
    assert client.get(f"/api/evaluations/{evaluation.pk}/").status_code in (401, 403)
