"""The explorer, the task page and the domain page, as an anonymous visitor (charlie) sees them."""

import re

import pytest
from django.test import override_settings

from apps.tasks.models import Task
from tests.tasks.test_catalogue import MOCK_TASKS, RETAIL_BASIS

pytestmark = pytest.mark.django_db


def count_line(response) -> tuple[int, int]:
    match = re.search(
        r'data-testid="count"><strong>([\d,]+)</strong> of ([\d,]+)', response.content.decode()
    )
    assert match, "the page should say 'N of M tasks'"
    return tuple(int(x.replace(",", "")) for x in match.groups())


def card_ids(response) -> list[str]:
    return re.findall(r'data-testid="task-card" data-task-id="([^"]+)"', response.content.decode())


def test_the_home_page_leads_to_the_explorer(client):
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"] == "/tasks/"


def test_it_defaults_to_airline_test_for_anonymous_visitors(client, catalogue):
    response = client.get("/tasks/")
    assert response.status_code == 200
    assert count_line(response) == (20, 20)
    assert len(card_ids(response)) == 20


@override_settings(TAU2_DOMAIN="retail", TAU2_SPLIT="train")
def test_the_defaults_follow_the_settings(client, catalogue):
    assert count_line(client.get("/tasks/")) == (74, 74)


def test_it_lists_telecoms_full_split_one_page_at_a_time(client, catalogue, settings):
    response = client.get("/tasks/", {"domain": "telecom", "split": "full"})
    assert count_line(response) == (2285, 2285)
    assert len(card_ids(response)) == settings.TAU2_EXPLORER_PAGE_SIZE
    last = client.get("/tasks/", {"domain": "telecom", "split": "full", "page": 999})
    assert len(card_ids(last)) == 2285 % settings.TAU2_EXPLORER_PAGE_SIZE or 48


def test_search_matches_every_word_in_title_reason_id_or_tools(client, catalogue):
    response = client.get("/tasks/", {"domain": "retail", "split": "base", "q": "Desk LAMP"})
    ids = card_ids(response)
    assert "5" in ids
    expected = {
        t.task_id
        for t in Task.objects.filter(domain_id="retail")
        if "desk" in (t.title + t.reason_for_call + " ".join(t.tool_names)).lower()
        and "lamp" in (t.title + t.reason_for_call + " ".join(t.tool_names)).lower()
    }
    assert set(ids) == expected
    assert count_line(response) == (len(expected), 114)


def test_search_finds_a_task_by_a_tool_name(client, catalogue):
    ids = card_ids(
        client.get("/tasks/", {"domain": "airline", "split": "base", "q": "book_reservation"})
    )
    assert ids
    for task_id in ids:
        assert (
            "book_reservation" in Task.objects.get(domain_id="airline", task_id=task_id).tool_names
        )


def test_search_finds_a_task_by_its_id(client, catalogue):
    task = Task.objects.filter(domain_id="telecom", splits__name="full").last()
    response = client.get("/tasks/", {"domain": "telecom", "split": "full", "q": task.task_id})
    assert task.task_id in card_ids(response)


def test_kind_splits_the_tasks_into_writes_and_reads(client, catalogue):
    writes = client.get("/tasks/", {"domain": "airline", "split": "test", "kind": "write"})
    reads = client.get("/tasks/", {"domain": "airline", "split": "test", "kind": "read"})
    write_ids, read_ids = set(card_ids(writes)), set(card_ids(reads))
    assert write_ids and read_ids
    assert not write_ids & read_ids
    assert len(write_ids) + len(read_ids) == 20
    assert all(Task.objects.get(domain_id="airline", task_id=i).changes_db for i in write_ids)
    assert not any(Task.objects.get(domain_id="airline", task_id=i).changes_db for i in read_ids)


def test_an_unknown_kind_is_ignored(client, catalogue):
    assert count_line(client.get("/tasks/", {"kind": "delete-everything"})) == (20, 20)


def test_a_split_the_domain_lacks_falls_back_to_one_it_has(client, catalogue):
    response = client.get("/tasks/", {"domain": "mock", "split": "test"})
    assert count_line(response) == (MOCK_TASKS, MOCK_TASKS)


def test_an_unknown_domain_says_so(client, catalogue):
    response = client.get("/tasks/", {"domain": "bakery"})
    assert response.status_code == 200
    assert "No domain “bakery”" in response.content.decode()


def test_htmx_gets_the_results_fragment_and_a_shareable_url(client, catalogue):
    response = client.get(
        "/tasks/",
        {"domain": "retail", "split": "test", "q": "exchange", "kind": "write"},
        HTTP_HX_REQUEST="true",
    )
    body = response.content.decode()
    assert "<html" not in body
    assert 'id="results"' in body
    assert response["HX-Push-Url"] == "/tasks/?domain=retail&split=test&q=exchange&kind=write"
    assert 'hx-swap-oob="true"' in body  # the split list follows the domain


def test_cards_show_id_title_and_chips(client, catalogue):
    body = client.get("/tasks/", {"domain": "retail", "split": "test", "q": "desk lamp"}).content
    card = body.decode().split('data-task-id="5"')[1].split("</li>")[0]
    assert "You want to exchange the water bottle and the desk lamp." in card
    assert all(basis in card for basis in RETAIL_BASIS)
    assert "5 expected calls" in card
    assert "changes the database" in card


def test_the_task_page_shows_what_the_agent_never_sees(client, catalogue):
    response = client.get("/tasks/retail/5/")
    assert response.status_code == 200
    body = response.content.decode()
    assert "Hidden from the agent" in body
    assert "You want to exchange the water bottle to a bigger one" in body  # reason for call
    assert "You are mei_kovacs_8020 in zipcode 28236." in body  # knows
    assert "You do not remember your email address" in body  # doesn't know
    assert "return_delivered_order_items" in body  # expected call
    assert "paypal_7644869" in body  # with its arguments
    assert "Database check" in body and "Must-tell information" in body
    assert "Retail agent policy" in body or "<h1>Retail" in body


def test_the_task_page_shows_behaviour_and_nl_assertions(client, catalogue):
    body = client.get("/tasks/airline/0/").content.decode()
    assert "mention that you were told that you didn" in body  # task instructions
    assert "Agent should refuse to proceed with the cancellation." in body
    assert "listed, not scored" in body  # NL assertions are not in this task's basis


def test_the_task_page_shows_env_assertions_and_phone_actions(client, catalogue):
    task = Task.objects.filter(domain_id="telecom", splits__name="test").first()
    body = client.get(task.get_absolute_url()).content.decode()
    assert task.evaluation_criteria["env_assertions"]
    assert task.evaluation_criteria["env_assertions"][0]["func_name"] in body
    assert "Environment assertions" in body


def test_a_missing_task_is_a_404(client, catalogue):
    assert client.get("/tasks/airline/no-such-task/").status_code == 404
    assert client.get("/tasks/bakery/1/").status_code == 404


def test_the_domain_page_lists_policy_and_tools(client, catalogue):
    body = client.get("/tasks/telecom/").content.decode()
    assert "The agent&#x27;s tools (13)" in body or "The agent's tools (13)" in body
    assert "phone tools (30)" in body
    assert "toggle_airplane_mode" in body
    assert "<h1>" in body  # the policy's markdown is rendered
    assert "suspend_line" in body and 'class="chip write"' in body
