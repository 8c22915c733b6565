"""What every page's header and the run pieces say, as charlie (anonymous) and alice see
them: the current place is marked, "Policy & tools" follows the domain of the page, τ²'s
stop markers are marks (not Markdown headings) and checks are SVG, not emoji."""

import re

import pytest
from django.db.models.functions import Length
from django.template.loader import render_to_string

from apps.runs import presenters
from apps.runs.models import Run, RunEvent
from apps.tasks.models import Task

pytestmark = pytest.mark.django_db


def current(html: str) -> list[str]:
    """The names of the header's links marked as the current page."""
    nav = html[html.index('class="site-nav"') : html.index("</nav>")]
    return re.findall(r'aria-current="page">([^<]+)</a>', nav)


def policy_link(html: str) -> str:
    return re.search(r'<a href="([^"]+)" id="nav-policy"', html).group(1)


def longest_telecom_task() -> Task:
    return Task.objects.filter(domain_id="telecom").order_by(Length("task_id").desc()).first()


def test_policy_and_tools_follows_the_domain_of_the_page(client, catalogue):
    task = longest_telecom_task()
    assert len(task.task_id) > 100  # [mms_issue]airplane_mode_on|…[PERSONA:Easy]
    page = client.get(task.get_absolute_url()).content.decode()
    assert policy_link(page) == "/tasks/telecom/"
    assert current(page) == ["Tasks"]

    assert policy_link(client.get("/tasks/?domain=retail").content.decode()) == "/tasks/retail/"
    retail = client.get("/tasks/retail/").content.decode()
    assert policy_link(retail) == "/tasks/retail/" and current(retail) == ["Policy &amp; tools"]
    # An unknown or malformed domain never breaks the header: the default one is linked.
    for query in ("nosuch", "a.b", "%00"):
        response = client.get(f"/tasks/?domain={query}")
        assert response.status_code < 500
        if response.status_code == 200:
            assert policy_link(response.content.decode()) == "/tasks/airline/"


def test_picking_a_domain_in_the_explorer_moves_policy_and_tools_along(client, catalogue):
    # htmx swaps the results only; the header's link comes with them, out of band.
    response = client.get("/tasks/?domain=retail", headers={"HX-Request": "true"})
    html = response.content.decode()
    assert "<html" not in html and 'hx-swap-oob="true"' in html
    assert policy_link(html) == "/tasks/retail/"
    # A whole page (no htmx) has the one link in its header.
    assert client.get("/tasks/?domain=retail").content.decode().count(' id="nav-policy"') == 1


def test_the_current_place_is_marked_in_the_header(alice_client, catalogue):
    expected = {
        "/tasks/": ["Tasks"],
        "/play/": ["Play"],
        "/runs/": ["Runs"],
        "/evaluations/": ["Evaluations"],
        "/leaderboard/": ["Leaderboard"],
        "/models/": ["Models"],
        "/training/": ["Training"],
        "/datasets/": ["Datasets"],
    }
    for path, marked in expected.items():
        response = alice_client.get(path)
        assert response.status_code == 200, path
        assert current(response.content.decode()) == marked, path


def test_the_header_links_review_for_reviewers_only(alice_client, staff_client, catalogue):
    page = alice_client.get("/runs/").content.decode()
    assert 'href="/training/"' in page and 'href="/datasets/"' in page
    assert 'href="/runs/review/"' not in page  # a member reviews only when the setting says
    forbidden = alice_client.get("/runs/review/")
    assert forbidden.status_code == 403
    body = forbidden.content.decode()
    assert 'data-testid="forbidden-reason">The review queue is for reviewers.<' in body
    assert 'class="site-header' in body  # the site's own page, not a bare "403 Forbidden"

    queue = staff_client.get("/runs/review/")
    assert queue.status_code == 200
    assert current(queue.content.decode()) == ["Review"]


def test_a_run_page_links_the_policy_of_its_domain(alice, alice_client, catalogue):
    task = longest_telecom_task()
    run = Run.objects.create(
        task=task, domain="telecom", created_by=alice, agent_model="o/m", user_model="u/m"
    )
    page = alice_client.get(run.get_absolute_url()).content.decode()
    assert policy_link(page) == "/tasks/telecom/" and current(page) == ["Runs"]


def _event(kind: str, role: str, content: str) -> RunEvent:
    return RunEvent(seq=3, kind=kind, message={"role": role, "content": content})


@pytest.mark.parametrize(
    ("kind", "role", "content", "said", "mark"),
    [
        ("customer", "user", "###STOP###", "", "The customer ended the conversation"),
        ("customer", "user", "Thanks, bye!\n###STOP###", "Thanks, bye!", "The customer ended"),
        ("customer", "user", "###TRANSFER###", "", "asked for a transfer to a human agent"),
        ("agent", "assistant", "###STOP###", "", "The agent ended the conversation"),
    ],
)
def test_a_stop_marker_is_a_mark_and_never_a_heading(kind, role, content, said, mark):
    html = presenters.event_html(_event(kind, role, content))
    assert "STOP" not in html and "TRANSFER" not in html and "<h3" not in html
    assert 'data-testid="stop-marker"' in html and mark in html
    if said:
        assert said in html and 'class="bubble' in html
    else:
        # Nobody wrote a word: no bubble (the player never sees an "Agent: STOP" they did
        # not send).
        assert 'class="bubble' not in html


def test_the_markers_are_tau2s_own():
    import importlib

    from tau2_env.engine.episodes import AGENT_STOP
    from tau2_env.generations import tau2_generation

    # τ² 0.2 keeps them in tau2.user.base, 1.x in tau2.user.user_simulator_base.
    where = "tau2.user.base" if tau2_generation() == "0.2" else "tau2.user.user_simulator_base"
    markers = importlib.import_module(where)
    STOP, TRANSFER, OUT_OF_SCOPE = markers.STOP, markers.TRANSFER, markers.OUT_OF_SCOPE

    assert set(presenters.STOP_MARKERS) == {STOP, TRANSFER, OUT_OF_SCOPE, AGENT_STOP}


def test_checks_are_inline_svg_not_emoji():
    html = render_to_string(
        "includes/reward.html",
        {
            "result": presenters.reward_view(
                {
                    "reward": 0.0,
                    "db_check": {"db_match": False},
                    "action_checks": [
                        {"action": {"name": "get_user_details"}, "action_match": True}
                    ],
                }
            )
        },
    )
    assert not re.search("[\u2600-\u27bf\U0001f300-\U0001faff]", html)
    assert html.count("<svg") == 2
    assert 'aria-label="met"' in html and 'aria-label="not met"' in html
