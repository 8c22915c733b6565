"""banking_knowledge's documents (τ² 1.x), as an anonymous visitor (charlie) sees them: the
domain page lists and searches its knowledge base and opens a document; a task page names
the documents its answer rests on."""

from __future__ import annotations

import re

import pytest

from tau2_env.engine import catalog

pytestmark = [pytest.mark.django_db, pytest.mark.upstream]

DOMAIN = "banking_knowledge"


def listed(response) -> list[str]:
    return re.findall(
        r'data-testid="document"><a href="[^"]*">([^<]+)</a>', response.content.decode()
    )


def test_banking_has_its_97_tasks_in_the_explorer(client, catalogue):
    response = client.get(f"/tasks/?domain={DOMAIN}&split=base")
    assert re.search(r'data-testid="count"><strong>97</strong> of 97', response.content.decode())


def test_the_domain_page_lists_the_knowledge_base_and_searches_it(client, catalogue):
    page = client.get(f"/tasks/{DOMAIN}/")
    assert page.status_code == 200
    assert "The knowledge base (698 documents)" in page.content.decode()
    assert len(listed(page)) == 50  # the first 50 of 698

    found = client.get(f"/tasks/{DOMAIN}/", {"doc_q": "gold rewards card"})
    titles = listed(found)
    assert titles, "a search for the Gold Rewards Card finds its documents"
    expected = catalog.document_search(DOMAIN, "gold rewards card")
    assert len(titles) == min(50, len(expected))
    assert titles[0] == expected[0].title and "Gold Rewards" in titles[0]

    nothing = client.get(f"/tasks/{DOMAIN}/", {"doc_q": "zzzz-no-such-word"})
    assert listed(nothing) == [] and "0 match" in nothing.content.decode()


def test_a_document_opens_on_the_domain_page(client, catalogue):
    doc = catalog.documents(DOMAIN)[0]
    page = client.get(f"/tasks/{DOMAIN}/", {"doc": doc.id}).content.decode()
    assert 'data-testid="document-shown"' in page and doc.title in page
    # An id that is no document opens nothing.
    page = client.get(f"/tasks/{DOMAIN}/", {"doc": "<script>"}).content.decode()
    assert 'data-testid="document-shown"' not in page


def test_a_task_page_names_the_documents_its_answer_rests_on(client, catalogue):
    page = client.get(f"/tasks/{DOMAIN}/task_001/").content.decode()
    assert 'data-testid="required-documents"' in page
    required = re.findall(r'data-testid="required-document"><a href="([^"]+)">([^<]+)</a>', page)
    assert [title for _, title in required] == [
        doc.title
        for _, doc in catalog.task_documents(
            DOMAIN,
            [
                "doc_credit_cards_gold_rewards_card_001",
                "doc_credit_cards_silver_rewards_card_001",
                "doc_credit_cards_bronze_rewards_card_001",
                "doc_credit_cards_platinum_rewards_card_001",
            ],
        )
    ]
    assert required[0][0].startswith(f"/tasks/{DOMAIN}/?doc=doc_credit_cards_gold_rewards_card_001")


def test_other_domains_have_no_documents(client, catalogue):
    page = client.get("/tasks/airline/").content.decode()
    assert 'data-testid="documents"' not in page
    assert (
        'data-testid="required-documents"' not in client.get("/tasks/airline/27/").content.decode()
    )
